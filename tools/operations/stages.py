"""Stage control: stage exits (R14), global termination (R14b), the checklist, the user's stop.

* ``StageControl`` — the JUDGE step after a decided round and what a stage's entry analysis marks; it needs only
  the session context, so the rounds, the runs and the search call it;
* ``StageOps``     — the tools mark_checklist, advance_stage, stop_session (a stop closes an open round through
  ``RoundOps`` and answers with ``ReportOps.get_status``).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from pypto_tune.tools.rules import gates
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.analysis import load_catalog
from pypto_tune.tools.rules import checklist as checklist_rules
from pypto_tune.tools.errors import InputError
from pypto_tune.tools.operations.results import (
    ChecklistResult,
    StatusResult,
)
from pypto_tune.tools.session.state import SessionState

from pypto_tune.tools.operations.base import (
    exclusive, Handle, SessionContext,
)

if TYPE_CHECKING:
    from pypto_tune.tools.operations.reporting import ReportOps
    from pypto_tune.tools.operations.rounds import RoundOps


log = logging.getLogger("pypto_tune.service")

# Catalogue items that are analyses, done by the stage's entry analysis (S-1: core usage).
ANALYSIS_ONLY = {"S-1"}
# Items no knob can carry out that are not changes at all.
NOT_A_CHANGE = {"I-5": "a comparison of one TileOp against an Ascend C kernel, outside what this server runs"}
# A measured figure: a number with its unit (the catalogue id's own digits do not count).
_MEASURED = re.compile(r"\d+(?:\.\d+)?\s*(?:µs|us|ms|%|x|×|KB|KiB|MB|tasks?|cores?|iterations?|samples?)\b",
                       re.IGNORECASE)


def checklist(st: SessionState, group: str) -> list[dict[str, str]]:
    """The catalogue items of stage group ``group`` with their marks in ``st`` (untried when unmarked)."""
    items = [i for i in load_catalog().items if i.stage == group]
    out = []
    for i in items:
        mark = st.checklist.get((group, i.id))
        out.append({"catalog_id": i.id, "title": i.title_en, "status": mark["status"] if mark else "untried",
                    "reason": mark["reason"] if mark else ""})
    return out


class StageControl:
    """The JUDGE step (leave a stage, finish the session) and the checklist marks the server sets itself."""

    def __init__(self, ctx: SessionContext) -> None:
        self.ctx = ctx

    def judge(self, h: Handle, st: SessionState) -> str:
        """JUDGE: global termination (R14b) first, then the stage's own exit (R14). Returns what happened."""
        reason = gates.global_stop_reason(st)
        if reason:
            self.ctx.finish(h, st, reason)
            return f"session finished: {reason}"
        if st.stage is None:
            return ""
        c = st.counters.get(st.stage)  # none yet: no round of this stage was decided, no streak
        why = tuning_loop.stage_exit_reason(st.stage, c.consecutive_no_gain) if c else ""
        return self.leave(h, st, why) if why else ""

    def leave(self, h: Handle, st: SessionState, reason: str, *, converged: bool = True) -> str:
        """Move to where ``tuning_loop.after_stage`` says the stage leads (the next stage, ALGORITHM or the report).
        ``converged`` is False for an early exit by a complete checklist."""
        assert st.stage is not None
        step = tuning_loop.after_stage(st.stage, reason, converged=converged)
        summary = gates.stage_summary(st)
        if step.to is None:
            self.ctx.finish(h, st, step.why, summary)
        else:
            self.ctx.transition(h, st, "stage", step.to, step.why, summary)
        return step.next_step

    def knobs_serving(self, h: Handle, st: SessionState, catalog_id: str) -> list:
        from pypto_tune.tools.patching import extract_knobs

        try:
            knobs = extract_knobs(st.expected_sources, self.ctx.context_files(h, st))
        except InputError:
            return []
        return [k for k in knobs if k.tunable and catalog_id in k.catalog_ids]

    def auto_mark(self, h: Handle, st: SessionState) -> None:
        """At a stage's entry analysis the server marks what it knows itself: items no knob of this operator
        serves are not-applicable (they need a structural change: ALGORITHM stage), analysis-only items are tried."""
        if st.stage is None:
            return
        group = tuning_loop.STAGES_BY_NAME[st.stage].group
        if group == "algorithm":
            return
        with h.record(st.id).transaction() as rec:
            for item in load_catalog().items:
                if item.stage != group or (group, item.id) in st.checklist:
                    continue
                if item.id in ANALYSIS_ONLY:
                    rec.checklist_mark(stage_group=group, stage=st.stage, catalog_id=item.id, status="tried",
                                       reason="server: the stage's entry analysis did it", round=None)
                elif not self.knobs_serving(h, st, item.id):
                    why = (NOT_A_CHANGE.get(item.id) or "no knob of this operator serves it; it needs a structural "
                           "change (ALGORITHM stage)")
                    rec.checklist_mark(stage_group=group, stage=st.stage, catalog_id=item.id, status="not-applicable",
                                       reason=f"server: {why}", round=None)

    def suggestions(self, h: Handle, st: SessionState, suggestions: list[Any]) -> tuple[list[Any], int]:
        """The analysis's suggestions an agent can act on now (issue #12): only the current stage's catalogue
        items, each naming the knobs of THIS operator that carry it out, or saying that it is an analysis or needs
        a structural change. Returns (kept, how many of other stages were left out)."""
        if st.stage is None:
            return suggestions, 0
        group = tuning_loop.STAGES_BY_NAME[st.stage].group
        if group == "algorithm":  # every item is a candidate for a declared algorithm-level change
            return [s.model_copy(update={"action": "structural"}) for s in suggestions], 0
        out = []
        for s in suggestions:
            if s.stage != group:
                continue
            knobs = [k.id for k in self.knobs_serving(h, st, s.catalog_id)]
            action = ("knob" if knobs else "analysis" if s.catalog_id in ANALYSIS_ONLY else "structural")
            out.append(s.model_copy(update={"knobs": knobs, "action": action}))
        return out, len(suggestions) - len(out)


