"""Plumbing shared by the operation groups: sessions by id, derived state, gates, recorded writes."""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pypto_tune.tools import gates
from pypto_tune.tools.errors import GateRefusal, InputError, PyptoTuneError
from pypto_tune.tools.ledger import LEDGER_DIR, Ledger, now_iso
from pypto_tune.tools.patching import (
    functional_sources,
    hash_sources,
    read_sources,
    unified_diff,
    write_sources,
)
from pypto_tune.tools.state import SessionState, derive_state, load_rows
from pypto_tune.tools.workspace import WorkspaceLock


Progress = Callable[[float, str], Awaitable[None]] | None

log = logging.getLogger("pypto_tune.service")


class _Handle:
    """What this process keeps per workspace: the ledger, the session lock and the name of a running long call."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.ledger = Ledger.for_workspace(workspace)
        self.lock = WorkspaceLock(workspace)
        self.busy: str | None = None  # name of the long operation in progress


class OperationsBase:
    """Plumbing every operation group shares: finding a session, deriving its state, the gates, writes."""

    def __init__(self, *, default_workspace: Path | None = None, python: str = sys.executable) -> None:
        self.default_workspace = default_workspace
        self.python = python
        self._handles: dict[Path, _Handle] = {}
        self._session_ws: dict[str, Path] = {}

    def _handle(self, workspace: Path) -> _Handle:
        if workspace not in self._handles:
            self._handles[workspace] = _Handle(workspace)
        return self._handles[workspace]

    def _find(self, session_id: str) -> _Handle:
        if not session_id or not isinstance(session_id, str):
            raise InputError("session_id is required", hint="call start_session first; it returns the id")
        ws = self._session_ws.get(session_id)
        if ws is None:
            candidates = [self.default_workspace] if self.default_workspace else []
            for cand in candidates:
                ledger_file = cand / LEDGER_DIR / "ledger.sqlite3"
                if ledger_file.exists():
                    h = self._handle(cand)
                    if h.ledger.rows("sessions", session_id):
                        ws = cand
                        self._session_ws[session_id] = cand
        if ws is None:
            raise InputError(
                f"unknown session_id {session_id!r}",
                hint="call start_session with the workspace to resume it (the ledger lives in WORKSPACE/.pypto-tune/)",
            )
        return self._handle(ws)

    def _state(self, h: _Handle, session_id: str) -> SessionState:
        return derive_state(load_rows(h.ledger, session_id))

    def _refuse(self, h: _Handle, session_id: str | None, tool: str, refusal: GateRefusal) -> GateRefusal:
        try:
            h.ledger.insert("refusals", session_id=session_id, at=now_iso(), tool=tool, rule=refusal.rule,
                            message=refusal.message)
        except PyptoTuneError:
            log.exception("could not record a refusal")
        return refusal

    def _gate(self, h: _Handle, st: SessionState, tool: str, *, mutating: bool = True, **kw: Any) -> None:
        """Run the gates for ``tool``; record and raise the first refusal."""
        try:
            if mutating:
                if h.busy:
                    raise GateRefusal("busy", f"{h.busy} is still running for this session",
                                      allowed=["wait_job", "get_status"], hint="wait for the job to finish")
                h.lock.acquire()
                st = self._heal(h, st)
                if (not st.finished and st.open_round is None and st.level1 == "S4_TUNE"
                        and gates.time_limit_exceeded(st)):
                    self._finish(h, st, f"time limit of {st.session['time_limit_h']} h reached")
                    st = self._state(h, st.id)
            disk = self._disk_sources(h, st)
            gates.check(tool, st, disk_raw_hash=hash_sources(disk), **kw)
        except GateRefusal as refusal:
            raise self._refuse(h, st.id, tool, refusal) from None

    def _disk_sources(self, h: _Handle, st: SessionState) -> dict[str, str]:
        try:
            return read_sources(h.workspace, list(st.session["operator_files"]))
        except FileNotFoundError as exc:
            raise GateRefusal("drift", f"an operator file is missing on disk: {exc}",
                              allowed=["revert_patch", "get_status"],
                              hint="call revert_patch to restore the server's last known sources") from None

    def _base(self, st: SessionState, message: str = "") -> dict[str, Any]:
        return {"session_id": st.id, "state": st.level1, "stage": st.stage, "message": message,
                "next_actions": gates.allowed_actions(st)}

    def _write(self, h: _Handle, st: SessionState, sources: dict[str, str], tool: str) -> str:
        """Write operator sources, with the intent on record first (ledger migration 2, see ``_heal``)."""
        h.ledger.insert("write_intents", session_id=st.id, at=now_iso(), tool=tool,
                        before_sources=st.expected_sources, after_sources=sources)
        return write_sources(h.workspace, sources)

    def _heal(self, h: _Handle, st: SessionState) -> SessionState:
        """Undo this server's own write if a crash cut it off before it was recorded.

        The sign: the last write intent started from the sources the ledger still expects, and every file on disk
        holds either its before or its after bytes. Those bytes were never accepted by any rule, so the ledger's
        state is restored (recorded as a drift-revert) instead of being reported as an external edit. Any other
        difference stays drift for the agent to resolve.
        """
        # only the newest intent matters, and each row holds two full copies of the sources: fetch just that one
        intents = h.ledger.rows("write_intents", st.id, "id = (SELECT MAX(id) FROM write_intents WHERE session_id = ?)",
                                (st.id,))
        if not intents:
            return st
        last = intents[0]
        before, after = dict(last["before_sources"]), dict(last["after_sources"])
        if hash_sources(before) != st.expected_raw_hash:
            return st  # that write was recorded (or superseded): nothing of ours is pending
        try:
            disk = read_sources(h.workspace, list(st.session["operator_files"]))
        except FileNotFoundError:
            return st
        if hash_sources(disk) == st.expected_raw_hash:
            return st
        if not all(disk.get(f) in (before.get(f), after.get(f)) for f in disk):
            return st
        self._write(h, st, st.expected_sources, "heal")  # also supersedes the interrupted intent
        h.ledger.insert("patches", **_patch_row(st.id, kind="drift-revert", round_no=None, before=disk,
                                                after=st.expected_sources,
                                                note=f"undid {last['tool']}'s write of {last['at']}, interrupted "
                                                "before it was recorded (server crash)"))
        return self._state(h, st.id)

    def _transition(self, h: _Handle, st: SessionState, level: str, to: str, reason: str,
                    summary: dict[str, Any] | None = None) -> None:
        h.ledger.insert("transitions", session_id=st.id, at=now_iso(), level=level,
                        from_value=st.level1 if level == "state" else st.stage, to_value=to, reason=reason,
                        summary=summary or {})

    def _finish(self, h: _Handle, st: SessionState, reason: str, summary: dict[str, Any] | None = None) -> None:
        self._transition(h, st, "state", "S5_REPORT", reason, summary or gates.stage_summary(st))



def code_hash(sources: dict[str, str]) -> str:
    """The hash a precision verdict binds to: runtime-debug additions do not change numerics, so they are stripped."""
    return hash_sources(functional_sources(sources))


def _patch_row(session_id: str, *, kind: str, round_no: int | None, before: dict[str, str], after: dict[str, str],
               note: str, catalog_id: str | None = None, diff: str | None = None,
               changes: list[Any] | None = None) -> dict[str, Any]:
    """One ``patches`` row: both source states, their functional and raw hashes, the diff and the knob delta."""
    return dict(session_id=session_id, at=now_iso(), round=round_no, kind=kind, catalog_id=catalog_id,
                diff=unified_diff(before, after) if diff is None else diff, before_hash=code_hash(before),
                after_hash=code_hash(after), before_raw_hash=hash_sources(before),
                after_raw_hash=hash_sources(after), before_sources=before, after_sources=after,
                knob_changes=[c.model_dump(mode="json") for c in (changes or [])], note=note)


def _goal_text(row: Any) -> str:
    return (f"{row['goal_value']:g}x faster" if row["goal_kind"] == "speedup" else f"≤ {row['goal_value']:g} µs")


def _next_round(st: SessionState) -> int:
    return max((int(r["number"]) for r in st.rounds), default=0) + 1


def _describe(changes: list[Any]) -> str:
    return "; ".join(f"{c.knob_id}: {c.before!r} → {c.after!r}" for c in changes)
