"""Session state, derived from the ledger rows and nothing else.

Deriving instead of storing is what makes a killed-and-restarted server resume exactly where the last committed event
left it: there is no second copy of the state that could disagree with the evidence. ``derive_state`` is a pure
function of the rows, so the rules can be tested without running anything.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.running.chips import chip_health
from pypto_tune.tools.running.verdict import COMMAND_PROBLEM
from pypto_tune.tools.code.codestate import FileEntry, entries_for_sources
from pypto_tune.tools.session.discarded import voided_rounds
from pypto_tune.tools.session.ledger import Ledger, Row

TABLES = (
    "sessions", "env_checks", "runs", "precision_records", "measurements", "analyses", "patches", "rounds",
    "round_decisions", "transitions", "checklist_marks", "refusals", "confirmations", "tree_files", "questions",
    "admissions", "corrections", "trials",
)


PERSON_SOURCES = ("elicitation", "cli")


@dataclass
class StageCounters:
    rounds: int = 0
    consecutive_no_gain: int = 0
    failures: int = 0


@dataclass
class OpenRound:
    row: Row
    precision: list[Row] = field(default_factory=list)  # records taken during this round, in order
    measurements: list[Row] = field(default_factory=list)
    patches: list[Row] = field(default_factory=list)

    @property
    def number(self) -> int:
        return int(self.row["number"])

    @property
    def corrections(self) -> int:
        return sum(1 for p in self.patches if p["kind"] == "correction")


@dataclass
class SessionState:
    session: Row
    level1: str
    stage: str | None
    outer_round: int
    current_hash: str  # functional hash (runtime-debug additions stripped) of the server's expected sources
    expected_raw_hash: str  # bytes the server last wrote / adopted; drift = disk differs from this
    expected_sources: dict[str, str]
    debug_enabled: bool
    debug_baseline: dict[str, str] | None  # sources before the debug toggle (to restore byte-for-byte)
    env_ok: bool | None
    env_batches: int
    passed_hashes: set[str]
    baseline_failures: int  # consecutive baseline precision failures since the last confirmation
    awaiting_user: bool
    baseline_us: float | None
    target_us: float | None
    kept_hash: str
    kept_raw_hash: str
    kept_sources: dict[str, str]
    kept_us: float | None  # time of the latest valid measurement of the kept state
    best_round: int | None
    open_round: OpenRound | None
    rounds: list[Row]
    decisions: dict[int, Row]
    counters: dict[str, StageCounters]
    stage_entry_transition_id: int | None
    stage_measured: bool  # fresh collection after stage entry (R15)
    stage_analyzed: bool  # analysis after that collection (R16)
    checklist: dict[tuple[str, str], Row]  # (stage_group, catalog_id) -> latest mark
    finish_reason: str | None
    rows: dict[str, list[Row]]
    tree: dict[str, FileEntry] = field(default_factory=dict)  # every workspace file at session start (empty: legacy)
    test_command: list[str] = field(default_factory=list)  # as corrected before the baseline passed
    pending_question: Row | None = None  # what the server asked a person and is waiting for (R5)
    kept_samples: list[float] = field(default_factory=list)  # every sample ever measured on the kept code
    device: str = "0"  # the chip the next run uses (R5 rotation; a chip that works stays in use until it fails)

    @property
    def id(self) -> str:
        return str(self.session["id"])

    @property
    def run_mode(self) -> str:
        return str(self.session["run_mode"])

    @property
    def finished(self) -> bool:
        return self.level1 in ("S5_REPORT", "DONE")

    @property
    def expected_tree(self) -> dict[str, FileEntry]:
        """The tree the workspace must hold now: the recorded files with the operator files as the server wrote them.
        Legacy sessions (recorded before the whole tree was) know only the operator files."""
        if not self.tree:
            return entries_for_sources(self.expected_sources, {})
        return entries_for_sources(self.expected_sources, self.tree)

    def last_valid_measurement(self, code_hash: str | None = None) -> Row | None:
        """The newest valid measurement (of ``code_hash`` if given); kept-state reference samples that an NPU
        round took for its decision (round −2) are not what an agent analyses."""
        for m in reversed(self.rows["measurements"]):
            if m["valid"] and m["round"] != -2 and (code_hash is None or m["code_hash"] == code_hash):
                return m
        return None


def load_rows(ledger: Ledger, session_id: str) -> dict[str, list[Row]]:
    return {t: ledger.rows(t, session_id) for t in TABLES}


def derive_state(rows: dict[str, list[Row]]) -> SessionState:
    """The session's state from its ledger rows, one named step per part of it; pure (see the module docstring)."""
    session = rows["sessions"][0]
    level1, stage, finish_reason, stage_entry_id = _levels(rows["transitions"])
    outer = tuning_loop.STAGES_BY_NAME[stage].outer_round if stage in tuning_loop.STAGES_BY_NAME else 1  # ALGORITHM: 3
    current_hash, raw_hash, sources, debug_enabled, debug_baseline = _expected_code(session, rows["patches"])
    env_ok, env_batches = _environment(rows["env_checks"])
    passed = {r["code_hash"] for r in rows["precision_records"] if r["verdict"] == "passed"}
    failures = _baseline_failures(rows)
    awaiting = failures >= tuning_loop.BASELINE_ATTEMPTS and level1 == "S1_SETUP"
    baseline = next((m for m in rows["measurements"] if m["round"] == 0 and m["valid"]), None)
    baseline_us = float(baseline["operator_time_us"]) if baseline else None
    decisions = {int(d["number"]): d for d in rows["round_decisions"]}
    kept_hash, kept_raw, kept_sources, best_round = _kept_code(session, rows["patches"], decisions)
    # The kept time is the median of EVERY sample ever measured on the kept code (baseline, stage re-collections,
    # the round that kept it), never the latest or the best one: re-collecting until noise gives a good number
    # moves nothing (issue #10, attack 9).
    kept_samples = kept_samples_of(rows["measurements"], kept_hash)
    kept_us = statistics.median(kept_samples) if kept_samples else None
    stage_measured, stage_analyzed = _stage_entry_done(rows, stage, stage_entry_id, baseline is not None)
    pending = _pending_question(rows)

    return SessionState(
        device=_current_device(rows, [str(d) for d in session["device_ids"]]), kept_samples=kept_samples,
        tree=_tree(rows["tree_files"]), test_command=_test_command(session, rows["corrections"]),
        pending_question=pending if awaiting else None,
        session=session, level1=level1, stage=stage, outer_round=outer, current_hash=current_hash,
        expected_raw_hash=raw_hash, expected_sources=sources, debug_enabled=debug_enabled,
        debug_baseline=debug_baseline, env_ok=env_ok, env_batches=env_batches, passed_hashes=passed,
        baseline_failures=failures, awaiting_user=awaiting, baseline_us=baseline_us,
        target_us=_target_us(session, baseline_us),
        kept_hash=kept_hash, kept_raw_hash=kept_raw, kept_sources=kept_sources, kept_us=kept_us,
        best_round=best_round, open_round=_open_round(rows, decisions), rounds=rows["rounds"], decisions=decisions,
        counters=_stage_counters(rows, decisions), stage_entry_transition_id=stage_entry_id,
        stage_measured=stage_measured, stage_analyzed=stage_analyzed,
        checklist=_checklist(rows["checklist_marks"], stage), finish_reason=finish_reason, rows=rows,
    )


