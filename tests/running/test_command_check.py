"""check_command: what is wrong with a test command, before a session fixes it.

Workspaces are built per test from real scripts: our fixture operator (softmax.py: ``--run-mode``, default sim),
a PyPTO-style example (pypto_style_example.py: ``--run_mode``, default npu, example ids ``module::test_fn``), the
SIM probe whose jit hard-codes run_mode SIM, and small pytest files written here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pypto_tune.tools.running.command_check import CommandProblem, check_command
from pypto_tune.tools.errors import InputError
from pypto_tune.tools.running.runner import build_child_env
from tests.running.runner_helpers import DATA

FIXTURE_SOFTMAX = Path(__file__).resolve().parents[2] / "fixtures" / "operators" / "softmax" / "softmax.py"

PYTEST_FILE = '''
import unittest
import pytest
from helpers import test_imported


def test_add():
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    pass


class TestOps:
    def test_mul(self):
        pass


class Base(unittest.TestCase):
    def test_inherited(self):
        pass


class TestChild(Base):
    pass


class TestExternal(SomethingImported):
    pass


if True:
    def test_in_if():
        pass
'''


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    shutil.copy(FIXTURE_SOFTMAX, w / "softmax.py")
    shutil.copy(DATA / "pypto_style_example.py", w / "pypto_style_example.py")
    shutil.copy(DATA / "probe_add_verdict.py", w / "probe.py")
    (w / "test_op.py").write_text(PYTEST_FILE)
    (w / "tests").mkdir()
    (w / "tests" / "test_more.py").write_text("def test_one():\n    pass\n")
    return w


def check(ws: Path, *argv: str, mode: str = "sim", env: dict[str, str] | None = None) -> list[CommandProblem]:
    return check_command(list(argv), workspace=ws, run_mode=mode, env=env or build_child_env(run_mode=mode))


def codes(problems: list[CommandProblem]) -> list[str]:
    return [p.code for p in problems]


# ------------------------------------------------------------------------------------------- clean commands
@pytest.mark.parametrize("mode,argv", [
    ("sim", ["python3", "softmax.py", "--run-mode", "sim"]),
    ("sim", ["python3", "softmax.py"]),  # the fixture defaults to sim
    ("npu", ["python3", "softmax.py", "--run-mode=npu"]),
    ("sim", ["python3", "pypto_style_example.py", "pypto_style_example::test_softmax", "--run_mode", "sim"]),
    ("npu", ["python3", "pypto_style_example.py", "pypto_style_example::test_softmax"]),  # defaults to npu
    ("sim", ["python3", "-u", "-W", "ignore", "softmax.py", "--run-mode", "sim"]),
    ("sim", ["python3", "-m", "pytest", "-q", "test_op.py::test_add", "-k", "add"]),
    ("sim", ["python3", "-m", "pytest", "test_op.py::test_param[1]", "test_op.py::TestOps::test_mul"]),
    ("sim", ["python3", "-m", "pytest", "test_op.py::TestChild::test_inherited", "test_op.py::test_in_if"]),
    ("sim", ["python3", "-m", "pytest", "test_op.py::test_imported", "tests/test_more.py::test_one"]),
    ("sim", ["pytest", "tests", "--deselect", "tests/test_more.py::test_gone"]),
    ("sim", ["python3", "probe.py"]),
    ("sim", ["env", "PYTHONHASHSEED=0", "python3", "softmax.py", "--run-mode", "sim"]),
])
def test_commands_that_are_fine_give_no_problems(ws: Path, mode: str, argv: list[str]) -> None:
    assert check(ws, *argv, mode=mode) == []


# ------------------------------------------------------------------------------------------------ the program
def test_program_not_on_the_childs_path(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    env = {"PATH": str(tmp_path / "empty")}
    (p,) = check(ws, "python3", "softmax.py", env=env)
    assert p.code == "program-not-found" and p.index == 0 and p.argument == "python3"
    assert str(tmp_path / "empty") in p.message and "PATH" in p.message
    assert check(ws, "nosuchprogram-xyz", "softmax.py")[0].code == "program-not-found"


def test_program_paths_are_taken_from_the_workspace(ws: Path) -> None:
    (p,) = [x for x in check(ws, "./missing.sh") if x.index == 0]
    assert p.code == "program-not-found" and str(ws / "missing.sh") in p.message
    (ws / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    (p,) = check(ws, "./run.sh")
    assert p.code == "program-not-executable" and "chmod +x" in p.hint
    os.chmod(ws / "run.sh", 0o755)
    assert check(ws, "./run.sh") == []


def test_a_script_run_as_the_program_must_be_executable(ws: Path) -> None:
    problems = check(ws, "./softmax.py", "--run-mode", "sim")
    assert codes(problems) == ["program-not-executable"]
    assert "python3 ./softmax.py" in problems[0].hint


# ----------------------------------------------------------------------------------------------- the script
def test_missing_script_names_where_it_looked(ws: Path) -> None:
    (p,) = check(ws, "python3", "sofmax.py", "--run-mode", "sim")
    assert p.code == "script-not-found" and p.index == 1 and p.argument == "sofmax.py"
    assert str(ws / "sofmax.py") in p.message and p.hint


@pytest.mark.parametrize("where", ["dotdot", "absolute", "symlink"])
def test_script_outside_the_workspace_is_refused(ws: Path, tmp_path: Path, where: str) -> None:
    outside = tmp_path / "elsewhere" / "test_op.py"
    outside.parent.mkdir()
    shutil.copy(FIXTURE_SOFTMAX, outside)
    arg = {"dotdot": "../elsewhere/test_op.py", "absolute": str(outside), "symlink": "link.py"}[where]
    if where == "symlink":
        (ws / "link.py").symlink_to(outside)
    problems = check(ws, "python3", arg, "--run-mode", "sim")
    assert codes(problems) == ["script-outside-workspace"]
    assert str(outside) in problems[0].message and "outside the workspace" in problems[0].message
    assert "copy the test into the workspace" in problems[0].hint


def test_unparsable_script_is_named(ws: Path) -> None:
    (ws / "broken.py").write_text("def f(:\n")
    (p,) = check(ws, "python3", "broken.py")
    assert p.code == "script-unreadable" and "does not parse" in p.message and "line 1" in p.message


def test_scripts_are_read_not_imported(ws: Path) -> None:
    marker = ws / "imported.txt"
    (ws / "side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').write('x')\nimport argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--run_mode', default='npu')\np.parse_args()\n")
    assert codes(check(ws, "python3", "side_effect.py")) == ["run-mode-default-conflict"]
    assert not marker.exists()


def test_module_run_from_the_workspace_is_checked_as_a_script(ws: Path) -> None:
    (ws / "ops").mkdir()
    shutil.copy(DATA / "pypto_style_example.py", ws / "ops" / "example.py")
    assert codes(check(ws, "python3", "-m", "ops.example")) == ["run-mode-default-conflict"]
    assert check(ws, "python3", "-m", "json.tool", "--run_mode", "npu")[0].code == "run-mode-conflict"


def test_wrappers_are_looked_through(ws: Path) -> None:
    assert codes(check(ws, "timeout", "300", "python3", "missing.py")) == ["script-not-found"]
    assert codes(check(ws, "env", "A=1", "python3", "softmax.py", "--run_mode", "sim")) == ["run-mode-flag-unknown"]


# ----------------------------------------------------------------------------------------------- selectors
def test_pytest_selector_naming_no_function_suggests_the_close_one(ws: Path) -> None:
    (p,) = check(ws, "python3", "-m", "pytest", "test_op.py::test_ad")
    assert p.code == "selector-not-found" and p.index == 3 and p.argument == "test_op.py::test_ad"
    assert "'test_ad' is not defined" in p.message and "test_add" in p.message and p.hint


def test_pytest_selector_naming_no_method(ws: Path) -> None:
    (p,) = check(ws, "pytest", "test_op.py::TestOps::test_div")
    assert p.code == "selector-not-found" and "'test_div' is not defined in TestOps" in p.message


def test_methods_are_looked_up_through_base_classes_of_the_same_file(ws: Path) -> None:
    assert check(ws, "pytest", "test_op.py::TestChild::test_inherited") == []
    (p,) = check(ws, "pytest", "test_op.py::TestChild::test_missing")
    assert p.code == "selector-not-found" and "'test_missing' is not defined in TestChild" in p.message


def test_methods_of_imported_bases_and_star_imports_are_not_guessed(ws: Path) -> None:
    assert check(ws, "pytest", "test_op.py::TestExternal::test_anything") == []
    (ws / "test_star.py").write_text("from helpers import *\n")
    assert check(ws, "pytest", "test_star.py::test_whatever") == []


def test_pytest_selector_file_missing_or_outside(ws: Path, tmp_path: Path) -> None:
    assert codes(check(ws, "pytest", "test_nope.py::test_add")) == ["script-not-found"]
    (tmp_path / "out.py").write_text("def test_add():\n    pass\n")
    assert codes(check(ws, "python3", "-m", "pytest", "../out.py::test_add")) == ["script-outside-workspace"]
    assert codes(check(ws, "pytest", "../out.py")) == ["script-outside-workspace"]


def test_python_cannot_run_a_pytest_selector(ws: Path) -> None:
    problems = check(ws, "python3", "test_op.py::test_add")
    assert codes(problems) == ["script-not-found"]
    assert "pytest" in problems[0].message and "python3 -m pytest test_op.py::test_add" in problems[0].hint
    # ...and if the function is missing too, both are said.
    assert codes(check(ws, "python3", "test_op.py::test_nope")) == ["script-not-found", "selector-not-found"]


def test_pypto_example_id_must_be_one_the_script_knows(ws: Path) -> None:
    (p,) = check(ws, "python3", "pypto_style_example.py", "pypto_style_example::test_softmx", "--run_mode", "sim")
    assert p.code == "selector-not-found" and p.index == 2
    assert "test_softmax" in p.message  # the close match and the known ids are named
    assert "pypto_style_example::test_softmax_twice" in p.message


def test_example_id_of_a_function_the_script_defines_is_accepted(ws: Path) -> None:
    # Not a literal id of the examples dict, but the function exists: the script decides (and the verdict will
    # show its "ERROR: Invalid example ID" line if it refuses).
    assert check(ws, "python3", "pypto_style_example.py", "other::test_softmax", "--run_mode", "sim") == []


def test_example_id_known_only_as_a_literal_is_accepted(ws: Path) -> None:
    # The id is a key of the script's examples dict; no function carries its name.
    (ws / "ids.py").write_text("import sys\ndef run_basic():\n    print('ok')\n"
                               "EXAMPLES = {'mine::basic': run_basic}\nEXAMPLES[sys.argv[1]]()\n")
    assert check(ws, "python3", "ids.py", "mine::basic") == []
    assert codes(check(ws, "python3", "ids.py", "mine::advanced")) == ["selector-not-found"]


def test_file_selector_given_to_a_script_is_checked_against_that_file(ws: Path) -> None:
    (p,) = check(ws, "python3", "pypto_style_example.py", "test_op.py::test_gone", "--run_mode", "sim")
    assert p.code == "selector-not-found" and "test_op.py" in p.message


# ----------------------------------------------------------------------------------------------- run mode
@pytest.mark.parametrize("mode,argv,given", [
    ("sim", ["python3", "pypto_style_example.py", "--run_mode", "npu"], "--run_mode npu"),
    ("sim", ["python3", "pypto_style_example.py", "--run_mode=npu"], "--run_mode=npu"),
    ("npu", ["python3", "pypto_style_example.py", "--run_mode=sim"], "--run_mode=sim"),
    ("npu", ["python3", "softmax.py", "--run-mode", "sim"], "--run-mode sim"),
    ("sim", ["bash", "run.sh", "--run-mode", "npu"], "--run-mode npu"),  # no script to read: the value still counts
    ("sim", ["python3", "-m", "pytest", "test_op.py", "--run_mode=npu"], "--run_mode=npu"),
])
def test_run_mode_flag_that_contradicts_the_session(ws: Path, mode: str, argv: list[str], given: str) -> None:
    problems = [p for p in check(ws, *argv, mode=mode) if p.code == "run-mode-conflict"]
    assert len(problems) == 1
    p = problems[0]
    assert p.argument == given and f"session's run_mode is {mode}" in p.message
    other = "npu" if mode == "sim" else "sim"
    assert f"{other} mode" in p.message and f"run_mode={other!r}" in p.hint


def test_flag_spelled_the_way_the_script_does_not_know(ws: Path) -> None:
    # PyPTO examples declare --run_mode (underscore); our fixtures --run-mode (hyphen).
    (p,) = check(ws, "python3", "pypto_style_example.py", "--run-mode", "sim")
    assert p.code == "run-mode-flag-unknown" and p.argument == "--run-mode" and p.index == 2
    assert "declares --run_mode" in p.message and "unrecognized arguments" in p.message
    assert p.hint == "spell it --run_mode sim"
    (p,) = check(ws, "python3", "softmax.py", "--run_mode=sim")
    assert p.code == "run-mode-flag-unknown" and p.hint == "spell it --run-mode sim"


def test_flag_the_scripts_parser_does_not_declare(ws: Path) -> None:
    (ws / "plain.py").write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('--n')\n"
                                 "p.parse_args()\n")
    (p,) = check(ws, "python3", "plain.py", "--run_mode", "sim")
    assert p.code == "run-mode-flag-unknown" and "declares no run-mode option" in p.message
    # parse_known_args tolerates it, and a script without a parser of its own may read it elsewhere: say nothing.
    (ws / "lenient.py").write_text("import argparse\np = argparse.ArgumentParser()\np.parse_known_args()\n")
    (ws / "noparser.py").write_text("import sys\nprint(sys.argv)\n")
    assert check(ws, "python3", "lenient.py", "--run_mode", "sim") == []
    assert check(ws, "python3", "noparser.py", "--run_mode", "sim") == []


def test_missing_flag_while_the_script_defaults_to_the_other_mode(ws: Path) -> None:
    (p,) = check(ws, "python3", "pypto_style_example.py", "pypto_style_example::test_softmax", mode="sim")
    assert p.code == "run-mode-default-conflict"
    assert "default --run_mode 'npu'" in p.message and "session's run_mode is sim" in p.message
    assert p.hint == "add --run_mode sim to the test command"
    (p,) = check(ws, "python3", "softmax.py", mode="npu")
    assert p.code == "run-mode-default-conflict" and p.hint == "add --run-mode npu to the test command"


def test_set_defaults_overrides_the_argument_default(ws: Path) -> None:
    (ws / "sd.py").write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('--run_mode', "
                              "default='sim')\np.set_defaults(run_mode='npu')\np.parse_args()\n")
    assert codes(check(ws, "python3", "sd.py", mode="sim")) == ["run-mode-default-conflict"]
    assert check(ws, "python3", "sd.py", mode="npu") == []


def test_run_mode_default_from_the_runmode_enum_is_understood(ws: Path) -> None:
    (ws / "enum.py").write_text("import argparse, pypto\np = argparse.ArgumentParser()\np.add_argument("
                                "'--run-mode', default=pypto.RunMode.NPU)\np.parse_args()\n")
    assert codes(check(ws, "python3", "enum.py", mode="sim")) == ["run-mode-default-conflict"]
    # A default computed at run time is not guessed.
    (ws / "computed.py").write_text("import argparse, os\np = argparse.ArgumentParser()\np.add_argument("
                                    "'--run-mode', default=os.environ.get('MODE', 'npu'))\np.parse_args()\n")
    assert check(ws, "python3", "computed.py", mode="sim") == []


def test_required_flag_and_flag_without_value_and_bad_choice(ws: Path) -> None:
    (ws / "req.py").write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('--run_mode', "
                               "required=True, choices=['npu', 'sim'])\np.parse_args()\n")
    assert codes(check(ws, "python3", "req.py")) == ["run-mode-required"]
    (p,) = check(ws, "python3", "req.py", "--run_mode")
    assert p.code == "run-mode-flag-without-value" and p.hint == "pass --run_mode sim"
    (p,) = check(ws, "python3", "req.py", "--run_mode", "SIM")
    assert p.code == "run-mode-invalid-choice" and p.argument == "SIM" and p.index == 3 and "npu | sim" in p.message


def test_pytest_options_declared_in_conftest(ws: Path) -> None:
    (ws / "conftest.py").write_text("def pytest_addoption(parser):\n    parser.addoption('--run_mode', "
                                    "default='npu')\n")
    (p,) = check(ws, "python3", "-m", "pytest", "test_op.py::test_add", mode="sim")
    assert p.code == "run-mode-default-conflict" and "conftest.py" in p.message
    assert check(ws, "python3", "-m", "pytest", "test_op.py::test_add", "--run_mode", "sim", mode="sim") == []
    (p,) = check(ws, "pytest", "tests", "--run-mode", "sim")
    assert p.code == "run-mode-flag-unknown" and "pytest stops" in p.message and p.hint == "spell it --run_mode sim"


def test_every_jit_hard_coding_the_other_mode(ws: Path) -> None:
    # probe.py: @pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM}) — in an NPU session its runs
    # would be simulated and measured as if they were device runs.
    (p,) = check(ws, "python3", "probe.py", mode="npu")
    assert p.code == "run-mode-hardcoded" and "SIM" in p.message and "session's run_mode is npu" in p.message
    assert check(ws, "python3", "probe.py", mode="sim") == []
    # One jit per mode, selected by the flag (the PyPTO example shape): nothing is hard-coded.
    assert check(ws, "python3", "pypto_style_example.py", "--run_mode", "npu", mode="npu") == []


# --------------------------------------------------------------------------------------------- the interface
def test_problems_are_returned_not_raised_and_only_a_bad_session_mode_raises(ws: Path) -> None:
    assert codes(check_command([], workspace=ws, run_mode="sim", env={})) == ["empty-command"]
    assert codes(check_command(["python3"], workspace=ws / "nope", run_mode="sim", env={})) == \
        ["workspace-missing"]
    with pytest.raises(InputError, match="run_mode"):
        check_command(["python3", "softmax.py"], workspace=ws, run_mode="cpu", env={})


def test_several_problems_are_all_reported_with_their_positions(ws: Path) -> None:
    problems = check(ws, "python3", "pypto_style_example.py", "pypto_style_example::nope", "--run-mode", "npu")
    assert codes(problems) == ["selector-not-found", "run-mode-flag-unknown", "run-mode-conflict"]
    assert [p.index for p in problems] == [2, 3, 3]
    for p in problems:
        assert p.message and p.hint and p.argument
