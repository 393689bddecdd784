"""The gates: which call the rules allow in a given state, and the refusal (with rule id) when they do not.

``check`` walks a table — per call, the rows in the order they are tried: rule id, when it applies, the message, the
hint, and (unless the row says otherwise) the calls the rules allow now. Pure functions of ``SessionState``;
``tools/operations`` calls ``check`` before doing anything and records the refusal. The state's derived facts the
rows read (``has_pass``, ``round_phase``, ``time_limit_exceeded``, ``allowed_actions``) live here too, and so do the
refusals of the same rule ids that a call decides later (``invalid_measurement``, ``nothing_to_analyse`` …).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.rules import change
from pypto_tune.tools.rules import drift as drift_rule
from pypto_tune.tools.rules.drift import DRIFT_ALLOWED
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.session.state import SessionState

READ_ONLY = {"get_status", "list_knobs", "analyze_bubbles"}  # propose_candidates: read-only, but stage-gated

__all__ = ["DRIFT_ALLOWED", "READ_ONLY", "allowed_actions", "check", "global_stop_reason", "has_pass",
           "platform_utilization", "round_phase", "stage_summary", "time_limit_exceeded"]


def has_pass(st: SessionState, code_hash: str | None = None) -> bool:
    return (code_hash or st.current_hash) in st.passed_hashes


def round_phase(st: SessionState) -> str:
    """Level-3 step of the open round: VERIFY, VERIFY_FAILED, MEASURE, RECORD."""
    r = st.open_round
    if r is None:
        return "START"
    prec = [p for p in r.precision if p["code_hash"] == st.current_hash]
    if not prec:
        return "VERIFY"
    if prec[-1]["verdict"] != "passed":
        return "VERIFY_FAILED"
    if not any(m["code_hash"] == st.current_hash for m in r.measurements):
        return "MEASURE"
    return "RECORD"


def time_limit_exceeded(st: SessionState) -> bool:
    started = float(st.session["config"].get("started_epoch", time.time()))
    return time.time() - started > float(st.session["time_limit_h"]) * 3600.0


# ------------------------------------------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Call:
    """What a row may read besides the state: the call, its arguments, and the workspace's drift ('' = none)."""

    tool: str
    drift: str
    kw: dict[str, Any]

    @property
    def adopting(self) -> bool:
        return self.tool == "run_precision_check" and bool(self.kw.get("adopt_drift"))

    @property
    def catalog_id(self) -> str:
        return str(self.kw.get("catalog_id") or "")


When = Callable[[SessionState, Call], bool]
Text = Callable[[SessionState, Call], str]


@dataclass(frozen=True)
class Gate:
    """One row: when ``applies``, the call is refused with ``refusal`` (the first row that applies wins)."""

    applies: When
    refusal: Callable[[SessionState, Call], GateRefusal]


def gate(rule: str, applies: When, message: Text | str, hint: Text | str = "") -> Gate:
    """A row refused with ``rule``, the message, the hint and the calls the rules allow now."""
    def refusal(st: SessionState, c: Call) -> GateRefusal:
        text = message(st, c) if callable(message) else message
        why = hint(st, c) if callable(hint) else hint
        return GateRefusal(rule, text, allowed=allowed_actions(st), hint=why)
    return Gate(applies, refusal)


def _stage(st: SessionState) -> tuning_loop.StageDef:
    return tuning_loop.STAGES_BY_NAME[st.stage]  # type: ignore[index]


def _in_algorithm_stage(st: SessionState) -> bool:
    return _stage(st).group == "algorithm"


def _known_catalog_ids() -> set[str]:
    from pypto_tune.tools.analysis import load_catalog

    return {i.id for i in load_catalog().items}


def _round_no(st: SessionState) -> int:
    return st.open_round.number  # type: ignore[union-attr]  # read only by rows whose round is open


def _unverified(st: SessionState, c: Call) -> bool:
    return st.level1 == "S1_SETUP" or not has_pass(st)


def _no_pass_for_hash(st: SessionState, c: Call) -> str:
    return f"no passing precision record for the current code hash {st.current_hash[:12]}"


_TIME_LIMIT = gate("finished", lambda st, c: time_limit_exceeded(st),
                   lambda st, c: f"the tuning time limit of {st.session['time_limit_h']} h is exceeded",
                   "stop_session('time limit') then render_report")