def _levels(transitions: list[Row]) -> tuple[str, str | None, str | None, int | None]:
    """(level-1 state, stage, finish reason, id of the stage's entry transition): the last transition of each level
    wins."""
    level1, stage, finish_reason = "S1_SETUP", None, None
    stage_entry_id: int | None = None
    for t in transitions:
        if t["level"] == "state":
            level1 = t["to_value"]
            if level1 in ("S5_REPORT",):
                finish_reason = t["reason"]
        else:
            stage = t["to_value"]
            stage_entry_id = int(t["id"])
    return level1, stage, finish_reason, stage_entry_id


def _expected_code(session: Row, patches: list[Row]) -> tuple[str, str, dict[str, str], bool, dict[str, str] | None]:
    """(functional hash, raw hash, sources, debug on, sources before debug) the workspace must hold: the last patch
    (any kind) wins; before any patch, the original sources."""
    current_hash, raw_hash = session["original_hash"], session["original_raw_hash"]
    sources: dict[str, str] = dict(session["original_sources"])
    debug_enabled, debug_baseline = False, None
    for p in patches:
        if p["kind"] == "trial":
            continue  # a candidate trial ran on a private copy; its code was never written to the workspace
        current_hash, raw_hash, sources = p["after_hash"], p["after_raw_hash"], dict(p["after_sources"])
        if p["kind"] == "debug-on":
            debug_enabled, debug_baseline = True, dict(p["before_sources"])
        elif p["kind"] in ("debug-off", "debug-restore"):
            debug_enabled, debug_baseline = False, None
    return current_hash, raw_hash, sources, debug_enabled, debug_baseline


