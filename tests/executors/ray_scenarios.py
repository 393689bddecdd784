"""Drive a real local Ray cluster through the executors and write what happened to a JSON file.

Runs in a network namespace of its own, with only ``lo`` up (:func:`enter_loopback_namespace`, the same as
``unshare -n sh -c 'ip link set lo up; ...'``, without needing either program): Ray advertises the machine's
non-loopback address otherwise (domain.md F.5), and test traffic must stay on loopback. Needs root. Each scenario
records facts; ``test_executor_ray.py`` judges them. One process for all scenarios, because starting Ray costs
seconds. Usage: ``python ray_scenarios.py OUT_JSON WORK_DIR``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import anyio
from exec_helpers import (
    job_spec,
    kill_leftovers,
    leftover_copies,
    make_workspace,
    max_overlap,
    output_summary,
    pids_in,
    read_result,
    wait_dead,
)
from pypto_tune.tools.running.executors import Executor, LocalExecutor, RunSpec
from pypto_tune.tools.running.executors.ray_backend import RayExecutor


def run_facts(ws: Path, runs: list) -> list[dict]:
    facts = []
    for r in runs:
        rec = read_result(r.output_dirs[0]) if r.output_dirs else {}
        facts.append({"label": rec.get("label"), "exit_code": r.result.exit_code, "exec_hash": r.exec_hash,
                      "tampered": r.tampered, "outputs": [str(d.relative_to(ws)) for d in r.output_dirs],
                      "argv1": r.argv[1], "device_id": r.device_id, "child_device": rec.get("device"),
                      "start": rec.get("start"), "end": rec.get("end"), "queued_s": r.queued_s,
                      "executor": r.executor})
    return facts


async def run_all(ex: Executor, specs: list[RunSpec]) -> list:
    results: list = [None] * len(specs)

    async def one(i: int) -> None:
        results[i] = await ex.run(specs[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(specs)):
            tg.start_soon(one, i)
    return results


async def same_runs(work: Path, ray_ex: RayExecutor) -> dict:
    """The same three runs through both backends, each into its own workspace. The two backends run them at the
    same time: the runs mostly sleep, and neither backend's facts depend on the other's (the local pool's two slots
    are its own; Ray's overlap is read from its own runs' start and end times), so the wait is paid once."""
    out = {}
    # Ray starts a worker process per CPU the first time it needs one; under the suite's load that cold start
    # took longer than a 2 s run (CI saw the second run begin after the first ended: overlap 1). The overlap asked
    # about is Ray's scheduling, not its worker start-up, so two short runs warm both workers first, and the runs
    # measured are long enough that a late start would still overlap.
    warm = make_workspace(work, "same-warm")
    await run_all(ray_ex, [job_spec(warm, "w0", 0.5), job_spec(warm, "w1", 0.5)])

    async def side(name: str, ex: Executor) -> None:
        ws = make_workspace(work, f"same-{name}")
        specs = [job_spec(ws, "s0", 3.0), job_spec(ws, "s1", 3.0, absolute=True), job_spec(ws, "s2", 3.0)]
        t0 = time.monotonic()
        runs = await run_all(ex, specs)
        out[name] = {"wall_s": round(time.monotonic() - t0, 3), "runs": run_facts(ws, runs),
                     "outputs": output_summary(ws), "copies_left": leftover_copies(ws),
                     "workspace_arg": str(ws / "job.py"), "spec_hash": specs[0].exec_hash,
                     "overlap": max_overlap([(f["start"], f["end"]) for f in run_facts(ws, runs)]),
                     "queued_s": [r.queued_s for r in runs]}

    async with anyio.create_task_group() as tg:
        tg.start_soon(side, "local", LocalExecutor(sim_slots=2))
        tg.start_soon(side, "ray", ray_ex)
    return out


async def progress(work: Path, ex: RayExecutor) -> dict:
    ws = make_workspace(work, "progress")
    seen: list = []

    async def cb(elapsed: float, line: str) -> None:
        seen.append([elapsed, line])

    run = await ex.run(job_spec(ws, "p", 2.6), on_progress=cb)
    return {"exit_code": run.result.exit_code, "seen": seen}


async def timeout(work: Path, ex: RayExecutor) -> dict:
    ws = make_workspace(work, "timeout")
    t0 = time.monotonic()
    run = await ex.run(job_spec(ws, "t", 60, timeout_s=1.0))
    return {"timed_out": run.result.timed_out, "exit_code": run.result.exit_code, "outputs": len(run.output_dirs),
            "wall_s": round(time.monotonic() - t0, 3), "copies_left": leftover_copies(ws)}


async def npu(work: Path, ex: RayExecutor) -> dict:
    ws = make_workspace(work, "npu")
    specs = [job_spec(ws, f"n{i}", 1.0, run_mode="npu", device_pool=("7",)) for i in range(4)]
    runs = await run_all(ex, specs)
    facts = run_facts(ws, runs)
    # a pinned chip (the session's current chip) cannot be honoured on Ray: the run goes where Ray puts it, and
    # says where
    pinned = await ex.run(job_spec(ws, "pinned", 0.1, run_mode="npu", device_pool=("7", "8"), device_id="8"))
    return {"runs": facts, "pinned": run_facts(ws, [pinned])[0], "capacity": ex.capacity("npu"),
            "cpu_capacity": ex.capacity("sim"), "resource": ex.npu_resource}


async def run_error(work: Path, ex: RayExecutor) -> dict:
    ws = make_workspace(work, "error")
    spec = job_spec(ws, "x")
    bad = RunSpec(files=spec.files, argv=["./missing-program"], env=spec.env, workspace=spec.workspace, timeout_s=5)
    try:
        await ex.run(bad)
    except Exception as exc:  # noqa: BLE001
        return {"raised": type(exc).__name__, "message": str(exc)}
    return {"raised": None}


async def cancel(work: Path, ex: RayExecutor, name: str) -> dict:
    """Two runs, each with a grandchild that ignores SIGTERM; cancel the caller once all four pids exist."""
    ws = make_workspace(work, name)
    pidfiles = [work / f"{name}-pids{i}" for i in range(2)]
    pids: list[int] = []
    t_cancel = t_back = None
    with anyio.move_on_after(120) as guard:
        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(ex.run, job_spec(ws, f"{name}{i}", 120, pidfile=pidfiles[i]))
            while sum(len(pids_in(p)) for p in pidfiles) < 4:
                await anyio.sleep(0.05)
            pids = [p for f in pidfiles for p in pids_in(f)]
            t_cancel = time.monotonic()
            tg.cancel_scope.cancel()
        t_back = time.monotonic()
    alive = wait_dead(pids, timeout_s=5.0)
    kill_leftovers(alive)
    tmp = Path(os.environ["TMPDIR"])
    return {"started": not guard.cancelled_caught, "pids": pids, "alive": alive,
            "cancel_s": round(t_back - t_cancel, 3) if t_cancel and t_back else None,
            "worker_dirs_left": sorted(p.name for p in tmp.glob("pypto-tune-ray-*")),
            "copies_left": leftover_copies(ws), "outputs": (ws / "output").exists()}


async def probe(work: Path, ex: RayExecutor) -> dict:
    """The run-time probe as RunOps.run delivers it (the sandbox's hooks: its hook folder first on PYTHONPATH, its
    records in the capture folder), on a Ray worker, in the sandbox and unsandboxed (``serve --unsandboxed``)."""
    from pypto_tune.tools.code.codestate import ExecFile
    from pypto_tune.tools.running.probe import DIR_ENV, HOOK_DIR, parse_records
    from pypto_tune.tools.running.runner import build_child_env

    script = b"import pypto\nprint('pypto imported from', pypto.__file__)\n"
    out = {}

    # the two runs are independent (each its own workspace) and the cluster has two CPUs: run at once, the wait for
    # pypto's import is paid once
    async def one(name: str, sandboxed: bool) -> None:
        ws = make_workspace(work, f"probe-{name}")
        spec = RunSpec(files={"imports.py": ExecFile(data=script)},
                       argv=[sys.executable, "imports.py"], env=build_child_env(run_mode="sim"), workspace=str(ws),
                       timeout_s=300, tag=f"probe-{name}", sandboxed=sandboxed,
                       pythonpath_first=(str(HOOK_DIR),), capture_env=DIR_ENV)
        run = await ex.run(spec)
        record = parse_records(run.captured, [str(ws), run.exec_dir])
        out[name] = {"exit_code": run.result.exit_code, "output": run.result.output[-2000:],
                     "sandbox": run.sandbox, "executor": run.executor, "captured": sorted(run.captured),
                     "status": record.status, "reason": record.reason, "version": record.pypto_version,
                     "processes": record.processes, "sys_path": record.sys_path, "hook": str(HOOK_DIR),
                     "ws": str(ws), "exec_dir": run.exec_dir, "copies_left": leftover_copies(ws)}

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "sandboxed", True)
        tg.start_soon(one, "unsandboxed", False)
    return out


async def main(out: Path, work: Path) -> None:
    report: dict = {"errors": {}}
    t0 = time.monotonic()
    ray_ex = RayExecutor(init_kwargs={"num_cpus": 2, "resources": {"NPU": 2}})
    await ray_ex.connect()
    report["connect_s"] = round(time.monotonic() - t0, 3)
    import ray

    report["node_ips"] = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
    try:
        scenarios = [("same", lambda: same_runs(work, ray_ex)), ("progress", lambda: progress(work, ray_ex)),
                     ("timeout", lambda: timeout(work, ray_ex)), ("npu", lambda: npu(work, ray_ex)),
                     ("run_error", lambda: run_error(work, ray_ex)), ("probe", lambda: probe(work, ray_ex)),
                     ("cancel_graceful", lambda: cancel(work, ray_ex, "graceful")),
                     # grace 0: straight to ray.cancel(force=True), the worker dies with the run inside it
                     ("cancel_forced", lambda: cancel(work, RayExecutor(cancel_grace_s=0.0), "forced"))]
        for name, scenario in scenarios:
            s0 = time.monotonic()
            try:
                report[name] = await scenario()
            except Exception:  # noqa: BLE001 - recorded for the test to show
                report["errors"][name] = traceback.format_exc()
            report.setdefault("times", {})[name] = round(time.monotonic() - s0, 3)
    finally:
        ray_ex.close()
        out.write_text(json.dumps(report, indent=1))


def enter_loopback_namespace() -> None:
    """Move this process into a new network namespace and bring its ``lo`` up.

    ``unshare(2)`` applies to the calling thread only, so this must run while the process has one thread (before
    Ray is imported); everything started afterwards (the Ray cluster, workers, test commands) inherits it.
    """
    import ctypes
    import fcntl
    import socket
    import struct
    import threading

    if threading.active_count() != 1:
        raise RuntimeError("enter_loopback_namespace must run before any thread starts")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed (root needed)")
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))
    names = [name for _, name in socket.if_nameindex()]
    if names != ["lo"]:
        raise RuntimeError(f"the new network namespace holds {names}, not just lo")


if __name__ == "__main__":
    enter_loopback_namespace()
    anyio.run(main, Path(sys.argv[1]), Path(sys.argv[2]))
