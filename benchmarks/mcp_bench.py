"""What a client pays to talk to pypto-tune: cold start, the size of tools/list, the size of typical results.

    .venv/bin/python benchmarks/mcp_bench.py [-n 9] [--pythonpath DIR] [--demo | --demo-only]

* cold start: from process start to the ``initialize`` answer over stdio (raw JSON-RPC on the pipes, nothing in
  between), median of N; a bare MCP server (the same SDK, one trivial tool) is measured in the same run, interleaved
  with ours, so that the ratio holds on a loaded machine;
* ``tools/list``: bytes of the JSON-RPC response;
* results on a recorded run (fixtures/runs/softmax_base and the softmax operator, in a scratch workspace):
  ``analyze_bubbles`` by default and with ``detail="full"``, ``get_status`` and ``list_knobs`` on a started session —
  bytes of each JSON-RPC response (text content and structured content together, as the client receives them);
* with ``--demo`` (or ``--demo-only``, which skips the above): the demo overhead. ``pypto-tune demo`` runs once in a
  scratch folder (about a minute); it prints its wall time and the sum of the test-command runs the server reported
  (the ``runs`` rows of its ledger), and the ratio of the two is what the server, the client and the agent's script
  add around the kernels. The wall time of the whole ``demo`` process (interpreter start included) is printed too.

Printed figures only; the tests never assert timings. ``--pythonpath DIR`` runs the server from another tree laid out
as an importable ``pypto_tune`` package (e.g. an older commit's, to compare before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BARE = """
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bare")


@mcp.tool()
def echo(text: str) -> str:
    \"\"\"Echo the text.\"\"\"
    return text


