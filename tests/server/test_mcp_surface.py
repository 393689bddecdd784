"""What a new user's client meets first: titles, lean schemas, a job handle distinct from the result, compact
analysis results, JSON-RPC errors that carry the reason, completions, one default language, lazy imports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    PromptReference,
    ResourceLink,
    ResourceTemplateReference,
)
from pypto_tune.server.app import build_server
from pypto_tune.tools.operations.results import (CandidatesResult, KnobOut, CollectResult, JobHandle, PrecisionResult,
                                                   TrialsResult)

from tests.conftest import OPERATORS, RUNS, make_workspace, sim_command
from tests.server.mcp_client import connect

pytestmark = pytest.mark.process

LONG_TOOLS = {"run_precision_check": PrecisionResult, "collect_swimlane": CollectResult,
              "run_candidates": TrialsResult, "propose_candidates": CandidatesResult}
KB8 = 8 * 1024


def _listing() -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with Client(build_server()) as c:
            return {"tools": (await c.list_tools()).tools, "prompts": (await c.list_prompts()).prompts,
                    "resources": (await c.list_resources()).resources,
                    "templates": (await c.list_resource_templates()).resource_templates}

    return anyio.run(go)


def _wire(obj: Any) -> int:
    """Bytes of a result as JSON-RPC carries it."""
    return len(json.dumps(obj.model_dump(mode="json", by_alias=True, exclude_none=True), ensure_ascii=False)
               .encode())


# ---------------------------------------------------------------------------------------------- listing
def test_every_tool_prompt_resource_and_template_has_a_title() -> None:
    found = _listing()
    for kind in ("tools", "prompts", "resources", "templates"):
        assert found[kind], kind
        for item in found[kind]:
            assert item.title and item.title != item.name, f"{kind}: {item.name} has no title"


def test_long_tools_publish_one_schema_that_admits_the_handle_and_the_final_result() -> None:
    tools = {t.name: t for t in _listing()["tools"]}
    with_wait = {n for n, t in tools.items() if "wait" in t.input_schema.get("properties", {})}
    assert with_wait == set(LONG_TOOLS)
    handle = JobHandle(job_id="job-1", tool="collect_swimlane", status="running", elapsed_s=0.1, message="m",
                       next_actions=["wait_job"]).model_dump(mode="json")
    for name, model in LONG_TOOLS.items():
        schema = tools[name].output_schema
        assert schema["type"] == "object" and len(schema["anyOf"]) == 2
        validator = Draft202012Validator(schema)
        assert not list(validator.iter_errors(handle)), name
        assert not list(validator.iter_errors(_sample(model))), name
        assert list(validator.iter_errors({"message": "neither", "next_actions": []})), name
        # the two shapes are told apart by their required fields
        result_def = schema["$defs"][model.__name__]
        assert list(Draft202012Validator({**result_def, "$defs": schema["$defs"]}).iter_errors(handle))
        assert {"job_id", "status", "tool", "elapsed_s", "message", "next_actions"} <= set(
            schema["$defs"]["JobHandle"]["required"])
    assert {"verdict", "numerics_checked", "code_hash", "record_id"} <= set(
        tools["run_precision_check"].output_schema["$defs"]["PrecisionResult"]["required"])
    assert {"operator_time_us", "valid", "measurement_id"} <= set(
        tools["collect_swimlane"].output_schema["$defs"]["CollectResult"]["required"])


def test_tools_list_is_lean_the_job_schema_only_where_a_job_can_come_back() -> None:
    tools = _listing()["tools"]
    # the campaign tools (issue #19) have their own budget, so neither family grows unnoticed behind the other's
    campaign = {"start_campaign", "campaign_status", "stop_campaign"}
    size = sum(_wire(t) for t in tools if t.name not in campaign)
    # 45.4 KB for all 21 tools (61 % output schemas) before a nested result model became {"type": "object"} in the
    # output schemas (shallow_schema); 39.2 KB after, output schemas 21.4 KB
    assert size < 35_500, f"tools/list is {size} bytes"
    for t in tools:  # a result's own fields are typed; a nested model is an object, its schema not repeated
        assert "$ref" not in json.dumps(t.output_schema.get("properties", {})), t.name
        for arm in t.output_schema.get("$defs", {}).values():
            assert all("properties" not in p for p in arm["properties"].values()), t.name
    campaign_size = sum(_wire(t) for t in tools if t.name in campaign)
    assert 0 < campaign_size < 5_000, f"the campaign tools take {campaign_size} bytes of tools/list"
    for t in tools:
        assert '"default": null' not in json.dumps(t.input_schema), t.name  # leaving it out says the same
        assert '"default"' not in json.dumps(t.output_schema), t.name  # a validator ignores defaults
    for t in tools:
        text = json.dumps(t.output_schema)
        assert ('"JobHandle"' in text) == (t.name in LONG_TOOLS), t.name
        if t.name in ("wait_job", "cancel_job"):  # the handle itself is their result
            assert {"job_id", "status", "result"} <= set(t.output_schema["properties"]), t.name
        assert '"title"' not in json.dumps(t.input_schema) + text, f"{t.name}: pydantic titles left in"


TYPED_BY = ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")


def _untyped(node: Any, path: str) -> list[str]:
    """Paths of schema nodes that admit anything (``{}`` once descriptions and defaults are gone)."""
    found: list[str] = []
    if not isinstance(node, dict):
        return found
    if not any(k in node for k in TYPED_BY):
        found.append(path)
    for key, sub in node.get("properties", {}).items():
        found += _untyped(sub, f"{path}.{key}")
    for key, sub in node.get("$defs", {}).items():
        found += _untyped(sub, f"{path}/$defs/{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found += _untyped(node[key], f"{path}[{key}]")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(node.get(key, [])):
            found += _untyped(sub, f"{path}|{key}{i}")
    return found


def test_every_output_schema_is_typed_all_the_way_down() -> None:
    """No field of any result admits anything: a client can check every value (a free JSON value is spelled as the
    six JSON types, results.JsonValue)."""
    tools = _listing()["tools"]
    untyped = [p for t in tools for p in _untyped(t.output_schema, t.name)]
    assert untyped == [], untyped
    assert _untyped({"properties": {"x": {}, "y": {"type": "string"}}, "type": "object"}, "probe") == ["probe.x"]
    candidates = {t.name: t for t in tools}["propose_candidates"].output_schema["$defs"]["CandidatesResult"]
    assert candidates["properties"]["candidates"] == {"items": {"type": "object"}, "type": "array"}


# ---------------------------------------------------------------------------------------------- analysis size
@pytest.fixture
def runs_ws(tmp_path: Path) -> Path:
    for name in ("softmax_base", "softmax_two_calls", "matmul_base"):
        shutil.copytree(RUNS / name, tmp_path / name)
    return tmp_path


def test_analyze_bubbles_answers_in_at_most_8_kb_and_full_detail_on_request(runs_ws: Path) -> None:
    async def scenario() -> None:
        async with connect(runs_ws) as s:
            for name in ("softmax_base", "softmax_two_calls", "matmul_base"):
                res = await s.call("analyze_bubbles", output_dir=str(runs_ws / name), lang="en")
                assert _wire(res) <= KB8, f"{name}: {_wire(res)} bytes"
                sc = res.structured_content
                text = res.content[0].text
                assert len(text) < len(json.dumps(sc)) / 2 and '"worst_cores"' not in text
                assert sc["cores_total"] == 72 and len(sc["worst_cores"]) + sc["omitted"]["cores"] == 72
                assert 'detail="full"' in text  # no session: the rest is one argument away
                full = await s.call("analyze_bubbles", output_dir=str(runs_ws / name), lang="en", detail="full")
                assert len(full.structured_content["full"]["cores"]) == 72
                assert _wire(full) > 3 * KB8
            two = await s.ok("analyze_bubbles", output_dir=str(runs_ws / "softmax_two_calls"), lang="en")
            assert two["kernels"] and two["kernels"][0]["task_count"] > 0

    anyio.run(scenario)


@pytest.mark.sim
def test_list_knobs_answers_a_summary_and_the_whole_on_request(tmp_path: Path) -> None:
    """The largest fixture by knobs (upstream_activation: 28 knobs, four kernels sharing one tiling helper), after a
    probed run: the summary says each kind's legal values once and leaves out what is empty; full has every field."""
    ws = tmp_path / "act"
    ws.mkdir()
    shutil.copy2(OPERATORS / "upstream_activation" / "activation_ops.py", ws / "activation_ops.py")
    cmd = [sys.executable, "activation_ops.py", "activation_ops.py::test_swiglu", "--run_mode", "sim"]
    sizes: dict[str, int] = {}

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["activation_ops.py"],
                              test_command=cmd, run_mode="sim", goal_speedup=2.0))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            brief = await s.call("list_knobs", session_id=sid)
            full = await s.call("list_knobs", session_id=sid, detail="full")
            sizes["summary"], sizes["full"] = _wire(brief), _wire(full)
            b, f = brief.structured_content, full.structured_content
            assert b["detail"] == "summary" and f["detail"] == "full"
            assert [k["id"] for k in b["knobs"]] == [k["id"] for k in f["knobs"]]  # the same knobs, fewer words
            assert [k["id"] for k in b["dead_knobs"]] == [k["id"] for k in f["dead_knobs"]]
            assert set(b["legal_by_kind"]) >= {k["kind"] for k in f["knobs"] if k["tunable"]}
            for k in b["knobs"]:
                assert {"id", "kind", "line", "value", "catalog_ids", "tunable"} <= set(k)
                rest = [v for name, v in k.items() if name not in ("value", "tunable", "catalog_ids")]
                assert None not in rest and "" not in rest and [] not in rest, k
                assert k.get("legal", b["legal_by_kind"].get(k["kind"]))
            every = set(KnobOut.model_fields)
            assert all(set(k) == every for k in f["knobs"] + f["dead_knobs"])
            live = next(k for k in b["knobs"] if k.get("live") and k.get("effective"))
            assert live["effective"] == next(x for x in f["knobs"] if x["id"] == live["id"])["effective"]

    anyio.run(scenario)
    print(f"list_knobs on upstream_activation: summary {sizes['summary']} bytes, full {sizes['full']} bytes")
    assert sizes["summary"] < 0.6 * sizes["full"], sizes


