"""The CLI answers a first-time user: every command's --help shows its options with help text and ends with
examples; a mistake is answered with that command's own usage, a close match, and where the examples are."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pypto_tune.server.cli import _parser
from tests.test_docs import subcommands

pytestmark = pytest.mark.process

COMMANDS = {"pypto-tune": _parser(), **subcommands(_parser())}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_has_help_and_every_help_ends_with_examples(command: str) -> None:
    parser = COMMANDS[command]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        assert action.help and action.help is not argparse.SUPPRESS, f"{command} {action.option_strings or action.dest}"
    text = parser.format_help()
    assert "examples:\n  pypto-tune" in text, f"{command} --help has no examples"
    for line in text[text.index("examples:"):].splitlines()[1:]:
        assert line.startswith("  pypto-tune"), f"{command}: an example that is not a command: {line!r}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pypto_tune.server.cli", *args], capture_output=True, text=True,
                          timeout=60)


def test_a_mistyped_subcommand_gets_its_closest_name() -> None:
    run = _cli("serv", "--workspace", "/tmp")
    assert run.returncode == 2 and "did you mean 'serve'?" in run.stderr
    assert run.stderr.startswith("usage: pypto-tune [-h]")


def test_a_mistyped_flag_gets_the_subcommands_usage_and_its_closest_flag() -> None:
    run = _cli("serve", "--tarnsport", "http")
    assert run.returncode == 2
    assert run.stderr.startswith("usage: pypto-tune serve"), run.stderr  # not the top level's usage
    assert "--tarnsport (did you mean --transport?)" in run.stderr
    assert "`pypto-tune serve --help` shows every option, with examples" in run.stderr
    run = _cli("report", "--lang", "fr")
    assert run.returncode == 2 and run.stderr.startswith("usage: pypto-tune report")
    assert "invalid choice: 'fr'" in run.stderr


def test_analyze_help_shows_its_own_options() -> None:
    run = _cli("analyze", "--help")
    assert run.returncode == 0
    for option in ("--json", "--lang", "--outer-loops", "--run-mode", "--no-report"):
        assert option in run.stdout
