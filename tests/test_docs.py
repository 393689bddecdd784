"""The documents keep their jobs: README.md is a user's manual (short, no dates, hashes or history; every CLI
subcommand, MCP tool and prompt documented; its worked example true), benchmarks/README.md holds one current table per
benchmark with its date on one designated line, and history goes to CHANGELOG.md."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from pypto_tune.server.app import build_server
from pypto_tune.server.cli import _parser
from pypto_tune.tools.service import TuningService

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCH = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
README_MAX_LINES = 450
ISO_DATE = re.compile(r"\b(19|20)\d{2}-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])\b")
# a hex word of 7+ characters with a digit and a letter: how a commit is cited (not a number, not a word)
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
MEASURED = "Measured: "


def subcommands(parser: argparse.ArgumentParser, prefix: str = "pypto-tune") -> dict[str, argparse.ArgumentParser]:
    """Every subcommand of the CLI, by its full command line (``pypto-tune knowledge``), walked from the parser."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{prefix} {name}"] = sub
                out.update(subcommands(sub, f"{prefix} {name}"))
    return out


def test_the_readme_is_a_manual_of_at_most_450_lines_with_contents() -> None:
    lines = README.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[0] == "## Contents"
    for h in headings[1:]:  # every section is linked from the contents
        anchor = re.sub(r"[^\w\- ]", "", h[3:].lower()).replace(" ", "-")
        assert f"(#{anchor})" in README, f"{h} is not in the contents"
    order = [h for h in headings if h in ("## Requirements and the two commands", "## Tune your own operator",
                                          "## Connect your client", "## Troubleshooting", "## CLI reference")]
    assert order == ["## Requirements and the two commands", "## Tune your own operator", "## Connect your client",
                     "## Troubleshooting", "## CLI reference"]


def test_the_readme_carries_no_date_no_commit_and_no_history() -> None:
    for n, line in enumerate(README.splitlines(), 1):
        assert not ISO_DATE.search(line), f"README.md:{n} has a date: {line.strip()[:100]}"
        assert not COMMIT.search(line), f"README.md:{n} cites a commit: {line.strip()[:100]}"
        assert not re.search(r"\bissue #?\d+", line, re.I), f"README.md:{n} names an issue: {line.strip()[:100]}"
        assert "load average" not in line, f"README.md:{n} reports a measurement's load: {line.strip()[:100]}"


def test_benchmarks_hold_one_current_table_each_with_its_date_on_one_line() -> None:
    sections = re.split(r"^## ", BENCH, flags=re.MULTILINE)[1:]
    assert len(sections) >= 10
    for section in sections:
        title = section.splitlines()[0]
        if title == "Contents":
            continue
        lines = section.splitlines()
        measured = [line for line in lines if line.startswith(MEASURED)]
        tables = [i for i, line in enumerate(lines) if line.startswith("|") and not lines[i - 1].startswith("|")]
        assert len(measured) == 1 and ISO_DATE.search(measured[0]), f"{title}: one '{MEASURED}<date> · …' line"
        assert len(tables) == 1, f"{title}: one table of current figures (found {len(tables)})"
        assert "```" in section, f"{title}: the command that measures it"
    for n, line in enumerate(BENCH.splitlines(), 1):
        if not line.startswith(MEASURED):
            assert not ISO_DATE.search(line), f"benchmarks/README.md:{n}: a date outside a Measured line: {line[:90]}"
            assert not COMMIT.search(line), f"benchmarks/README.md:{n} cites a commit: {line[:90]}"


def test_history_lives_in_the_changelog() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    dated = re.findall(r"^## (\d{4}-\d{2}-\d{2})", changelog, flags=re.MULTILINE)
    assert dated and dated == sorted(dated, reverse=True), "CHANGELOG.md: one section per date, newest first"


def test_every_cli_subcommand_is_in_the_readmes_cli_reference() -> None:
    reference = README[README.index("## CLI reference"):]
    reference = reference[:reference.index("\n## ")]
    for command in subcommands(_parser()):
        assert f"`{command}" in reference, f"{command} is missing from the README's CLI reference"
    knowledge = next(a for a in subcommands(_parser())["pypto-tune knowledge"]._actions if a.dest == "action")
    for action in knowledge.choices:
        assert re.search(rf"\b{action}\b", reference), f"pypto-tune knowledge {action} is not documented"


def test_every_tool_and_prompt_is_documented_in_the_readme() -> None:
    async def names() -> tuple[list[str], list[str]]:
        mcp = build_server(TuningService())
        return [t.name for t in await mcp.list_tools()], [p.name for p in await mcp.list_prompts()]

    tools, prompts = anyio.run(names)
    for name in tools:
        assert re.search(rf"^\| `{name}` \|", README, re.MULTILINE), f"tool {name} has no row in the README's table"
    for name in prompts:
        assert f"`{name}`" in README, f"prompt {name} is not in the README"


def test_the_readmes_local_links_and_pictures_exist_and_pictures_stay_small() -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", README)
    assert len(pictures) >= 2
    for pic in pictures:
        assert (ROOT / pic).stat().st_size < 150_000, f"{pic} is over 150 KB"


@pytest.mark.sim
def test_the_worked_example_reaches_a_kept_gain_as_the_readme_shows(tmp_path: Path) -> None:
    """Run docs/example/tune_example.py (a real MCP stdio session on the real simulator) and compare what it printed
    with the transcript the README shows: the same calls in the same order, and the same figures (SIM is
    deterministic)."""
    run = subprocess.run([sys.executable, str(ROOT / "docs" / "example" / "tune_example.py"), str(tmp_path / "op")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    printed = [line for line in run.stdout.splitlines() if " -> " in line]
    section = README[README.index("### A worked example"):]
    shown = re.search(r"```text\n(.*?)```", section, re.DOTALL)
    assert shown, "the README shows the example's transcript in a text block"
    assert [line.rstrip() for line in shown.group(1).splitlines()] == printed
    assert any(line.startswith("record_round") and "-> kept" in line for line in printed)
