"""Time and peak RSS of the whole analysis vs the reference-style baseline at 10k / 100k / 500k tasks.

Each measurement is a fresh child process, repeated ``--repeat`` times keeping the fastest (the test machine is
shared); peak RSS is the largest over repeats of the child's process tree (its ``ru_maxrss`` from ``os.wait4``, or
the tree's summed RSS sampled every 10 ms when that is larger: ours reads dyn_topo.txt in a helper process on the
second core). CPU seconds (user + sys, helper included) are printed too, so the wall-time gain from the second
core can be told apart from less work. The baseline
is five processes (one per reference script): its time is their sum, its peak memory the largest of them.
Ours is one process running ``analyze_runs`` + ``write_report`` (which also does the cross-check, chains and
suggestions the baseline does not).

Usage: python benchmarks/run_bench.py [--sizes 10000,100000,500000] [--src RUN_DIR] [--work /tmp/pypto-bench]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SRC = HERE.parent / "tests" / "analysis" / "data" / "sim_softmax" / "runs"
OURS = ("from pathlib import Path; import sys\n"
        "from pypto_tune.tools.analysis import analyze_runs, write_report, locate\n"
        "r = Path(sys.argv[1]); a = analyze_runs([r])\n"
        "write_report(a, locate(r).report_path, 'en'); print(a.task_count, round(a.operator_time_us, 3))\n")


def _tree_rss_mib(pid: int) -> float:
    """Current RSS of ``pid`` and all its descendants (the analysis reads dyn_topo.txt in a child process)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo.extend(int(x) for x in fh.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total / 1024.0


def measure(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one child process and everything it starts.

    Peak RSS is the larger of the child's own ``ru_maxrss`` and the sum over its process tree sampled every 10 ms,
    so memory held by a helper process at the same time is counted, not hidden.
    """
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tree_peak = 0.0
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        tree_peak = max(tree_peak, _tree_rss_mib(p.pid))
        time.sleep(0.01)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode() if p.stderr else ""
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-2000:]}")
    # ru_* of wait4 cover the child and the grandchildren it waited for
    return wall, max(usage.ru_maxrss / 1024.0, tree_peak), usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,500000")
    ap.add_argument("--src", default=None, help="a recorded SIM run (default: the softmax test run)")
    ap.add_argument("--work", default="/tmp/pypto-bench")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per measurement; the fastest is kept (the machine may be shared)")
    args = ap.parse_args()
    src = Path(args.src) if args.src else sorted(DEFAULT_SRC.iterdir())[0]
    py = sys.executable
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        dest = Path(args.work) / f"n{n}"
        runs = sorted(dest.glob("output_*")) if dest.exists() else []
        if not runs:
            subprocess.run([py, str(HERE / "gen_trace.py"), str(src), str(dest), str(n)], check=True,
                           stdout=subprocess.DEVNULL)
            runs = sorted(dest.glob("output_*"))
        run = runs[0]
        size_mb = (run / "CostModelSimulationOutput" / "merged_swimlane.json").stat().st_size / 2 ** 20
        b_time, b_rss, b_cpu = 0.0, 0.0, 0.0
        for step in ("perf", "swimlane", "core_usage", "dep_chains", "leafhash"):
            runs_ = [measure([py, str(HERE / "baseline.py"), step, str(run)]) for _ in range(args.repeat)]
            best = min(runs_)
            b_time += best[0]
            b_cpu += best[2]
            b_rss = max(b_rss, max(r for _, r, _ in runs_))
        runs_ = [measure([py, "-c", OURS, str(run)]) for _ in range(args.repeat)]
        o_time, _, o_cpu = min(runs_)
        o_rss = max(r for _, r, _ in runs_)
        rows.append((n, size_mb, b_time, b_rss, o_time, o_rss, b_cpu, o_cpu))
        print(f"n={n}: trace {size_mb:.0f} MiB  baseline {b_time:.2f} s / {b_rss:.0f} MiB  "
              f"ours {o_time:.2f} s / {o_rss:.0f} MiB", file=sys.stderr, flush=True)
    print("| tasks | trace MiB | baseline s | baseline peak MiB | ours s | ours peak MiB | time ratio | memory ratio "
          "| baseline CPU s | ours CPU s | CPU ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, mb, bt, br, ot, orr, bc, oc in rows:
        print(f"| {n} | {mb:.0f} | {bt:.2f} | {br:.0f} | {ot:.2f} | {orr:.0f} | {ot / bt:.3f} | {orr / br:.3f} "
              f"| {bc:.2f} | {oc:.2f} | {oc / bc:.3f} |")


if __name__ == "__main__":
    main()
