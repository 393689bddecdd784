"""run_command: what the server promises about the child process (runner.py's module docstring)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import anyio
import pytest

from pypto_tune.tools.errors import InputError, RunError
from pypto_tune.tools.running.runner import build_child_env, run_command, split_command
from tests.running.runner_helpers import kill_leftovers, processes_mentioning, wait_dead, wait_for_pids

pytestmark = [pytest.mark.process, pytest.mark.anyio]

PY = sys.executable

# A test command that forks two children, each forking a grandchild; every process ignores SIGTERM and writes
# its pid to argv[1]. Only SIGKILL to the whole process group can stop them.
FORKER = textwrap.dedent("""
    import os, signal, sys, time
    pidfile = sys.argv[1]
    def record():
        fd = os.open(pidfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{os.getpid()}\\n".encode()); os.close(fd)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record()
    for _ in range(2):
        if os.fork() == 0:
            if os.fork() == 0:
                record()
                while True: time.sleep(0.1)
            record()
            while True: time.sleep(0.1)
    print("forked", flush=True)
    while True: time.sleep(0.1)
""")


def env() -> dict[str, str]:
    return build_child_env(run_mode="sim")


async def test_timeout_kills_the_whole_group_even_grandchildren_that_ignore_sigterm(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    t0 = time.monotonic()
    result = await run_command([PY, "-c", FORKER, str(pidfile)], cwd=tmp_path, env=env(), timeout_s=1.5,
                               kill_grace_s=0.5)
    elapsed = time.monotonic() - t0
    pids = wait_for_pids(pidfile, 5)
    try:
        assert result.timed_out is True
        assert result.exit_code is None and result.signal == signal.SIGKILL  # SIGTERM was ignored
        assert "forked" in result.output
        assert wait_dead(pids) == [], "a process of the test command survived the timeout"
        assert elapsed < 1.5 + 2 * 0.5 + 2.0  # timeout + grace periods + slack
    finally:
        kill_leftovers(pids)


async def test_cancelling_the_task_kills_the_group_and_reraises(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    finished = False
    with anyio.move_on_after(1.5) as scope:  # what the MCP SDK does when the client cancels the call
        await run_command([PY, "-c", FORKER, str(pidfile)], cwd=tmp_path, env=env(), timeout_s=60,
                          kill_grace_s=0.5)
        finished = True
    pids = wait_for_pids(pidfile, 5)
    try:
        assert scope.cancelled_caught and not finished, "cancellation must propagate, not return a result"
        assert wait_dead(pids) == [], "a process survived the cancellation"
    finally:
        kill_leftovers(pids)


async def test_normal_exit_still_kills_background_processes_left_behind(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    # The child starts a daemon with its output redirected (so the pipe closes) and exits at once.
    code = textwrap.dedent(f"""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(pidfile)!r}, "w").write(str(p.pid))
        print("test passed")
    """)
    result = await run_command([PY, "-c", code], cwd=tmp_path, env=env(), timeout_s=30, kill_grace_s=0.5)
    pids = wait_for_pids(pidfile, 1)
    try:
        assert result.exit_code == 0 and not result.timed_out
        assert result.output.strip() == "test passed"
        assert result.duration_s < 5
        assert wait_dead(pids) == []
    finally:
        kill_leftovers(pids)


async def test_output_of_200_mb_keeps_memory_bounded_and_head_and_tail_exact(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        out = sys.stdout.buffer
        out.write(b"HEAD-START\\n")
        line = b"x" * 1023 + b"\\n"
        block = line * 1024  # 1 MiB
        for _ in range(200):
            out.write(block)
        out.write(b"TAIL-END\\n")
    """)
    cap = 1024 * 1024
    tracemalloc.start()
    try:
        result = await run_command([PY, "-c", code], cwd=tmp_path, env=env(), timeout_s=60, output_cap_bytes=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0
    assert result.output_bytes == 11 + 200 * 1024 * 1024 + 9
    assert result.output_truncated
    assert result.output_head.startswith("HEAD-START\nxxx")
    assert len(result.output_head.encode()) == cap // 2
    assert result.output_tail.endswith("xxx\nTAIL-END\n")
    assert len(result.output_tail.encode()) == cap // 2
    assert f"[... {result.output_bytes - cap} bytes of output omitted ...]" in result.output
    assert peak < 8 * cap, f"python heap peaked at {peak} bytes for a {cap}-byte cap"


async def test_small_output_is_kept_whole_without_marker(tmp_path: Path) -> None:
    result = await run_command([PY, "-c", "print('a'); import sys; print('b', file=sys.stderr)"], cwd=tmp_path,
                               env=env(), timeout_s=30)
    assert result.output == "a\nb\n"  # stderr is merged into the same capture
    assert not result.output_truncated and result.output_tail == ""


async def test_progress_is_reported_at_the_interval_even_for_a_silent_child(tmp_path: Path) -> None:
    calls: list[tuple[float, float, str]] = []

    async def on_progress(elapsed_s: float, last_line: str) -> None:
        calls.append((time.monotonic(), elapsed_s, last_line))

    t0 = time.monotonic()
    result = await run_command([PY, "-c", "import time; time.sleep(3.2)"], cwd=tmp_path, env=env(), timeout_s=30,
                               on_progress=on_progress, progress_interval_s=0.5)
    assert result.exit_code == 0
    assert len(calls) >= 5
    stamps = [t0] + [c[0] for c in calls]
    assert max(b - a for a, b in zip(stamps, stamps[1:])) < 0.5 + 0.5  # slack for a loaded 2-core machine
    assert all(c[2] == "" for c in calls)
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)


