"""The recorder (``tools/session/recorder.py``) is the one writer of a session's rows: each kind of row lands in its
table with the session, the recorder's time and exactly the fields given; rows written in one transaction commit
together or not at all; no module of ``tools/operations/`` names a table to write to."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pypto_tune.tools.session.ledger import Ledger
from pypto_tune.tools.session.recorder import Recorder
from pypto_tune.tools.session.state import derive_state, load_rows

OPERATIONS = Path(__file__).resolve().parents[2] / "tools" / "operations"
AT = "2026-12-06T10:00:00.000000+00:00"


def _started(tmp_path: Path) -> tuple[Recorder, Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    rec = Recorder(ledger, "s1", clock=lambda: AT)
    with rec.transaction() as tx:
        tx.session(workspace=str(tmp_path), operator="op", operator_files=["op.py"], test_command=["python", "t.py"],
                   shell=False, run_mode="sim", goal_kind="speedup", goal_value=1.2, timeout_s=60.0,
                   device_ids=["0"], time_limit_h=1.0, repeats=1, original_sources={"op.py": "X = 1\n"},
                   original_hash="h0", original_raw_hash="r0", config={})
        tx.transition(level="state", from_value=None, to_value="S1_SETUP", reason="started", summary={})
    return rec, ledger


def test_each_row_lands_in_its_table_with_the_session_and_the_recorders_time(tmp_path: Path) -> None:
    rec, ledger = _started(tmp_path)
    rec.refusal(tool="apply_tuning_patch", rule="measure-first", message="collect first")
    rec.env_check(batch=1, name="python", ok=True, detail="3.11", at="2026-12-06T09:00:00.000000+00:00")
    rec.patch(kind="debug-on", round_no=None, before={"op.py": "X = 1\n"}, after={"op.py": "X = 2\n"}, note="n")
    rows = load_rows(ledger, "s1")
    assert rows["sessions"][0]["created_at"] == AT and rows["sessions"][0]["goal_value"] == 1.2
    assert [(r["tool"], r["rule"], r["at"]) for r in rows["refusals"]] == [("apply_tuning_patch", "measure-first", AT)]
    assert rows["env_checks"][0]["at"] == "2026-12-06T09:00:00.000000+00:00"  # a row that carries its own time
    patch = rows["patches"][0]
    assert (patch["kind"], patch["at"], patch["before_raw_hash"] != patch["after_raw_hash"]) == ("debug-on", AT, True)
    assert "+X = 2" in patch["diff"]
    assert derive_state(rows).level1 == "S1_SETUP"


def test_rows_of_one_transaction_commit_together_or_not_at_all(tmp_path: Path) -> None:
    rec, ledger = _started(tmp_path)
    with pytest.raises(RuntimeError), rec.transaction() as tx:
        tx.round_opened(number=1, stage="FRONTEND", outer_round=1, kind="config", catalog_id="F-1", change="a",
                        rationale="r", before_hash="h0", before_raw_hash="r0", before_us=10.0)
        raise RuntimeError("cut off before the patch row")
    assert load_rows(ledger, "s1")["rounds"] == []
    with pytest.raises(TypeError):
        with rec.transaction() as tx, tx.transaction():
            pass


def test_no_operation_names_a_table_to_write_to() -> None:
    writes = []
    for path in sorted(OPERATIONS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "insert"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                writes.append(f"{path.name}:{node.lineno} {node.args[0].value}")
    assert writes == [], "write through the session's Recorder (tools/session/recorder.py): " + ", ".join(writes)
