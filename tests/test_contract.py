"""Contract: every registered tool, prompt and resource is described, titled, annotated and documented in the
README, and the README's annotation column says what the annotations say."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
from pypto_tune.server.app import build_server
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.service import TuningService

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_tool_is_described_annotated_and_in_the_readme() -> None:
    async def check() -> None:
        mcp = build_server(TuningService())
        tools = await mcp.list_tools()
        assert len(tools) >= 16
        for t in tools:
            assert t.description and len(t.description) > 20, t.name
            assert t.title, f"{t.name} has no title"
            assert t.annotations is not None and t.annotations.read_only_hint is not None, t.name
            assert t.output_schema, f"{t.name} has no structured output"
            for name, prop in t.input_schema.get("properties", {}).items():
                if name != "ctx":
                    assert prop.get("description"), f"{t.name}.{name} has no description"
            assert f"`{t.name}`" in README, f"{t.name} missing from the README tool table"
        prompts = await mcp.list_prompts()
        assert {p.name for p in prompts} == {"perf_tune", "tune_frontend", "tune_swimlane", "tune_incore",
                                             "analyze_perf"}
        for p in prompts:
            assert f"`{p.name}`" in README
        templates = await mcp.list_resource_templates()
        uris = {str(r.uri) for r in await mcp.list_resources()} | {t.uri_template for t in templates}
        for uri in ("pypto-tune://catalog", "pypto-tune://rules", "pypto-tune://sessions/{session_id}/status",
                    "pypto-tune://sessions/{session_id}/ledger",
                    "pypto-tune://sessions/{session_id}/analyses/{measurement_id}"):
            assert uri in uris and f"`{uri}`" in README
        assert len(uris) == 5, f"a resource is missing from this list and the README: {sorted(uris)}"

    anyio.run(check)


def test_the_readme_annotation_column_matches_the_registered_annotations() -> None:
    """read-only ⇔ readOnlyHint; edits source / kills ⇔ destructiveHint; idempotent (or read-only) ⇔ idempotentHint."""
    rows = dict(re.findall(r"^\| `(\w+)` \| .* \| ([^|]+) \|$", README, flags=re.MULTILINE))

    async def check() -> None:
        for t in await build_server(TuningService()).list_tools():
            cell = rows[t.name]
            a = t.annotations
            read_only = "read-only" in cell
            assert a.read_only_hint is read_only, (t.name, cell)
            assert a.destructive_hint is ("edits source" in cell or "kills" in cell), (t.name, cell)
            assert a.idempotent_hint is (read_only or "idempotent" in cell), (t.name, cell)
            assert a.open_world_hint is False, t.name

    anyio.run(check)


def test_every_rule_id_is_in_the_readme_rules_table() -> None:
    for r in tuning_loop.RULES:
        assert re.search(rf"\| `{re.escape(r.id)}` \|", README), r.id


def test_only_start_session_accepts_a_command() -> None:
    async def check() -> None:
        for t in await build_server(TuningService()).list_tools():
            props = set(t.input_schema.get("properties", {}))
            if t.name != "start_session":
                assert not props & {"test_command", "command", "argv", "shell", "cmd"}, t.name

    anyio.run(check)
