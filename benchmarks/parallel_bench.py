"""Parallel trials: N SIM runs of a fixture operator on k workers against one run's time.

Each run is what a candidate trial's run is: ``Executor.run`` of a ``RunSpec`` (the operator's file materialised into
a private copy, ``python softmax.py --run-mode sim`` there, the copy verified, the output folder moved into the
workspace's ``output/``). Figures:

* ``one run`` — the mean wall time of ``--single`` runs one after the other on the same executor (after one warm-up
  run, which is not counted: the first run pays for cold caches);
* ``N on k`` — the wall time of N runs started at once on an executor with k slots (they queue beyond k);
* ``ratio`` = ``N on k`` / (ceil(N / k) × ``one run``); the target (issue #12) is ≤ 1.2. A ratio above 1 is the price
  of sharing the machine: k simulators on k cores compete for memory bandwidth and for the cores the server, the
  executor and the rest of the machine also use.

``--ray`` does the same through a local Ray cluster (``RayExecutor``, ``num_cpus`` = k) and prints how long Ray took
to start (not counted in the ratio). Ray advertises the machine's non-loopback address; to keep it on loopback run the
benchmark in a network namespace: ``unshare -n sh -c 'ip link set lo up && exec python benchmarks/parallel_bench.py
--ray'`` (root). The load average is printed first: measure on a quiet machine, compare ratios within one invocation.
Never asserted in tests.

Usage: python benchmarks/parallel_bench.py [-n 4] [-k CORES] [--single 2] [--operator softmax] [--ray]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ROOT / "fixtures" / "operators"


def _specs(ws: Path, operator: str, count: int, tag: str):
    from pypto_tune.tools.code.codestate import ExecFile
    from pypto_tune.tools.running.executors import RunSpec
    from pypto_tune.tools.running.runner import build_child_env

    files = {f"{operator}.py": ExecFile(data=(OPERATORS / operator / f"{operator}.py").read_bytes())}
    env = build_child_env(run_mode="sim")
    return [RunSpec(files=files, argv=[sys.executable, f"{operator}.py", "--run-mode", "sim"], env=env,
                    workspace=str(ws), timeout_s=600, run_mode="sim", tag=f"{tag}{i}") for i in range(count)]


def _check(runs) -> None:
    for r in runs:
        if r.result.exit_code != 0 or not r.output_dirs:
            tail = r.result.output_tail or r.result.output_head
            raise SystemExit(f"a run failed (exit {r.result.exit_code}, {len(r.output_dirs)} output folders):\n"
                             f"{tail[-2000:]}")


async def _measure(executor, ws: Path, operator: str, n: int, k: int, single: int) -> dict:
    # warm-up, then the single-run time, then N at once
    _check([await executor.run(_specs(ws, operator, 1, "warm")[0])])
    singles = []
    for spec in _specs(ws, operator, single, "one"):
        t0 = time.monotonic()
        _check([await executor.run(spec)])
        singles.append(time.monotonic() - t0)
    one = sum(singles) / len(singles)
    runs: list = []

    async def go(spec) -> None:
        runs.append(await executor.run(spec))

    t0 = time.monotonic()
    async with anyio.create_task_group() as tg:
        for spec in _specs(ws, operator, n, "par"):
            tg.start_soon(go, spec)
    wall = time.monotonic() - t0
    _check(runs)
    waves = math.ceil(n / k)
    return {"one": one, "singles": singles, "wall": wall, "waves": waves, "ratio": wall / (waves * one),
            "queued": sorted(r.queued_s for r in runs)}


def _print(name: str, n: int, k: int, m: dict) -> None:
    ok = "meets" if m["ratio"] <= 1.2 else "MISSES"
    print(f"{name:6s} one run {m['one']:6.2f} s (runs: {', '.join(f'{s:.2f}' for s in m['singles'])})  "
          f"{n} on {k}: {m['wall']:6.2f} s  = {m['wall'] / m['one']:.2f} x one run  "
          f"ratio {m['ratio']:.3f} vs ceil({n}/{k}) = {m['waves']} waves  ({ok} the ≤ 1.2 target)")
    print(f"       queued before starting: {', '.join(f'{q:.2f}' for q in m['queued'])} s")


async def main_async(args: argparse.Namespace) -> int:
    from pypto_tune.tools.running.executors import LocalExecutor

    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
          f"{len(os.sched_getaffinity(0))} usable cores; operator {args.operator}; N={args.n} k={args.k}")
    base = Path(tempfile.mkdtemp(prefix="pypto-par-"))
    try:
        ws = base / "local"
        ws.mkdir()
        _print("local", args.n, args.k, await _measure(LocalExecutor(sim_slots=args.k), ws, args.operator, args.n,
                                                       args.k, args.single))
        if args.ray:
            from pypto_tune.tools.running.executors.ray_backend import RayExecutor

            ray_ex = RayExecutor(init_kwargs={"num_cpus": args.k})
            try:
                await ray_ex.connect()
                print(f"ray    started in {ray_ex.connect_s:.2f} s (not counted below)")
                ws = base / "ray"
                ws.mkdir()
                _print("ray", args.n, args.k, await _measure(ray_ex, ws, args.operator, args.n, args.k,
                                                             args.single))
            finally:
                ray_ex.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=4, help="runs started at once")
    p.add_argument("-k", type=int, default=len(os.sched_getaffinity(0)), help="slots (default: usable cores)")
    p.add_argument("--single", type=int, default=2, help="sequential runs that give the single-run time")
    p.add_argument("--operator", default="softmax", help="fixture operator under fixtures/operators/")
    p.add_argument("--ray", action="store_true", help="also through a local Ray cluster (pip install .[ray])")
    args = p.parse_args()
    return anyio.run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
