"""The run sandbox itself (tools/running/sandbox.py), with the real bubblewrap: what a run can and cannot see.

Commands here are small shell commands (no simulator): each test runs ``run_isolated`` as every session run does and
reads what the command printed from inside.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from pypto_tune.tools.code.codestate import ExecFile
from pypto_tune.tools.running import sandbox
from pypto_tune.tools.running.execution import run_isolated
from pypto_tune.tools.running.runner import build_child_env
from tests.attacker import sandboxed_copies
from tests.conftest import require_real

pytestmark = pytest.mark.process

RECORDED = b"recorded bytes\n"
LIVE = "live bytes (edited by the agent)\n"


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_real(sandbox.status().ok, f"bubblewrap cannot build a sandbox here: {sandbox.status().missing}")


def _run(ws: Path, script: str, **kw) -> str:
    files = {"data.txt": ExecFile(data=RECORDED), "sub/helper.txt": ExecFile(data=b"helper\n")}

    async def go():
        return await run_isolated(files, ["/bin/sh", "-c", script], workspace=ws, env=build_child_env(run_mode="sim"),
                                  timeout_s=60, tag="t", **kw)

    iso = anyio.run(go)
    assert iso.sandbox.startswith("bubblewrap"), iso.sandbox
    return iso.result.output


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "data.txt").write_text(LIVE)
    (ws / ".pypto-tune").mkdir()
    (ws / ".pypto-tune" / "pytest.ini").write_text("[pytest]\n")
    return ws


def test_every_spelling_of_the_workspace_reaches_the_recorded_copy(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    spellings = [f"{ws}/data.txt", f"/.{ws}/data.txt", f"/{ws}/data.txt", f"{ws}/sub/../data.txt",
                 "/proc/self/cwd/data.txt", f"/proc/self/cwd/../{ws.name}/data.txt", "data.txt", "./sub/../data.txt"]
    out = _run(ws, "; ".join(f"cat '{p}' 2>&1" for p in spellings))
    assert out.count(RECORDED.decode()) == len(spellings), out
    assert "live bytes" not in out


def test_nothing_outside_the_closure_exists_in_a_run(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("a data file outside the workspace\n")
    host_tmp = Path("/tmp") / f"pypto-tune-test-{os.getpid()}.txt"
    host_tmp.write_text("in the host's /tmp\n")
    try:
        out = _run(ws, f"""
            for p in '{outside}' '{host_tmp}' '{ws}/.pypto-tune' '{ws}/.pypto-tune/pytest.ini' '{tmp_path}/outside.txt' \
                     /root/.bashrc /etc/hostname /etc/hosts; do
                [ -e "$p" ] && echo "VISIBLE $p" || echo "absent $p"
            done
            ls -A '{tmp_path}' | sed 's/^/PARENT /'
            ls -A /tmp | sed 's/^/TMP /'
            touch /new-file 2>/dev/null && echo "ROOT WRITABLE" || echo "root read-only"
            echo "PID $$"
            cat /proc/net/dev | tail -n +3 | cut -d: -f1 | sed 's/^ */IFACE /'
        """)
    finally:
        host_tmp.unlink()
    assert "VISIBLE" not in out, out
    # above the workspace: only the folders bwrap made to mount it (the workspace itself, empty of .pypto-tune)
    assert [ln for ln in out.splitlines() if ln.startswith("PARENT ")] == ["PARENT ws"], out
    assert not [ln for ln in out.splitlines() if ln.startswith("TMP ") and "pypto-tune-test" in ln], out
    assert "root read-only" in out
    pid = int(next(ln for ln in out.splitlines() if ln.startswith("PID ")).split()[1])
    assert pid < 10, f"own pid namespace expected, pid {pid}"
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("IFACE ")] == ["lo"], out


def test_the_interpreter_and_path_resolve_inside(tmp_path: Path) -> None:
    """pypto starts its writer scripts with the python3 on PATH (domain A.2b): it must resolve in the sandbox, to
    the venv's interpreter the recorded PATH names first."""
    ws = _workspace(tmp_path)
    out = _run(ws, "command -v python3; python3 -c 'import sys, pypto; print(\"PREFIX\", sys.prefix)'")
    assert f"PREFIX {sys.prefix}" in out, out
    assert out.splitlines()[0] == os.path.join(os.path.dirname(sys.executable), "python3")


