"""Shared by the executor tests and the Ray scenario script: a small deterministic test command, workspaces, specs.

The test command (``job.py``) stands in for an operator's test: it reads a data file of the workspace, prints
progress, sleeps, and writes one ``output/output_<ts>_<pid>/`` run folder (a nested file included, and the
``program.json`` a PyPTO run folder holds, naming the script it compiled — without it the folder would not count)
that records what it saw (its label, the data file, ``TILE_FWK_DEVICE_ID``, its start/end times), so a test can check
concurrency, chips and artifacts from the outputs alone. With a pid file it also forks a grandchild that ignores
SIGTERM, and both record their pids: the liveness probes of ``tests/running/runner_helpers.py`` then tell whether
the whole group died.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path

from pypto_tune.tools.code.codestate import ExecFile
from pypto_tune.tools.running.executors import RunSpec
from pypto_tune.tools.running.runner import build_child_env
# the Ray scenarios import this module in processes of their own, with only this folder on the path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "running"))

from runner_helpers import is_alive, kill_leftovers, processes_mentioning, wait_dead  # noqa: E402,F401 - re-exported

PY = sys.executable

JOB = textwrap.dedent("""
    import json, os, signal, sys, time
    from datetime import datetime
    sleep_s, label = float(sys.argv[1]), sys.argv[2]
    pidfile = sys.argv[3] if len(sys.argv) > 3 else ""
    start = time.time()
    def record():  # only where the file is reachable: a sandboxed run sees no folder outside its closure
        try:
            fd = os.open(pidfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError:
            return
        os.write(fd, f"{os.getpid()}\\n".encode()); os.close(fd)
    if pidfile:
        if os.fork() == 0:  # a grandchild that only SIGKILL to the group can stop
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            record()
            while True: time.sleep(0.1)
        record()
    data = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "input.txt")).read()
    print(f"start {label}", flush=True)
    t = 0.0
    while t < sleep_s:
        time.sleep(min(0.25, sleep_s - t)); t += 0.25
        print(f"tick {label} {min(t, sleep_s):.2f}", flush=True)
    end = time.time()
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S_%f")
    run = os.path.join("output", f"output_{stamp}_{os.getpid()}")
    os.makedirs(os.path.join(run, "sub"))
    via_env = os.environ.get("JOB_DATA_DIR", "")
    with open(os.path.join(run, "result.json"), "w") as fh:
        json.dump({"label": label, "data": data, "device": os.environ.get("TILE_FWK_DEVICE_ID"),
                   "data_dir": open(os.path.join(via_env, "input.txt")).read() if via_env else "",
                   "start": start, "end": end}, fh)
    with open(os.path.join(run, "program.json"), "w") as fh:
        json.dump({"functions": [{"operations": [{"file": os.path.abspath(__file__), "line": 1}]}]}, fh)
    with open(os.path.join(run, "sub", "trace.txt"), "w") as fh:
        fh.write(f"trace of {label}\\n" * 3)
    print(f"done {label}", flush=True)
""")

DATA = "input data: 42\n"
#: What the workspace on disk holds instead: edited after the session recorded it, so a run that read the live
#: files (not its private copy of the recorded ones) would show it.
LIVE = "live data: edited after the session recorded it\n"


def job_files() -> dict[str, ExecFile]:
    """The recorded files of the job's workspace (what a session would materialise)."""
    return {"job.py": ExecFile(data=JOB.encode()), "data/input.txt": ExecFile(data=DATA.encode())}


def make_workspace(root: Path, name: str) -> Path:
    """A workspace holding the job's files on disk, its data file edited since (runs never read them: they execute
    the recorded bytes)."""
    ws = root / name
    for rel, f in job_files().items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(f.data)
    (ws / "data" / "input.txt").write_text(LIVE)
    return ws


def job_spec(ws: Path, label: str, sleep_s: float = 0.5, *, pidfile: Path | None = None, timeout_s: float = 60,
             run_mode: str = "sim", device_pool: tuple[str, ...] = (), device_id: str | None = None,
             absolute: bool = False) -> RunSpec:
    """One run of the job. ``absolute`` names the script by its workspace path and passes the workspace in an
    environment variable, to check that both reach the private copy (the sandbox mounts it at that path)."""
    script = str(ws / "job.py") if absolute else "job.py"
    argv = [PY, script, str(sleep_s), label] + ([str(pidfile)] if pidfile else [])
    env = build_child_env(run_mode=run_mode, extra={"JOB_DATA_DIR": str(ws / "data")} if absolute else None)
    return RunSpec(files=job_files(), argv=argv, env=env, workspace=str(ws), timeout_s=timeout_s, run_mode=run_mode,
                   device_pool=device_pool, device_id=device_id, tag=label)


def read_result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one instant (an end at t closes before a start at t)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, step in events:
        cur += step
        best = max(best, cur)
    return best


def output_summary(ws: Path) -> list[dict]:
    """What landed in ``ws/output/``: per run folder, its files and the job's record minus times and pids."""
    out = []
    root = ws / "output"
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        rec = read_result(d)
        files = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
        out.append({"label": rec["label"], "data": rec["data"], "device": rec["device"],
                    "data_dir": _where(rec["data_dir"], ws),
                    "files": files, "trace": (d / "sub" / "trace.txt").read_text()})
    return sorted(out, key=lambda r: r["label"])


def _where(data: str, ws: Path) -> str:
    """What the data file named by JOB_DATA_DIR held: nothing, the live workspace's (a bug), or the recorded copy's."""
    if not data:
        return ""
    return {LIVE: "workspace", DATA: "copy"}.get(data, data)


def pids_in(path: Path) -> list[int]:
    """The live processes of the job given ``path`` as its pid file: the job and its grandchild. Found from the host's
    /proc by their command line (``… job.py SLEEP LABEL PIDFILE``): inside its sandbox a run has a pid namespace of
    its own, so the pids it could write are not the host's — and it cannot reach the file anyway."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if len(argv) >= 5 and argv[1].endswith(b"job.py") and argv[-1] == str(path).encode() and is_alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


def leftover_copies(ws: Path) -> list[str]:
    from pypto_tune.tools.running.execution import exec_parent

    parent = exec_parent(ws)
    return sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []


def ray_unavailable() -> str:
    """Why a real local Ray cluster in a network namespace cannot run here ('' when it can)."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install .[ray]; scripts/test.sh installs it)"
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux to create a network namespace"
    return ""