class StageOps:
    """mark_checklist, advance_stage, stop_session."""

    def __init__(self, ctx: SessionContext, *, control: StageControl, rounds: RoundOps, reports: ReportOps) -> None:
        self.ctx = ctx
        self.control = control
        self.rounds = rounds
        self.reports = reports

    @exclusive
    def mark_checklist(self, session_id: str, *, catalog_id: str, status: str, reason: str) -> ChecklistResult:
        """Mark a catalogue item of the current stage as not-applicable, with a reason the server can check (R10).

        Items no knob of this operator serves are marked by the server itself when the stage is analysed. An item
        whose knob exists needs a tried round, or a specific reason: one that names the knob or a measured figure
        and is not the same words as another mark (issue #10, attack 6: boilerplate marks skipped every stage).
        """
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "mark_checklist", catalog_id=catalog_id)
        if status != "not-applicable":
            # Rounds mark items tried/failed themselves (R10); an agent could otherwise satisfy the early-exit
            # rule without trying anything.
            raise InputError(f"only 'not-applicable' can be marked by hand, got {status!r}",
                             hint="items become tried/failed when a round citing them is recorded")
        text = " ".join((reason or "").split())
        group = tuning_loop.STAGES_BY_NAME[st.stage].group  # type: ignore[index]
        knobs = self.control.knobs_serving(h, st, catalog_id)
        problem = ""
        if len(text) < 10:
            problem = "a reason of a few words at least is required"
        elif knobs:
            names = {k.name.lower() for k in knobs} | {k.id.lower() for k in knobs}
            used = {" ".join(str(m["reason"]).split()).lower() for m in st.rows["checklist_marks"]}
            if text.lower() in used:
                problem = "the same reason was already given for another item: say why THIS item does not apply"
            elif len(text) < 30 or not (any(n in text.lower() for n in names) or _MEASURED.search(text)):
                problem = (f"{catalog_id} has knobs in this operator ({', '.join(k.id for k in knobs[:4])}): the "
                           "reason must name the knob or cite a measured figure (at least 30 characters)")
        if problem:
            raise self.ctx.refuse(h, st.id, "mark_checklist", checklist_rules.not_applicable_refused(catalog_id, problem))
        h.record(st.id).checklist_mark(stage_group=group, stage=st.stage, catalog_id=catalog_id, status=status,
                                       reason=text, round=None)
        st2 = self.ctx.state(h, session_id)
        return ChecklistResult(**self.ctx.result_base(st2, f"{catalog_id} marked {status}"), stage_group=group,
                               items=checklist(st2, group))

    @exclusive
    def advance_stage(self, session_id: str, *, reason: str) -> ChecklistResult:
        """Leave the current stage early: only after its entry collection and analysis, with every checklist item
        tried or marked (R14). Leaving the last configuration stage early ends the session (no ALGORITHM, R23)."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "advance_stage")
        if not (st.stage_measured and st.stage_analyzed):
            raise self.ctx.refuse(h, st.id, "advance_stage", gates.stage_not_measured(st.stage, gates.allowed_actions(st)))
        group = tuning_loop.STAGES_BY_NAME[st.stage].group  # type: ignore[index]
        items = checklist(st, group)
        untried = [i["catalog_id"] for i in items if i["status"] == "untried"]
        if untried:
            raise self.ctx.refuse(h, st.id, "advance_stage", checklist_rules.items_untried(st.stage, untried))
        msg = self.control.leave(h, st, f"checklist complete; {reason}", converged=False)
        st2 = self.ctx.state(h, session_id)
        return ChecklistResult(**self.ctx.result_base(st2, msg), stage_group=group, items=items)

    @exclusive
    def stop_session(self, session_id: str, *, reason: str, lang: str | None = None) -> StatusResult:
        """The user's explicit stop (R14b): the session moves to reporting."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "stop_session")
        if not reason or not reason.strip():
            raise InputError("reason is required", hint="e.g. 'user asked to stop'")
        if st.open_round is not None:
            disk = self.ctx.disk_sources(h, st)
            self.rounds.close_round(h, st, disk, decision="reverted" if not st.open_round.precision or
                                    st.open_round.precision[-1]["verdict"] == "passed" else "failed",
                                    result_type="abandoned", after_us=None, delta_pct=None, error="",
                                    notes="session stopped with the round open")
            st = self.ctx.state(h, session_id)
        self.ctx.finish(h, st, f"user stop: {reason.strip()}")
        return self.reports.get_status(session_id, self.ctx.session_lang(session_id, lang))

