"""The layout stage's peer: transformers 5.25's PP-DocLayoutV3 / V4 exported with torch.onnx.export at 800x800
and run by ONNX Runtime on the pages of a PDF, each version in its own process: export s, first call s, s per page
of the forward alone (the reference processor's pixels made beforehand), peak RSS, and the exported graph checked
against torch on the first page (each output's max |difference| / max |value| after matching the queries).

    python scripts/benchmark_layout_onnx.py [--versions v3 v4] [--pdf doc.pdf] [--threads 2] [--bench-dir DIR]

The export is the TorchScript exporter (dynamo=False, opset 17): it needs the `onnx` package (pip install onnx),
which ms_ocr does not; without it, or when the export fails, the row says why. Default checkpoints: the pipeline
benchmark's (~/.cache/ms_ocr/bench/pp_doclayout_vN_scored, every tensor random), default pages: its 10-page PDF.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
FIELDS = {"v3": ("logits", "pred_boxes", "order_logits", "out_masks"),
          "v4": ("logits", "pred_boxes", "relative_order_logits", "successor_order_logits", "warp_params")}
DPI = 96  # the benchmark PDF's resolution: pages render at 768x1024


def export(model, version, path):
    """The reference model as an ONNX file taking [1, 3, 800, 800] pixels, returning FIELDS[version]."""
    import torch

    class Outputs(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values):
            out = self.inner(pixel_values=pixel_values)
            return tuple(getattr(out, name) for name in FIELDS[version])

    torch.onnx.export(Outputs(model), (torch.rand(1, 3, 800, 800),), path, input_names=["pixel_values"],
                      output_names=list(FIELDS[version]), dynamo=False, opset_version=17)


def parity(got, want, version):
    """{output: max |ours - torch| / max |torch|}, ONNX Runtime's queries matched to torch's (near-equal encoder
    scores may leave two in either order); "moved": how many queries took another place."""
    rows = [np.concatenate([o[0], b[0]], -1) for o, b in ((got[0], got[1]), (want[0], want[1]))]
    perm = np.abs(rows[0][:, None, :] - rows[1][None, :, :]).max(-1).argmin(0)
    out = {"moved": int((perm != np.arange(len(perm))).sum()), "permutation": len(set(perm.tolist())) == len(perm)}
    for name, g, w in zip(FIELDS[version], got, want):
        if name != "warp_params":
            g = g[:, perm][:, :, perm] if "order" in name else g[:, perm]
        if name == "order_logits":  # V3's pointer masks by query position (j <= i): the queries left in place
            kept = perm == np.arange(len(perm))
            g, w = g[:, kept][:, :, kept], w[:, kept][:, :, kept]
        out[name] = float(np.abs(g - w).max() / max(float(np.abs(w).max()), 1e-30))
    return out


def worker(args):
    import onnxruntime as ort
    import torch
    import transformers
    from ms_ocr.batch.inputs import pdf_page_count, render_pdf_page
    from ms_ocr.proc import peak_rss_gb
    from bench.layout import reference_pixels
    torch.set_num_threads(args.threads)
    n = args.version[-1]
    model = getattr(transformers, f"PPDocLayoutV{n}ForObjectDetection").from_pretrained(args.ckpt).eval()
    pages = [reference_pixels(render_pdf_page(args.pdf, p, DPI), 800, 800, args.version).astype(np.float32)
             for p in range(1, pdf_page_count(args.pdf) + 1)]
    row = {"version": args.version, "runtime": f"onnxruntime {ort.__version__}", "threads": args.threads}
    with torch.no_grad():  # before the export: the model's eager outputs differ after torch.onnx.export has run it
        out = model(torch.tensor(pages[0]))
    want = [getattr(out, name).numpy() for name in FIELDS[args.version]]
    path = os.path.join(tempfile.mkdtemp(prefix="layout_onnx_"), f"pp_doclayout_{args.version}.onnx")
    t0 = time.perf_counter()
    try:
        export(model, args.version, path)
    except Exception as e:  # noqa: BLE001 - the row reports why the peer could not run
        row["error"] = f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return row
    row["export_s"] = round(time.perf_counter() - t0, 2)
    del model, out
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    t0 = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    row["session_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    got = session.run(None, {"pixel_values": pages[0]})
    row["first_call_s"] = round(time.perf_counter() - t0, 2)
    row["parity"] = parity(got, want, args.version)
    times = []
    for pixels in pages:
        t0 = time.perf_counter()
        session.run(None, {"pixel_values": pixels})
        times.append(time.perf_counter() - t0)
    row.update(pages=len(times), s_per_page=round(float(np.mean(times)), 3), s_per_page_min=round(min(times), 3),
               onnx_mb=round(os.path.getsize(path) / 2 ** 20, 1), peak_rss_gb=peak_rss_gb())
    os.remove(path)
    return row


def run(versions, pdf, bench_dir, threads):
    """One worker process per version: its row (or the row with the reason it has no figures)."""
    from bench.run import run_json_worker
    rows = []
    for version in versions:
        ckpt = os.path.join(bench_dir, f"pp_doclayout_{version}_scored")
        try:
            import onnx  # noqa: F401 - what torch.onnx.export needs to write the file
        except ImportError:
            rows.append({"version": version, "error": "torch.onnx.export needs the onnx package (pip install onnx), "
                                                      "which is not installed"})
            continue
        rows.append(run_json_worker(__file__, ["--worker", "--version", version, "--ckpt", ckpt, "--pdf", pdf,
                                               "--threads", threads], threads, f"onnxruntime {version}"))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench")
    p.add_argument("--versions", nargs="+", default=["v3", "v4"], choices=["v3", "v4"])
    p.add_argument("--pdf", help="pages to run (default: the pipeline benchmark's 10-page PDF, made if missing)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bench-dir", default=bench)
    from bench.run import parse_worker_args
    args = parse_worker_args(p, worker, ('--version', '--ckpt'))
    from bench.pages import article_pdf
    from bench.run import ensure_checkpoint
    for version in args.versions:
        ensure_checkpoint(f"pp-doclayout-{version}-scored", os.path.join(args.bench_dir,
                                                                         f"pp_doclayout_{version}_scored"))
    pdf = args.pdf or os.path.join(args.bench_dir, "article_10_pages.pdf")
    if not os.path.isfile(pdf):
        article_pdf(pdf)
    for row in run(args.versions, pdf, args.bench_dir, args.threads):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
