"""The pure decisions behind the fault handling, and the one check every operator-file write passes (no run here):

* which decided rounds a ledger charged to runs the server discarded (``tools/session/discarded.py``);
* how a concurrent failure or a SQLite error reaches the agent (``tools/errors.py::domain_error``,
  ``tools/session/ledger.py::ledger_fault``);
* ``SessionContext.write`` for each write path's tool: an edit nobody recorded is refused (or, for the reverts,
  copied to quarantine first); the server's own interrupted write is not an edit.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pypto_tune.tools.errors import GateRefusal, LedgerError, ResourceError, domain_error
from pypto_tune.tools.operations.base import UnrecordedEdit
from pypto_tune.tools.service import TuningService
from pypto_tune.tools.session.discarded import VOID_FIELD, charged_discards, voided_rounds
from pypto_tune.tools.session.ledger import ledger_fault
from tests.conftest import make_workspace, sim_command

pytestmark = pytest.mark.process


def _rows(**tables: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    base: dict[str, list[dict[str, Any]]] = {t: [] for t in ("runs", "round_decisions", "precision_records",
                                                             "measurements", "corrections")}
    return {**base, **tables}


INTERPRETER = ["interpreter added: /venv/lib/site-packages/unrelated_pkg"]


def test_a_round_failed_only_on_discarded_runs_is_charged_wrongly_and_voided_once() -> None:
    rows = _rows(
        runs=[{"id": 1, "tampered": INTERPRETER}, {"id": 2, "tampered": []}, {"id": 3, "tampered": INTERPRETER}],
        round_decisions=[{"number": 5, "decision": "failed"}, {"number": 6, "decision": "failed"},
                         {"number": 7, "decision": "failed"}, {"number": 8, "decision": "reverted"}],
        precision_records=[
            {"round": 5, "verdict": "error", "run_id": 1},   # the server discarded its only run: charged wrongly
            {"round": 6, "verdict": "failed", "run_id": 2},  # a failure of its own code: stays failed
            {"round": 7, "verdict": "passed", "run_id": 2}],
        measurements=[{"round": 7, "valid": False, "run_ids": [3]}])  # its measurement run was discarded
    charged = charged_discards(rows)
    assert set(charged) == {5, 7} and "interpreter's files changed" in charged[5]
    rows["corrections"] = [{"field": VOID_FIELD, "after_value": {"rounds": [5, 7], "status": "invalid"}}]
    assert voided_rounds(rows) == {5, 7} and charged_discards(rows) == {}


def test_a_round_with_a_failure_of_its_own_beside_a_discarded_run_stays_failed() -> None:
    rows = _rows(runs=[{"id": 1, "tampered": INTERPRETER}, {"id": 2, "tampered": []}],
                 round_decisions=[{"number": 3, "decision": "failed"}],
                 precision_records=[{"round": 3, "verdict": "error", "run_id": 1},
                                    {"round": 3, "verdict": "failed", "run_id": 2}])
    assert charged_discards(rows) == {}


def test_a_batch_failing_in_a_task_group_reaches_the_agent_as_its_cause() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/ws/.pypto-tune/exec/r3/softmax.py")
    group = ExceptionGroup("unhandled errors in a TaskGroup", [ExceptionGroup("inner", [full])])
    err = domain_error(group)
    assert isinstance(err, ResourceError) and "disk is full" in str(err) and full.filename in str(err)
    ledger = LedgerError("the disk holding /ws/.pypto-tune/ledger.sqlite3 is full")
    assert domain_error(ExceptionGroup("g", [ValueError("a bug"), ledger])) is ledger
    assert domain_error(ExceptionGroup("g", [ValueError("a bug")])) is None  # a bug stays a bug


@pytest.mark.parametrize("sqlite_text, code, words", [
    ("database disk image is malformed", "ledger-damaged", ("damaged", "restore", ".recover")),
    ("database or disk is full", "disk-full", ("full", "free space")),
    ("attempt to write a readonly database", "ledger-readonly", ("cannot be written", "writable")),
])
def test_a_sqlite_failure_names_the_file_its_cause_and_the_way_out(sqlite_text: str, code: str,
                                                                   words: tuple[str, ...]) -> None:
    path = Path("/ws/.pypto-tune/ledger.sqlite3")
    err = ledger_fault(path, sqlite3.DatabaseError(sqlite_text), "cannot open the ledger")
    assert err.code == code and str(path) in str(err) and all(w in str(err) for w in words), str(err)


@pytest.mark.parametrize("tool", ["apply_tuning_patch", "revert", "run_candidates", "enable_runtime_debug",
                                  "render_report", "heal"])
def test_no_write_path_goes_over_an_edit_nobody_recorded(tmp_path: Path, tool: str) -> None:
    ws = make_workspace(tmp_path)
    svc = TuningService(default_workspace=ws)
    sid = svc.start_session(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(),
                            run_mode="sim", goal_speedup=2.0).session_id
    h = svc.ctx.find(sid)
    st = svc.ctx.state(h, sid)
    recorded = st.expected_sources["softmax.py"]
    target = {"softmax.py": recorded.replace("TILE_B = 4", "TILE_B = 8")}
    edited = recorded + "\n# a person's note\n"
    (ws / "softmax.py").write_text(edited)
    with pytest.raises(UnrecordedEdit) as refused:
        svc.ctx.write(h, st, target, tool)
    assert isinstance(refused.value, GateRefusal) and refused.value.rule == "drift"
    assert "softmax.py changed since the server recorded it" in str(refused.value)
    assert (ws / "softmax.py").read_text() == edited  # nothing written, the edit is still there
    assert not h.ledger.rows("write_intents", sid)  # nor an intent recorded for a write that did not happen

    # the server's own bytes (an interrupted write _heal undoes) are not an edit
    (ws / "softmax.py").write_text(target["softmax.py"])
    svc.ctx.write(h, st, {"softmax.py": recorded}, tool, ours=target)
    assert (ws / "softmax.py").read_text() == recorded


def test_a_revert_keeps_a_copy_of_the_edit_it_writes_over(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    svc = TuningService(default_workspace=ws)
    sid = svc.start_session(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(),
                            run_mode="sim", goal_speedup=2.0).session_id
    h = svc.ctx.find(sid)
    st = svc.ctx.state(h, sid)
    edited = st.expected_sources["softmax.py"].replace("TILE_B = 4", "TILE_B = 2  # tried by hand")
    (ws / "softmax.py").write_text(edited)
    svc.ctx.write(h, st, st.expected_sources, "revert_patch", over_edit="quarantine")
    assert (ws / "softmax.py").read_text() == st.expected_sources["softmax.py"]
    copies = list((ws / ".pypto-tune" / "quarantine").rglob("softmax.py"))
    assert [c.read_text() for c in copies] == [edited]


def _result(output: str, exit_code: int) -> Any:
    from pypto_tune.tools.running.runner import RunResult

    return RunResult(argv=["python3", "softmax.py"], cwd="/ws", exit_code=exit_code, signal=None, timed_out=False,
                     duration_s=0.1, started_at=0.0, ended_at=0.1, output_head=output, output_truncated=False,
                     output_bytes=len(output.encode()), env_keys=[])


@pytest.mark.parametrize("entry, words", [
    ("sandbox bwrap: Can't find source path /opt/cann: No such file or directory", ("sandbox", "never ran")),
    ("resource /ws has 0 bytes free", ("disk filled", "free space")),
    ("interpreter added: /venv/lib/site-packages/x.pth", ("interpreter's files changed",)),
])
def test_a_run_the_server_discarded_is_no_failure_of_its_code(entry: str, words: tuple[str, ...]) -> None:
    from pypto_tune.tools.operations.runs import RunOutcome, _sandbox_failure, check_run

    out = RunOutcome(result=_result("PRECISION: passed\n", 0), run_id=1, dirs=[], tampered=[entry])
    checked = check_run(out, "sim")
    assert checked.result_type == "discarded" and all(w in checked.reason for w in words), checked.reason
    assert _sandbox_failure(_result("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n", 1))
    assert not _sandbox_failure(_result("bwrap: said by the test, which passed\n", 0))
    assert not _sandbox_failure(_result("Traceback (most recent call last):\n", 1))
