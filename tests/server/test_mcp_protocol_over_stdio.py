"""What a client author meets, on both protocol eras the SDK speaks (``legacy`` = the 2025-11-25 initialize handshake,
``auto`` = 2026-07-28 over stdio), and over HTTP: how the server presents itself, the protocol errors for unknown
names, argument errors in the server's own words, progress a client can draw, and a person's R5 answer asked through
the multi-round-trip ``InputRequiredResult`` on 2026-07-28 connections.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, types
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from tests.admission.test_attacks_over_stdio import FAILING_OP
from tests.conftest import make_workspace, sim_command
from tests.reliability.helpers import running_http
from tests.server.mcp_client import Session, server_params

pytestmark = pytest.mark.process

STATIC_TTL_MS = 3_600_000  # an hour: the lists never change while the server runs


# ---------------------------------------------------------------------------------------------- presentation
async def _presentation(client: Client) -> dict[str, Any]:
    info, caps = client.server_info, client.server_capabilities
    lists = {"tools": await client.list_tools(), "prompts": await client.list_prompts(),
             "resources": await client.list_resources(), "templates": await client.list_resource_templates()}
    catalog = await client.read_resource("pypto-tune://catalog")
    errors = {}
    for what, call in (("prompt", client.get_prompt("no_such_prompt")), ("tool", client.call_tool("no_such_tool", {}))):
        with pytest.raises(MCPError) as err:
            await call
        errors[what] = (err.value.code, err.value.message)
    perf_tune = {lang: (await client.get_prompt("perf_tune", {"lang": lang})).messages[0].content.text
                 for lang in ("zh", "en")}
    return {"protocol": client.protocol_version, "info": info, "caps": caps.model_dump(exclude_none=True),
            "ttl": {k: (v.ttl_ms, v.cache_scope) for k, v in lists.items()},
            "catalog_ttl": (catalog.ttl_ms, catalog.cache_scope), "errors": errors,
            "tools": {t.name for t in lists["tools"].tools}, "prompts": {p.name for p in lists["prompts"].prompts},
            "perf_tune": perf_tune, "catalog": catalog.contents[0].text}


def _check_presentation(seen: dict[str, Any]) -> None:
    info = seen["info"]
    assert info.description and "PyPTO" in info.description
    assert info.website_url and info.website_url.startswith("https://")
    mimes = {i.mime_type for i in info.icons or []}
    assert mimes == {"image/png", "image/svg+xml"}
    for icon in info.icons:
        head, data = icon.src.split(",", 1)
        assert head == f"data:{icon.mime_type};base64"
        raw = base64.b64decode(data)
        assert raw.startswith(b"\x89PNG\r\n\x1a\n") if icon.mime_type == "image/png" else raw.startswith(b"<svg")
    # the lists never change, so nothing may be promised about changes: one capability set, whatever the era
    assert seen["caps"]["tools"] == {"list_changed": False} and seen["caps"]["prompts"] == {"list_changed": False}
    assert seen["caps"]["resources"] == {"subscribe": False, "list_changed": False}
    for what, (code, message) in seen["errors"].items():
        assert code == INVALID_PARAMS, (what, code, message)
        assert f"unknown {what} 'no_such_{what}'" in message and "this server's" in message


async def _bad_arguments(client: Client) -> dict[str, str]:
    """The refusals of four calls with bad arguments, by what was wrong."""
    s = Session(client)
    return {
        "three": await s.refused("start_session", operator_files=["op.py"], test_command="python op.py",
                                 run_mode="cpu", goal_speedup="fast"),
        "one": await s.refused("wait_job", job_id="job-x", timeout_s="soon"),
        "lang": await s.refused("get_status", session_id="x", lang="fr"),
        "nested": await s.refused("start_session", workspace="/w", operator_files=["a.py", 3],
                                  test_command=["python", "a.py"], run_mode="sim"),
    }


@pytest.fixture(scope="module")
def http_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One server over HTTP for the module: each request is stateless, so the clients of several tests can share it
    (a session's workspace is named in its own start_session)."""
    with running_http(tmp_path_factory.mktemp("http")) as port:
        yield port


@pytest.fixture(scope="module")
def eras(tmp_path_factory: pytest.TempPathFactory, http_port: int) -> dict[str, Any]:
    """One server per era (and one over HTTP) asked how it presents itself; the legacy one also gets bad arguments,
    then runs a softmax session's baseline with a progress recorder on each call (one server start fewer than a
    server of its own)."""
    ws = tmp_path_factory.mktemp("eras")
    softmax = make_workspace(tmp_path_factory.mktemp("progress"))

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for mode in ("legacy", "auto"):
            async with Client(server_params(ws), mode=mode) as client:  # type: ignore[arg-type]
                seen[mode] = await _presentation(client)
                if mode == "legacy":
                    seen["bad_arguments"] = await _bad_arguments(client)
                    seen["progress"] = await _baseline_with_progress(client, softmax)
        async with Client(f"http://127.0.0.1:{http_port}/mcp") as client:
            seen["http"] = await _presentation(client)
        return seen

    return anyio.run(scenario)


