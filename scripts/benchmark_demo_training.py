"""How well the demo training's --minutes bounds the whole run: `scripts/train_demo.py --minutes M` in its own process,
timed from launch to exit (start-up, tokenizer, evaluation and export included), --repeat rounds.

    python scripts/benchmark_demo_training.py --minutes 1 2 --repeat 2

A round reports the process wall, its ratio to the budget (<= 1.00x: the clock held), the steps the loop ran and the
loop's own seconds (training.json); the run's arguments other than --minutes are a short, evaluation-light schedule
far longer than the budget, so that the clock, not the step count, ends it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from bench.report import print_table, write_json  # noqa: E402

SCHEDULE = ["--steps", "100000", "--batch", "8", "--eval-lines", "16", "--eval-every", "0", "--curriculum", "0"]


def run_round(minutes, threads, procs):
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        cmd = [sys.executable, os.path.join(REPO, "scripts", "train_demo.py"), "--out", out, "--minutes",
               str(minutes), "--procs", str(procs), *SCHEDULE]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"train_demo.py --minutes {minutes} failed:\n{proc.stderr[-3000:]}")
        with open(os.path.join(out, "training.json")) as f:
            log = json.load(f)
    budget = 60 * minutes
    return {"minutes": minutes, "wall_s": wall, "budget_s": budget, "ratio": wall / budget,
            "steps_done": log["steps_done"], "loop_s": log["seconds"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, nargs="+", default=[1.0, 2.0], help="budgets to time")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--procs", type=int, default=1, help="train_demo.py --procs (DDP processes)")
    p.add_argument("--out", default=os.path.join(REPO, "bench_out"))
    args = p.parse_args()
    from ms_ocr.ops.native import cpu_model
    rows = []
    for r in range(args.repeat):
        for minutes in args.minutes:
            print(f"round {r + 1}/{args.repeat}: --minutes {minutes} ...", flush=True)
            rows.append(run_round(minutes, args.threads, args.procs))
    print(f"CPU: {cpu_model()}; {args.threads} threads; {args.procs} process(es)")
    print_table([("minutes", 8, "<.2f"), ("budget s", 10, ".0f"), ("process wall s", 16, ".1f"),
                 ("wall/budget", 13, ".2fx"), ("loop s", 9, ".1f"), ("steps", 8, "d")],
                [(row["minutes"], row["budget_s"], row["wall_s"], row["ratio"], row["loop_s"], row["steps_done"])
                 for row in rows])
    write_json(args.out, "benchmark_demo_training.json",
               {"cpu": cpu_model(), "threads": args.threads, "procs": args.procs, "rows": rows})
    if any(row["ratio"] > 1.0 for row in rows):
        print("the run outlasted its --minutes budget")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
