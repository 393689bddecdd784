"""What a campaign reads about one operator's session: straight from its ledger, never from the driver's memory.

A driver that was killed knows nothing; the ledger knows everything that was decided. So the board, the budgets,
the resume and the report all read :class:`SessionFacts` from ``WORKSPACE/.pypto-tune/ledger.sqlite3`` (read-only:
a workspace without a ledger has no session, and none is created by looking).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pypto_tune.tools.code.workspace import LEDGER_DIR
from pypto_tune.tools.session.discarded import charged_discards, invalid_next_step, voided_rounds
from pypto_tune.tools.session.ledger import LEDGER_FILE, Ledger
from pypto_tune.tools.session.state import SessionState, derive_state, load_rows


@dataclass
class SessionFacts:
    session_id: str
    level1: str
    stage: str | None
    finished: bool
    finish_reason: str | None
    run_mode: str
    goal: str
    baseline_us: float | None
    best_us: float | None
    target_us: float | None
    trials: int  # candidate trials recorded (run_candidates)
    rounds: int  # decided rounds (trials included)
    kept: int
    failed: int
    run_s: float  # sum of the durations of every run the session recorded
    started_at: str
    last_at: str
    awaiting_user: bool
    failures: list[str] = field(default_factory=list)  # why trials failed (result types with counts)

    @property
    def speedup(self) -> float | None:
        if self.baseline_us and self.best_us:
            return self.baseline_us / self.best_us
        return None

    @property
    def elapsed_s(self) -> float:
        try:
            return (datetime.fromisoformat(self.last_at) - datetime.fromisoformat(self.started_at)).total_seconds()
        except ValueError:
            return 0.0


def has_ledger(workspace: Path) -> bool:
    return (workspace / LEDGER_DIR / LEDGER_FILE).is_file()


def ledger_signature(workspace: Path) -> tuple[int, ...]:
    """Changes whenever the ledger does (size and mtime of the database and its write-ahead log): the board reads a
    session's facts again only then, since deriving them costs tens of milliseconds of the driver's CPU."""
    out: list[int] = []
    for name in (LEDGER_FILE, LEDGER_FILE + "-wal"):
        try:
            st = (workspace / LEDGER_DIR / name).stat()
            out += [st.st_size, st.st_mtime_ns]
        except FileNotFoundError:
            out += [-1, -1]
    return tuple(out)


def session_state(ledger: Ledger, session_id: str) -> SessionState:
    return derive_state(load_rows(ledger, session_id))


def facts_of(st: SessionState) -> SessionFacts:
    rows = st.rows
    # rounds decided on runs the server discarded (voided, or in a ledger not resumed since): no result of the code
    void = voided_rounds(rows) | set(charged_discards(rows))
    decisions = [d for n, d in st.decisions.items() if n not in void]
    fails: dict[str, int] = {}
    for d in decisions:
        if d["decision"] == "failed":
            fails[str(d["result_type"])] = fails.get(str(d["result_type"]), 0) + 1
    invalid = [str(t["info"].get("reason") or "") for t in rows.get("trials", []) if t["outcome"] == "invalid"]
    invalid += list(charged_discards(rows).values())
    times = [str(r.get("at") or "") for t in ("runs", "transitions", "round_decisions") for r in rows.get(t, [])]
    s = st.session
    goal = f"{s['goal_value']:g}x" if s["goal_kind"] == "speedup" else f"≤ {s['goal_value']:g} µs"
    return SessionFacts(
        session_id=st.id, level1=st.level1, stage=st.stage, finished=st.finished, finish_reason=st.finish_reason,
        run_mode=st.run_mode, goal=goal, baseline_us=st.baseline_us, best_us=st.kept_us, target_us=st.target_us,
        trials=len(rows.get("trials", [])), rounds=len(decisions),
        kept=sum(1 for d in decisions if d["decision"] == "kept"), failed=sum(fails.values()),
        run_s=round(sum(float(r.get("duration_s") or 0.0) for r in rows.get("runs", [])), 3),
        started_at=str(s["created_at"]), last_at=max([str(s["created_at"]), *times]),
        awaiting_user=st.awaiting_user,
        failures=[f"{k} ×{v}" for k, v in sorted(fails.items())]
        + ([f"invalid ×{len(invalid)}, discarded by the server and not charged to their values ({invalid[-1][:200]}"
            f"; next: {invalid_next_step(invalid[-1])})"] if invalid else []))


def latest_session(workspace: Path) -> SessionFacts | None:
    """The newest session of a workspace, or None (no ledger, or a ledger without a session)."""
    if not has_ledger(workspace):
        return None
    ledger = Ledger.for_workspace(workspace)
    try:
        sessions = ledger.rows("sessions")
        if not sessions:
            return None
        return facts_of(session_state(ledger, str(sessions[-1]["id"])))
    finally:
        ledger.close()


def ledger_tables(workspace: Path, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of one session, table by table (what ``pypto-tune://sessions/{id}/ledger`` serves)."""
    ledger = Ledger.for_workspace(workspace)
    try:
        return {k: [dict(r) for r in v] for k, v in load_rows(ledger, session_id).items()}
    finally:
        ledger.close()
