"""Every row the server writes into a session's ledger, one typed method per kind of row.

The operations never name a table: what a kind of row holds, and which table it goes to, is written here once, so a
round's or a trial's rows read as calls (``round_opened``, ``patch``, ``round_decision``, ``checklist_mark``) and a
misspelt column fails where it is written. ``Recorder(ledger, session_id)`` writes each row in its own transaction;
``with recorder.transaction() as rec:`` gives a recorder whose rows commit together or not at all (one event, one
transaction: ``Ledger.transaction``). ``at`` is the recorder's clock unless a row carries its own time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from pypto_tune.tools.patching import hash_sources, unified_diff
from pypto_tune.tools.patching.hashes import code_hash
from pypto_tune.tools.session.ledger import Ledger, now_iso


class RowWriter(Protocol):
    """A ledger or one of its open transactions."""

    def insert(self, table: str, **fields: Any) -> int: ...


def patch_row(session_id: str, *, kind: str, round_no: int | None, before: dict[str, str], after: dict[str, str],
              note: str, catalog_id: str | None = None, diff: str | None = None,
              changes: list[Any] | None = None, at: str | None = None) -> dict[str, Any]:
    """One ``patches`` row: both source states, their functional and raw hashes, the diff and the knob delta;
    stamped ``at`` (now when not given)."""
    return dict(session_id=session_id, at=at or now_iso(), round=round_no, kind=kind, catalog_id=catalog_id,
                diff=unified_diff(before, after) if diff is None else diff, before_hash=code_hash(before),
                after_hash=code_hash(after), before_raw_hash=hash_sources(before),
                after_raw_hash=hash_sources(after), before_sources=before, after_sources=after,
                knob_changes=[c.model_dump(mode="json") for c in (changes or [])], note=note)


class Recorder:
    """The writes of one session (``session_id`` None: a refusal before any session exists)."""

    def __init__(self, writer: RowWriter, session_id: str | None, *, clock: Callable[[], str] = now_iso) -> None:
        self._w = writer
        self.session_id = session_id
        self._clock = clock

    @contextmanager
    def transaction(self) -> Iterator[Recorder]:
        """A recorder whose rows commit together (only on a recorder made over a ``Ledger``)."""
        if not isinstance(self._w, Ledger):
            raise TypeError("a transaction is opened on the ledger, not inside another one")
        with self._w.transaction() as tx:
            yield Recorder(tx, self.session_id, clock=self._clock)

    def _row(self, table: str, at: str | None = None, **fields: Any) -> int:
        return self._w.insert(table, session_id=self.session_id, at=at or self._clock(), **fields)

    @property
    def _sid(self) -> str:
        if self.session_id is None:
            raise ValueError("this row belongs to a session")
        return self.session_id

    # ------------------------------------------------------------------------------------------- the session
    def session(self, *, workspace: str, operator: str, operator_files: list[str], test_command: list[str],
                shell: bool, run_mode: str, goal_kind: str, goal_value: float, timeout_s: float,
                device_ids: list[str], time_limit_h: float, repeats: int, original_sources: dict[str, str],
                original_hash: str, original_raw_hash: str, config: dict[str, Any]) -> int:
        """The session row: what start_session fixed (the goal, the command, the files and their bytes)."""
        return self._w.insert("sessions", id=self._sid, created_at=self._clock(), workspace=workspace,
                              operator=operator, operator_files=operator_files, test_command=test_command,
                              shell=shell, run_mode=run_mode, goal_kind=goal_kind, goal_value=goal_value,
                              timeout_s=timeout_s, device_ids=device_ids, time_limit_h=time_limit_h,
                              repeats=repeats, original_sources=original_sources, original_hash=original_hash,
                              original_raw_hash=original_raw_hash, config=config)

    def tree_file(self, *, path: str, sha256: str, size: int, executable: bool, link: str | None, role: str) -> int:
        """One file of the workspace as recorded at start (its bytes are in the blob store)."""
        return self._w.insert("tree_files", session_id=self._sid, path=path, sha256=sha256, size=size,
                              executable=executable, link=link, role=role)

    def transition(self, *, level: str, from_value: str | None, to_value: str, reason: str,
                   summary: dict[str, Any]) -> int:
        """A move of the session's state (``level="state"``) or stage (``"stage"``)."""
        return self._row("transitions", level=level, from_value=from_value, to_value=to_value, reason=reason,
                         summary=summary)

    def correction(self, *, field: str, before_value: Any, after_value: Any, reason: str) -> int:
        """A recorded value corrected by a later row (the test command, the verdict patterns, the environment,
        rounds voided)."""
        return self._row("corrections", field=field, before_value=before_value, after_value=after_value,
                         reason=reason)

    def env_check(self, *, batch: int, name: str, ok: bool, detail: str, at: str | None = None) -> int:
        return self._row("env_checks", at, batch=batch, name=name, ok=ok, detail=detail)

    def question(self, *, kind: str, text: str, info: dict[str, Any]) -> int:
        """A question for a person (a retry of a failed baseline, a changed environment)."""
        return self._row("questions", kind=kind, text=text, info=info)

    def confirmation(self, *, kind: str, detail: str, source: str | None, question_id: int | None) -> int:
        """An answer; ``source`` says who gave it (``PERSON_SOURCES``), never the agent's own argument."""
        return self._row("confirmations", kind=kind, detail=detail, source=source, question_id=question_id)

    def refusal(self, *, tool: str, rule: str, message: str) -> int:
        return self._row("refusals", tool=tool, rule=rule, message=message)

    # ----------------------------------------------------------------------------------------- runs, numbers
    def run(self, *, purpose: str, round: int | None, argv: list[str], env: dict[str, str], cwd: str,
            exit_code: int | None, signal: int | None, timed_out: bool, cancelled: bool, duration_s: float,
            started_epoch: float, output_head: str, output_tail: str, output_bytes: int, output_dirs: list[str],
            code_hash: str, raw_hash: str, device_id: str | None, exec_hash: str | None, exec_dir: str | None,
            tampered: list[str], batch: str | None, at: str | None = None) -> int:
        """One execution of the test command on a private copy of the recorded state."""
        return self._row("runs", at, purpose=purpose, round=round, argv=argv, env=env, cwd=cwd,
                         exit_code=exit_code, signal=signal, timed_out=timed_out, cancelled=cancelled,
                         duration_s=duration_s, started_epoch=started_epoch, output_head=output_head,
                         output_tail=output_tail, output_bytes=output_bytes, output_dirs=output_dirs,
                         code_hash=code_hash, raw_hash=raw_hash, device_id=device_id, exec_hash=exec_hash,
                         exec_dir=exec_dir, tampered=tampered, batch=batch)

    def probe(self, *, run_id: int, code_hash: str, fields: dict[str, Any], at: str | None = None) -> int:
        """What the run-time probe saw in run ``run_id`` (``fields``: ``probe.store.to_row``)."""
        return self._row("probes", at, run_id=run_id, code_hash=code_hash, **fields)

    def precision_record(self, *, run_id: int | None, command: str, verdict: str, numerics_checked: bool,
                         exit_code: int | None, duration_s: float, key_output: str, reason: str, code_hash: str,
                         round: int | None, device_id: str | None, result_type: str | None) -> int:
        return self._row("precision_records", run_id=run_id, command=command, verdict=verdict,
                         numerics_checked=numerics_checked, exit_code=exit_code, duration_s=duration_s,
                         key_output=key_output, reason=reason, code_hash=code_hash, round=round,
                         device_id=device_id, result_type=result_type)

    def measurement(self, *, round: int, code_hash: str, valid: bool, invalid_reasons: list[str],
                    operator_time_us: float | None, e2e_us: float | None, samples: list[float],
                    analysis: dict[str, Any], archive: str, run_ids: list[int], stage: str | None,
                    per_kernel: Any) -> int:
        return self._row("measurements", round=round, code_hash=code_hash, valid=valid,
                         invalid_reasons=invalid_reasons, operator_time_us=operator_time_us, e2e_us=e2e_us,
                         samples=samples, analysis=analysis, archive=archive, run_ids=run_ids, stage=stage,
                         per_kernel=per_kernel)

    def analysis(self, *, measurement_id: int, stage: str | None, report_path: str, suggestions: Any) -> int:
        return self._row("analyses", measurement_id=measurement_id, stage=stage, report_path=report_path,
                         suggestions=suggestions)

    # ------------------------------------------------------------------------------------- changes and rounds
    def write_intent(self, *, tool: str, before_sources: dict[str, str], after_sources: dict[str, str]) -> int:
        """The sources about to be written, on record before the write (a crash between is then recognised)."""
        return self._row("write_intents", tool=tool, before_sources=before_sources, after_sources=after_sources)

    def admission(self, *, round: int | None, path: str, verdict: str, knob_id: str | None,
                  info: dict[str, Any]) -> int:
        """How a change was accounted for (``tools/code/admission.py``)."""
        return self._row("admissions", round=round, path=path, verdict=verdict, knob_id=knob_id, info=info)

    def patch(self, *, kind: str, round_no: int | None, before: dict[str, str], after: dict[str, str], note: str,
              catalog_id: str | None = None, diff: str | None = None, changes: list[Any] | None = None) -> int:
        """A change of the operator files (see :func:`patch_row`)."""
        return self._w.insert("patches", **patch_row(self._sid, kind=kind, round_no=round_no, before=before,
                                                      after=after, note=note, catalog_id=catalog_id, diff=diff,
                                                      changes=changes, at=self._clock()))

    def round_opened(self, *, number: int, stage: str, outer_round: int, kind: str, catalog_id: str, change: str,
                     rationale: str, before_hash: str, before_raw_hash: str, before_us: float | None) -> int:
        return self._w.insert("rounds", session_id=self._sid, number=number, opened_at=self._clock(), stage=stage,
                              outer_round=outer_round, kind=kind, catalog_id=catalog_id, change=change,
                              rationale=rationale, before_hash=before_hash, before_raw_hash=before_raw_hash,
                              before_us=before_us)

    def round_decision(self, *, number: int, decision: str, result_type: str, after_us: float | None,
                       delta_pct: float | None, error_output: str, notes: str, restored_hash: str) -> int:
        return self._row("round_decisions", number=number, decision=decision, result_type=result_type,
                         after_us=after_us, delta_pct=delta_pct, error_output=error_output, notes=notes,
                         restored_hash=restored_hash)

    def checklist_mark(self, *, stage_group: str, stage: str | None, catalog_id: str, status: str, reason: str,
                       round: int | None) -> int:
        return self._row("checklist_marks", stage_group=stage_group, stage=stage, catalog_id=catalog_id,
                         status=status, reason=reason, round=round)

    def trial(self, *, batch: str, candidate: str, round: int | None, outcome: str, operator_time_us: float | None,
              info: dict[str, Any]) -> int:
        """One candidate of a batch (``run_candidates``); an invalid one has no round."""
        return self._row("trials", batch=batch, candidate=candidate, round=round, outcome=outcome,
                         operator_time_us=operator_time_us, info=info)