_NO_PASS = gate("precision-first", lambda st, c: not has_pass(st), "the current code has no passing precision record",
                "run_precision_check first")
_NOT_ANALYSED = gate("stage-analysis", lambda st, c: not (st.stage_measured and st.stage_analyzed),
                     lambda st, c: f"{st.stage} needs its own fresh collection and analysis before the first change "
                     "(R15/R16)", "collect_swimlane, then analyze_bubbles")
_NOT_TUNING = gate("sequence", lambda st, c: st.level1 != "S4_TUNE" or st.stage is None,
                   "the checklist belongs to a tuning stage")

#: every call but the read-only ones and render_report: a finished session only reports
FINISHED = (gate("finished", lambda st, c: st.finished,
                 lambda st, c: f"the session has terminated ({st.finish_reason or st.level1}); only reporting is "
                 "allowed", "call render_report"),)

#: while the workspace drifts these rows replace the call's own ones
DRIFTING = (
    Gate(lambda st, c: drift_rule.blocks(c.tool, c.adopting), lambda st, c: drift_rule.external_edit(c.drift)),
    gate("round-open", lambda st, c: c.adopting and st.open_round is not None,
         "cannot adopt an external edit while a round is open",
         "revert_patch first (it also undoes the external edit)"),
)

#: the call's own rows, tried in this order
GATES: dict[str, tuple[Gate, ...]] = {
    "get_status": (),
    "list_knobs": (),
    "analyze_bubbles": (
        gate("precision-first", lambda st, c: st.open_round is not None and not has_pass(st),
             "the open round's code has no passing precision record yet", "run_precision_check first"),
    ),
    "render_report": (
        gate("report-end", lambda st, c: not st.finished,
             lambda st, c: f"the session is still tuning ({st.level1}/{st.stage}); the final report comes after "
             "termination", "reach an exit condition, or stop_session(reason) when the user asks to stop; get_status "
             "shows the live board"),
        Gate(lambda st, c: bool(c.drift), lambda st, c: drift_rule.report_over_edit(c.drift, allowed_actions(st))),
    ),
    "run_precision_check": (
        Gate(lambda st, c: st.awaiting_user and bool(c.kw.get("confirm_retry")), lambda st, c: GateRefusal(
            "confirmation", f"the baseline precision check failed {st.baseline_failures} times and a person must "
            "decide whether to retry (R5); confirm_retry=true from the agent is not that person's answer",
            allowed=["get_status", "stop_session"],
            hint="ask the user: in a client with elicitation the server asks them when you call "
            "run_precision_check; otherwise they type "
            f"`pypto-tune confirm --workspace {st.session['workspace']}` in a terminal (never run it yourself)")),
        Gate(lambda st, c: bool(st.awaiting_user), lambda st, c: GateRefusal(
            "baseline-retry", f"the baseline precision check failed {st.baseline_failures} times; the operator "
            "must not be fixed by the tuner and a person must decide whether to retry (R5). An agent's own "
            "confirm_retry=true is not that person's answer",
            allowed=["get_status", "stop_session"],
            hint="ask the user: in a client with elicitation the server asks them on this call; otherwise they "
            f"type `pypto-tune confirm --workspace {st.session['workspace']}` in a terminal, then call "
            "run_precision_check again")),
    ),
    "enable_runtime_debug": (
        gate("round-open", lambda st, c: st.open_round is not None,
             "the debug switch cannot change while a round is open",
             "finish the round first (record_round or revert_patch)"),
        gate("precision-first", lambda st, c: not has_pass(st), _no_pass_for_hash, "run_precision_check first"),
    ),
    "collect_swimlane": (
        gate("verify-after-change", lambda st, c: _unverified(st, c) and st.open_round is not None,
             lambda st, c: _no_pass_for_hash(st, c) + "; measuring unverified code is not allowed",
             "run_precision_check first"),
        gate("precision-first", _unverified,
             lambda st, c: _no_pass_for_hash(st, c) + "; measuring unverified code is not allowed",
             "run_precision_check first"),
        gate("debug-mode", lambda st, c: not st.debug_enabled,
             "measurements need runtime_debug_mode 1 on every jit (R2/R7)", "call enable_runtime_debug"),
        gate("sequence", lambda st, c: st.level1 == "S3_ANALYZE", "the baseline is collected; analyse it before "
             "anything else", "call analyze_bubbles"),
        gate("measure-once", lambda st, c: round_phase(st) == "RECORD",
             lambda st, c: f"round {_round_no(st)} is already measured (code hash {st.current_hash[:12]}); "
             "another measurement of the same code would let the number be re-rolled",
             "record_round judges it, or revert_patch rolls it back"),
    ),
    "apply_tuning_patch": (
        gate("sequence", lambda st, c: st.level1 != "S4_TUNE",
             lambda st, c: f"tuning starts after setup, baseline collection and analysis (now {st.level1})"),
        _TIME_LIMIT,
        # R11: a failed verification allows one quick correction of the same knob
        Gate(lambda st, c: round_phase(st) == "VERIFY_FAILED" and st.open_round.corrections != 0,  # type: ignore
             lambda st, c: change.correction_limit(
                 f"round {_round_no(st)} already used its one correction",
                 "record_round (it rolls back and records the failure) or revert_patch", allowed_actions(st))),
        gate("round-open", lambda st, c: st.open_round is not None and round_phase(st) != "VERIFY_FAILED",
             lambda st, c: f"round {_round_no(st)} is open (step {round_phase(st)})",
             lambda st, c: "finish it: " + ", ".join(allowed_actions(st))),
        gate("precision-first", lambda st, c: st.open_round is None and not has_pass(st),
             "the current code has no passing precision record", "run_precision_check first"),
        _NOT_ANALYSED,
        Gate(lambda st, c: _in_algorithm_stage(st) and not c.kw.get("algorithm"), lambda st, c: change.algorithm(
            "in the ALGORITHM stage every round is a declared algorithm change",
            "pass algorithm=true with one catalogue id", allowed_actions(st))),
        Gate(lambda st, c: not _in_algorithm_stage(st) and bool(c.kw.get("algorithm")), lambda st, c: change.algorithm(
            "algorithm-level changes come only after the configuration stages converged without reaching the target "
            "(R23)", "change one knob, or finish the configuration stages first", allowed_actions(st))),
        Gate(lambda st, c: not _in_algorithm_stage(st) and not c.catalog_id.startswith(_stage(st).catalog_prefix),
             lambda st, c: change.catalog_stage(
                 f"catalogue id {c.catalog_id!r} does not belong to stage {st.stage} (expects "
                 f"{_stage(st).catalog_prefix}*)", "read pypto-tune://catalog and pick an id of the current stage",
                 allowed_actions(st))),
        Gate(lambda st, c: not _in_algorithm_stage(st) and c.catalog_id not in _known_catalog_ids(),
             lambda st, c: change.catalog_stage(f"unknown catalogue id {c.catalog_id!r}", "see pypto-tune://catalog",
                                                allowed_actions(st))),
    ),
    # a batch of candidate trials is a set of rounds: everything apply_tuning_patch needs, and no open round
    "propose_candidates": (
        gate("sequence", lambda st, c: st.level1 != "S4_TUNE" or st.stage is None,
             lambda st, c: f"candidate search belongs to the tuning stages (now {st.level1})"),
        Gate(lambda st, c: _in_algorithm_stage(st), lambda st, c: change.algorithm(
            "the ALGORITHM stage takes declared algorithm-level changes, not knob candidates",
            "apply_tuning_patch(algorithm=true, ...)", allowed_actions(st))),
        _NOT_ANALYSED,
    ),
    "revert_patch": (
        gate("no-round", lambda st, c: st.open_round is None,
             "there is no open round to revert (and no external edit to undo)"),
    ),
    "record_round": (
        gate("no-round", lambda st, c: st.open_round is None, "there is no open round to record",
             "apply_tuning_patch opens a round"),
        gate("verify-after-change", lambda st, c: round_phase(st) == "VERIFY",
             lambda st, c: f"round {_round_no(st)}'s code has not been verified",
             "run_precision_check"),
        gate("measure-first", lambda st, c: round_phase(st) == "MEASURE",
             lambda st, c: f"round {_round_no(st)} passed precision but was not measured; the server decides "
             "keep/revert from its own measurement", "collect_swimlane"),
    ),
    "mark_checklist": (
        _NOT_TUNING,
        Gate(lambda st, c: not c.catalog_id.startswith(_stage(st).catalog_prefix),
             lambda st, c: change.catalog_stage(f"{c.catalog_id!r} is not an item of {st.stage}'s checklist", "",
                                                allowed_actions(st))),
    ),
    "advance_stage": (
        _NOT_TUNING,
        gate("round-open", lambda st, c: st.open_round is not None,
             lambda st, c: f"round {_round_no(st)} is open", "finish it first"),
    ),
    "stop_session": (),
}
GATES["run_candidates"] = GATES["propose_candidates"] + (
    gate("round-open", lambda st, c: st.open_round is not None,
         lambda st, c: f"round {_round_no(st)} is open",
         lambda st, c: "finish it first: " + ", ".join(allowed_actions(st))),
    _TIME_LIMIT,
    _NO_PASS,
)


