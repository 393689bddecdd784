"""Time and peak memory of ``pypto-tune analyze RUN --json`` against the reference-style baseline, same run.

"Ours" is the command users run: the ``pypto-tune`` console script next to this interpreter, as a subprocess,
with ``--json`` on stdout and the Markdown report written into the run folder (the CLI's default). So interpreter
start-up, imports, the ``dyn_topo.txt`` helper process, the report and the JSON dump are all inside the figures.
The baseline is five processes, one per reference script (``baseline.py``): its time is their sum, its peak memory
the largest of them. Both sides are measured in the same invocation, interleaved repeat by repeat (baseline, then
ours), so a change in machine load hits both alike; ratios are only meaningful within one invocation.

Per measurement (a fresh child process each time):
* wall time — the fastest of ``--repeat`` runs (the test machine is shared; slower runs are other people's load);
* peak memory — of the whole process tree, the larger of the child's ``ru_maxrss`` and the tree's summed RSS
  sampled every 5 ms, and the LARGEST over the repeats (memory does not depend on load, so no best-of);
* peak bound — the sum of every process's own high-water mark (``VmHWM``), an upper bound that holds even if the
  sampler missed the moment where two processes peaked together;
* CPU — user + sys of the child and everything it waited for, from ``os.wait4`` (tells a gain from the second
  core apart from less work).

The load average is printed before each size: measure on a quiet machine.

Usage: python benchmarks/run_bench.py [--sizes 10000,100000,500000] [--repeat 3] [--src RUN_DIR]
                                      [--work /tmp/pypto-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SRC = HERE.parent / "tests" / "analysis" / "data" / "sim_softmax" / "runs"
STEPS = ("perf", "swimlane", "core_usage", "dep_chains", "leafhash")
SAMPLE_S = 0.005


@dataclass
class Sample:
    wall_s: float
    peak_mib: float  # max(ru_maxrss, sampled tree sum)
    bound_mib: float  # Σ VmHWM over the tree (upper bound)
    cpu_s: float


def _status(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of one process in MiB; (0, 0) once it is gone."""
    rss = hwm = 0.0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024.0
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) / 1024.0
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return rss, hwm


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return []


def measure(cmd: list[str], stdout=subprocess.DEVNULL) -> Sample:
    """Run ``cmd`` once; see the module doc for what each figure means."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    tree_peak = 0.0
    hwm: dict[int, float] = {}  # last seen high-water mark per process of the tree
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        total, todo = 0.0, [p.pid]
        while todo:
            q = todo.pop()
            rss, high = _status(q)
            total += rss
            if high:
                hwm[q] = max(hwm.get(q, 0.0), high)
            todo.extend(_children(q))
        tree_peak = max(tree_peak, total)
        time.sleep(SAMPLE_S)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-2000:]}")
    own = usage.ru_maxrss / 1024.0  # wait4's ru_* cover the child and the grandchildren it waited for
    hwm[p.pid] = max(hwm.get(p.pid, 0.0), own)
    return Sample(wall, max(own, tree_peak), max(sum(hwm.values()), own, tree_peak), usage.ru_utime + usage.ru_stime)


def cli_command() -> list[str]:
    """``pypto-tune`` as installed beside this interpreter (the console script users call)."""
    exe = Path(sys.executable).with_name("pypto-tune")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("pypto-tune")
    if found:
        return [found]
    raise SystemExit("the pypto-tune console script is not installed next to this Python; run `pip install -e .`")


def run_ours(cli: list[str], run: Path) -> tuple[Sample, dict]:
    """One ``pypto-tune analyze RUN --json``; stdout goes to a file and is checked to be the analysis."""
    with tempfile.TemporaryFile() as out:
        s = measure([*cli, "analyze", str(run), "--json"], stdout=out)
        out.seek(0)
        data = json.loads(out.read())
    return s, data


def ensure_run(src: Path, dest: Path, n: int) -> Path:
    runs = sorted(dest.glob("output_*")) if dest.exists() else []
    if not runs:
        subprocess.run([sys.executable, str(HERE / "gen_trace.py"), str(src), str(dest), str(n)], check=True,
                       stdout=subprocess.DEVNULL)
        runs = sorted(dest.glob("output_*"))
    return runs[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,500000")
    ap.add_argument("--src", default=None, help="a recorded SIM run (default: the softmax test run)")
    ap.add_argument("--work", default="/tmp/pypto-bench")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per measurement; the fastest time is kept (the machine may be shared)")
    args = ap.parse_args()
    src = Path(args.src) if args.src else sorted(DEFAULT_SRC.iterdir())[0]
    py = sys.executable
    cli = cli_command()
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        run = ensure_run(src, Path(args.work) / f"n{n}", n)
        size_mb = (run / "CostModelSimulationOutput" / "merged_swimlane.json").stat().st_size / 2 ** 20
        load = os.getloadavg()
        print(f"n={n}: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} before measuring",
              file=sys.stderr, flush=True)
        base: dict[str, list[Sample]] = {s: [] for s in STEPS}
        ours: list[Sample] = []
        for rep in range(args.repeat):
            for step in STEPS:
                base[step].append(measure([py, str(HERE / "baseline.py"), step, str(run)]))
            s, data = run_ours(cli, run)
            ours.append(s)
            b_rep = sum(base[step][-1].wall_s for step in STEPS)
            print(f"  repeat {rep + 1}: baseline {b_rep:.2f} s, ours {s.wall_s:.2f} s / {s.peak_mib:.0f} MiB "
                  f"(bound {s.bound_mib:.0f}) / CPU {s.cpu_s:.2f} s, {data['task_count']} tasks",
                  file=sys.stderr, flush=True)
        # baseline: each step's fastest run, summed; its peak is the largest of any step in any repeat
        b_time = sum(min(x.wall_s for x in base[step]) for step in STEPS)
        b_cpu = sum(min(x.cpu_s for x in base[step]) for step in STEPS)
        b_rss = max(x.peak_mib for step in STEPS for x in base[step])
        o_time = min(x.wall_s for x in ours)
        o_cpu = min(x.cpu_s for x in ours)
        o_rss = max(x.peak_mib for x in ours)
        o_bound = max(x.bound_mib for x in ours)
        rows.append((n, size_mb, b_time, b_rss, o_time, o_rss, o_bound, b_cpu, o_cpu))
        print(f"n={n}: trace {size_mb:.0f} MiB  baseline {b_time:.2f} s / {b_rss:.0f} MiB  "
              f"ours {o_time:.2f} s / {o_rss:.0f} MiB", file=sys.stderr, flush=True)
    print(f"ours = `{' '.join(Path(c).name for c in cli)} analyze RUN --json` (subprocess, report written); "
          f"time best of {args.repeat}, peak memory largest of {args.repeat}")
    print("| tasks | trace MiB | baseline s | baseline peak MiB | ours s | ours peak MiB | ours peak bound MiB "
          "| time ratio | memory ratio | bound ratio | baseline CPU s | ours CPU s | CPU ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, mb, bt, br, ot, orr, ob, bc, oc in rows:
        print(f"| {n} | {mb:.0f} | {bt:.2f} | {br:.0f} | {ot:.2f} | {orr:.0f} | {ob:.0f} | {ot / bt:.3f} "
              f"| {orr / br:.3f} | {ob / br:.3f} | {bc:.2f} | {oc:.2f} | {oc / bc:.3f} |")


if __name__ == "__main__":
    main()
