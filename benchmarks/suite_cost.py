"""What each test file costs in CPU-seconds, and how many sandboxed runs it starts.

Wall time lies on a shared machine; CPU time does not: a test file's cost is the user + system time of its pytest
process and of every process it started (the stdio servers, and through them the sandboxed SIM runs). As root the
file's pytest runs in a cpuacct cgroup of its own, which counts them all (RUSAGE_CHILDREN misses about half: the
sandboxed runs, and daemons such as ``ray start``'s); elsewhere the rusage of waited-for children is used. The
suite's wall time on N idle cores is at least the sum over files divided by N (with ``--dist loadfile``, plus the
longest file's tail). Each file's row includes its own pytest start-up (~1.5 CPU s), which the suite pays once per
worker.

    .venv/bin/python benchmarks/suite_cost.py tests/reliability tests/server/test_demo_interrupt.py ...
    .venv/bin/python benchmarks/suite_cost.py --per-test tests/test_docs.py

Runs each test file alone, one after the other (``nice``), and prints one row per file: tests, runs (bwrap
invocations that ran a command, i.e. the sandbox's measured runs), SIM runs (those whose command says ``sim``), CPU
s and wall s; ``--json FILE`` keeps the rows. The tests run from this checkout: do not edit it while they run (a
server started meanwhile imports the half-edited code). Runs are counted by a ``bwrap`` wrapper put first on PATH
(the stdio client passes PATH to the server), which logs its argument vector and execs the real one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG_ENV = "SUITE_COST_LOG"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _wrapper(dir_: Path, real: str, log: Path) -> None:
    # The server gets only HOME, PATH and a few more from the stdio client: the log's path is written into the wrapper.
    w = dir_ / "bwrap"
    w.write_text(f"""#!/bin/sh
case "$*" in
  *--version*|*/bin/true) ;;
  *) {{ printf '%s' "$*" | tr '\\n' ' '; echo; }} >> {log} ;;