mcp.run("stdio")
"""
INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "mcp-bench", "version": "0"}}


class Pipe:
    """A JSON-RPC client on a child's stdin/stdout, one message per line (the stdio transport)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, cwd=cwd)
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
        """The response and its size in bytes (notifications in between are skipped)."""
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, **({"params": params} if params else {})}
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the server closed stdout while answering {method}")
            data = json.loads(line)
            if data.get("id") == self.next_id:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data["result"], len(line.rstrip(b"\n"))

    def notify(self, method: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.proc.stdin.flush()

    def initialize(self) -> tuple[float, float]:
        """Wall seconds from process start to the answer, and the CPU seconds the server spent until then."""
        self.request("initialize", INIT)
        elapsed = time.perf_counter() - self.t0
        cpu = _cpu_seconds(self.proc.pid)
        self.notify("notifications/initialized")
        return elapsed, cpu

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _cpu_seconds(pid: int) -> float:
    """user + system CPU time of a running process (Linux /proc): unlike wall time, barely moved by other load."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _env(pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TERM")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def cold_start(n: int, workspace: Path, pythonpath: str | None
               ) -> tuple[list[tuple[float, float, float]], list[tuple[float, float, float]]]:
    ours_argv = [sys.executable, "-m", "pypto_tune.server.cli", "serve", "--workspace", str(workspace),
                 "--log-level", "WARNING"]
    bare_argv = [sys.executable, "-c", BARE]
    ours, bare = [], []
    for _ in range(n):  # interleaved: a load spike hits both series alike
        for argv, out in ((bare_argv, bare), (ours_argv, ours)):
            p = Pipe(argv, _env(pythonpath), workspace)
            try:
                wall, cpu = p.initialize()
                p.request("tools/list")  # what a client does next: the listing is part of connecting
                out.append((wall, cpu, time.perf_counter() - p.t0))
            finally:
                p.close()
    return ours, bare


def sizes(workspace: Path, pythonpath: str | None) -> dict[str, int]:
    p = Pipe([sys.executable, "-m", "pypto_tune.server.cli", "serve", "--workspace", str(workspace), "--log-level",
              "WARNING"], _env(pythonpath), workspace)
    out: dict[str, int] = {}

    def call(label: str, name: str, **args: Any) -> dict[str, Any]:
        res, size = p.request("tools/call", {"name": name, "arguments": args})
        if res.get("isError"):
            raise RuntimeError(f"{name}: {res['content']}")
        if label:
            out[label] = size
        return res.get("structuredContent") or json.loads(res["content"][0]["text"])

    try:
        p.initialize()
        _, out["tools/list"] = p.request("tools/list")
        run = str(workspace / "output")
        call("analyze_bubbles (default)", "analyze_bubbles", output_dir=run, lang="en")
        call("analyze_bubbles detail=full", "analyze_bubbles", output_dir=run, lang="en", detail="full")
        sid = call("", "start_session", workspace=str(workspace), operator_files=["softmax.py"],
                   test_command=[sys.executable, "softmax.py", "--run-mode", "sim"], run_mode="sim",
                   goal_speedup=2.0)["session_id"]
        call("get_status", "get_status", session_id=sid)
        call("list_knobs", "list_knobs", session_id=sid)
    finally:
        p.close()
    return out


DEMO_LINE = re.compile(r"demo wall time ([0-9.]+) s; sum of the kernel runs the server reported ([0-9.]+) s")


def demo_overhead(pythonpath: str | None) -> tuple[float, float, float]:
    """Run ``pypto-tune demo`` once: (the demo's own wall s, the kernel runs' sum s, the process's wall s)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory(prefix="mcp-bench-demo-") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pypto_tune.server.cli", "demo", "--workspace",
                               str(Path(tmp) / "demo-run")], capture_output=True, text=True, env=env, cwd=tmp,
                              timeout=1800, check=False)  # a failure is reported below with the demo's output
        process_s = time.perf_counter() - t0
    found = DEMO_LINE.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"the demo failed (exit {proc.returncode}) or printed no wall-time line:\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return float(found.group(1)), float(found.group(2)), process_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=9, help="cold starts of each server (median reported)")
    ap.add_argument("--pythonpath", default=None, help="run the server from this importable tree instead")
    demo = ap.add_mutually_exclusive_group()
    demo.add_argument("--demo", action="store_true", help="also run `pypto-tune demo` once (about a minute) and "
                      "print its wall time over the sum of its kernel runs")
    demo.add_argument("--demo-only", action="store_true", help="only the demo overhead")
    args = ap.parse_args()
    if args.demo_only:
        _print_demo(args.pythonpath)
        return 0

    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        shutil.copy2(ROOT / "fixtures" / "operators" / "softmax" / "softmax.py", ws / "softmax.py")
        shutil.copytree(ROOT / "fixtures" / "runs" / "softmax_base" / "output", ws / "output")
        ours, bare = cold_start(args.n, ws, args.pythonpath)
        found = sizes(ws, args.pythonpath)

    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load:.2f} at the end; server from "
          f"{args.pythonpath or 'this checkout'}")
    print(f"cold start, median of {args.n}: wall s to the initialize answer (server CPU s until then), and wall s "
          "to the tools/list answer")
    med = {}
    for label, series in (("pypto-tune", ours), ("bare MCP server", bare)):
        wall, cpu, listed = ([x[i] for x in series] for i in range(3))
        med[label] = (statistics.median(wall), statistics.median(cpu), statistics.median(listed))
        print(f"  {label:15} initialize {med[label][0]:6.3f} s (min {min(wall):.3f}, max {max(wall):.3f}; "
              f"{med[label][1]:.3f} s CPU), tools/list {med[label][2]:6.3f} s")
    ours_m, bare_m = med["pypto-tune"], med["bare MCP server"]
    print(f"  ratio           initialize {ours_m[0] / bare_m[0]:.2f} wall, {ours_m[1] / bare_m[1]:.2f} CPU; "
          f"tools/list {ours_m[2] / bare_m[2]:.2f} wall")
    print("response sizes (bytes of the JSON-RPC line) on fixtures/runs/softmax_base:")
    for name, size in found.items():
        print(f"  {name:28} {size:8d}  ({size / 1024:.1f} KiB)")
    if args.demo:
        _print_demo(args.pythonpath)
    return 0


def _print_demo(pythonpath: str | None) -> None:
    wall, kernels, process = demo_overhead(pythonpath)
    print(f"demo overhead (one `pypto-tune demo`, load average {os.getloadavg()[0]:.2f} at the end): wall {wall:.1f} s "
          f"over the sum of its kernel runs {kernels:.1f} s = {wall / kernels:.2f}x; the whole demo process "
          f"{process:.1f} s = {process / kernels:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