def _environment(env_checks: list[Row]) -> tuple[bool | None, int]:
    """(the last batch of environment checks all passed — None before any, the number of batches)."""
    batches = sorted({int(r["batch"]) for r in env_checks})
    if not batches:
        return None, 0
    return all(r["ok"] for r in env_checks if r["batch"] == batches[-1]), len(batches)


def _baseline_failures(rows: dict[str, list[Row]]) -> int:
    """R5: consecutive baseline precision failures, reset by a pass or by a person's confirmation."""
    # A confirmation row's detail holds the id of the last precision record it answered, which orders the two
    # tables without clocks. Only a person's answer counts (MCP elicitation answered in the client, or `pypto-tune
    # confirm` typed at a terminal): an agent's own argument never resets the count (issue #10, attack 8).
    confirmed_upto = max((int(c["detail"]) for c in rows["confirmations"] if c["kind"] == "baseline-retry"
                          and c.get("source") in PERSON_SOURCES),
                         default=0)
    failures = 0
    for r in rows["precision_records"]:
        if r["round"] is not None or r.get("result_type") == COMMAND_PROBLEM:
            continue  # a run without a verdict line is the command's problem, not the operator's (issue #17)
        if r["verdict"] == "passed":
            failures = 0
        elif int(r["id"]) > confirmed_upto:
            failures += 1
    return failures


def _target_us(session: Row, baseline_us: float | None) -> float | None:
    """The goal as an operator time: the baseline over the speed-up, or the time the session asked for."""
    if baseline_us is None:
        return None
    return (baseline_us / float(session["goal_value"]) if session["goal_kind"] == "speedup"
            else float(session["goal_value"]))


def _open_round(rows: dict[str, list[Row]], decisions: dict[int, Row]) -> OpenRound | None:
    """The last round without a decision, with the records taken during it."""
    open_round = None
    for r in rows["rounds"]:
        if int(r["number"]) not in decisions:
            n = int(r["number"])
            open_round = OpenRound(
                row=r,
                precision=[p for p in rows["precision_records"] if p["round"] == n],
                measurements=[m for m in rows["measurements"] if m["round"] == n],
                patches=[p for p in rows["patches"] if p["round"] == n],
            )
    return open_round


def _kept_code(session: Row, patches: list[Row], decisions: dict[int, Row]
               ) -> tuple[str, str, dict[str, str], int | None]:
    """(hash, raw hash, sources, best round) of the kept state: what reverts restore exactly."""
    # Patches outside rounds (debug toggles, adoptions before tuning, drift reverts) apply to it directly; a round's
    # patches count only once the round was decided "kept".
    kept_hash = session["original_hash"]
    kept_raw, kept_sources = session["original_raw_hash"], dict(session["original_sources"])
    best_round = None
    for p in patches:
        n = p["round"]
        if p["kind"] == "trial":
            continue  # the kept trial's code arrives through its "trial-apply" patch
        if n is None or decisions.get(int(n), {}).get("decision") == "kept":
            kept_hash, kept_raw, kept_sources = p["after_hash"], p["after_raw_hash"], dict(p["after_sources"])
            if n is not None:
                best_round = int(n)
    return kept_hash, kept_raw, kept_sources, best_round


def _stage_counters(rows: dict[str, list[Row]], decisions: dict[int, Row]) -> dict[str, StageCounters]:
    """Per stage: rounds judged, the no-gain streak (R12) and failures (R13), rounds voided by a discarded run left
    out."""
    counters: dict[str, StageCounters] = {}
    # A candidate batch is judged as a whole: its trials count in round order, but a batch that kept a gain ends its
    # streak with that gain, wherever the winner's number falls in the batch.
    batch_of = {int(t["round"]): t["batch"] for t in rows["trials"] if t["round"] is not None}
    first_of: dict[str, int] = {}
    for n, b in batch_of.items():
        first_of[b] = min(first_of.get(b, n), n)

    def judge_order(r: Row) -> tuple[int, int, int]:
        n = int(r["number"])
        b = batch_of.get(n)
        if b is None:
            return (n, 0, n)
        kept = decisions.get(n, {}).get("decision") == "kept"
        return (first_of[b], int(kept), n)

    voided = voided_rounds(rows)  # decided on runs the server discarded: no result of the code (discarded.py)
    for r in sorted(rows["rounds"], key=judge_order):
        d = decisions.get(int(r["number"]))
        c = counters.setdefault(r["stage"], StageCounters())
        if not d or int(r["number"]) in voided:
            continue
        c.rounds += 1
        if d["result_type"] in ("gain", "not-chosen"):  # a batch that found a gain reset the streak
            c.consecutive_no_gain = 0
        elif d["result_type"] in ("no-gain", "regression"):
            c.consecutive_no_gain += 1
        else:
            c.failures += 1  # R13: failures before measurement do not touch the no-gain counter
    return counters