# ---------------------------------------------------------------------------------------------- conventions
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_bad_resource_and_prompt_arguments_are_json_rpc_errors_with_the_reason(tmp_path: Path, mode: str) -> None:
    async def scenario() -> None:
        async with connect(tmp_path, mode=mode) as s:
            c = s.client
            with pytest.raises(MCPError) as err:
                await c.read_resource("pypto-tune://sessions/nope/status")
            assert err.value.code == INVALID_PARAMS and "unknown session_id 'nope'" in err.value.message
            assert "start_session" in err.value.message  # and what to do next
            with pytest.raises(MCPError) as err:
                await c.read_resource("pypto-tune://sessions/nope/ledger")
            assert err.value.code == INVALID_PARAMS and "unknown session_id 'nope'" in err.value.message
            with pytest.raises(MCPError) as err:
                await c.read_resource("pypto-tune://sessions/nope/analyses/x1")
            assert err.value.code == INVALID_PARAMS and "must be a number" in err.value.message
            with pytest.raises(MCPError) as err:
                await c.get_prompt("perf_tune", {"lang": "fr"})
            assert err.value.code == INVALID_PARAMS and "lang must be 'zh' or 'en' (got 'fr')" in err.value.message
            for tool, args in (("get_status", {"session_id": "x"}), ("analyze_bubbles", {"output_dir": "x"}),
                               ("render_report", {"session_id": "x"})):
                text = await s.refused(tool, **args, lang="fr")
                assert "lang must be 'zh' or 'en' (got 'fr')" in text, tool

    anyio.run(scenario)