def test_outputs_come_from_the_fresh_output_folder_only(tmp_path: Path) -> None:
    """The run's output/ starts empty; a folder made there counts only if it is a PyPTO run of this copy — a bare
    folder with a current-looking name is rejected (no program.json), and nothing the agent put into the live
    output/ is seen by the run."""
    ws = _workspace(tmp_path)
    (ws / "output" / "output_20200101_000000_1_1_x").mkdir(parents=True)
    out = _run(ws, "ls -A output | sed 's/^/SEEN /'; mkdir output/output_$(date +%Y%m%d_%H%M%S)_1_2_x")
    assert "SEEN" not in out

    files = {"data.txt": ExecFile(data=RECORDED)}

    async def go():
        return await run_isolated(files, ["/bin/sh", "-c", "mkdir output/output_$(date +%Y%m%d_%H%M%S)_1_2_x"],
                                  workspace=ws, env=build_child_env(run_mode="sim"), timeout_s=60, tag="t")

    iso = anyio.run(go)
    assert iso.output_dirs == []
    (why,) = iso.rejected_outputs.values()
    assert any("program.json" in w for w in why), why


def test_capture_folder_and_pythonpath_first_for_other_modules(tmp_path: Path) -> None:
    """The typed hooks another module (the run-time probe) uses: a read-only folder first on PYTHONPATH, and a
    writable folder whose files come back."""
    ws = _workspace(tmp_path)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "probe_mod.py").write_text("VALUE = 'from the hook folder'\n")
    files = {"data.txt": ExecFile(data=RECORDED)}
    script = ('python3 -c "import os, probe_mod; open(os.path.join(os.environ[\'PROBE_OUT\'], \'r.json\'), \'w\')'
              '.write(probe_mod.VALUE)"; touch "$(dirname ' + str(hook) + ')/escaped" 2>/dev/null || echo ro')

    async def go():
        return await run_isolated(files, ["/bin/sh", "-c", script], workspace=ws, env=build_child_env(run_mode="sim"),
                                  timeout_s=60, tag="t", pythonpath_first=(str(hook),), capture_env="PROBE_OUT")

    iso = anyio.run(go)
    assert iso.captured == {"r.json": b"from the hook folder"}, iso.result.output
    assert not (tmp_path / "escaped").exists()


