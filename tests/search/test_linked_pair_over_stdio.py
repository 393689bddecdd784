"""A plateau of two linked knobs crossed in one round (rule ``linked-pair``), over MCP stdio, real simulator.

The operator is written here: a row normalisation of x[64, 512] in blocks of ``BLOCK`` rows
(``for i in pypto.loop(n // BLOCK)``, a view of ``BLOCK`` rows) under one vector tile, shipped at ``BLOCK = 1`` with
a (1, 512) tile — the plateau of domain.md H.1. From there each knob alone does not gain: a tile of 2 rows is
clipped to the one-row view (the same run), and a 2-row block under the 1-row tile is slightly slower. Both together
are faster by far (the grid of ``fixtures/operators/rmsnorm_grid``, the same kernel: 6.44 µs → 2.63 µs).

The session shows, in order:

* a manual round may change two knobs only as a linked pair: a diff moving the block and a jit option is refused
  (GATE one-change), as is the linked pair with a problem size or a third knob riding along; the linked pair's own
  diff opens one round that names both knobs (then rolled back unmeasured);
* each knob alone, run from the kept state, is not kept (no gain or slower);
* ``propose_candidates`` then offers the pair as one candidate, from the plateau it measured, and
  ``run_candidates`` keeps it in one round: one ledger round whose patch names both knobs and whose admission is a
  pair, and the status board shows it as one change ``BLOCK … + set_vec_tile_shapes …``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.server.mcp_client import Session, connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

OP = "rownorm.py"
BLOCK = f"{OP}:BLOCK"
TILE = f"{OP}:rownorm.set_vec_tile_shapes#1"
STITCH = f"{OP}:rownorm.runtime_options.stitch_function_max_num"
OPERATOR = '''"""Row normalisation of x[64, 512] FP32 in blocks of BLOCK rows, one vector tile over each block's view."""
import argparse
import sys

import pypto
import torch

ROWS, HIDDEN = 64, 512  # the problem, not knobs
BLOCK = 1
EPS = 1e-6


def _parse_run_mode() -> str:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-mode", choices=("sim", "npu"), default="sim")
    return parser.parse_args().run_mode


RUN_MODE_NAME = _parse_run_mode()
RUN_MODE = pypto.RunMode.SIM if RUN_MODE_NAME == "sim" else pypto.RunMode.NPU


