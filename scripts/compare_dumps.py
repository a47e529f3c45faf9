"""Compare two precision dumps (MindIE logits-save style): per-step logits and token ids.

    python scripts/compare_dumps.py OUT/dumps/<key> REF_DUMP [--tol 1e-4]

A dump is a folder with logits.npy [steps, V] (float32, raw logits before sampling) and token_ids.npy [steps]
(written by the batch runner's --dump and by scripts/dump_reference.py). Two folders of dumps (e.g. two
OUT/dumps) are compared input by input where their subfolder names match. Reports, per input, the first step
whose chosen token differs, the first step whose logits differ by more than tol x max|logit|, and the largest
difference; exit status 1 if any input diverges, 2 on unusable input.
"""

import argparse
import os
import sys

import numpy as np


def load_dump(path):
    try:
        return np.load(os.path.join(path, "logits.npy")), np.load(os.path.join(path, "token_ids.npy"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {path} is not a dump folder ({e})") from None


def compare(a, b, tol):
    """dict(steps, first_token_divergence, first_logit_divergence, max_abs, max_rel) of two dumps."""
    (la, ta), (lb, tb) = a, b
    if la.shape[1:] != lb.shape[1:]:
        raise SystemExit(f"error: vocabulary sizes differ ({la.shape[1]} vs {lb.shape[1]})")
    steps = min(len(la), len(lb))
    diff = np.abs(la[:steps].astype(np.float64) - lb[:steps].astype(np.float64)).max(-1)
    scale = np.maximum(np.abs(lb[:steps]).max(-1), 1e-30)
    rel = diff / scale
    tokens_differ = np.nonzero(ta[:steps] != tb[:steps])[0]
    logits_differ = np.nonzero(rel > tol)[0]
    return {"steps": int(steps), "lengths": (int(len(ta)), int(len(tb))),
            "first_token_divergence": int(tokens_differ[0]) if len(tokens_differ) else None,
            "first_logit_divergence": int(logits_differ[0]) if len(logits_differ) else None,
            "max_abs": float(diff.max()) if steps else 0.0, "max_rel": float(rel.max()) if steps else 0.0}


def pairs(a, b):
    if os.path.isfile(os.path.join(a, "logits.npy")):
        return [(os.path.basename(os.path.normpath(a)), a, b)]
    names = sorted(set(os.listdir(a)) & set(os.listdir(b)))
    if not names:
        raise SystemExit(f"error: no dumps with matching names in {a} and {b}")
    return [(n, os.path.join(a, n), os.path.join(b, n)) for n in names]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b", help="the reference")
    p.add_argument("--tol", type=float, default=1e-4, help="relative logit tolerance (x max|logit| of b)")
    args = p.parse_args(argv)
    diverged = False
    for name, a, b in pairs(args.a, args.b):
        r = compare(load_dump(a), load_dump(b), args.tol)
        ok = r["first_token_divergence"] is None and r["first_logit_divergence"] is None \
            and r["lengths"][0] == r["lengths"][1]
        diverged |= not ok
        print(f"{name}: {'MATCH' if ok else 'DIVERGED'} steps={r['steps']} lengths={r['lengths'][0]}/{r['lengths'][1]} "
              f"first_token_divergence={r['first_token_divergence']} first_logit_divergence="
              f"{r['first_logit_divergence']} max_abs={r['max_abs']:.3e} max_rel={r['max_rel']:.3e}")
    return 1 if diverged else 0


if __name__ == "__main__":
    sys.exit(main())
