"""Gates: which call the rules allow in a given state, and the refusal (with rule id) when they do not.

Pure functions of ``SessionState``; ``tools/service.py`` calls ``check`` before doing anything and records refusals.
"""

from __future__ import annotations

import time
from typing import Any

from pypto_tune.tools.session import rules
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.session.state import SessionState

READ_ONLY = {"get_status", "list_knobs", "analyze_bubbles"}  # propose_candidates: read-only, but stage-gated
DRIFT_ALLOWED = ["revert_patch", "run_precision_check(adopt_drift=true)", "get_status", "list_knobs"]


def _refuse(rule: str, message: str, st: SessionState, hint: str = "") -> GateRefusal:
    return GateRefusal(rule, message, allowed=allowed_actions(st), hint=hint)


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


def check(tool: str, st: SessionState, *, drift: str = "", **kw: Any) -> None:
    """Raise the first GateRefusal that applies to ``tool`` in ``st``.

    ``drift`` describes how the workspace differs from the recorded state ('' = it does not).
    """
    if tool in READ_ONLY:
        if tool == "analyze_bubbles" and st.open_round is not None and not has_pass(st):
            raise _refuse("precision-first", "the open round's code has no passing precision record yet", st,
                          "run_precision_check first")
        return
    if tool == "render_report":
        if not st.finished:
            raise _refuse("report-end", f"the session is still tuning ({st.level1}/{st.stage}); the final report "
                          "comes after termination", st, "reach an exit condition, or stop_session(reason) when the "
                          "user asks to stop; get_status shows the live board")
        if drift:
            raise _refuse("drift", f"the workspace changed outside the server ({drift}); restoring the debug "
                          "options now could overwrite that edit", st,
                          "undo the external edit (or copy it away), then retry")
        return
    if st.finished:
        raise _refuse("finished", f"the session has terminated ({st.finish_reason or st.level1}); only reporting "
                      "is allowed", st, "call render_report")
    if drift:
        adopting = tool == "run_precision_check" and kw.get("adopt_drift")
        if not adopting and tool != "revert_patch":
            raise GateRefusal(
                "drift", f"the workspace differs from the state the server recorded ({drift}): an edit made behind "
                "its back, or an interrupted write; tuning is blocked", allowed=DRIFT_ALLOWED,
                hint="revert_patch restores every recorded file byte-for-byte (files added since are moved to "
                ".pypto-tune/quarantine/); during tuning, run_precision_check(adopt_drift=true) adopts an edit of "
                "the operator files that is exactly one legal knob change, as a manual round")
        if adopting and st.open_round is not None:
            raise _refuse("round-open", "cannot adopt an external edit while a round is open", st,
                          "revert_patch first (it also undoes the external edit)")
        return

    if tool == "run_precision_check":
        if st.awaiting_user and kw.get("confirm_retry"):
            raise GateRefusal(
                "confirmation", f"the baseline precision check failed {st.baseline_failures} times and a person must "
                "decide whether to retry (R5); confirm_retry=true from the agent is not that person's answer",
                allowed=["get_status", "stop_session"],
                hint="ask the user: in a client with elicitation the server asks them when you call "
                "run_precision_check; otherwise they type "
                f"`pypto-tune confirm --workspace {st.session['workspace']}` in a terminal (never run it yourself)")
        if st.awaiting_user:
            raise GateRefusal(
                "baseline-retry", f"the baseline precision check failed {st.baseline_failures} times; the operator "
                "must not be fixed by the tuner and a person must decide whether to retry (R5). An agent's own "
                "confirm_retry=true is not that person's answer",
                allowed=["get_status", "stop_session"],
                hint="ask the user: in a client with elicitation the server asks them on this call; otherwise they "
                f"type `pypto-tune confirm --workspace {st.session['workspace']}` in a terminal, then call "
                "run_precision_check again")
        return

    if tool == "enable_runtime_debug":
        if st.open_round is not None:
            raise _refuse("round-open", "the debug switch cannot change while a round is open", st,
                          "finish the round first (record_round or revert_patch)")
        if not has_pass(st):
            raise _refuse("precision-first", "no passing precision record for the current code hash "
                          f"{st.current_hash[:12]}", st, "run_precision_check first")
        return

    if tool == "collect_swimlane":
        if st.level1 == "S1_SETUP" or not has_pass(st):
            rule = "verify-after-change" if st.open_round is not None else "precision-first"
            raise _refuse(rule, "no passing precision record for the current code hash "
                          f"{st.current_hash[:12]}; measuring unverified code is not allowed", st,
                          "run_precision_check first")
        if not st.debug_enabled:
            raise _refuse("debug-mode", "measurements need runtime_debug_mode 1 on every jit (R2/R7)", st,
                          "call enable_runtime_debug")
        if st.level1 == "S3_ANALYZE":
            raise _refuse("sequence", "the baseline is collected; analyse it before anything else", st,
                          "call analyze_bubbles")
        if round_phase(st) == "RECORD":
            raise _refuse("measure-once", f"round {st.open_round.number} is already measured (code hash "
                          f"{st.current_hash[:12]}); another measurement of the same code would let the number be "
                          "re-rolled", st, "record_round judges it, or revert_patch rolls it back")
        return

    if tool == "apply_tuning_patch":
        if st.level1 != "S4_TUNE":
            raise _refuse("sequence", f"tuning starts after setup, baseline collection and analysis (now "
                          f"{st.level1})", st)
        if time_limit_exceeded(st):
            raise _refuse("finished", f"the tuning time limit of {st.session['time_limit_h']} h is exceeded", st,
                          "stop_session('time limit') then render_report")
        phase = round_phase(st)
        if st.open_round is not None:
            if phase == "VERIFY_FAILED" and st.open_round.corrections == 0:
                pass  # R11: one quick correction of the same knob
            elif phase == "VERIFY_FAILED":
                raise _refuse("correction-limit", f"round {st.open_round.number} already used its one correction",
                              st, "record_round (it rolls back and records the failure) or revert_patch")
            else:
                raise _refuse("round-open", f"round {st.open_round.number} is open (step {phase})", st,
                              "finish it: " + ", ".join(allowed_actions(st)))
        elif not has_pass(st):
            raise _refuse("precision-first", "the current code has no passing precision record", st,
                          "run_precision_check first")
        if not (st.stage_measured and st.stage_analyzed):
            raise _refuse("stage-analysis", f"{st.stage} needs its own fresh collection and analysis before the "
                          "first change (R15/R16)", st, "collect_swimlane, then analyze_bubbles")
        cid = str(kw.get("catalog_id") or "")
        stage = rules.STAGES_BY_NAME[st.stage]  # type: ignore[index]
        algorithm = bool(kw.get("algorithm"))
        if stage.group == "algorithm":
            if not algorithm:
                raise _refuse("algorithm", "in the ALGORITHM stage every round is a declared algorithm change", st,
                              "pass algorithm=true with one catalogue id")
        else:
            if algorithm:
                raise _refuse("algorithm", "algorithm-level changes come only after the configuration stages "
                              "converged without reaching the target (R23)", st,
                              "change one knob, or finish the configuration stages first")
            if not cid.startswith(stage.catalog_prefix):
                raise _refuse("catalog-stage", f"catalogue id {cid!r} does not belong to stage {st.stage} "
                              f"(expects {stage.catalog_prefix}*)", st,
                              "read pypto-tune://catalog and pick an id of the current stage")
        from pypto_tune.tools.analysis import load_catalog

        if stage.group != "algorithm" and cid not in {i.id for i in load_catalog().items}:
            raise _refuse("catalog-stage", f"unknown catalogue id {cid!r}", st, "see pypto-tune://catalog")
        return

    if tool in ("run_candidates", "propose_candidates"):
        # a batch of candidate trials is a set of rounds: everything apply_tuning_patch needs, and no open round
        if st.level1 != "S4_TUNE" or st.stage is None:
            raise _refuse("sequence", f"candidate search belongs to the tuning stages (now {st.level1})", st)
        if rules.STAGES_BY_NAME[st.stage].group == "algorithm":
            raise _refuse("algorithm", "the ALGORITHM stage takes declared algorithm-level changes, not knob "
                          "candidates", st, "apply_tuning_patch(algorithm=true, ...)")
        if not (st.stage_measured and st.stage_analyzed):
            raise _refuse("stage-analysis", f"{st.stage} needs its own fresh collection and analysis before the "
                          "first change (R15/R16)", st, "collect_swimlane, then analyze_bubbles")
        if tool == "propose_candidates":
            return
        if st.open_round is not None:
            raise _refuse("round-open", f"round {st.open_round.number} is open", st,
                          "finish it first: " + ", ".join(allowed_actions(st)))
        if time_limit_exceeded(st):
            raise _refuse("finished", f"the tuning time limit of {st.session['time_limit_h']} h is exceeded", st,
                          "stop_session('time limit') then render_report")
        if not has_pass(st):
            raise _refuse("precision-first", "the current code has no passing precision record", st,
                          "run_precision_check first")
        return

    if tool == "revert_patch":
        if st.open_round is None:
            raise _refuse("no-round", "there is no open round to revert (and no external edit to undo)", st)
        return

    if tool == "record_round":
        if st.open_round is None:
            raise _refuse("no-round", "there is no open round to record", st, "apply_tuning_patch opens a round")
        phase = round_phase(st)
        if phase == "VERIFY":
            raise _refuse("verify-after-change", f"round {st.open_round.number}'s code has not been verified",
                          st, "run_precision_check")
        if phase == "MEASURE":
            raise _refuse("measure-first", f"round {st.open_round.number} passed precision but was not measured; "
                          "the server decides keep/revert from its own measurement", st, "collect_swimlane")
        return

    if tool in ("mark_checklist", "advance_stage"):
        if st.level1 != "S4_TUNE" or st.stage is None:
            raise _refuse("sequence", "the checklist belongs to a tuning stage", st)
        if tool == "advance_stage" and st.open_round is not None:
            raise _refuse("round-open", f"round {st.open_round.number} is open", st, "finish it first")
        if tool == "mark_checklist":
            stage = rules.STAGES_BY_NAME[st.stage]
            cid = str(kw.get("catalog_id") or "")
            if not cid.startswith(stage.catalog_prefix):
                raise _refuse("catalog-stage", f"{cid!r} is not an item of {st.stage}'s checklist", st)
        return

    if tool == "stop_session":
        return
    raise _refuse("sequence", f"unknown operation {tool}", st)


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
        if (util is not None and bubble is not None and platform is not None and util > rules.GLOBAL_UTIL_PCT
                and platform > rules.GLOBAL_UTIL_PCT and bubble < rules.GLOBAL_BUBBLE_PCT):
            return (f"theoretical limit: utilisation {platform:.1f} % of the platform's cores of the types the kernel "
                    f"uses and {util:.1f} % of its active cores (> {rules.GLOBAL_UTIL_PCT:g} %), bubble {bubble:.1f} % "
                    f"< {rules.GLOBAL_BUBBLE_PCT:g} %")
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
    if st.stage == rules.ALGORITHM_STAGE.name:
        return ["apply_tuning_patch(algorithm=true)", "list_knobs", "analyze_bubbles", "stop_session", "get_status"]
    return ["propose_candidates", "run_candidates", "apply_tuning_patch", "list_knobs", "analyze_bubbles",
            "mark_checklist", "advance_stage", "stop_session", "get_status"]