@pypto.frontend.jit(runtime_options={"run_mode": RUN_MODE, "stitch_function_max_num": 128})
def rownorm(
    x: pypto.Tensor([ROWS, HIDDEN], pypto.DT_FP32),
    y: pypto.Tensor([ROWS, HIDDEN], pypto.DT_FP32),
):
    pypto.set_vec_tile_shapes(1, 512)
    n = ROWS
    for i in pypto.loop(n // BLOCK, name="LOOP_ROWS", idx_name="i"):
        xb = pypto.view(x, [BLOCK, HIDDEN], [i * BLOCK, 0])
        ms = pypto.sum(xb * xb, -1, keepdim=True) / HIDDEN
        y[i * BLOCK:(i + 1) * BLOCK, :] = xb / pypto.sqrt(ms + EPS)


def main() -> int:
    try:
        torch.manual_seed(0)
        x = torch.randn(ROWS, HIDDEN, dtype=torch.float32)
        y = torch.zeros(ROWS, HIDDEN, dtype=torch.float32)
        rownorm(x, y)
        print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
        return 0
    except Exception as exc:  # the verdict line is the contract with the server
        print(f"PRECISION: error: {type(exc).__name__}: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
'''


def _diff(text: str, *swaps: tuple[str, str]) -> str:
    """A unified diff of the operator's current ``text`` (the server added its debug switch) with each ``old``
    replaced by ``new``."""
    import difflib

    after = text
    for old, new in swaps:
        assert after.count(old) == 1, old
        after = after.replace(old, new)
    return "".join(difflib.unified_diff(text.splitlines(keepends=True), after.splitlines(keepends=True),
                                        f"a/{OP}", f"b/{OP}"))


def _pair(block: int, tile: str) -> list[tuple[str, str]]:
    return [("BLOCK = 1\n", f"BLOCK = {block}\n"), ("set_vec_tile_shapes(1, 512)", f"set_vec_tile_shapes({tile})")]


def _single(knob: str, value: Any, catalog_id: str) -> dict[str, Any]:
    """A single change in propose_candidates' shape (the test chooses the values that make the plateau)."""
    return {"id": f"hand-{knob.rsplit('.', 1)[-1]}", "knob": knob, "value": value, "catalog_id": catalog_id,
            "why": "written by the test: one half of the linked pair, alone", "evidence": {}}


async def _ledger(s: Session, sid: str) -> dict[str, list[dict[str, Any]]]:
    text = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
    return json.loads(text)["tables"]


def test_a_plateau_of_two_linked_knobs_is_crossed_in_one_round(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / OP).write_text(OPERATOR)

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, [OP], [sys.executable, OP, "--run-mode", "sim"])
            base_us = (await s.ok("get_status", session_id=sid))["best_us"]

            # a manual round: two knobs only as the pair the run links; nothing else rides along
            text = (ws / OP).read_text()
            stitch = ('"stitch_function_max_num": 128', '"stitch_function_max_num": 256')

            async def refused(*swaps: tuple[str, str]) -> str:
                return await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-3", rationale="attack",
                                       diff=_diff(text, *swaps))

            unlinked = await refused(_pair(2, "2, 512")[0], stitch)
            assert "GATE one-change" in unlinked and "not a linked pair" in unlinked
            assert "GATE one-change" in await refused(*_pair(2, "2, 512"), ("ROWS, HIDDEN = 64, 512",
                                                                            "ROWS, HIDDEN = 128, 512"))
            third = await refused(*_pair(2, "2, 512"), stitch)
            assert "GATE one-change" in third and "3 knobs" in third
            manual = await s.ok("apply_tuning_patch", session_id=sid, catalog_id="F-3", rationale="the pair by hand",
                                diff=_diff(text, *_pair(4, "4, 512")))
            assert {c["knob_id"] for c in manual["knob_changes"]} == {BLOCK, TILE}
            assert "(linked pair)" in manual["message"]
            await s.ok("revert_patch", session_id=sid, notes="rolled back unmeasured: the search's turn")
            assert (ws / OP).read_text() == text

            # each knob alone, from the kept state: neither is kept
            alone = await s.ok("run_candidates", session_id=sid, candidates=[
                _single(BLOCK, 2, "F-3"), _single(TILE, [2, 512], "F-10")])
            assert alone["refused"] == [] and alone["winner_round"] is None, alone
            by_knob = {t["knob"]: t for t in alone["trials"]}
            assert by_knob[BLOCK]["result_type"] in ("no-gain", "regression")
            assert by_knob[TILE]["result_type"] in ("no-gain", "regression")

            # the search offers the pair as one candidate, from the plateau it measured
            prop = await s.ok("propose_candidates", session_id=sid, limit=16)
            found = [c for c in prop["candidates"] if c["kind"] == "pair"]
            plateau = [c for c in found if c["evidence"]["pair"]["trigger"] == "plateau"]
            assert plateau, [(c["knob"], c["value"], c["kind"]) for c in prop["candidates"]]
            pair = plateau[0]
            assert pair["knob"] == BLOCK and pair["value"] == 2 and pair["before"] == 1
            assert pair["pair_with"]["knob"] == TILE and pair["pair_with"]["value"] == [2, 512]
            assert "plateau measured from this kept state" in pair["why"]

            ran = await s.ok("run_candidates", session_id=sid, candidates=[pair["id"]])
            (trial,) = ran["trials"]
            assert trial["decision"] == "kept" and trial["pair_with"]["knob"] == TILE, trial
            assert ran["winner_round"] == trial["round"] and ran["best_us"] < base_us / 2
            assert (ws / OP).read_text().count("BLOCK = 2\n") == 1
            assert "pypto.set_vec_tile_shapes(2, 512)" in (ws / OP).read_text()

            # one ledger round, its patch naming both knobs, its admission a pair
            tables = await _ledger(s, sid)
            n = trial["round"]
            (rnd,) = [r for r in tables["rounds"] if r["number"] == n]
            assert rnd["change"] == f"{BLOCK}: 1 → 2 + {TILE}: [1, 512] → [2, 512]"
            patches = [p for p in tables["patches"] if p["round"] == n and p["kind"] == "trial"]
            assert [(c["knob_id"], c["before"], c["after"]) for c in patches[0]["knob_changes"]] == [
                (BLOCK, 1, 2), (TILE, [1, 512], [2, 512])]
            assert any(a["verdict"] == "pair" and a["info"]["link"] for a in tables["admissions"])
            board = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/status")).contents[0].text
            assert f"{BLOCK}: 1 → 2 + {TILE}: [1, 512] → [2, 512]" in board

    anyio.run(scenario)