def test_presentation_and_unknown_names_are_the_same_on_both_eras_and_over_http(
        eras: dict[str, dict[str, Any]]) -> None:
    seen = {era: eras[era] for era in ("legacy", "auto", "http")}
    assert seen["legacy"]["protocol"] == "2025-11-25"
    assert seen["auto"]["protocol"] == seen["http"]["protocol"] == "2026-07-28"
    for era in seen.values():
        _check_presentation(era)
    assert seen["legacy"]["caps"] == seen["auto"]["caps"] == seen["http"]["caps"]
    # cache hints exist on the 2026-07-28 wire only: every list for an hour, shared; the catalogue too
    for era in ("auto", "http"):
        assert set(seen[era]["ttl"].values()) == {(STATIC_TTL_MS, "public")}, seen[era]["ttl"]
        assert seen[era]["catalog_ttl"] == (STATIC_TTL_MS, "public")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_both_handshakes_list_the_same_tools_prompts_and_resources(eras: dict[str, dict[str, Any]],
                                                                   mode: str) -> None:
    seen = eras[mode]
    assert {"start_session", "run_precision_check", "enable_runtime_debug", "collect_swimlane", "analyze_bubbles",
            "apply_tuning_patch", "revert_patch", "record_round", "render_report", "get_status", "list_knobs",
            "wait_job"} <= seen["tools"]
    assert seen["prompts"] == {"perf_tune", "tune_frontend", "tune_swimlane", "tune_incore", "analyze_perf"}
    assert seen["perf_tune"]["zh"] != seen["perf_tune"]["en"]
    assert '"F-1"' in seen["catalog"] and '"I-9"' in seen["catalog"]


# ---------------------------------------------------------------------------------------------- arguments
def test_bad_arguments_are_answered_in_the_servers_words(eras: dict[str, dict[str, Any]]) -> None:
    refused = eras["bad_arguments"]
    text = refused["three"]
    assert text.startswith("start_session: 3 arguments not accepted"), text
    assert "- workspace: required and missing (absolute path of the folder" in text
    assert "- run_mode: must be one of 'sim', 'npu' (got 'cpu')" in text
    assert "- goal_speedup: must be a number or null (got 'fast')" in text
    assert "Next: call start_session again with these corrected (required: workspace, operator_files, " \
           "test_command, run_mode)" in text
    for raw in ("validation error", "pydantic", "input_value", "For further information", "Arguments"):
        assert raw not in text, raw
    assert refused["one"].startswith("wait_job: 1 argument not accepted\n- timeout_s: must be a number (got 'soon')")
    assert "- lang: lang must be 'zh' or 'en' (got 'fr'); zh is the default" in refused["lang"]
    nested = refused["nested"]
    assert "- operator_files[1]: must be" in nested or "- operator_files[1]: input should be" in nested, nested


# ---------------------------------------------------------------------------------------------- progress
class Recorder:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.seen: list[tuple[float, float, float | None, str]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((time.monotonic() - self.t0, progress, total, message or ""))


def _check_drawable(rec: Recorder, tool: str) -> None:
    assert rec.seen, f"{tool}: no progress notification"
    values = [p for _, p, _, _ in rec.seen]
    assert values == sorted(values) and len(set(values)) == len(values), f"{tool}: progress must increase: {values}"
    assert all(m.startswith(f"{tool}: ") and m != "running" for _, _, _, m in rec.seen), rec.seen
    totals = [(p, t) for _, p, t, _ in rec.seen if t is not None]
    assert totals, f"{tool}: no notification said how much there is to do: {rec.seen}"
    assert all(p < t for p, t in totals), totals
    # the first one comes when the call starts, not after the first seconds of work (generous bound: a loaded CI)
    assert rec.seen[0][0] < 5.0, rec.seen[:2]


async def _baseline_with_progress(client: Client, ws: Path) -> tuple[Recorder, Recorder]:
    """A softmax session's baseline precision check and collection, each call's progress notifications recorded."""
    s = Session(client)
    sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                      test_command=sim_command(), run_mode="sim", goal_speedup=2.0))["session_id"]
    precision, collect = Recorder(), Recorder()
    res = await client.call_tool("run_precision_check", {"session_id": sid}, progress_callback=precision)
    assert not res.is_error and res.structured_content["verdict"] == "passed"
    await s.ok("enable_runtime_debug", session_id=sid)
    collect.t0 = time.monotonic()
    res = await client.call_tool("collect_swimlane", {"session_id": sid}, progress_callback=collect)
    assert not res.is_error, res.content
    return precision, collect