def test_completions_offer_languages_and_the_workspace_sessions_lang_defaults_to_zh_and_refusals_read_gate_first(
        tmp_path: Path) -> None:
    """One server and one started session for three conventions (each once needed a server of its own)."""
    ws = make_workspace(tmp_path)

    async def scenario() -> None:
        async with connect(ws) as s:
            c = s.client
            # completions: languages, and the workspace's sessions (none before start_session)
            langs = await c.complete(PromptReference(name="perf_tune"), {"name": "lang", "value": ""})
            assert langs.completion.values == ["zh", "en"]
            assert (await c.complete(PromptReference(name="tune_incore"), {"name": "lang", "value": "e"})) \
                .completion.values == ["en"]
            status_ref = ResourceTemplateReference(uri="pypto-tune://sessions/{session_id}/status")
            assert (await c.complete(status_ref, {"name": "session_id", "value": ""})).completion.values == []
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=sim_command(), run_mode="sim", goal_speedup=2.0))["session_id"]
            got = await c.complete(status_ref, {"name": "session_id", "value": sid[:3]})
            assert got.completion.values == [sid]
            assert (await c.complete(status_ref, {"name": "session_id", "value": "zz-no"})).completion.values == []
            analysis_ref = ResourceTemplateReference(
                uri="pypto-tune://sessions/{session_id}/analyses/{measurement_id}")
            none_yet = await c.complete(analysis_ref, {"name": "measurement_id", "value": ""}, {"session_id": sid})
            assert none_yet.completion.values == []  # no measurement before collect_swimlane
            with pytest.raises(MCPError) as err:
                await c.read_resource(f"pypto-tune://sessions/{sid}/analyses/1")
            assert err.value.code == INVALID_PARAMS and f"session {sid} has no measurement 1" in err.value.message
            assert "collect_swimlane first" in err.value.message

            # lang defaults to zh: the board, the status resource, the prompt
            default = (await s.ok("get_status", session_id=sid))["board"]
            assert default == (await s.ok("get_status", session_id=sid, lang="zh"))["board"]
            assert default != (await s.ok("get_status", session_id=sid, lang="en"))["board"]
            resource = (await c.read_resource(f"pypto-tune://sessions/{sid}/status")).contents[0].text
            assert resource == default
            prompt = await c.get_prompt("perf_tune")
            assert prompt.messages[0].content.text == (await c.get_prompt("perf_tune", {"lang": "zh"})) \
                .messages[0].content.text

            # a refusal reads GATE first, not the SDK's prefix
            text = await s.refused("collect_swimlane", session_id=sid)
            assert text.startswith("GATE precision-first:"), text
            assert "Allowed now: run_precision_check" in text
            unknown = await s.refused("wait_job", job_id="job-nope")
            assert unknown.startswith("unknown job id 'job-nope'") and "Next:" in unknown

    anyio.run(scenario)
    langs = {t.name: t.input_schema["properties"]["lang"] for t in _listing()["tools"]
             if "lang" in t.input_schema.get("properties", {})}
    # every tool that answers in prose: omitted, lang is the session's (start_session's lang, else zh)
    assert set(langs) == {"analyze_bubbles", "render_report", "get_status", "stop_session", "record_round",
                          "start_session"}
    for name, lang in langs.items():
        assert lang.get("default") is None and lang["enum"] == ["zh", "en"], (name, lang)


