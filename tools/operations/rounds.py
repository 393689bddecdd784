"""Rounds: a change is admitted, verified, measured and judged; kept or rolled back byte for byte."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pypto_tune.tools.session.discarded import discarded_run_ids, invalid_next_step
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.rules import change as change_rules, gates
from pypto_tune.tools.errors import InputError, KnobValueError
from pypto_tune.tools.patching import (
    extract_knobs,
    plan_diff_edit,
    plan_knob_edit,
)
from pypto_tune.tools.operations.results import (
    PatchResult,
    RecordResult,
    RevertResult,
)
from pypto_tune.tools.session.state import SessionState

from pypto_tune.tools.operations.base import (
    exclusive, Handle, SessionContext, describe_change, next_round, code_hash,
)
from pypto_tune.tools.operations.reporting import render_status_board

if TYPE_CHECKING:
    from pypto_tune.tools.operations.reporting import ReportOps
    from pypto_tune.tools.operations.stages import StageControl

log = logging.getLogger("pypto_tune.service")


class RoundOps:
    """apply_tuning_patch, revert_patch, record_round; closing a round (also stop_session's). A decided round is
    judged by ``stages`` (the JUDGE step); the status board of record_round comes from ``reports``."""

    def __init__(self, ctx: SessionContext, *, stages: StageControl, reports: ReportOps) -> None:
        self.ctx = ctx
        self.stages = stages
        self.reports = reports

    @exclusive
    def apply_tuning_patch(self, session_id: str, *, catalog_id: str, rationale: str, knob: str | None = None,
                           value: Any = None, target: str | None = None, diff: str | None = None,
                           algorithm: bool = False) -> PatchResult:
        """Change exactly one knob (structured ``knob``+``value``, or a unified ``diff``) and open a round.

        Both forms go through the one admission path (``tools/code/admission.py``): every differing syntax node must be
        one knob, the value must be legal on every site it reaches, and the change must not be one that already
        failed; nothing is written before that holds.
        """
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "apply_tuning_patch", catalog_id=catalog_id, algorithm=algorithm)
        if not rationale or not rationale.strip():
            raise InputError("rationale is required: say which analysis row or symptom led to this change (R10)",
                             hint="e.g. 'AIV util 12 %, tasks 0.9 µs: bigger vector tile (F-10)'")
        if (diff is None) == (knob is None):
            raise InputError("give either knob (+ value, optional target) or diff, not both/neither",
                             hint="list_knobs shows the knob ids")
        correction = st.open_round is not None
        base_sources = st.expected_sources
        try:
            if diff is not None:
                plan = plan_diff_edit(base_sources, diff)
            else:
                plan = plan_knob_edit(base_sources, knob, value, target, context=self.ctx.context_files(h, st))
        except KnobValueError as exc:
            refusal = change_rules.illegal_value(str(exc.message), exc.hint)
            raise self.ctx.refuse(h, st.id, "apply_tuning_patch", refusal) from None
        if plan.new_sources == base_sources:
            raise InputError("the patch changes nothing", hint="choose a different value; list_knobs shows current ones")
        # The one-change rule compares the candidate with the last KEPT state (E.1.2), not the failed attempt.
        reference = st.open_round.patches[0]["before_sources"] if correction else st.kept_sources
        first = st.open_round.patches[0]["knob_changes"] if correction else []
        adm = self.ctx.admit(h, st, "apply_tuning_patch", reference, plan.new_sources, catalog_id=catalog_id,
                          algorithm=algorithm, same_knobs=frozenset(c["knob_id"] for c in first) if first else None,
                          path="diff" if diff is not None else "knob")
        # a linked pair (rule linked-pair) is one change point: one round, one patch naming both knobs
        delta = list(adm.changes) if adm.kind == "pair" else [adm.change] if adm.change is not None else []
        kind = "algorithm" if adm.kind == "structural" else "config"
        new_hash = code_hash(plan.new_sources)
        self.ctx.write(h, st, plan.new_sources, "apply_tuning_patch")
        round_no = st.open_round.number if correction else next_round(st)
        with h.record(st.id).transaction() as rec:
            if not correction:
                rec.round_opened(number=round_no, stage=st.stage or "", outer_round=st.outer_round, kind=kind,
                                 catalog_id=catalog_id,
                                 change=describe_change(delta) if adm.kind in ("knob", "pair")
                                 else f"algorithm change ({catalog_id}): " + "; ".join(adm.structural_lines[:2]),
                                 rationale=rationale, before_hash=st.kept_hash, before_raw_hash=st.kept_raw_hash,
                                 before_us=st.kept_us)
            rec.patch(kind="correction" if correction else "tuning", round_no=round_no, before=base_sources,
                      after=plan.new_sources, note=rationale, catalog_id=catalog_id, diff=plan.diff, changes=delta)
        st2 = self.ctx.state(h, session_id)
        notes = []
        if adm.unchecked:
            notes.append("unchecked: " + "; ".join(adm.unchecked[:2]))
        if adm.formatting_files:
            notes.append("formatting-only differences in " + ", ".join(adm.formatting_files))
        if adm.shared_with:
            notes.append("shared site — this change also changes: " + ", ".join(adm.shared_with))
        return PatchResult(
            **self.ctx.result_base(st2, f"round {round_no}: {adm.describe()}; verify it with run_precision_check"
                         + (f" ({'; '.join(notes)})" if notes else "")),
            round=round_no, kind="correction" if correction else kind, knob_changes=delta, diff=plan.diff,
            code_hash=new_hash, legality_checked=adm.checked, legality_unchecked=adm.unchecked,
            ran_with=adm.ran_with, shared_with=adm.shared_with,
        )

    @exclusive
    def revert_patch(self, session_id: str, *, notes: str = "") -> RevertResult:
        """Roll the open round back to the last kept state byte-for-byte (or undo an external edit)."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "revert_patch")
        disk = self.ctx.disk_sources(h, st)
        if st.open_round is None:
            # Only reachable under drift (the gate refuses otherwise): restore every recorded file.
            restored = self.ctx.restore_tree(h, st)
            h.record(st.id).patch(kind="drift-revert", round_no=None, before=disk, after=st.expected_sources,
                                  note="external edit reverted" + (f" ({restored})" if restored else ""))
            st2 = self.ctx.state(h, session_id)
            kept = "; ".join(h.quarantined)
            h.quarantined.clear()
            return RevertResult(**self.ctx.result_base(st2, "external edit reverted; the recorded state is restored"
                                             + (f" ({restored})" if restored else "") + (f"; {kept}" if kept else "")),
                                round=None, restored_hash=st.current_hash)
        r = st.open_round
        measured = next((m for m in reversed(r.measurements) if m["code_hash"] == st.current_hash and m["valid"]),
                        None)
        after = delta = None
        if measured is not None and st.kept_us is not None:
            # Measured already: the server's numbers judge the round even when the agent rolls it back, so a bad
            # number cannot be hidden as "abandoned" and the change fished for again (R12/R19).
            j = tuning_loop.judge_measurement(st.kept_us, list(measured["samples"]), st.run_mode, st.kept_samples)
            after, delta = j.after_us, j.delta_pct
            decision, result_type, error = "reverted", ("abandoned" if j.result_type == "gain" else j.result_type), ""
        else:
            decision, result_type, error = _abandon_outcome(st)
        restored = self.close_round(h, st, disk, decision=decision, result_type=result_type, after_us=after,
                                     delta_pct=delta, error=error, notes=notes or "reverted by revert_patch",
                                     over_edit="quarantine")
        st2 = self.ctx.state(h, session_id)
        self.stages.judge(h, st2)
        st2 = self.ctx.state(h, session_id)
        kept = "; ".join(h.quarantined)
        h.quarantined.clear()
        return RevertResult(**self.ctx.result_base(st2, f"round {r.number} rolled back ({result_type}); "
                                         "source restored to the last kept state" + (f"; {kept}" if kept else "")),
                            round=r.number, restored_hash=restored, decision=decision)

    def close_round(self, h: Handle, st: SessionState, disk: dict[str, str], *, decision: str, result_type: str,
                     after_us: float | None, delta_pct: float | None, error: str, notes: str,
                     over_edit: str = "refuse") -> str:
        """Write the decision; when not kept, restore the kept sources (with the current debug state) first.
        ``over_edit``: see ``SessionContext.write`` (revert_patch keeps a copy of an unrecorded edit; record_round refuses)."""
        assert st.open_round is not None
        n = st.open_round.number
        restored_hash = st.current_hash
        target = st.kept_sources if decision != "kept" else None
        if target is not None:
            # before the transaction: the intent must be on record first
            self.ctx.write(h, st, target, "revert", over_edit=over_edit)
        with h.record(st.id).transaction() as rec:
            if target is not None:
                restored_hash = code_hash(target)
                rec.patch(kind="revert", round_no=n, before=disk, after=target,
                          note=f"round {n} rolled back ({result_type})")
            rec.round_decision(number=n, decision=decision, result_type=result_type, after_us=after_us,
                               delta_pct=delta_pct, error_output=error[-4000:], notes=notes,
                               restored_hash=restored_hash)
            cat = st.open_round.row["catalog_id"]
            group = tuning_loop.STAGES_BY_NAME.get(st.open_round.row["stage"])
            ran = bool(st.open_round.precision or st.open_round.measurements)
            # a round opened and rolled back without a single run tried nothing: its item stays untried, or
            # apply+revert per item would empty the checklist and let the stage be left with no run at all
            if group and group.group in ("frontend", "swimlane", "incore") and cat != "MANUAL" and ran:
                rec.checklist_mark(stage_group=group.group, stage=group.name, catalog_id=cat,
                                   status="tried" if decision != "failed" else "failed",
                                   reason=f"round {n}: {result_type}", round=n)
        return restored_hash

    @exclusive
    def record_round(self, session_id: str, *, notes: str = "", lang: str | None = None) -> RecordResult:
        """Judge the open round from the server's own measurement and keep or roll back (R12/R13/R14)."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "record_round")
        assert st.open_round is not None
        r = st.open_round
        disk = self.ctx.disk_sources(h, st)
        last_prec = r.precision[-1] if r.precision else None
        measurement = next((m for m in reversed(r.measurements) if m["code_hash"] == st.current_hash), None)
        discarded = _discarded_evidence(st)
        if discarded:
            # the server threw the run away for its own reasons: deciding "failed" would charge the change (R19)
            raise self.ctx.refuse(h, st.id, "record_round", gates.discarded_run(r.number, discarded,
                                                                              invalid_next_step(discarded)))
        before = st.kept_us
        after = delta = None
        flags: list[str] = []
        if last_prec is not None and last_prec["code_hash"] == st.current_hash and last_prec["verdict"] != "passed":
            decision, result_type = "failed", last_prec["result_type"] or "precision-failure"
            error = last_prec["key_output"] + ("\n" + last_prec["reason"] if last_prec["reason"] else "")
        elif measurement is not None and not measurement["valid"]:
            decision, result_type = "failed", "runtime-error"
            error = "invalid measurement: " + "; ".join(measurement["invalid_reasons"])
        else:
            assert measurement is not None and before is not None
            j = tuning_loop.judge_measurement(before, list(measurement["samples"]), st.run_mode, st.kept_samples)
            after, delta, result_type = j.after_us, j.delta_pct, j.result_type
            decision = "kept" if j.result_type == "gain" else "reverted"
            error = ""
            flags = _regression_flags(st, measurement, j.margin_pct)
            notes = "; ".join(x for x in [notes, j.note, f"noise margin {j.margin_pct:.2f} %"
                                          if st.run_mode == "npu" else "", *flags] if x)
        self.close_round(h, st, disk, decision=decision, result_type=result_type, after_us=after,
                          delta_pct=delta, error=error, notes=notes)
        st2 = self.ctx.state(h, session_id)
        verdict = self.stages.judge(h, st2)
        st2 = self.ctx.state(h, session_id)
        c = st2.counters.get(r.row["stage"])
        sdef = tuning_loop.STAGES_BY_NAME.get(r.row["stage"])
        msg = f"round {r.number}: {decision} ({result_type}"
        msg += f", {delta:+.2f} %)" if delta is not None else ")"
        if verdict:
            msg += f"; {verdict}"
        try:
            board = render_status_board(self.reports.snapshot(session_id), self.ctx.session_lang(session_id, lang))
        except Exception:  # the decision is recorded; a rendering bug must not turn it into an error
            log.exception("status board rendering failed")
            board = ""
        return RecordResult(
            **self.ctx.result_base(st2, msg), round=r.number, before_us=before, after_us=after, delta_pct=delta,
            decision=decision, result_type=result_type, finished=st2.finished, best_us=st2.kept_us,
            target_us=st2.target_us, stage_consecutive_no_gain=c.consecutive_no_gain if c else 0,
            stage_threshold=sdef.no_gain_threshold if sdef else 0, board=board, flags=flags,
        )



def _knob_catalog_ids(sources: dict[str, str], knob_id: str) -> list[str]:
    for k in extract_knobs(sources):
        if k.id == knob_id:
            return list(k.catalog_ids)
    return []


def _discarded_evidence(st: SessionState) -> str:
    """'' or why the open round's latest evidence — its last precision record of the current code when that did not
    pass, else its last measurement of it when invalid — comes from a run the server discarded (its reason)."""
    r = st.open_round
    assert r is not None
    runs = discarded_run_ids(st.rows)
    last = r.precision[-1] if r.precision else None
    if last is not None and last["code_hash"] == st.current_hash and last["verdict"] != "passed":
        return str(last["reason"]) if last["run_id"] is not None and int(last["run_id"]) in runs else ""
    m = next((m for m in reversed(r.measurements) if m["code_hash"] == st.current_hash), None)
    if m is not None and not m["valid"] and any(int(i) in runs for i in m["run_ids"] or []):
        return "; ".join(m["invalid_reasons"])
    return ""


def _abandon_outcome(st: SessionState) -> tuple[str, str, str]:
    r = st.open_round
    assert r is not None
    if _discarded_evidence(st):  # nothing was learnt of the change: rolled back, not failed (never R19)
        return "reverted", "abandoned", ""
    last = r.precision[-1] if r.precision else None
    if last is not None and last["verdict"] != "passed" and last["code_hash"] == st.current_hash:
        return "failed", last["result_type"] or "precision-failure", last["key_output"]
    bad = next((m for m in reversed(r.measurements) if m["code_hash"] == st.current_hash and not m["valid"]), None)
    if bad is not None:  # measured and unusable: a failure, as record_round would have called it, not "abandoned"
        return "failed", "runtime-error", "invalid measurement: " + "; ".join(bad["invalid_reasons"])
    return "reverted", "abandoned", ""


def _regression_flags(st: SessionState, measurement: Any, margin_pct: float) -> list[str]:
    """What got worse although the session metric may not have: the AICore end-to-end time, or any one kernel of
    a test that runs several (issue #11: E2E rose 30 % while the summed work time fell 16 %, unnoticed).

    Beyond the round's noise margin (SIM: 0.5 %, below which SIM gains may not transfer either)."""
    import statistics

    limit = max(margin_pct, tuning_loop.SIM_TRANSFER_WARN_PCT)
    kept = [m for m in st.rows["measurements"] if m["valid"] and m["code_hash"] == st.kept_hash]
    out: list[str] = []
    kept_e2e = [m["e2e_us"] for m in kept if m["e2e_us"]]
    if kept_e2e and measurement["e2e_us"]:
        before, after = statistics.median(kept_e2e), float(measurement["e2e_us"])
        rise = (after - before) / before * 100.0
        if rise > limit:
            out.append(f"FLAG: AICore end-to-end time rose {rise:+.1f} % ({before:.3f} → {after:.3f} µs)")
    kept_k: dict[str, list[float]] = {}
    for m in kept:
        for label, figs in (m.get("per_kernel") or {}).items():
            kept_k.setdefault(label, []).extend(figs.get("time", []))
    for label, figs in (measurement.get("per_kernel") or {}).items():
        if label in kept_k and figs.get("time"):
            before, after = statistics.median(kept_k[label]), statistics.median(figs["time"])
            rise = (after - before) / before * 100.0 if before else 0.0
            if rise > limit:
                out.append(f"FLAG: kernel {label} got slower {rise:+.1f} % ({before:.3f} → {after:.3f} µs)")
    return out