def _stage_entry_done(rows: dict[str, list[Row]], stage: str | None, stage_entry_id: int | None,
                      has_baseline: bool) -> tuple[bool, bool]:
    """(measured, analysed) since the current stage was entered: the fresh collection (R15) and its analysis (R16)."""
    if stage is None or stage_entry_id is None:
        return False, False
    # A stage name is entered once, so "measured in this stage" needs no clock comparison.
    stage_ms = [m for m in rows["measurements"] if m["stage"] == stage and m["valid"] and m["round"] == -1]
    if tuning_loop.STAGES_BY_NAME[stage].group in ("frontend", "algorithm"):
        # FRONTEND reuses the S2/S3 baseline data (R15): the S3 analysis is its entry analysis.
        return has_baseline, any(a for a in rows["analyses"])
    if not stage_ms:
        return False, False
    mid = int(stage_ms[-1]["id"])
    return True, any(a["measurement_id"] == mid for a in rows["analyses"])


def _checklist(marks: list[Row], stage: str | None) -> dict[tuple[str, str], Row]:
    """(stage group, catalogue id) → the latest mark the current stage sees."""
    checklist: dict[tuple[str, str], Row] = {}
    current_group = tuning_loop.STAGES_BY_NAME[stage].group if stage in tuning_loop.STAGES_BY_NAME else None
    for mark in marks:
        # the current stage sees only its own marks (and marks of ledgers from before marks named their stage);
        # SWIMLANE_2 does not inherit SWIMLANE_1's "not applicable" (issue #10, attack 6)
        own = mark.get("stage")
        if mark["stage_group"] == current_group and own is not None and own != stage:
            continue
        checklist[(mark["stage_group"], mark["catalog_id"])] = mark
    return checklist


def _tree(tree_files: list[Row]) -> dict[str, FileEntry]:
    """Every workspace file recorded at session start (empty for a legacy session)."""
    return {r["path"]: FileEntry(path=r["path"], sha256=r["sha256"], size=int(r["size"]),
                                 executable=bool(r["executable"]), link=r["link"]) for r in tree_files}


def _test_command(session: Row, corrections: list[Row]) -> list[str]:
    """The test command as last corrected (corrections come only before the baseline passed)."""
    command = list(session["test_command"])
    for c in corrections:
        if c["field"] == "test_command":
            command = list(c["after_value"])
    return command


def _pending_question(rows: dict[str, list[Row]]) -> Row | None:
    """The newest baseline-retry question no retry answer closed (a "no" leaves it open: the person may still say
    yes later)."""
    answered = {int(c["question_id"]) for c in rows["confirmations"]
                if c.get("question_id") is not None and c["kind"] == "baseline-retry"}
    return next((q for q in reversed(rows["questions"])
                 if int(q["id"]) not in answered and q["kind"] == "baseline-retry"), None)


def kept_samples_of(measurements: list[Row], kept_hash: str, before_id: int | None = None) -> list[float]:
    """Every sample of the kept code's VALID measurements (recorded before measurement ``before_id``, if given): the
    kept time is their median. An invalid measurement — tampered, broken, fake tasks — never counts, so a
    re-measurement of the kept code cannot move the number the next round is judged against (issue #16)."""
    return [float(x) for m in measurements
            if m["valid"] and m["code_hash"] == kept_hash and (before_id is None or int(m["id"]) < before_id)
            for x in (m["samples"] or [m["operator_time_us"]])]


def _current_device(rows: dict[str, list[Row]], pool: list[str]) -> str:
    """The chip of the next run (R5 rotation): see ``tools/running/chips.py``, which owns every choice of chip."""
    return chip_health(rows, pool).current


def checklist_status(state: SessionState, group: str, catalog_ids: list[str]) -> list[tuple[str, str, str]]:
    """(catalog_id, status, reason) for every item of a stage group; unmarked items are 'untried'."""
    out = []
    for cid in catalog_ids:
        mark = state.checklist.get((group, cid))
        out.append((cid, mark["status"] if mark else "untried", mark["reason"] if mark else ""))
    return out


def as_jsonable(rows: dict[str, list[Row]]) -> dict[str, Any]:
    return {k: [dict(r) for r in v] for k, v in rows.items()}
