"""A process forked from a warm interpreter (tests/warm_interpreter.py) behaves, for whoever started it, as the fresh
``python -m MODULE`` or ``python SCRIPT`` it stands in for: the module or script runs as ``__main__`` with the
arguments, folder, environment and ``sys.path`` a fresh interpreter would give it, on the caller's own pipes; its
exit status, a signal the caller sends and a launcher killed outright reach the child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.running.runner_helpers import is_alive
from tests.warm_interpreter import module_command, script_command

pytestmark = pytest.mark.process

REPORT = """
import json, os, sys
print(json.dumps({"name": __name__, "argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0],
                  "path": sys.path, "env": os.environ.get("WARM_PROBE"), "line": sys.stdin.readline(),
                  "file": __file__}))
sys.exit(int(sys.argv[1]))
"""

SLEEPER = """
import os, sys, time
print(os.getpid(), flush=True)
time.sleep(120)
"""


def _launch(tmp_path: Path, module: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    command, argv = module_command(module, args, env)
    assert argv[:3] == ["-I", "-S", "-c"], "the warm interpreter did not start: this test would test nothing"
    return subprocess.Popen([command, *argv], cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def test_the_module_runs_as_main_with_the_arguments_folder_environment_and_path_of_a_fresh_interpreter(
        tmp_path: Path) -> None:
    (tmp_path / "report_mod.py").write_text(REPORT)
    extra = tmp_path / "extra"
    extra.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "WARM_PROBE": "seen", "PYTHONPATH": str(extra)}
    proc = _launch(tmp_path, "report_mod", ["3", "--flag"], env)
    out, _ = proc.communicate("typed on stdin\n", timeout=60)
    assert proc.returncode == 3  # sys.exit's code is the launcher's
    got = json.loads(out)
    fresh = subprocess.run([sys.executable, "-m", "report_mod", "3", "--flag"], cwd=tmp_path, env=env, text=True,
                           input="typed on stdin\n", capture_output=True, timeout=60)
    want = json.loads(fresh.stdout)
    assert got == want  # name, argv, folder, sys.path (the folder, then PYTHONPATH), environment, stdin
    assert got["name"] == "__main__" and got["path"][1] == str(extra) and got["env"] == "seen"


def test_a_script_runs_as_main_with_the_arguments_folder_environment_and_path_of_a_fresh_interpreter(
        tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.mkdir()
    (tool / "helper_mod.py").write_text("VALUE = 7\n")  # importable because the script's folder is first on the path
    (tool / "report_script.py").write_text(REPORT.replace("import json, os, sys", "import json, os, sys, helper_mod"))
    extra = tmp_path / "extra"
    extra.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "WARM_PROBE": "seen", "PYTHONPATH": str(extra)}
    argv = ["tool/report_script.py", "4", "--flag"]
    command, args = script_command(argv, env, preload=("json",))
    assert args[:3] == ["-I", "-S", "-c"], "the warm interpreter did not start: this test would test nothing"
    warm = subprocess.run([command, *args], cwd=tmp_path, env=env, text=True, input="typed on stdin\n",
                          capture_output=True, timeout=60)
    fresh = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, text=True, input="typed on stdin\n",
                           capture_output=True, timeout=60)
    assert warm.returncode == fresh.returncode == 4, warm.stderr
    got, want = json.loads(warm.stdout), json.loads(fresh.stdout)
    assert got == want  # name, argv, folder, sys.path (the script's folder, then PYTHONPATH), __file__, environment
    assert got["path0"] == str(tool) and got["file"] == str(tool / "report_script.py")


STREAMS = """
import json, sys
print("to stderr first", file=sys.stderr)
print(json.dumps({"no_pyc": sys.dont_write_bytecode, "out": sys.stdout.write_through,
                  "err": sys.stderr.write_through, "encoding": sys.stdout.encoding}))
"""


@pytest.mark.parametrize("kind", ["script", "module"])
def test_the_unbuffered_and_no_bytecode_options_are_taken_as_a_fresh_interpreter_would(
        tmp_path: Path, kind: str) -> None:
    """The helper's streams were made from the test process's environment (xdist's workers set both options): a
    server forked from it with neither must still block-buffer its stdout, as a fresh one does."""
    (tmp_path / "streams.py").write_text(STREAMS)
    argv = ["streams.py"] if kind == "script" else ["-m", "streams"]
    for options in ({}, {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}):
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **options}
        command, args = (script_command(argv, env, preload=("json",)) if kind == "script" else
                         module_command("streams", [], env, preload=("json",)))
        assert args[:3] == ["-I", "-S", "-c"], "these options must not need a fresh interpreter"
        warm = subprocess.run([command, *args], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=60)
        fresh = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, text=True, capture_output=True,
                               timeout=60)
        assert (warm.returncode, warm.stderr, json.loads(warm.stdout)) == \
            (fresh.returncode, fresh.stderr, json.loads(fresh.stdout)), options


def test_another_interpreter_option_gets_a_script_a_fresh_interpreter() -> None:
    env = {"PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1"}
    assert script_command(["x.py"], env) == (sys.executable, ["x.py"])


def test_an_uncaught_exception_in_a_script_exits_1_with_its_traceback(tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text("raise ValueError('boom')\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    command, args = script_command(["boom.py"], env, preload=("json",))
    proc = subprocess.run([command, *args], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback (most recent call last):" in proc.stderr and "ValueError: boom" in proc.stderr


def test_a_signal_to_the_launcher_reaches_the_child_and_its_status_comes_back(tmp_path: Path) -> None:
    (tmp_path / "sleeper_mod.py").write_text(SLEEPER)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    proc = _launch(tmp_path, "sleeper_mod", [], env)
    child = int(proc.stdout.readline())  # type: ignore[union-attr]
    assert child != proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert not is_alive(child)


def test_a_launcher_killed_outright_takes_its_child_with_it(tmp_path: Path) -> None:
    (tmp_path / "sleeper_mod.py").write_text(SLEEPER)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    proc = _launch(tmp_path, "sleeper_mod", [], env)
    child = int(proc.stdout.readline())  # type: ignore[union-attr]
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while is_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_alive(child)


def test_an_interpreter_option_in_the_environment_gets_a_fresh_interpreter() -> None:
    command, argv = module_command("pypto_tune.server.cli", ["serve"], {"PYTHONHASHSEED": "0"})
    assert (command, argv) == (sys.executable, ["-m", "pypto_tune.server.cli", "serve"])
