"""A campaign on a three-node Ray cluster that loses a worker node and then its driver, and is resumed.

Runs in a network namespace of its own with only ``lo`` up (``enter_loopback_namespace``: Ray's traffic stays on
loopback, domain.md F.5; needs root). Everything happens on this one machine, as several raylets:

1. ``ray start --head`` (no CPU: it only coordinates) and two workers, ``ray start --address``: node A (1 CPU) and
   node B (2 CPUs), each with its own node-manager port;
2. ``pypto-tune campaign MANIFEST --executor ray --ray-address 127.0.0.1:PORT`` (the driver);
3. as soon as a test command runs under one of node A's Ray workers, node A is killed (SIGKILL to its raylet and
   every process of that node): the run it held is lost with it;
4. once the driver has run a lost run again (journal: ``run-lost``), finished at least one operator and has another
   one running whose ledger holds work not yet decided, the driver is killed (SIGKILL, mid-work);
5. ``pypto-tune campaign MANIFEST ... --resume`` runs the campaign to its end on what is left of the cluster;
6. the cluster is stopped — by pid: every process that names the scratch folder (Ray's session folder is in each of
   its processes' arguments), never ``ray stop``, which would stop every Ray process of the machine by name — and
   what is still alive is listed (nothing may be left).

What happened is written to OUT_JSON for ``test_campaign_on_ray.py`` to judge.
Usage: ``python ray_campaign.py OUT_JSON WORK MANIFEST``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "executors"))

HEAD_PORT = 6391
NODE_A_PORT = 6611
NODE_B_PORT = 6612
PHASE_TIMEOUT_S = 600.0


def ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def sh(args: list[str], log: list[dict]) -> int:
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True)
    log.append({"cmd": " ".join(args[1:3]), "rc": r.returncode, "s": round(time.monotonic() - t0, 2),
                "err": r.stderr[-800:] if r.returncode else ""})
    return r.returncode


def procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(p)] = (ppid, cmd)
    return out


def node_pids(port: int, table: dict[int, tuple[int, str]]) -> list[int]:
    """The raylet of the node with this node-manager port, its workers and everything under them."""
    marks = (f"--node_manager_port={port}", f"--node-manager-port={port}")
    roots = {pid for pid, (_, cmd) in table.items() if any(m in cmd for m in marks)}
    out = set(roots)
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _) in table.items():
            if ppid in out and pid not in out:
                out.add(pid)
                changed = True
    return sorted(out)


def test_command_under(port: int, table: dict[int, tuple[int, str]]) -> list[int]:
    """Operator test commands running under the node's Ray workers."""
    under = set(node_pids(port, table))
    return [pid for pid in under if ("--run-mode" in table[pid][1] or "--run_mode" in table[pid][1])
            and "worker_run" not in table[pid][1]]


def undecided_work(root: Path, running: set[str]) -> bool:
    """Whether a running operator's ledger (``root/ws/NAME``, read-only) has a precision record or a measurement
    under a round that has no round row yet: work the driver has begun and not decided."""
    import sqlite3

    for name in sorted(running):
        db = root / "ws" / name / ".pypto-tune" / "ledger.sqlite3"
        if not db.is_file():
            continue
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.5)
            try:
                n = con.execute("SELECT (SELECT count(*) FROM precision_records p WHERE p.round > 0 AND p.round NOT IN "
                                "(SELECT number FROM rounds)) + (SELECT count(*) FROM measurements m WHERE m.round > 0 "
                                "AND m.round NOT IN (SELECT number FROM rounds))").fetchone()[0]
            finally:
                con.close()
        except sqlite3.Error:
            continue
        if n:
            return True
    return False


def ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    table = procs()
    while pid in table and pid not in out:
        out.add(pid)
        pid = table[pid][0]
    return out


def stop_cluster(work: Path) -> list[str]:
    """SIGTERM, then SIGKILL, every process that names ``work`` (the cluster's processes, runs, drivers) except this
    process and its ancestors; returns what was still alive before the SIGKILL (a clean stop leaves none)."""
    mine = ancestors()

    def ours() -> dict[int, str]:
        return {pid: cmd for pid, (_, cmd) in procs().items() if str(work) in cmd and pid not in mine}

    for pid in ours():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 15
    while ours() and time.monotonic() < deadline:
        time.sleep(0.3)
    left = ours()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [cmd[:200] for cmd in left.values()]


def runs_alive(work: Path) -> list[str]:
    """Test commands and run helpers of this scenario still alive: those that name ``work`` or run in a folder
    under it (a run's private copy; on a Ray worker, the worker's folder under our TMPDIR)."""
    out = []
    for pid, (_, cmd) in procs().items():
        if not ("--run-mode" in cmd or "--run_mode" in cmd or "worker_run" in cmd):
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if str(work) in cmd or cwd.startswith(str(work)):
            out.append(cmd[:160])
    return out


