"""What an executor adds to each run (issue #19): the driver's wall time of ``Executor.run`` minus the run's own
duration, on the local pool and on a local Ray cluster, for the same small test command.

    .venv/bin/python benchmarks/executor_overhead.py --runs 10 --json /tmp/overhead.json   # needs root (Ray)

The command is the executor tests' ``job.py`` (tests/executors/exec_helpers.py: sleeps ``--sleep-s``, writes one run
folder), run one at a time so that nothing queues: what remains besides the run is the executor's own work on the
run's path — materialising the private copy, the sandbox, verifying and digesting the outputs (both executors), and on
Ray also submitting the task, the worker's helper process, packing, streaming and unpacking the run folders. Ray's
cluster runs in a network namespace of its own with only ``lo`` up (domain.md F.5), as the tests' does. Also printed:
the CPU the cluster's own processes (GCS, raylet, agents, idle workers) use while no run executes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "executors"))


def _cpu_s(pids: list[int]) -> float:
    """utime + stime of these processes, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _cluster_pids(mark: str) -> list[int]:
    """Processes whose command line names ``mark`` (Ray's session folder lies under our TMPDIR)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                if mark.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                    out.append(int(p))
            except OSError:
                pass
    return out


async def measure(ex, work: Path, name: str, runs: int, sleep_s: float, gap_s: float = 0.0) -> dict:
    import anyio

    from exec_helpers import job_spec, make_workspace

    ws = make_workspace(work, name)
    extra = []
    await ex.run(job_spec(ws, "warm-up", sleep_s))  # Ray starts its workers on first use
    for i in range(runs):
        await anyio.sleep(gap_s)  # what a session does between two runs of a slot (judge, record, admit the next)
        t0 = time.monotonic()
        r = await ex.run(job_spec(ws, f"r{i}", sleep_s))
        extra.append(time.monotonic() - t0 - r.result.duration_s)
        if r.result.exit_code != 0 or not r.output_dirs:
            raise SystemExit(f"{name}: run {i} failed: {r.result.output[-800:]}")
    return {"runs": runs, "extra_s_median": round(statistics.median(extra), 3),
            "extra_s_mean": round(statistics.mean(extra), 3), "extra_s": [round(x, 3) for x in extra]}


async def main_async(args: argparse.Namespace) -> dict:
    from pypto_tune.tools.running.executors import LocalExecutor
    from pypto_tune.tools.running.executors.ray_backend import SPARE_ENV, RayExecutor

    work = Path(tempfile.mkdtemp(prefix="pto-overhead-"))
    out: dict = {"load_before": [round(x, 2) for x in os.getloadavg()]}
    out["local"] = await measure(LocalExecutor(sim_slots=2), work, "local", args.runs, args.sleep_s, args.gap_s)
    # the same cluster size without spares first (every helper started inside its run), then as shipped
    plain = RayExecutor(init_kwargs={"num_cpus": 2, "runtime_env": {"env_vars": {SPARE_ENV: "0"}}})
    await plain.connect()
    try:
        out["ray_no_spare"] = await measure(plain, work, "ray-no-spare", args.runs, args.sleep_s, args.gap_s)
    finally:
        plain.close()
    ray_ex = RayExecutor(init_kwargs={"num_cpus": 2})
    await ray_ex.connect()
    try:
        out["ray"] = await measure(ray_ex, work, "ray", args.runs, args.sleep_s, args.gap_s)
        pids = _cluster_pids(os.environ["TMPDIR"])
        c0, t0 = _cpu_s(pids), time.monotonic()
        time.sleep(args.idle_s)
        out["ray"]["idle_cluster_cpu_pct"] = round(100 * (_cpu_s(pids) - c0) / (time.monotonic() - t0), 1)
        out["ray"]["idle_cluster_processes"] = len(pids)
    finally:
        ray_ex.close()
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--sleep-s", type=float, default=1.0, help="how long the test command sleeps")
    ap.add_argument("--gap-s", type=float, default=0.0,
                    help="pause between two runs, as a session's bookkeeping makes (0: back to back)")
    ap.add_argument("--idle-s", type=float, default=10.0, help="how long to watch the idle cluster's CPU")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from ray_scenarios import enter_loopback_namespace

    # Ray's session folder under a TMPDIR of our own: its processes are then the ones that name it. HOME too: a local
    # ray.init writes an auth token to ~/.ray/, which would turn on token authentication for every later `ray start`
    # of the user's (and break drivers that do not expect it)
    os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="pto", dir="/tmp")
    os.environ["HOME"] = os.environ["TMPDIR"]
    enter_loopback_namespace()
    import anyio

    try:
        out = anyio.run(main_async, args)
    finally:
        shutil.rmtree(os.environ["TMPDIR"], ignore_errors=True)  # the cluster is down: its session folder can go
    for name in ("local", "ray_no_spare", "ray"):
        row = out[name]
        print(f"{name}: {row['runs']} runs of {args.sleep_s} s, executor's extra per run: median "
              f"{row['extra_s_median']} s, mean {row['extra_s_mean']} s")
    print(f"idle Ray cluster: {out['ray']['idle_cluster_processes']} processes, "
          f"{out['ray']['idle_cluster_cpu_pct']} % of one core; load average before {out['load_before']}, after "
          f"{out['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