def _unknown(tool: str) -> tuple[Gate, ...]:
    return (gate("sequence", lambda st, c: True, f"unknown operation {tool}"),)


def rows_for(tool: str, drift: str) -> tuple[Gate, ...]:
    """The rows ``check`` tries for ``tool``, in order."""
    if tool in READ_ONLY or tool == "render_report":
        return GATES[tool]
    return FINISHED + (DRIFTING if drift else GATES[tool] if tool in GATES else _unknown(tool))


def check(tool: str, st: SessionState, *, drift: str = "", **kw: Any) -> None:
    """Raise the refusal of the first row that applies to ``tool`` in ``st``.

    ``drift`` describes how the workspace differs from the recorded state ('' = it does not).
    """
    call = Call(tool, drift, kw)
    for row in rows_for(tool, drift):
        if row.applies(st, call):
            raise row.refusal(st, call)


# ------------------------------------------------------------------- the same rules, decided later in a call


def invalid_measurement(message: str, allowed: list[str]) -> GateRefusal:
    """A baseline or stage-entry collection gave no valid measurement: nothing may be decided from it."""
    return GateRefusal("measure-first", message, allowed=allowed,
                       hint="fix the cause (the source was not changed by this call) and collect again")


def nothing_to_analyse(allowed: list[str]) -> GateRefusal:
    return GateRefusal("sequence", "there is no valid measurement of the kept state to analyse yet", allowed=allowed,
                       hint="collect_swimlane first")


