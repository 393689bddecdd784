"""Stage control: stage exits (R14), global termination (R14b), the checklist, the user's stop."""

from __future__ import annotations

import logging

from pypto_tune.tools import gates, rules
from pypto_tune.tools.analysis import load_catalog
from pypto_tune.tools.errors import GateRefusal, InputError
from pypto_tune.tools.ledger import now_iso
from pypto_tune.tools.results import (
    ChecklistResult,
    StatusResult,
)
from pypto_tune.tools.state import SessionState

from pypto_tune.tools.operations.base import (
    OperationsBase, _Handle,
)


log = logging.getLogger("pypto_tune.service")


class StageOps(OperationsBase):
    """mark_checklist, advance_stage, stop_session and the JUDGE step."""

    def _judge_stage(self, h: _Handle, st: SessionState) -> str:
        """JUDGE: global termination (R14b) first, then the stage's own exit (R14). Returns what happened."""
        reason = gates.global_stop_reason(st)
        if reason:
            self._finish(h, st, reason)
            return f"session finished: {reason}"
        if st.stage is None:
            return ""
        sdef = rules.STAGES_BY_NAME[st.stage]
        c = st.counters.get(st.stage)
        if c and c.consecutive_no_gain >= sdef.no_gain_threshold:
            return self._leave_stage(h, st, f"{c.consecutive_no_gain} consecutive rounds without gain "
                                           f"(threshold {sdef.no_gain_threshold})")
        return ""

    def _leave_stage(self, h: _Handle, st: SessionState, reason: str) -> str:
        assert st.stage is not None
        nxt = rules.next_stage(st.stage)
        summary = gates.stage_summary(st)
        if nxt is None and st.stage != rules.ALGORITHM_STAGE.name:
            # R23: the configuration stages converged without reaching the target; algorithm-level changes may
            # follow (stop_session ends the session instead).
            self._transition(h, st, "stage", rules.ALGORITHM_STAGE.name,
                             f"{st.stage} left: {reason}; configuration stages converged (R23)", summary)
            return ("configuration stages converged without reaching the target: stage ALGORITHM (declared "
                    "algorithm-level changes, algorithm=true), or stop_session + render_report")
        if nxt is None:
            self._finish(h, st, f"algorithm stage done ({reason})", summary)
            return "all stages done: reporting only"
        self._transition(h, st, "stage", nxt.name, f"{st.stage} left: {reason}", summary)
        return f"stage {st.stage} left ({reason}); now {nxt.name}: collect_swimlane + analyze_bubbles first (R15)"

    def mark_checklist(self, session_id: str, *, catalog_id: str, status: str, reason: str) -> ChecklistResult:
        """Mark a catalogue item of the current stage as not-applicable (with a reason) or tried (R10)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "mark_checklist", catalog_id=catalog_id)
        if status != "not-applicable":
            # Rounds mark items tried/failed themselves (R10); an agent could otherwise satisfy the early-exit
            # rule without trying anything.
            raise InputError(f"only 'not-applicable' can be marked by hand, got {status!r}",
                             hint="items become tried/failed when a round citing them is recorded")
        if not reason or len(reason.strip()) < 5:
            raise InputError("a reason is required (at least a few words)", hint="say why the item does not apply")
        group = rules.STAGES_BY_NAME[st.stage].group  # type: ignore[index]
        h.ledger.insert("checklist_marks", session_id=st.id, at=now_iso(), stage_group=group, catalog_id=catalog_id,
                        status=status, reason=reason.strip(), round=None)
        st2 = self._state(h, session_id)
        return ChecklistResult(**self._base(st2, f"{catalog_id} marked {status}"), stage_group=group,
                               items=self._checklist(st2, group))

    def _checklist(self, st: SessionState, group: str) -> list[dict[str, str]]:
        items = [i for i in load_catalog().items if i.stage == group]
        out = []
        for i in items:
            mark = st.checklist.get((group, i.id))
            out.append({"catalog_id": i.id, "title": i.title_en, "status": mark["status"] if mark else "untried",
                        "reason": mark["reason"] if mark else ""})
        return out

    def advance_stage(self, session_id: str, *, reason: str) -> ChecklistResult:
        """Leave the current stage early: allowed only when its checklist is fully marked (R14)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "advance_stage")
        group = rules.STAGES_BY_NAME[st.stage].group  # type: ignore[index]
        items = self._checklist(st, group)
        untried = [i["catalog_id"] for i in items if i["status"] == "untried"]
        if untried:
            raise self._refuse(h, st.id, "advance_stage", GateRefusal(
                "stage-exit", f"{st.stage} cannot be left early: checklist items untried: {', '.join(untried)}",
                allowed=["apply_tuning_patch", "mark_checklist", "get_status"],
                hint="try them, or mark_checklist(catalog_id, 'not-applicable', reason) for each"))
        msg = self._leave_stage(h, st, f"checklist complete; {reason}")
        st2 = self._state(h, session_id)
        return ChecklistResult(**self._base(st2, msg), stage_group=group, items=items)

    def stop_session(self, session_id: str, *, reason: str) -> StatusResult:
        """The user's explicit stop (R14b): the session moves to reporting."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "stop_session")
        if not reason or not reason.strip():
            raise InputError("reason is required", hint="e.g. 'user asked to stop'")
        if st.open_round is not None:
            disk = self._disk_sources(h, st)
            self._close_round(h, st, disk, decision="reverted" if not st.open_round.precision or
                              st.open_round.precision[-1]["verdict"] == "passed" else "failed",
                              result_type="abandoned", after_us=None, delta_pct=None, error="",
                              notes="session stopped with the round open")
            st = self._state(h, session_id)
        self._finish(h, st, f"user stop: {reason.strip()}")
        return self.get_status(session_id)