def events(journal: Path) -> list[dict]:
    try:
        lines = journal.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def driver(manifest: Path, work: Path, resume: bool) -> subprocess.Popen:
    args = [sys.executable, "-m", "pypto_tune.server.cli", "campaign", str(manifest), "--executor", "ray",
            "--ray-address", f"127.0.0.1:{HEAD_PORT}", "--quiet"] + (["--resume"] if resume else [])
    log = open(work / ("driver-resumed.log" if resume else "driver.log"), "wb")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=str(work))


def main(out: Path, work: Path, manifest: Path, journal: Path) -> None:
    report: dict = {"cluster": [], "phases": {}}
    t0 = time.monotonic()

    def stamp(name: str, **facts) -> None:
        report["phases"][name] = {"at_s": round(time.monotonic() - t0, 1), **facts}
        out.write_text(json.dumps(report, indent=1))

    ray = ray_bin()
    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    try:
        sh([ray, "start", "--head", "--port", str(HEAD_PORT), "--num-cpus", "0", "--include-dashboard", "false",
            *common], report["cluster"])
        for cpus, port, name in (("1", NODE_A_PORT, "node_a"), ("2", NODE_B_PORT, "node_b")):
            # one after the other: two raylets registering at once overloaded the head on the loaded 2-core machine
            sh([ray, "start", "--address", f"127.0.0.1:{HEAD_PORT}", "--num-cpus", cpus, "--node-manager-port",
                str(port), "--resources", json.dumps({name: 1}), *common], report["cluster"])
        stamp("cluster", nodes=3)

        d = driver(manifest, work, resume=False)
        report["driver_pid"] = d.pid
        # 3. kill node A while it runs a test command
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        victims: list[int] = []
        while time.monotonic() < deadline and d.poll() is None:
            table = procs()
            running = test_command_under(NODE_A_PORT, table)
            if running:
                victims = node_pids(NODE_A_PORT, table)
                for pid in victims:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                stamp("node_a_killed", running=[table[p][1][:160] for p in running], killed=len(victims))
                break
            time.sleep(0.2)
        else:
            stamp("node_a_killed", running=[], killed=0, driver_rc=d.poll())
        # 4. kill the driver once it has run a lost run again, finished an operator and runs another, and a running
        #    session's ledger holds work not yet decided (a batch's first trial recorded, the second still running).
        #    Polled: a fixed delay landed mid-work while each trial ran twice, but with one SIM run per trial
        #    (2026-12-05) the moments between a trial's record and its batch's decision are seconds, not a delay's
        #    worth. Past give_up the driver is killed anyway (the test then says the kill missed the work)
        #    The patience starts when the rest holds (a lost run, an operator done, another running): on a loaded
        #    machine reaching that point alone took longer than a fixed allowance from here, and the kill then
        #    landed at once, between batches.
        give_up: float | None = None
        while time.monotonic() < deadline and d.poll() is None:
            ev = events(journal)
            names = {e.get("event") for e in ev}
            done = {e["operator"] for e in ev if e.get("event") == "operator-done"}
            started = {e["operator"] for e in ev if e.get("event") == "session"}
            ready = "run-lost" in names and bool(done) and bool(started - done)
            if ready:
                give_up = give_up or time.monotonic() + 240.0
            if ready and (undecided_work(manifest.parent, started - done) or time.monotonic() > (give_up or 0.0)):
                os.kill(d.pid, signal.SIGKILL)
                d.wait()
                from pypto_tune.tools.campaign.control import view
                from pypto_tune.tools.campaign.journal import CampaignDir

                cdir = CampaignDir(journal.parent)
                (work / "board-at-kill.html").write_bytes((cdir.path / "board.html").read_bytes())
                stamp("driver_killed", done=sorted(done), running=sorted(started - done), events=len(ev),
                      status_after_kill=view(cdir).state)
                break
            time.sleep(0.05)
        else:
            stamp("driver_killed", done=[], running=[], driver_rc=d.poll())
            d.wait(timeout=PHASE_TIMEOUT_S)
        # 5. resume to the end
        r = driver(manifest, work, resume=True)
        try:
            rc = r.wait(timeout=PHASE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            r.kill()
            rc = None
        stamp("resumed", rc=rc, runs_alive=runs_alive(work))
    finally:
        report["leftovers"] = stop_cluster(work)
        report["wall_s"] = round(time.monotonic() - t0, 1)
        out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    from ray_scenarios import enter_loopback_namespace

    enter_loopback_namespace()
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
