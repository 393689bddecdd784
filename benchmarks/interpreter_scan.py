"""What the check after every run costs: the scan of the interpreter's files (``tools/running/interpreter_files.py``)
over the closure this machine's interpreter gives a session, three ways, interleaved in one run:

* ``each root``: every fingerprinted root walked on its own, as the scan did before 2026-12-04 (a closure names
  the base installation and its standard library, the venv and its site-packages: most entries walked twice), plus
  the fingerprint's digest, which it recomputed on every check;
* ``once``: each entry walked once (roots inside roots skipped) — what an unsandboxed session's check does now;
* ``sandboxed``: once, and without the package folders a sandboxed run cannot see (``Closure.hidden``) — what a
  sandboxed session's check does now.

    .venv/bin/python benchmarks/interpreter_scan.py [--python .venv/bin/python] [--repeats 7]

Prints entries and the median CPU time of each, and each one's ratio to ``each root``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pypto_tune.tools.running import closure
from pypto_tune.tools.running.interpreter_files import digest, scan
from pypto_tune.tools.running.runner import build_child_env


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        clo, _ = closure.find_sync(args.python, build_child_env(run_mode="sim"), workspace=ws)
        roots, skip = list(clo.fingerprinted), [str(ws)]

        def each_root() -> dict:
            out: dict = {}
            for r in roots:
                out.update(scan([r], skip))
            digest(out)
            return out

        ways = {"each root": each_root, "once": lambda: scan(roots, skip),
                "sandboxed": lambda: scan(roots, [*skip, *clo.hidden])}
        times: dict[str, list[float]] = {k: [] for k in ways}
        sizes: dict[str, int] = {}
        for _ in range(args.repeats):
            for name, fn in ways.items():
                t0 = time.process_time()
                sizes[name] = len(fn())
                times[name].append(time.process_time() - t0)
    print(f"interpreter {args.python}: {len(roots)} fingerprinted roots, hidden {list(clo.hidden) or 'none'}")
    base = statistics.median(times["each root"])
    for name in ways:
        m = statistics.median(times[name])
        print(f"  {name:10s} {sizes[name]:7d} entries  {m * 1000:7.1f} ms CPU (median of {args.repeats})  "
              f"ratio {m / base:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