def stage_not_measured(stage: str, allowed: list[str]) -> GateRefusal:
    return GateRefusal("stage-analysis", f"{stage} has no entry collection and analysis yet; a stage is left only "
                       "after it was measured (R15/R16)", allowed=allowed,
                       hint="collect_swimlane, then analyze_bubbles")


def discarded_run(round_no: int, discarded: str, next_step: str) -> GateRefusal:
    """The server threw the round's run away for its own reasons: judging it "failed" would charge the change (R19)."""
    return GateRefusal("discarded-run", f"round {round_no} cannot be judged: {discarded}",
                       allowed=["run_precision_check", "collect_swimlane", "revert_patch", "get_status"],
                       hint=f"{next_step}; or revert_patch rolls the round back without charging the change (it stays "
                       "proposable)")


def global_stop_reason(st: SessionState) -> str:
    """R14b, evaluated at every JUDGE: target, utilisation+bubble on active cores (E.2), time limit."""
    if st.kept_us is not None and st.target_us is not None and st.kept_us <= st.target_us:
        return f"target reached ({st.kept_us:.3f} µs ≤ {st.target_us:.3f} µs)"
    m = st.last_valid_measurement(st.kept_hash)
    if m is not None:
        a = m["analysis"]
        util, bubble = a.get("active_core_utilization_pct"), a.get("active_bubble_rate_pct")
        platform = platform_utilization(a)
        # "At its limit" means the cores the kernel COULD use are busy: a kernel on 1 of 48 vector cores at 100 %
        # is not at a limit (issue #12: layer_norm sessions ended after one round). Both figures must hold.
        if (util is not None and bubble is not None and platform is not None and util > tuning_loop.GLOBAL_UTIL_PCT
                and platform > tuning_loop.GLOBAL_UTIL_PCT and bubble < tuning_loop.GLOBAL_BUBBLE_PCT):
            return (f"theoretical limit: utilisation {platform:.1f} % of the platform's cores of the types the kernel "
                    f"uses and {util:.1f} % of its active cores (> {tuning_loop.GLOBAL_UTIL_PCT:g} %), bubble {bubble:.1f} % "
                    f"< {tuning_loop.GLOBAL_BUBBLE_PCT:g} %")
    if time_limit_exceeded(st):
        return f"time limit of {st.session['time_limit_h']} h reached"
    return ""


