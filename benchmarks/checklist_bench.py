"""What the environment checklist of a session's first precision check costs, with and without the remembered answer
of ``import pypto`` (``tools/running/import_memo.py``), interleaved in one run on the softmax fixture in SIM:

* ``asked``: no answer remembered (a new memo folder each time) — the checklist imports torch and pypto in a child;
* ``remembered``: the answer the previous ``asked`` kept — the child only locates the test's imports.

Both include the scan of the interpreter's files that keys the answer (``interpreter_files.py``), as a session does.

    .venv/bin/python benchmarks/checklist_bench.py [--repeats 5]

Prints the median wall time and CPU time (this process and its children) of each, and ``remembered``'s ratio to
``asked``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from pypto_tune.tools.running import closure
from pypto_tune.tools.running.environment import check_environment
from pypto_tune.tools.running.import_memo import ImportMemo, memo_key
from pypto_tune.tools.running.interpreter_files import take_sync
from pypto_tune.tools.running.runner import build_child_env

ROOT = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        shutil.copy2(ROOT / "fixtures" / "operators" / "softmax" / "softmax.py", ws / "softmax.py")
        env = build_child_env(run_mode="sim")
        env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"
        clo, _ = closure.find_sync(python, env, workspace=ws)
        times: dict[str, list[tuple[float, float]]] = {"asked": [], "remembered": []}

        async def checklist(folder: Path) -> list[str]:
            fp = take_sync(clo.fingerprinted, workspace=ws)
            memo = ImportMemo(key=memo_key(python=python, interpreter_digest=fp.digest, env=env),
                              seal_key=b"benchmark key, not a secret....", path_folders=[ws], folder=folder)
            checks = await check_environment(run_mode="sim", workspace=ws, operator_files=["softmax.py"], env=env,
                                             python=python, test_command=[python, "softmax.py"], memo=memo)
            bad = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
            assert not bad, bad
            return [c.detail for c in checks if c.name == "import pypto"]

        for i in range(args.repeats):
            folder = Path(tmp) / f"memo{i}"
            for arm in ("asked", "remembered"):
                c0, t0 = _cpu(), time.perf_counter()
                detail = anyio.run(checklist, folder)
                times[arm].append((time.perf_counter() - t0, _cpu() - c0))
                assert ("remembered from" in detail[0]) == (arm == "remembered"), detail
    asked = statistics.median(c for _, c in times["asked"])
    print(f"{'arm':<12} {'wall s':>8} {'CPU s':>8} {'CPU ×':>7}")
    for arm, rows in times.items():
        wall, cpu = statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows)
        print(f"{arm:<12} {wall:8.2f} {cpu:8.2f} {cpu / asked:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