def test_a_missing_bubblewrap_is_named_with_the_way_to_install_it(tmp_path: Path) -> None:
    code = ("import os; os.environ['PYPTO_TUNE_BWRAP'] = '/nonexistent/bwrap'\n"
            "from pypto_tune.tools.running import sandbox\n"
            "st = sandbox.status()\n"
            "print(st.ok, st.missing)\n"
            "try:\n    sandbox.require()\nexcept sandbox.SandboxUnavailable as e:\n    print('HINT', e.hint)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("False bubblewrap (bwrap) is not installed (PYPTO_TUNE_BWRAP=/nonexistent/bwrap")
    assert "apt-get install bubblewrap" in out and "--unsandboxed" in out


def test_a_package_folder_the_interpreter_does_not_use_is_empty_and_read_only_inside(tmp_path: Path) -> None:
    """``Closure.hidden``: the base installation's own site-packages (not on a venv's sys.path) is mounted with its
    installation, but a run finds it empty — so a file planted there cannot reach it, and the scan may skip it."""
    ws = _workspace(tmp_path)
    base = tmp_path / "base"
    std = base / "lib" / "python3.11"
    (std / "site-packages").mkdir(parents=True)
    (std / "stdlib_module.py").write_text("# the standard library stays\n")
    (std / "site-packages" / "planted.pth").write_text("import os; os.environ['X'] = 'planted'\n")
    hidden = str(std / "site-packages")
    files = {"data.txt": ExecFile(data=RECORDED)}
    script = (f"cat '{std}/stdlib_module.py'; ls -A '{hidden}' | sed 's/^/HIDDEN /'; "
              f"cat '{hidden}/planted.pth' 2>/dev/null || echo 'no planted file'; "
              f"touch '{hidden}/new' 2>/dev/null && echo WRITABLE || echo 'read-only'")

    async def go(clo: sandbox.Closure):
        return await run_isolated(files, ["/bin/sh", "-c", script], workspace=ws, env=build_child_env(run_mode="sim"),
                                  timeout_s=60, tag="t", closure=clo)

    seen = anyio.run(go, sandbox.Closure(roots=(str(base),))).result.output
    assert "planted" in seen and "HIDDEN planted.pth" in seen, seen  # without hiding, the run reads it
    out = anyio.run(go, sandbox.Closure(roots=(str(base),), hidden=(hidden,))).result.output
    assert "# the standard library stays" in out, out
    assert "HIDDEN" not in out and "no planted file" in out and "read-only" in out, out
    assert (std / "site-packages" / "planted.pth").exists() and not (std / "site-packages" / "new").exists()


# ------------------------------------------------------------------------------------- the sealed run (issue #32)
def test_a_running_copy_lives_in_no_host_folder_and_is_read_only_even_through_proc(tmp_path: Path) -> None:
    """While the run executes, no host folder holds its copy or its outputs (the agent's account, polling
    ``.pypto-tune/exec/``, finds only the run's empty private folder); the copy inside the sandbox cannot be added
    to or changed — not by the run, not through ``/proc/<pid>/root`` from outside (a read-only mount)."""
    ws = _workspace(tmp_path)
    files = {"data.txt": ExecFile(data=RECORDED), "mod.py": ExecFile(data=b"X = 1\n")}
    script = ("echo out > output/seen; touch planted 2>&1; mkdir __pycache__ 2>&1; echo x >> data.txt 2>&1; "
              "i=0; while [ ! -e /tmp/go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done")
    seen: dict[str, object] = {}

    async def attacker() -> None:
        copies: list[Path] = []
        for _ in range(400):
            copies = sandboxed_copies(ws, "mod.py")
            if copies:
                break
            await anyio.sleep(0.02)
        assert copies, "the run never started"
        host = [p.relative_to(ws).as_posix() for p in (ws / ".pypto-tune").rglob("*")]
        seen["host"] = host
        refusals = []
        for copy in copies:
            for act in (lambda: (copy.parent / "__pycache__").mkdir(),
                        lambda: copy.write_bytes(b"X = 2\n"),
                        lambda: (copy.parent / "planted.py").write_text("X = 3\n")):
                try:
                    act()
                    refusals.append("WRITTEN")
                except OSError as exc:
                    refusals.append(os.strerror(exc.errno or 0))
            root = Path(str(copy)[:-len(f"{ws}/mod.py")])
            (root / "tmp" / "go").write_text("")  # /proc/<pid>/root/tmp: the run's own /tmp (let it end)
        seen["refusals"] = refusals

    async def go():
        async with anyio.create_task_group() as tg:
            tg.start_soon(attacker)
            iso = await run_isolated(files, ["/bin/sh", "-c", script], workspace=ws,
                                     env=build_child_env(run_mode="sim"), timeout_s=60, tag="t")
        return iso

    iso = anyio.run(go)
    out = iso.result.output
    assert out.count("Read-only file system") == 3, out
    assert not [h for h in seen["host"] if h.endswith(("data.txt", "mod.py", "seen"))], seen["host"]
    in_exec = [h for h in seen["host"] if h.startswith(".pypto-tune/exec/")]
    assert len(in_exec) == 1 and in_exec[0].startswith(".pypto-tune/exec/t.run-"), seen["host"]  # empty, its own
    assert seen["refusals"] and set(seen["refusals"]) == {"Read-only file system"}, seen["refusals"]
    assert iso.tampered == [] and iso.result.exit_code == 0


def test_a_run_that_breaks_its_handback_is_discarded(tmp_path: Path) -> None:
    """The sandbox's shell hands the copy back after the command; a command that kills it leaves a run whose copy
    nobody can vouch for: tampered, never a verdict."""
    ws = _workspace(tmp_path)
    files = {"data.txt": ExecFile(data=RECORDED)}

    async def go():
        return await run_isolated(files, ["/bin/sh", "-c", "kill -9 $PPID; sleep 1"], workspace=ws,
                                  env=build_child_env(run_mode="sim"), timeout_s=60, tag="t")

    iso = anyio.run(go)
    assert iso.tampered and "handed nothing back" in iso.tampered[0], (iso.tampered, iso.result)


def test_a_fed_descriptor_refuses_a_writer_that_opens_it_again() -> None:
    """Until bwrap has copied it, a recorded file's memfd is open in the server, where a process of the same account
    can open it again (``/proc/<server pid>/fd/N``); sealed against writes, it refuses that writer."""
    from pypto_tune.tools.running.execution import _feeds

    feeds, fds = _feeds({"mod.py": ExecFile(data=b"X = 1\n"), "link.py": ExecFile(data=b"mod.py", link="mod.py")})
    try:
        assert [f.rel for f in feeds] == ["link.py", "mod.py"] and feeds[0].fd == -1
        fd = os.open(f"/proc/self/fd/{fds[0]}", os.O_WRONLY)
        try:
            with pytest.raises(PermissionError):
                os.write(fd, b"X = 2\n")
        finally:
            os.close(fd)
        assert os.pread(fds[0], 100, 0) == b"X = 1\n"
    finally:
        for fd in fds:
            os.close(fd)