def test_progress_says_where_the_call_is_with_a_total_from_the_first_seconds(eras: dict[str, Any]) -> None:
    precision, collect = eras["progress"]
    _check_drawable(precision, "run_precision_check")
    phases = " | ".join(m for _, _, _, m in precision.seen)
    # the first call of a session checks the environment before the run: a client can say so
    assert "environment checklist" in phases and "precision run (baseline)" in phases, phases
    assert {t for _, _, t, _ in precision.seen if t is not None} == {1.0}  # one run
    _check_drawable(collect, "collect_swimlane")
    assert "repeat 1/1" in " | ".join(m for _, _, _, m in collect.seen)  # SIM: one repeat
    # the seconds go up in the message, the last output line follows them
    assert any(" s · " in m for _, _, _, m in precision.seen + collect.seen)


# ---------------------------------------------------------------------------------------------- R5 on 2026-07-28
@pytest.fixture
def failing_ws(tmp_path: Path) -> Iterator[Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "bad_op.py").write_text(FAILING_OP)
    yield ws


def test_a_person_answers_r5_through_input_required_on_a_2026_connection(failing_ws: Path, http_port: int) -> None:
    """The 2026-07-28 wire has no server-to-client requests: the call answers InputRequiredResult with the question,
    the client shows it and calls again with the answer; it is recorded as the person's, and only an accepted retry
    runs the baseline again — over stdio and over HTTP. A client that cannot show a form is told the terminal
    command; the agent's own confirm_retry and answers the server never asked for change nothing."""
    asked: list[str] = []
    answers = iter([False, True])

    async def person(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        if next(answers):
            return types.ElicitResult(action="accept", content={"retry": True})
        return types.ElicitResult(action="decline")

    async def person_http(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"retry": True})

    async def scenario() -> None:
        async with Client(server_params(failing_ws), mode="auto") as client:  # declares no elicitation
            assert client.protocol_version == "2026-07-28"
            s = Session(client)
            sid = (await s.ok("start_session", workspace=str(failing_ws), operator_files=["bad_op.py"],
                              test_command=[sys.executable, "bad_op.py"], run_mode="sim",
                              goal_speedup=2.0))["session_id"]
            for _ in range(3):
                await s.ok("run_precision_check", session_id=sid)
            text = await s.refused("run_precision_check", session_id=sid)
            assert "GATE baseline-retry:" in text and "pypto-tune confirm --workspace" in text
            text = await s.refused("run_precision_check", session_id=sid, confirm_retry=True)
            assert "not that person's answer" in text  # the agent's own say-so never counts
        async with Client(server_params(failing_ws), mode="auto", elicitation_callback=person) as client:
            s = Session(client)
            # an answer nobody was asked for (no sealed state of ours) is ignored: the question is asked anyway
            forged = {"r5-retry": types.ElicitResult(action="accept", content={"retry": True})}
            res = await client.call_tool("run_precision_check", {"session_id": sid}, input_responses=forged)
            declined = "".join(b.text for b in res.content)
            assert res.is_error and "GATE baseline-retry:" in declined and len(asked) == 1, declined
            assert "failed 3 times" in asked[0] and "Retry the baseline precision check once more?" in asked[0]
            again = await s.ok("run_precision_check", session_id=sid)
            assert len(asked) == 2 and again["verdict"] == "failed" and again["attempts_left"] == 2
            ledger = json.loads((await client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text)
            confirmations = [(c["kind"], c["source"]) for c in ledger["tables"]["confirmations"]]
            assert confirmations == [("declined", "elicitation"), ("baseline-retry", "elicitation")], confirmations
        # over HTTP (stateless 2026-07-28 requests: the sealed state must survive between two POSTs)
        async with Client(f"http://127.0.0.1:{http_port}/mcp", elicitation_callback=person_http) as client:
            s = Session(client)
            await s.ok("start_session", workspace=str(failing_ws), operator_files=["bad_op.py"],
                       test_command=[sys.executable, "bad_op.py"], run_mode="sim", goal_speedup=2.0)
            before = len(asked)
            for _ in range(4):  # the attempts the last answer allowed, then the question again
                await s.ok("run_precision_check", session_id=sid)
                if len(asked) > before:
                    break
            assert len(asked) == before + 1, "the question was not asked over HTTP"
            ledger = json.loads((await client.read_resource(f"pypto-tune://sessions/{sid}/ledger"))
                                .contents[0].text)
            assert [c["source"] for c in ledger["tables"]["confirmations"]] == ["elicitation"] * 3

    anyio.run(scenario)