async def test_progress_carries_the_last_output_line(tmp_path: Path) -> None:
    seen: list[str] = []

    async def on_progress(elapsed_s: float, last_line: str) -> None:
        seen.append(last_line)

    code = "import time; print('compiling kernel 3/7'); print(); time.sleep(1.5)"
    await run_command([PY, "-c", code], cwd=tmp_path, env=env(), timeout_s=30, on_progress=on_progress,
                      progress_interval_s=0.3)
    assert seen and seen[-1] == "compiling kernel 3/7"


async def test_a_crash_is_reported_as_the_signal(tmp_path: Path) -> None:
    result = await run_command([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                               cwd=tmp_path, env=env(), timeout_s=30)
    assert result.exit_code is None and result.signal == signal.SIGSEGV and not result.timed_out


async def test_result_records_times_argv_and_env_names(tmp_path: Path) -> None:
    before = time.time()
    result = await run_command([PY, "-c", "import os; print(os.environ['PYTHONUNBUFFERED'], os.getcwd())"],
                               cwd=tmp_path, env=env(), timeout_s=30)
    assert before <= result.started_at <= result.ended_at <= time.time()
    assert result.output.split() == ["1", str(tmp_path)]
    assert result.cwd == str(tmp_path) and result.argv[0] == PY
    assert result.env_keys == sorted(env())


async def test_stdin_is_dev_null(tmp_path: Path) -> None:
    result = await run_command([PY, "-c", "import sys; print(repr(sys.stdin.read()))"], cwd=tmp_path, env=env(),
                               timeout_s=30)
    assert result.output.strip() == "''"


async def test_a_program_that_cannot_start_is_a_run_error(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="cannot start"):
        await run_command([str(tmp_path / "nope")], cwd=tmp_path, env=env())
    with pytest.raises(RunError):
        await run_command([PY, "-c", "pass"], cwd=tmp_path / "missing-dir", env=env())


# ------------------------------------------------------------------------------------------- split_command
def test_split_command_uses_shlex_and_no_shell_features() -> None:
    assert split_command("python3 test_op.py --case 'a b'") == ["python3", "test_op.py", "--case", "a b"]
    # Shell operators are plain words: nothing is piped or chained.
    assert split_command("python3 t.py && rm -rf x") == ["python3", "t.py", "&&", "rm", "-rf", "x"]
    assert split_command(["python3", "t.py"]) == ["python3", "t.py"]


@pytest.mark.parametrize("bad", ["", "   ", [], ["python3", "a\x00b"], "python3 'unbalanced", "no-such-prog-xyz t.py",
                                 [1, 2]])
def test_split_command_refuses_what_cannot_run(bad: object) -> None:
    with pytest.raises(InputError):
        split_command(bad)  # type: ignore[arg-type]


def test_split_command_checks_paths_against_cwd(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    assert split_command("./run.sh", cwd=tmp_path) == ["./run.sh"]
    with pytest.raises(InputError, match="does not exist"):
        split_command("./other.sh", cwd=tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        split_command(str(tmp_path / "absent"))


# ------------------------------------------------------------------------------------------- build_child_env
def test_child_env_is_explicit_and_puts_the_interpreter_dir_first() -> None:
    base = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "SECRET_TOKEN": "x", "ASCEND_HOME_PATH": "/a",
            "PTO_TILE_LIB_CODE_PATH": "/p", "LD_LIBRARY_PATH": "/l", "TILE_FWK_DEVICE_ID": "5", "PYTHONPATH": "/q",
            "VIRTUAL_ENV": "/v"}
    e = build_child_env(run_mode="sim", base=base)
    assert e["PATH"].split(":") == [os.path.dirname(sys.executable), "/usr/bin", "/bin"]
    assert e["HOME"] == "/home/u" and e["LANG"] == e["LC_ALL"] == "C.UTF-8"
    assert e["PYTHONUNBUFFERED"] == "1" and e["PYTHONDONTWRITEBYTECODE"] == "1"
    assert e["ASCEND_HOME_PATH"] == "/a" and e["PTO_TILE_LIB_CODE_PATH"] == "/p" and e["LD_LIBRARY_PATH"] == "/l"
    assert "SECRET_TOKEN" not in e and "VIRTUAL_ENV" not in e
    assert "TILE_FWK_DEVICE_ID" not in e  # SIM does not pick a chip


def test_child_env_keeps_what_cann_set_env_exports() -> None:
    # CANN's set_env.sh exports these; PYTHONPATH carries CANN's packages and often torch_npu (R3 import check).
    cann = {"ASCEND_TOOLKIT_HOME": "/t", "ASCEND_HOME_PATH": "/t", "ASCEND_OPP_PATH": "/t/opp",
            "ASCEND_AICPU_PATH": "/t", "TOOLCHAIN_HOME": "/t/toolkit", "LD_LIBRARY_PATH": "/t/lib64",
            "PYTHONPATH": "/t/python/site-packages:/t/opp/built-in/op_impl/ai_core/tbe"}
    base = {"PATH": "/t/bin:/usr/bin", "HOME": "/h", "PTO_TILE_LIB_CODE_PATH": "/pto",
            "TILE_FWK_DEVICE_ID": "5", "TILE_FWK_STITCH_DEBUG": "1", **cann}
    for mode in ("sim", "npu"):
        e = build_child_env(run_mode=mode, device_id="2" if mode == "npu" else None, base=base)
        assert {k: e[k] for k in cann} == cann
        assert e["PTO_TILE_LIB_CODE_PATH"] == "/pto" and e["TILE_FWK_STITCH_DEBUG"] == "1"
        assert "/t/bin" in e["PATH"].split(":")
    assert build_child_env(run_mode="npu", device_id="2", base=base)["TILE_FWK_DEVICE_ID"] == "2"
    assert build_child_env(run_mode="npu", base=base)["TILE_FWK_DEVICE_ID"] == "5"  # no device_id: the base's
    assert "TILE_FWK_DEVICE_ID" not in build_child_env(run_mode="sim", base=base)


def test_child_env_on_npu_sets_the_device_and_extra_wins() -> None:
    base = {"PATH": "/bin", "HOME": "/h"}
    e = build_child_env(run_mode="npu", device_id="3", extra={"DUMP_DEVICE_PERF": "true"}, base=base)
    assert e["TILE_FWK_DEVICE_ID"] == "3" and e["DUMP_DEVICE_PERF"] == "true"
    with pytest.raises(InputError):
        build_child_env(run_mode="gpu", base=base)
    with pytest.raises(InputError):
        build_child_env(run_mode="sim", extra={"A=B": "1"}, base=base)


async def test_the_child_python3_on_path_is_the_server_interpreter_dir(tmp_path: Path) -> None:
    # domain A.2b: pypto's helper scripts run with the python3 PATH finds.
    result = await run_command(["sh", "-c", "command -v python3"], cwd=tmp_path, env=env(), timeout_s=30)
    assert os.path.dirname(result.output.strip()) == os.path.dirname(sys.executable)


async def test_an_error_in_the_progress_callback_stops_the_child_and_propagates_unwrapped(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"

    async def on_progress(elapsed_s: float, last_line: str) -> None:
        # only once the whole tree exists: on a loaded machine half a second may pass before the forks are done
        if pidfile.exists() and len(pidfile.read_text().split()) >= 5:
            raise RuntimeError("client went away")

    with pytest.raises(RuntimeError, match="client went away"):
        await run_command([PY, "-c", FORKER, str(pidfile)], cwd=tmp_path, env=env(), timeout_s=60,
                          on_progress=on_progress, progress_interval_s=0.5, kill_grace_s=0.3)
    pids = wait_for_pids(pidfile, 5)
    try:
        assert wait_dead(pids) == []
    finally:
        kill_leftovers(pids)


async def test_a_call_cancelled_right_away_leaves_no_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    with anyio.CancelScope() as scope:
        scope.cancel()  # cancelled before the spawn even starts
        await run_command([PY, "-c", code], cwd=tmp_path, env=env(), timeout_s=60, kill_grace_s=0.3)
    assert scope.cancelled_caught
    # The child may be killed before it writes its pid: look for any process whose command line names pidfile.
    assert wait_dead(processes_mentioning(str(pidfile))) == []
