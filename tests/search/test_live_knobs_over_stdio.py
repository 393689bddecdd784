"""Every live knob is a candidate, over MCP stdio with the real server and the real simulator, on an operator written
for it (``tests/knob_operators.py``'s ``rows_op.py``: PyPTO's upstream patterns, each once).

One session:

* ``list_knobs`` says which ``loop_unroll`` variant ran: at 64 rows the config's ``[2, 1]`` runs factor 2 (32
  iterations) and only traces factor 1, so the tile call under ``if n == 1:`` is dead, and the unroll list is live;
* ``propose_candidates(knob="unroll_list")`` — the knob name the catalogue's F-8 gives — answers with the config
  field the loop reads (``RowsConfig(unroll_list)``, built in the test), and the first candidate runs as a gated
  round: admitted, verified, measured, one ledger round naming the config field;
* no answer of the session proposes a tile the unified buffer cannot hold at the dtypes that ran: the sigmoid
  kernel casts its FP16 input to FP32, so ``TILE`` stays within 96 KB of FP32 ([32, 1024] — 64 KB of FP16, 128 KB of
  FP32 — fails to compile in SIM with ``Errcode: FFFFFF``), and the admission refuses it when the agent asks;
* on the same server, the config as a plain class whose ``__init__`` stores the list (``self.unroll_list = [2,
  1]``, PyPTO's arctic LSTM model's way): listed live and tunable as ``RowsConfig.unroll_list``, proposed when
  ``unroll_list`` is asked for, and run as a gated round that writes the ``__init__``'s literal;
* a rank-3 group tile over a [1, 4, 40] reshape (PyPTO's GLM expert selection) gets candidates within what ran on
  every axis — before, values past its middle axis of 4 went out unadmitted and were refused at run, one by one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from pypto_tune.tools.patching.effective import UB_TILE_MAX_BYTES
from tests.knob_operators import ROWS_CMD, ROWS_FILE, write_rows_op
from tests.server.mcp_client import connect
from tests.sessions import to_frontend

pytestmark = [pytest.mark.sim, pytest.mark.slow]

CONFIG = "rows_op.py:test_rows.RowsConfig(unroll_list)"
LOOP = "rows_op.py:build_scale.scale_kernel.loop_unroll[ROW_BLOCKS].unroll_list"
ONLY_TRACED = "rows_op.py:build_scale.scale_kernel.set_vec_tile_shapes#2"
TILE = "rows_op.py:TILE"


def _tiles_fit(answers: list[dict[str, Any]]) -> list[list[int]]:
    tiles = [c["value"] for a in answers for c in a["candidates"] if c["knob"] == TILE]
    assert all(rows * cols * 4 <= UB_TILE_MAX_BYTES for rows, cols in tiles), tiles
    return tiles


def test_a_config_unroll_list_is_proposed_and_run_and_no_tile_past_the_buffer_is(tmp_path: Path) -> None:
    ws = write_rows_op(tmp_path / "ws")

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, [ROWS_FILE], [sys.executable, *ROWS_CMD])

            knobs = await s.ok("list_knobs", session_id=sid)
            live = {k["id"]: k for k in knobs["knobs"]}
            dead = {k["id"]: k for k in knobs["dead_knobs"]}
            assert "2 (32 iterations)" in live[LOOP]["unroll"] and "1 traced and compiled, never executed" in \
                live[LOOP]["unroll"]
            assert live[CONFIG]["effective"] == [[2, 1]]
            assert ONLY_TRACED in dead and "never execute" in dead[ONLY_TRACED]["why"]

            answers = [await s.ok("propose_candidates", session_id=sid, knob="unroll_list", limit=4)]
            unroll = answers[0]["candidates"]
            assert unroll and {c["knob"] for c in unroll} == {CONFIG}, answers[0]
            assert all(sorted(set(c["value"]), reverse=True) != [2, 1] for c in unroll)
            answers.append(await s.ok("propose_candidates", session_id=sid, limit=64))
            assert CONFIG in {c["knob"] for c in answers[-1]["candidates"]}
            assert ONLY_TRACED not in {c["knob"] for c in answers[-1]["candidates"]}
            answers.append(await s.ok("propose_candidates", session_id=sid, knob=TILE, limit=64))
            tiles = _tiles_fit(answers)
            assert tiles and [32, 1024] not in tiles

            # the first unroll candidate as a gated round: admitted again, verified, measured, recorded
            first = unroll[0]
            ran = await s.ok("run_candidates", session_id=sid, candidates=[first["id"]])
            assert ran["refused"] == [] and len(ran["trials"]) == 1, ran
            trial, = ran["trials"]
            assert trial["knob"] == CONFIG and trial["verdict"] == "passed", trial
            assert trial["operator_time_us"] is not None and trial["operator_time_us"] > 0, trial  # measured
            text = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
            tables = json.loads(text)["tables"]
            row, = [t for t in tables["trials"] if t["batch"] == ran["batch"]]
            cand = json.loads(row["candidate"]) if isinstance(row["candidate"], str) else row["candidate"]
            assert cand["knob"] == CONFIG and cand["admitted"] is True and "unroll_list" in cand["diff"]
            assert row["round"] == trial["round"]

            # after the round, from whatever state is kept: still no tile past the buffer, and asked for by hand
            # the admission refuses it, naming the dtype after the cast
            _tiles_fit([await s.ok("propose_candidates", session_id=sid, knob=TILE, limit=64)])
            big = {"id": "hand-tile", "knob": TILE, "value": [32, 1024], "catalog_id": "F-10",
                   "why": "written by the test: 64 KB of FP16, 128 KB after the cast to FP32", "evidence": {}}
            refused = await s.ok("run_candidates", session_id=sid, candidates=[big])
            assert refused["trials"] == [] and len(refused["refused"]) == 1, refused
            assert "128 KB" in refused["refused"][0] and "DT_FP32" in refused["refused"][0]

            await _init_attribute_unroll_list(s, tmp_path / "init")
            await _rank_three_group_tile(s, tmp_path / "groups")

    anyio.run(scenario)


async def _init_attribute_unroll_list(s: Any, ws: Path) -> None:
    from tests.knob_operators import INIT_CFG_OP

    write_rows_op(ws, INIT_CFG_OP)
    sid = await to_frontend(s, ws, [ROWS_FILE], [sys.executable, *ROWS_CMD])
    live = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
    attr = "rows_op.py:RowsConfig.unroll_list"
    assert live[attr]["tunable"] and live[attr]["value"] == [2, 1] and live[attr]["effective"] == [[2, 1]], live
    answer = await s.ok("propose_candidates", session_id=sid, knob="unroll_list", limit=4)
    unroll = answer["candidates"]
    assert unroll and {c["knob"] for c in unroll} == {attr}, answer
    ran = await s.ok("run_candidates", session_id=sid, candidates=[unroll[0]["id"]])
    trial, = ran["trials"]
    assert trial["knob"] == attr and trial["verdict"] == "passed" and trial["operator_time_us"], trial
    tables = json.loads((await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text)
    row, = [t for t in tables["tables"]["trials"] if t["batch"] == ran["batch"]]
    cand = json.loads(row["candidate"]) if isinstance(row["candidate"], str) else row["candidate"]
    assert f"+        self.unroll_list = {unroll[0]['value']}" in cand["diff"], cand["diff"]


def test_a_tile_replaced_before_any_operation_used_it_is_dead_and_never_proposed(tmp_path: Path) -> None:
    """PyPTO's FFN pattern: the kernel sets a vector tile, runs a matmul, and the activation helper sets its own
    vector tile before its first vector operation. The kernel's tile — and the constant feeding it — change nothing
    measured (the FFN example's first two search trials measured exactly its baseline time), so list_knobs names
    them dead and why, and no proposal touches them; the helper's tile and the cube tile stay live."""
    from tests.knob_operators import SHADOW_CMD, SHADOW_FILE, SHADOW_OP, line_of

    ws = write_rows_op(tmp_path / "ws", SHADOW_OP, SHADOW_FILE)
    replaced, helper = line_of(SHADOW_OP, "set_vec_tile_shapes(*VEC_TILE)"), line_of(SHADOW_OP, "(16, 64)")
    cube = line_of(SHADOW_OP, "set_cube_tile_shapes")

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, [SHADOW_FILE], [sys.executable, *SHADOW_CMD])
            knobs = await s.ok("list_knobs", session_id=sid, detail="full")
            live = {(k["kind"], k["line"]): k for k in knobs["knobs"]}
            dead = {(k["kind"], k["line"]): k for k in knobs["dead_knobs"]}
            assert ("vec_tile", helper) in live and ("cube_tile", cube) in live, sorted(live)
            shadowed = dead[("vec_tile", replaced)]
            assert "no vector operation was built while its tile was in force" in shadowed["why"], shadowed
            constant = [k for k in knobs["dead_knobs"] if k["id"].endswith(":VEC_TILE")]
            assert constant and "replaced" in constant[0]["why"], knobs["dead_knobs"]
            gone = {shadowed["id"], constant[0]["id"]}
            answer = await s.ok("propose_candidates", session_id=sid, limit=64)
            proposed = {c["knob"] for c in answer["candidates"]}
            assert proposed and not proposed & gone, answer
            assert live[("vec_tile", helper)]["id"] in proposed or live[("cube_tile", cube)]["id"] in proposed

    anyio.run(scenario)


async def _rank_three_group_tile(s: Any, ws: Path) -> None:
    from tests.knob_operators import GROUPS_FILE, GROUPS_OP

    write_rows_op(ws, GROUPS_OP, GROUPS_FILE)
    sid = await to_frontend(s, ws, [GROUPS_FILE], [sys.executable, GROUPS_FILE, "--run-mode", "sim"])
    tile = f"{GROUPS_FILE}:groups_kernel.set_vec_tile_shapes#2"
    answer = await s.ok("propose_candidates", session_id=sid, knob=tile, limit=64)
    values = [c["value"] for c in answer["candidates"] if c["knob"] == tile]
    assert values and all(len(v) == 3 and v[0] <= 1 and v[1] <= 4 and v[2] <= 40 for v in values), values