# ---------------------------------------------------------------------------------------------- lazy imports
HEAVY = ("numpy", "libcst", "msgspec", "jinja2", "pypto_tune.tools.service", "pypto_tune.tools.analysis")

LAZY_PROBE = """
import sys, anyio
from pathlib import Path
from mcp import Client
from pypto_tune.server.app import build_server

HEAVY = {heavy!r}

async def main():
    mcp = build_server(workspace=Path({ws!r}))
    async with Client(mcp) as c:
        await c.list_tools(); await c.list_prompts(); await c.list_resources(); await c.list_resource_templates()
        await c.get_prompt("perf_tune", {{"lang": "en"}})
        await c.read_resource("pypto-tune://rules")
        print("after-listing", sorted(m for m in HEAVY if m in sys.modules))
        await c.call_tool("get_status", {{"session_id": "nope"}})
        print("after-call", sorted(m for m in HEAVY if m in sys.modules))

anyio.run(main)
"""


def test_listing_and_prompts_need_none_of_the_heavy_imports_which_come_on_first_use(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", LAZY_PROBE.format(heavy=HEAVY, ws=str(tmp_path))],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith("after-"))
    assert lines["after-listing"] == "[]", lines
    # the probe can see imports: the first call that needs the service loads the domain library
    assert "pypto_tune.tools.service" in lines["after-call"] and "numpy" in lines["after-call"], lines


# ---------------------------------------------------------------------------------------------- helpers
def _sample(model: type) -> dict[str, Any]:
    common = {"session_id": "s-1", "state": "S2_COLLECT", "stage": None, "message": "m",
              "next_actions": ["get_status"]}
    if model is PrecisionResult:
        return PrecisionResult(**common, verdict="passed", numerics_checked=False, exit_code=0, duration_s=1.0,
                               key_output="", code_hash="h", record_id=1).model_dump(mode="json")
    if model is TrialsResult:
        return TrialsResult(**common, batch="b", parallel=2, trials=[]).model_dump(mode="json")
    if model is CandidatesResult:
        return CandidatesResult(**common, candidates=[]).model_dump(mode="json")
    return CollectResult(**common, output_dirs=[], artifacts=[], operator_time_us=1.0, e2e_us=1.0, samples_us=[1.0],
                         valid=True, invalid_reasons=[], measurement_id=1, round=0, target_us=None,
                         baseline_us=None).model_dump(mode="json")


def test_sample_results_are_what_the_operations_return() -> None:
    # the samples above must stay valid instances, or the schema test would test nothing
    assert PrecisionResult.model_validate(_sample(PrecisionResult)).verdict == "passed"
    assert CollectResult.model_validate(_sample(CollectResult)).measurement_id == 1


def test_a_resource_link_points_at_the_whole_analysis() -> None:
    """Unit-level: the reply of a summary with a detail_uri carries a resource link (the SIM session test reads
    it back through the real server)."""
    from pypto_tune.server.tooling import reply
    from pypto_tune.tools.operations.results import AnalysisSummary, Omitted

    s = AnalysisSummary(session_id="s-1", message="m", next_actions=[], measurement_id=3, output_dirs=[],
                        operator_time_us=1.0, e2e_us=1.0, avg_core_utilization=1.0, avg_bubble_rate=1.0,
                        load_balance=1.0, active_core_utilization=1.0, active_bubble_rate=1.0,
                        active_load_balance=1.0, ratings={}, cores_total=0, cores_active=0, worst_cores=[],
                        bottlenecks=[], suggestions=[], kernels=[], top_leaves=[], warnings=[],
                        omitted=Omitted(cores=0, bottlenecks=0, suggestions=0, kernels=0, leaves=0, warnings=0),
                        report_path="r.md", detail_uri="pypto-tune://sessions/s-1/analyses/3")
    links = [b for b in reply(s).content if isinstance(b, ResourceLink)]
    assert [str(link.uri) for link in links] == ["pypto-tune://sessions/s-1/analyses/3"]
    assert links[0].mime_type == "application/json"