esac
exec {real} "$@"
""")
    w.chmod(0o755)


def _runs(log: Path) -> tuple[int, int]:
    if not log.exists():
        return 0, 0
    lines = log.read_text(errors="replace").splitlines()
    return len(lines), sum(1 for ln in lines if " sim" in ln or "=sim" in ln)


# ------------------------------------------------------------------------------------------------ the pytest plugin
# Loaded with -p benchmarks.suite_cost in each file's pytest: one JSON line per test (CPU of this process and of the
# children reaped during the test; a module-scoped server is charged to the test whose teardown reaps it).

def _own_group() -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpuacct" in controllers.split(",") and "suite-cost-" in path:
                return CPUACCT / path.lstrip("/") / "cpuacct.usage"
    except OSError:
        pass
    return None


def _cpu() -> float:
    group = _own_group()
    if group is not None:  # the whole group: sandboxed runs too (RUSAGE_CHILDREN misses some of them)
        return int(group.read_text()) / 1e9
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


_marks: dict[str, tuple[float, float, int]] = {}


def pytest_runtest_logstart(nodeid, location):  # noqa: ANN001
    if os.environ.get(LOG_ENV):
        _marks[nodeid] = (_cpu(), time.monotonic(), _runs(Path(os.environ[LOG_ENV]))[0])


def pytest_runtest_logfinish(nodeid, location):  # noqa: ANN001
    out = os.environ.get(LOG_ENV)
    if not out or nodeid not in _marks:
        return
    cpu0, t0, r0 = _marks.pop(nodeid)
    runs = _runs(Path(out))[0] - r0
    with open(out + ".tests", "a") as f:
        f.write(json.dumps({"test": nodeid, "cpu": round(_cpu() - cpu0, 2), "wall": round(time.monotonic() - t0, 2),
                            "runs": runs}) + "\n")


# ------------------------------------------------------------------------------------------------ the driver

def _cgroup(name: str) -> Path | None:
    """A cgroup-v1 cpuacct group of our own for one file's pytest (root only): it also counts what RUSAGE_CHILDREN
    misses — processes that daemonize (``ray start``) or that nobody waits for."""
    group = CPUACCT / f"suite-cost-{os.getpid()}-{name}"
    try:
        group.mkdir(exist_ok=True)
        return group
    except OSError:
        return None


def _cgroup_end(group: Path | None) -> tuple[float | None, int]:
    if group is None:
        return None, 0
    cpu = int((group / "cpuacct.usage").read_text()) / 1e9
    left = len((group / "tasks").read_text().split())
    if not left:
        group.rmdir()
    return round(cpu, 1), left

def measure(path: str, work: Path, real_bwrap: str, extra: list[str]) -> dict:
    log = work / "bwrap.log"
    log.unlink(missing_ok=True)
    Path(str(log) + ".tests").unlink(missing_ok=True)
    bindir = work / "bin"
    bindir.mkdir(exist_ok=True)
    _wrapper(bindir, real_bwrap, log)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", **{LOG_ENV: str(log)})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    group = _cgroup(work.name)
    t0 = time.monotonic()
    proc = subprocess.Popen(["nice", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-p", "benchmarks.suite_cost", *extra, path], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=(lambda: (group / "tasks").write_text(str(os.getpid()))) if group else None)
    out, _ = proc.communicate()
    group_cpu, left = _cgroup_end(group)
    wall = time.monotonic() - t0
    tests = [json.loads(ln) for ln in Path(str(log) + ".tests").read_text().splitlines()] \
        if Path(str(log) + ".tests").exists() else []
    runs, sims = _runs(log)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return {"file": path, "tests": len(tests), "runs": runs, "sim": sims, "wall": round(wall, 1),
            "group_cpu": group_cpu, "left_running": left,
            "summary": last, "per_test": tests, "rc": proc.returncode}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="test files or folders (a folder: each test_*.py in it)")
    ap.add_argument("--per-test", action="store_true", help="also print each test's row")
    ap.add_argument("--json", help="append each file's row to this JSON-lines file")
    ap.add_argument("--pytest-args", default="", help="more pytest arguments, one string")
    ap.add_argument("--work", help="keep the wrapper and the last file's bwrap log in this folder")
    a = ap.parse_args()
    real = shutil.which("bwrap") or "/usr/bin/bwrap"
    files: list[str] = []
    for p in a.paths:
        pp = Path(p)
        files += sorted(str(f) for f in pp.rglob("test_*.py")) if pp.is_dir() else [p]
    total = 0.0
    print(f"{'file':60} {'tests':>5} {'runs':>5} {'SIM':>4} {'CPU s':>7} {'wall s':>7}  result", flush=True)
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as tmp:
        if a.work:
            tmp = a.work
            Path(tmp).mkdir(parents=True, exist_ok=True)
        for f in files:
            # communicate() reaps the pytest process: this process's children's counter moves by exactly its cost.
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            row = measure(f, Path(tmp), real, a.pytest_args.split())
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            row["cpu"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
            if row["group_cpu"] is not None:  # the cgroup also saw daemons nobody waited for
                row["cpu"] = max(row["cpu"], row["group_cpu"])
            total += row["cpu"]
            left = f" ({row['left_running']} processes left running)" if row["left_running"] else ""
            print(f"{f:60} {row['tests']:5} {row['runs']:5} {row['sim']:4} {row['cpu']:7.1f} {row['wall']:7.1f}  "
                  f"{row['summary'][:60]}{left}", flush=True)
            if a.per_test:
                for t in row["per_test"]:
                    print(f"    {t['test'][:90]:90} runs {t['runs']:3} cpu {t['cpu']:7.1f} wall {t['wall']:7.1f}")
            if a.json:
                with open(a.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    print(f"{'total':60} {'':5} {'':5} {'':4} {total:7.1f}   (/2 = {total / 2:.0f} s on 2 idle cores)")


if __name__ == "__main__":
    main()
