"""The server under its own account, the agent under another — set up as the README says, attacked as the agent.

The test creates two accounts (idempotent: reused if a crashed run left them; removed at the end), gives the
workspace to the server's account (readable by everyone, writable by the server only), and starts the server
through the documented stdio launcher (``scripts/serve-as.sh``, which switches to the server's account with its own
HOME — where the ledger's seal key is created 0600). The MCP client is the agent's side: it tunes one round to a
kept gain and renders the report. Meanwhile, as the agent's account, every same-account attack the README names is
played, and each must be refused by the operating system (EACCES / EPERM):

* bytecode planted in a running copy (its host run folder, and ``/proc/<pid>/root`` of the sandbox) and in a
  recorded folder (the workspace) — the attack of issue #32;
* the seal key read, a row forged (the ledger opened for writing);
* a file written into a running output folder, and into a measured one after the run;
* a ``.pth`` and a ``sitecustomize.py`` in the interpreter's roots.

Tests run as root (here and in CI), so the accounts can be made. The project's interpreter is the checkout's
``.venv``, owned by root, which neither account can write — as the README asks of the interpreter; where its base
installation lies under a folder other accounts cannot enter (pyenv under ``/root``, mode 0700), the server and the
agent run in a private mount namespace in which that folder is a read-only-for-them tmpfs holding only the
installation (bind-mounted at its own path): nothing of the checkout or the machine changes for other tests.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import OPERATORS, require_real
from tests.server.mcp_client import Session
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
SERVER, AGENT = "pt-srv-test", "pt-agent-test"
VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"
BASE_US, VEC16_US = 36.405, 15.463
REFUSED = {"Permission denied", "Operation not permitted"}
HARNESS = '''import sys

import pypto  # noqa: F401

import softmax

sys.exit(softmax.main())
'''


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def _account(name: str) -> None:
    if _run(["id", "-u", name]).returncode == 0:
        return  # left by an interrupted run: reuse it
    res = _run(["useradd", "--system", "--user-group", "--create-home", "--home-dir", f"/var/lib/{name}",
                "--shell", "/usr/sbin/nologin", name])
    assert res.returncode == 0, res.stderr


def _blocked(path: str) -> str | None:
    """The outermost folder on ``path`` that other accounts cannot enter (no o+x), or None."""
    parts = Path(path).parts
    for i in range(2, len(parts) + 1):
        folder = os.path.join(*parts[:i])
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def _exposing(stash: Path) -> str:
    """Shell commands, run as root in a private mount namespace, after which the interpreter and the checkout are
    reachable by other accounts at their own paths (see the module docstring)."""
    wanted = [os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), str(ROOT)]
    by_block: dict[str, list[str]] = {}
    for p in wanted:
        block = _blocked(p)
        if block is not None and p not in by_block.get(block, []):
            by_block.setdefault(block, []).append(p)
    cmds = []
    for n, (block, paths) in enumerate(sorted(by_block.items())):
        for i, p in enumerate(paths):
            keep = stash / f"{n}-{i}"
            cmds += [f"mkdir -p {keep}", f"mount --bind {shlex.quote(p)} {keep}"]
        cmds.append(f"mount -t tmpfs -o mode=755 pypto-tune-test {shlex.quote(block)}")
        for i, p in enumerate(paths):
            cmds += [f"mkdir -p {shlex.quote(p)}", f"mount --bind {stash / f'{n}-{i}'} {shlex.quote(p)}"]
    return " && ".join(cmds) or "true"


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict]:
    require_real(os.geteuid() == 0 and all(shutil.which(t) for t in ("useradd", "userdel", "setpriv", "unshare")),
                 "the other-account suite creates accounts: it needs root, useradd, setpriv and unshare")
    for name in (SERVER, AGENT):
        _account(name)
    root = Path(tempfile.mkdtemp(prefix="pypto-tune-accounts-", dir="/var/tmp"))
    root.chmod(0o755)
    try:
        yield {"root": root, "expose": _exposing(root / "stash"),
               "server_home": Path(_run(["sh", "-c", f"getent passwd {SERVER} | cut -d: -f6"]).stdout.strip())}
    finally:
        subprocess.run(["umount", "-R", str(root / "stash")], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        for name in (SERVER, AGENT):
            subprocess.run(["userdel", "--remove", name], capture_output=True)


def _in_namespace(acc: dict, argv: list[str]) -> list[str]:
    """``argv`` as root in a private mount namespace that exposes the interpreter (then ``argv`` switches user)."""
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", acc["expose"] + ' && exec "$@"',
            "sh", *argv]


def _as_agent(acc: dict, code: str, *args: str) -> dict[str, str]:
    """Run Python ``code`` as the agent's account; it prints one JSON object (what it tried → what happened)."""
    argv = _in_namespace(acc, ["setpriv", f"--reuid={AGENT}", f"--regid={AGENT}", "--init-groups", "--reset-env",
                               "--", sys.executable, "-S", "-c", code, *args])
    res = _run(argv, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


TRY = '''
import errno, json, os, sys
out = {}
def attempt(what, act):
    try:
        act()
        out[what] = "done"
    except OSError as exc:
        out[what] = os.strerror(exc.errno or errno.EIO)
def pyc(folder):
    import importlib._bootstrap_external as ext
    code = compile("TILE_B = 1", "softmax.py", "exec")
    def act():
        try:
            os.mkdir(os.path.join(folder, "__pycache__"))
        except FileExistsError:
            pass
        with open(os.path.join(folder, "__pycache__", "softmax.cpython-311.pyc"), "wb") as fh:
            fh.write(bytes(ext._code_to_timestamp_pyc(code, 0, 0)))
    return act
def write(path, mode="w"):
    def act():
        with open(path, mode) as fh:
            fh.write("x" if "b" not in mode else b"x")
    return act
def read(path):
    def act():
        with open(path, "rb") as fh:
            fh.read()
    return act
'''

DURING = TRY + '''
import time
ws, server = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 90
tried_inside = False
while time.monotonic() < deadline and not tried_inside:
    execd = os.path.join(ws, ".pypto-tune", "exec")
    for name in (os.listdir(execd) if os.path.isdir(execd) else []):
        attempt(f"pyc in the running copy's host folder {name}", pyc(os.path.join(execd, name)))
        attempt(f"a file in the running output folder's host folder {name}",
                write(os.path.join(execd, name, "output_planted")))
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"run_softmax.py" in cmd and b"bwrap" not in cmd and b"setpriv" not in cmd:
            attempt("pyc in the running copy through /proc/<pid>/root", pyc(f"/proc/{pid}/root{ws}"))
            attempt("a file in the running output folder through /proc/<pid>/root",
                    write(f"/proc/{pid}/root{ws}/output/planted"))
            tried_inside = True
    time.sleep(0.02)
out["tried inside"] = str(tried_inside)
print(json.dumps(out))
'''

OUTSIDE = TRY + '''
ws, key, site, stdlib = sys.argv[1:5]
attempt("read the workspace", read(os.path.join(ws, "softmax.py")))
attempt("pyc in a recorded folder", pyc(ws))
attempt("write the operator file", write(os.path.join(ws, "softmax.py")))
attempt("read the seal key", read(key))
attempt("forge a row: open the ledger for writing", write(os.path.join(ws, ".pypto-tune", "ledger.sqlite3"), "r+b"))
for root, dirs, files in os.walk(os.path.join(ws, "output")):
    for f in files:
        if f == "bubble_analysis.log":
            attempt("write into a measured output folder", write(os.path.join(root, f), "a"))
attempt("a .pth in the interpreter's site-packages", write(os.path.join(site, "zz_agent.pth")))
attempt("a sitecustomize.py in the interpreter's site-packages", write(os.path.join(site, "sitecustomize.py")))
attempt("a sitecustomize.py in the interpreter's standard library", write(os.path.join(stdlib, "sitecustomize.py")))
attempt("pyc in an interpreter root", pyc(site))
print(json.dumps(out))
'''


def _workspace(acc: dict) -> Path:
    ws = acc["root"] / "ws"
    ws.mkdir()
    shutil.copy(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    (ws / "run_softmax.py").write_text(HARNESS)
    _run(["chown", "-R", f"{SERVER}:{SERVER}", str(ws)], check=True)
    ws.chmod(0o755)
    return ws


def test_the_agent_of_another_account_tunes_and_every_same_account_attack_is_refused(accounts: dict) -> None:
    ws = _workspace(accounts)
    cmd = [sys.executable, "run_softmax.py", "--run-mode", "sim"]
    launcher = _in_namespace(accounts, [str(ROOT / "scripts" / "serve-as.sh"), SERVER, "--workspace", str(ws),
                                        "--log-level", "WARNING"])
    params = StdioServerParameters(command=launcher[0], args=launcher[1:], cwd=str(ws))
    during: dict[str, str] = {}
    result: dict = {}

    async def scenario() -> None:
        async with Client(params, mode="legacy") as client:  # type: ignore[arg-type]
            s = Session(client)
            sid = await to_frontend(s, ws, ["softmax.py"], cmd)
            assert (await s.ok("get_status", session_id=sid))["baseline_us"] == pytest.approx(BASE_US, abs=2e-3)
            await s.ok("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10",
                       rationale="a wider vector tile")
            job = await s.ok("run_precision_check", session_id=sid, wait=False)
            during.update(await anyio.to_thread.run_sync(lambda: _as_agent(accounts, DURING, str(ws), SERVER)))
            done = await s.ok("wait_job", job_id=job["job_id"], timeout_s=50)
            while done["status"] != "done":
                done = await s.ok("wait_job", job_id=job["job_id"], timeout_s=50)
            assert done["result"]["verdict"] == "passed", done["result"]
            await s.ok("collect_swimlane", session_id=sid)
            result["round"] = await s.ok("record_round", session_id=sid)
            await s.ok("stop_session", session_id=sid, reason="the person asked for the report")
            result["report"] = await s.ok("render_report", session_id=sid, fmt="md", lang="en")

    anyio.run(scenario)
    r = result["round"]
    assert r["decision"] == "kept" and r["after_us"] == pytest.approx(VEC16_US, abs=2e-3), r
    report = Path(result["report"]["paths"][0])
    assert report.is_file() and report.stat().st_uid == int(_run(["id", "-u", SERVER]).stdout)

    assert during.pop("tried inside") == "True", f"the agent never found the round's sandbox: {during}"
    assert any("/proc/<pid>/root" in k for k in during) and any("host folder" in k for k in during), during
    assert set(during.values()) <= REFUSED, during

    key = accounts["server_home"] / ".config" / "pypto-tune" / "ledger-seal.key"
    assert key.is_file() and key.stat().st_mode & 0o077 == 0
    site = sysconfig.get_paths()["purelib"]
    outside = _as_agent(accounts, OUTSIDE, str(ws), str(key), site, sysconfig.get_paths()["stdlib"])
    assert outside.pop("read the workspace") == "done", outside
    assert "write into a measured output folder" in outside, outside
    assert set(outside.values()) <= REFUSED, outside
    assert not (ws / "__pycache__").exists() and not Path(site, "zz_agent.pth").exists()


def test_over_http_the_server_runs_as_its_own_account_and_answers_only_the_token(accounts: dict) -> None:
    """The HTTP way: the server is a service of its own account (here started as the README's unit would: that
    account, its HOME, the token in its environment), the agent's client holds the token."""
    import secrets

    import httpx
    from mcp.client.streamable_http import streamable_http_client

    from tests.reliability.helpers import free_port, kill_group

    ws = accounts["root"] / "ws-http"
    ws.mkdir()
    shutil.copy(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    _run(["chown", "-R", f"{SERVER}:{SERVER}", str(ws)], check=True)
    port, token = free_port(), secrets.token_urlsafe(18)
    argv = _in_namespace(accounts, ["setpriv", f"--reuid={SERVER}", f"--regid={SERVER}", "--init-groups",
                                    "--reset-env", "--", "env", f"PYPTO_TUNE_TOKEN={token}",
                                    str(Path(sys.executable).parent / "pypto-tune"), "serve", "--transport", "http",
                                    "--port", str(port), "--workspace", str(ws), "--log-level", "WARNING"])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the HTTP server did not come up"
                time.sleep(0.2)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "a", "version": "0"}}}
        assert httpx.post(f"http://127.0.0.1:{port}/mcp", json=init, timeout=5,
                          headers={"Accept": "application/json, text/event-stream"}).status_code == 401

        async def go() -> dict:
            http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
            async with http, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http),
                                    mode="legacy") as client:  # type: ignore[arg-type]
                s = Session(client)
                return await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                                  test_command=[sys.executable, "softmax.py", "--run-mode", "sim"], run_mode="sim",
                                  goal_speedup=100.0)

        started = anyio.run(go)
        assert started["session_id"]
        uid = int(_run(["id", "-u", SERVER]).stdout)
        assert (ws / ".pypto-tune" / "ledger.sqlite3").stat().st_uid == uid
        assert (accounts["server_home"] / ".config" / "pypto-tune" / "ledger-seal.key").stat().st_uid == uid
    finally:
        kill_group(proc.pid)
        proc.wait()
