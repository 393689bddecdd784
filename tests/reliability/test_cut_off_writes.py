"""A crash between writing an operator file and recording it (the SIGKILL trials hit this in render_report).

The server records a write intent before every write; the next server recognises its predecessor's cut-off write
and undoes it, so the session resumes on the sources the ledger knows. Anything else on disk is still an external
edit (drift) and is left for the agent to resolve.
"""

from __future__ import annotations

from pathlib import Path

from pypto_tune.tools.session.ledger import Ledger
from pypto_tune.tools.service import TuningService

from ..conftest import sim_command

import pytest

pytestmark = pytest.mark.process


def _start(ws: Path) -> tuple[TuningService, str]:
    svc = TuningService()
    r = svc.start_session(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(),
                          run_mode="sim", goal_speedup=2.0)
    return svc, r.session_id


def _crash_after_write(svc: TuningService, sid: str, new_text: str, tool: str) -> None:
    """What a SIGKILL right after ``write_sources`` leaves: the intent and the file, no record of the write."""
    h = svc.ctx.find(sid)
    st = svc.ctx.state(h, sid)
    svc.ctx.write(h, st, {"softmax.py": new_text}, tool)
    _die(svc, sid)


def _die(svc: TuningService, sid: str) -> None:
    """The server goes away: the kernel drops its lock, its ledger connection closes."""
    h = svc.ctx.find(sid)
    h.lock.release()
    h.ledger.close()


def _patches(ws: Path, sid: str) -> list:
    ledger = Ledger.for_workspace(ws)
    try:
        return ledger.rows("patches", sid)
    finally:
        ledger.close()


def test_a_patch_write_cut_off_by_sigkill_is_undone_when_the_session_resumes(softmax_ws: Path) -> None:
    original = (softmax_ws / "softmax.py").read_text()
    svc, sid = _start(softmax_ws)
    _crash_after_write(svc, sid, original.replace("TILE_B = 4", "TILE_B = 2"), "apply_tuning_patch")
    assert "TILE_B = 2" in (softmax_ws / "softmax.py").read_text()

    svc2, sid2 = _start(softmax_ws)
    assert sid2 == sid
    assert (softmax_ws / "softmax.py").read_text() == original
    assert not svc2.get_status(sid).drift
    last = _patches(softmax_ws, sid)[-1]
    assert last["kind"] == "drift-revert" and "undid apply_tuning_patch's write" in last["note"]
    # the undo superseded the intent: resuming again changes nothing more
    _die(svc2, sid)
    _start(softmax_ws)
    assert len(_patches(softmax_ws, sid)) == 1


def test_an_external_edit_is_still_drift_after_resume(softmax_ws: Path) -> None:
    svc, sid = _start(softmax_ws)
    _die(svc, sid)
    edited = (softmax_ws / "softmax.py").read_text() + "\n# edited by hand\n"
    (softmax_ws / "softmax.py").write_text(edited)

    svc2, _ = _start(softmax_ws)
    assert svc2.get_status(sid).drift
    assert (softmax_ws / "softmax.py").read_text() == edited
    assert _patches(softmax_ws, sid) == []


def test_an_edit_made_over_a_cut_off_write_is_not_undone(softmax_ws: Path) -> None:
    original = (softmax_ws / "softmax.py").read_text()
    svc, sid = _start(softmax_ws)
    _crash_after_write(svc, sid, original.replace("TILE_B = 4", "TILE_B = 2"), "render_report")
    by_hand = original.replace("TILE_B = 4", "TILE_B = 8")
    (softmax_ws / "softmax.py").write_text(by_hand)

    svc2, _ = _start(softmax_ws)
    assert svc2.get_status(sid).drift
    assert (softmax_ws / "softmax.py").read_text() == by_hand