def platform_utilization(analysis: dict[str, Any]) -> float | None:
    """Busy time of the kernel's cores over (the platform's cores of the types it uses × the operator time), in %.

    The platform's count per type is the larger of the lanes listed (SIM lists idle cores too) and the theoretical
    count the core-usage analysis found (device properties on the NPU). None without the data.
    """
    cores = analysis.get("cores") or []
    op_time = analysis.get("operator_time_us") or 0.0
    used = {c.get("core_type") for c in cores if c.get("active")}
    if not used or op_time <= 0:
        return None
    listed = {t: sum(1 for c in cores if c.get("core_type") == t) for t in used}
    theory: dict[str, int] = {}
    for row in (analysis.get("core_usage") or {}).get("rows", []):
        t = row.get("core_type")
        if t in used:
            theory[t] = max(theory.get(t, 0), int(row.get("theoretical_cores") or 0))
    n = sum(max(listed[t], theory.get(t, 0)) for t in used)
    busy = sum(float(c.get("busy_us") or 0.0) for c in cores if c.get("core_type") in used and c.get("active"))
    return 100.0 * busy / (n * op_time) if n else None


def stage_summary(st: SessionState) -> dict[str, Any]:
    """R19 hand-off summary, generated from server state instead of trusting the agent."""
    c = st.counters.get(st.stage or "")
    stage_rounds = [r for r in st.rounds if r["stage"] == st.stage]
    kept = [r for r in stage_rounds if st.decisions.get(int(r["number"]), {}).get("decision") == "kept"]
    failed = [r for r in stage_rounds if st.decisions.get(int(r["number"]), {}).get("decision") == "failed"]
    reached = bool(st.kept_us is not None and st.target_us is not None and st.kept_us <= st.target_us)
    return {
        "stage": st.stage, "rounds": c.rounds if c else 0, "consecutive_no_gain": c.consecutive_no_gain if c else 0,
        "failures": c.failures if c else 0, "baseline_us": st.baseline_us, "best_us": st.kept_us,
        "target_us": st.target_us, "reached": reached,
        "kept": [{"round": r["number"], "catalog_id": r["catalog_id"], "change": r["change"]} for r in kept],
        "failed": [{"round": r["number"], "catalog_id": r["catalog_id"], "change": r["change"]} for r in failed],
    }


def allowed_actions(st: SessionState) -> list[str]:
    """The calls the rules allow now (every result and refusal ends with these)."""
    if st.finished:
        return ["render_report", "get_status"]
    if st.level1 == "S1_SETUP":
        if st.awaiting_user:
            return ["ask the user (pypto-tune confirm, or the client's elicitation)", "get_status", "stop_session"]
        return ["run_precision_check", "get_status"]
    if st.level1 == "S2_COLLECT":
        return (["collect_swimlane"] if st.debug_enabled else ["enable_runtime_debug"]) + ["get_status"]
    if st.level1 == "S3_ANALYZE":
        return ["analyze_bubbles", "get_status"]
    phase = round_phase(st)
    if phase == "VERIFY":
        return ["run_precision_check", "revert_patch", "get_status"]
    if phase == "VERIFY_FAILED":
        first = ["apply_tuning_patch (one correction of the same knob)"] if st.open_round and \
            st.open_round.corrections == 0 else []
        return first + ["record_round", "revert_patch", "get_status"]
    if phase == "MEASURE":
        return ["collect_swimlane", "revert_patch", "get_status"]
    if phase == "RECORD":
        return ["record_round", "analyze_bubbles", "revert_patch", "get_status"]
    if not st.stage_measured:
        return ["collect_swimlane", "get_status"]
    if not st.stage_analyzed:
        return ["analyze_bubbles", "get_status"]
    if st.stage == tuning_loop.ALGORITHM_STAGE.name:
        return ["apply_tuning_patch(algorithm=true)", "list_knobs", "analyze_bubbles", "stop_session", "get_status"]
    return ["propose_candidates", "run_candidates", "apply_tuning_patch", "list_knobs", "analyze_bubbles",
            "mark_checklist", "advance_stage", "stop_session", "get_status"]
