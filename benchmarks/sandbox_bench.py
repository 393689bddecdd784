"""What the run sandbox costs per run: sandboxed against unsandboxed runs of the same SIM kernel, interleaved.

Each run is what a session's run is: ``run_isolated`` of the fixture operator's file (``python softmax.py
--run-mode sim``, the output folders checked and moved into the workspace's ``output/``) — once with
``sandboxed=True`` (the sealed bubblewrap sandbox: the file fed from a descriptor into a read-only tmpfs, outputs in
the sandbox's own tmpfs and handed back as a tar stream, the copy verified from it; the closure the server would
record, found once as ``start_session`` does, and reused) and once with ``sandboxed=False`` (the file materialised
into a private copy under ``.pypto-tune/exec/`` and run there directly).
The two kinds alternate (A B B A A B …) so that load drifting on the shared machine hits both alike; one warm-up
pair is not counted. Printed: the median wall time of each kind, their ratio (goal ≤ 1.02× for a ~3 s SIM run) and
the difference in ms; and, for the sandbox's own price without the kernel, ``bwrap … /bin/true`` with the same
mounts (sealed: one fed file, the handback) against ``/bin/true`` (goal ≤ 50 ms). The load average is printed first. Never asserted in tests.

Usage: python benchmarks/sandbox_bench.py [-n 8] [--operator softmax] [--true 40]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ROOT / "fixtures" / "operators"


async def _kernel_runs(ws: Path, operator: str, pairs: int) -> dict[str, list[float]]:
    from pypto_tune.tools.code.codestate import ExecFile
    from pypto_tune.tools.running import closure as closure_mod
    from pypto_tune.tools.running.execution import run_isolated
    from pypto_tune.tools.running.runner import build_child_env

    files = {f"{operator}.py": ExecFile(data=(OPERATORS / operator / f"{operator}.py").read_bytes())}
    env = build_child_env(run_mode="sim")
    argv = [sys.executable, f"{operator}.py", "--run-mode", "sim"]
    clo, _ = await closure_mod.find(sys.executable, env, workspace=ws)
    times: dict[str, list[float]] = {"sandboxed": [], "unsandboxed": []}
    order = ["sandboxed", "unsandboxed"]
    for i in range(pairs + 1):
        for kind in (order if i % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            iso = await run_isolated(files, argv, workspace=ws, env=env, timeout_s=600, tag=kind,
                                     sandboxed=kind == "sandboxed", closure=clo)
            dt = time.perf_counter() - t0
            if iso.result.exit_code != 0 or not iso.output_dirs:
                raise SystemExit(f"a {kind} run failed (exit {iso.result.exit_code}, rejected "
                                 f"{iso.rejected_outputs}):\n{(iso.result.output_tail or iso.result.output_head)[-2000:]}")
            if i > 0:  # the first pair warms caches
                times[kind].append(dt)
    return times


def _true_runs(ws: Path, count: int) -> dict[str, list[float]]:
    """``/bin/true`` alone against the same command inside a sealed sandbox with a session's mounts: one recorded
    file fed from a descriptor, the copy remounted read-only, the handback written (the shape every run has)."""
    from pypto_tune.tools.running import closure as closure_mod
    from pypto_tune.tools.running import sandbox
    from pypto_tune.tools.running.runner import build_child_env

    status = sandbox.require()
    env = build_child_env(run_mode="sim")
    clo, _ = closure_mod.find_sync(sys.executable, env, workspace=ws)
    times: dict[str, list[float]] = {"bwrap /bin/true": [], "/bin/true": []}
    data = (OPERATORS / "softmax" / "softmax.py").read_bytes()
    for i in range(count + 1):
        feed = os.memfd_create("bench-feed")
        os.write(feed, data)
        os.lseek(feed, 0, os.SEEK_SET)
        mine, theirs = socket.socketpair()  # the handback (a few kB here: fits the socket's buffer)
        layout = sandbox.SealedLayout(workspace=str(ws), feeds=(sandbox.Feed(rel="softmax.py", fd=feed),))
        boxed = sandbox.command(status.bwrap, ["/bin/true"], layout=layout, closure=clo, home=env["HOME"])
        for kind, argv in (("bwrap /bin/true", boxed), ("/bin/true", ["/bin/true"])):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, env=env, pass_fds=(feed,), stdin=theirs)
            if i > 0:
                times[kind].append(time.perf_counter() - t0)
        os.close(feed)
        theirs.close()
        mine.close()
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("-n", type=int, default=8, help="pairs of kernel runs (after one warm-up pair)")
    p.add_argument("--operator", default="softmax")
    p.add_argument("--true", type=int, default=40, help="pairs of /bin/true runs")
    args = p.parse_args()
    from pypto_tune.tools.running import sandbox

    st = sandbox.status()
    if not st.ok:
        raise SystemExit(f"no sandbox here: {st.missing}")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, {os.cpu_count()} CPUs, {st.tool}")
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-ws-") as d:
        ws = Path(d)
        t = _true_runs(ws, args.true)
        a, b = statistics.median(t["bwrap /bin/true"]), statistics.median(t["/bin/true"])
        print(f"/bin/true: sandboxed {a * 1000:.1f} ms, alone {b * 1000:.1f} ms (median of {args.true}) — the "
              f"sandbox adds {(a - b) * 1000:.1f} ms")
        k = anyio.run(_kernel_runs, ws, args.operator, args.n)
    sb, un = statistics.median(k["sandboxed"]), statistics.median(k["unsandboxed"])
    print(f"{args.operator} SIM run: sandboxed {sb:.3f} s, unsandboxed {un:.3f} s (median of {args.n} each, "
          f"interleaved) — ratio {sb / un:.3f}×, {(sb - un) * 1000:+.0f} ms")
    lo_sb, lo_un = min(k["sandboxed"]), min(k["unsandboxed"])
    print(f"  fastest of each (least disturbed by other load): {lo_sb:.3f} s vs {lo_un:.3f} s — ratio "
          f"{lo_sb / lo_un:.3f}×, {(lo_sb - lo_un) * 1000:+.0f} ms")
    print("  sandboxed:   " + " ".join(f"{x:.2f}" for x in k["sandboxed"]))
    print("  unsandboxed: " + " ".join(f"{x:.2f}" for x in k["unsandboxed"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
