"""What the run-time probe costs a SIM run: probe on against probe off, interleaved in one invocation.

    .venv/bin/python benchmarks/probe_bench.py [-n 7] [--operator upstream_layernorm ...]

Each operator's test command runs 2·N times in a scratch copy of its fixture folder, alternating probe on (the
hook first on PYTHONPATH, ``$PYPTO_TUNE_PROBE_DIR`` set: exactly what a probed run gets) and probe
off, so that load changes on the machine fall on both sides alike. Printed per operator: median wall time and
median CPU time (user + system of the child and its children) of each side, their ratios, the time the probe's own
code took in the last probed run (``self_s``, timed inside the hook: loading, wrapping, recording, writing — load
noise does not reach it) and its share of that run's CPU time, the record's size and what it saw. Goal (issue #17): ≤ 3 % of a SIM run. The simulated operator time of every run is compared too:
the probe must never change it. Figures only; no test asserts timings.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pypto_tune.tools.analysis import analyze_runs  # noqa: E402
from pypto_tune.tools.running.probe import probe_env, read_records  # noqa: E402
from pypto_tune.tools.running.runner import build_child_env  # noqa: E402

OPERATORS = {
    "upstream_layernorm": ("layernorm_op.py", "test_layer_norm"),
    "upstream_activation": ("activation_ops.py", "test_swiglu"),
    "upstream_ffn": ("ffn_module.py", "test_ffn_static"),
    "upstream_softmax": ("softmax_op.py", "test_softmax"),
}


def _run(folder: Path, file: str, test: str, env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, CPU s of the children, simulated operator time µs) of one run of the test command."""
    for old in (folder / "output").glob("output_*"):
        shutil.rmtree(old)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, file, f"{file}::{test}", "--run_mode", "sim"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{file}::{test} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    dirs = sorted((folder / "output").glob("output_*"))
    return wall, cpu, analyze_runs(dirs, run_mode="sim").operator_time_us


def bench(name: str, n: int, scratch: Path) -> dict[str, object]:
    file, test = OPERATORS[name]
    folder = scratch / name
    shutil.copytree(ROOT / "fixtures" / "operators" / name, folder)
    base = build_child_env(run_mode="sim")
    records = scratch / f"{name}.probe"
    sides: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    _run(folder, file, test, base)  # warm the file cache once; not counted
    for i in range(2 * n):
        probed = i % 2 == 0
        if probed:  # the last probed run's record stays for the summary
            shutil.rmtree(records, ignore_errors=True)
            records.mkdir()
        env = probe_env(base, records) if probed else base
        sides[probed].append(_run(folder, file, test, env))
    record = read_records(records, [str(folder)])
    size = sum(p.stat().st_size for p in records.glob("probe-*.json"))
    med = {k: (statistics.median(w for w, _, _ in v), statistics.median(c for _, c, _ in v)) for k, v in sides.items()}
    times = {round(t, 6) for v in sides.values() for _, _, t in v}
    return {
        "operator": f"{name} ({file}::{test})", "runs_per_side": n,
        "wall_off_s": round(med[False][0], 3), "wall_on_s": round(med[True][0], 3),
        "wall_ratio": round(med[True][0] / med[False][0], 4),
        "cpu_off_s": round(med[False][1], 3), "cpu_on_s": round(med[True][1], 3),
        "cpu_ratio": round(med[True][1] / med[False][1], 4),
        "operator_time_us": sorted(times), "same_operator_time": len(times) == 1,
        "probe_self_s": record.self_s, "self_share_of_cpu": round(record.self_s / med[True][1], 4),
        "record_bytes": size, "probe": record.summary(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=7, help="runs per side (default 7)")
    ap.add_argument("--operator", action="append", choices=sorted(OPERATORS),
                    help="fixture operator(s) to run (default: upstream_layernorm and upstream_activation)")
    args = ap.parse_args()
    names = args.operator or ["upstream_layernorm", "upstream_activation"]
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    print(f"load average before: {' '.join(load)}  ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        for name in names:
            row = bench(name, args.n, Path(tmp))
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
