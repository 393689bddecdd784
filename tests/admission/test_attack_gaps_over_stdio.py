"""Issue #10, the gaps the first attack tests left open (see test_attacks_over_stdio.py for the nine attacks), each
over MCP stdio against the real server and the real simulator:

2  a block size held in a local variable of a factory-built kernel (upstream_softmax ``tile_b``) is tunable with one
   structured edit and with one diff; a value that drops rows or blocks nothing is refused on both paths (the
   server follows the factory's one call, ``build_softmax(shape)`` with a literal shape, to the axis length)
3  a cube tile with L1 % L0 != 0 is refused with the same legality reason as a structured edit and as a diff
2' the same block written as PyPTO's own examples write it over a dynamic axis (``b = x.shape[0]``,
   ``b_loop = b // tile_b``, ``pypto.loop(b_loop)``): the run records the trip count as a symbol and the count
   reaches the loop through a name, the indirection an agent could use to slip a block past the loop check; a block
   past the axis the test passed (64 > 32, zero iterations) or one that drops rows is refused on both paths; counted
   by ceil division (``(b + tile_b - 1) // tile_b``, PyPTO's GLM gate), a block past the axis is refused alike and
   one that leaves a tail (3 of 32) is admitted
2" the extent of a view that no loop moves along an axis (PyPTO's attention examples: ``head = 8`` in
   ``[tile, head, q_len, dim]`` at ``[b_offset, 0, 0, 0]``): a problem size, not a tile — SIM checks no values, and
   fewer heads ran faster; no knob, refused on both paths, and so is a valid_shape smaller than the view along it
2‴ a constant valid_shape along the axis a loop moves, where the block is the kernel's int argument (PyPTO's
   dynamic_mul): only the run knows the block, and one row of each block of 8 was admitted "unchecked"; now judged
   on the view's shape as it ran — shorter or longer refused, the view's own extent admitted (and the valid_shape
   written on the view's second line is live, not "dead"); a new expression there, which the server cannot
   evaluate before the run, is refused; and a config's block that a constant valid part no longer covers (8 of
   every 16 rows) is refused on both paths
2⁗ an offset written through a name — ``at = [lo, 0]`` passed to pypto.assemble, ``col = 0`` in a view's offsets,
   each through a copy (``edge = at``, ``col = home``) — says where results go or which columns are read: no knob (it
   was one as an int beside run-time values, and through a copy), and a change of it is refused as an edit and as a
   diff; a tile constant that also reaches an assemble's offset through arithmetic no loop index takes part in
   (``COLS * 1``) stays a knob, and a change that would move the write is refused on both paths
(4 at S3 — no adoption before tuning opens — and 6 — leaving the last configuration stage early ends the session —
are in test_algorithm_stage_over_stdio.py, on the session that walks the configuration stages once for both branches;
7 for a round that produced no usable data — never retried, in either form — is in test_attacks_over_stdio.py, on the
softmax session that reaches SWIMLANE_1 anyway)

The operators' sessions run on one server (its sessions each name their workspace); each is played once by a module
fixture and checked by its test (tests/sessions.Chapters).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import pytest

from tests.admission.test_attacks_over_stdio import _diff, _round, _to_frontend
from tests.conftest import OPERATORS, sim_command
from tests.knob_operators import (BLOCK_ARG_FILE, BLOCK_ARG_OP, CFG_BLOCK_FILE, CFG_BLOCK_OP, DYN_AXIS_FILE, DYN_AXIS_OP,
                                  DYN_CEIL_OP, HEADS_FILE, HEADS_OP, OFFSET_FILE, OFFSET_OP, WRITE_FILE, WRITE_OP)
from tests.server.mcp_client import Session, connect
from tests.sessions import Chapters

pytestmark = pytest.mark.sim

TILE_B = "softmax_op.py:build_softmax.softmax_kernel.tile_b"
CUBE = "matmul_act.py:matmul_silu.set_cube_tile_shapes#1"
DYN_BLOCK = f"{DYN_AXIS_FILE}:add_kernel.tile_b"
HEADS = f"{HEADS_FILE}:heads_kernel.heads"


def _copy(tmp_path: Path, name: str) -> Path:
    ws = tmp_path / name
    shutil.copytree(OPERATORS / name, ws, ignore=shutil.ignore_patterns("*.json", "__pycache__", "README.md"))
    return ws


async def _refused_both_ways(s: Session, sid: str, knob: str, value: object, file: str, src: str, old: str,
                             new: str, *, catalog_id: str, says: tuple[str, ...]) -> None:
    """The change is refused with the legality gate's reason alike as a structured edit and as a diff (``old`` →
    ``new`` in ``file``), and the file is left as it was."""
    for way in ({"knob": knob, "value": value}, {"diff": _diff(file, src, src.replace(old, new))}):
        msg = await s.refused("apply_tuning_patch", session_id=sid, catalog_id=catalog_id, rationale="attack", **way)
        assert "GATE legality:" in msg and all(x in msg for x in says), msg


async def _kernel_local_block_size(s: Session, ws: Path) -> None:
    op = ws / "softmax_op.py"
    cmd = [sys.executable, "softmax_op.py", "softmax_op.py::test_softmax", "--run_mode", "sim"]
    sid = await _to_frontend(s, ws, ["softmax_op.py"], cmd)
    knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
    tb = knobs[TILE_B]
    assert tb["kind"] == "local_constant" and tb["tunable"] and tb["value"] == 4 and "F-3" in tb["catalog_ids"]
    assert not knobs["softmax_op.py:test_softmax.shape"]["tunable"]  # the problem size is never a knob

    src = op.read_text()
    # 3-on-this-form: batch reaches the kernel only through build_softmax(shape, ...), called once with
    # shape = (32, 32, 256): the server follows that call, so a block that drops rows (32 % 3 = 2) or
    # blocks nothing (64 > 32 rows: zero iterations) is refused on both paths, not measured
    for value, why in ((3, "the last 2 rows would never be computed"), (64, "exceeds the axis length 32")):
        await _refused_both_ways(s, sid, TILE_B, value, "softmax_op.py", src, "tile_b = 4 ", f"tile_b = {value} ",
                                 catalog_id="F-3", says=(why, "batch // tile_b"))
    assert op.read_text() == src

    # 2: a legal local block size is admitted as one structured edit, measured and recorded ...
    r1 = await _round(s, sid, knob=TILE_B, value=8, catalog_id="F-3")
    assert r1["round"] == 1 and r1["decision"] in ("kept", "reverted") and r1["after_us"] is not None
    # ... and as one diff
    src = op.read_text()
    r2 = await _round(s, sid, catalog_id="F-3",
                      diff=_diff("softmax_op.py", src, src.replace("tile_b = 4 ", "tile_b = 2 ").replace(
                          "tile_b = 8 ", "tile_b = 2 ")))
    assert r2["round"] == 2 and r2["decision"] in ("kept", "reverted") and r2["after_us"] is not None
    ledger = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
    assert ledger.count(TILE_B) >= 2  # each round recorded under the local's knob id


async def _dynamic_axis_block(s: Session, ws: Path) -> None:
    op = ws / DYN_AXIS_FILE
    sid = await _to_frontend(s, ws, [DYN_AXIS_FILE], [sys.executable, DYN_AXIS_FILE, "--run-mode", "sim"])
    knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
    assert knobs[DYN_BLOCK]["tunable"] and knobs[DYN_BLOCK]["value"] == 1
    src = op.read_text()
    # the axis is the input's first dimension at the shape the test passed (32), read through b = x.shape[0]
    for value, why in ((64, "exceeds the axis length 32"), (3, "the last 2 rows would never be computed")):
        await _refused_both_ways(s, sid, DYN_BLOCK, value, DYN_AXIS_FILE, src, "tile_b = 1\n", f"tile_b = {value}\n",
                                 catalog_id="F-3", says=(why,))
    assert op.read_text() == src, "a refused change must not touch the file"
    # ... and a block that divides the axis is admitted, checked on that axis (the refusals opened no round)
    ok = await s.ok("apply_tuning_patch", session_id=sid, knob=DYN_BLOCK, value=8, catalog_id="F-3",
                    rationale="legal")
    assert ok["round"] == 1 and "tile_b = 8" in op.read_text()
    assert any("axis 32 (from the run) in 4 block(s) of 8" in c for c in ok["legality_checked"]), ok


async def _ceil_dynamic_axis_block(s: Session, ws: Path) -> None:
    """The loop counts its blocks by ceil division, ``(b + tile_b - 1) // tile_b``, as PyPTO's GLM gate does over a
    dynamic batch: any block up to the axis covers it, a block past it is checked on the axis the test passed."""
    op = ws / DYN_AXIS_FILE
    sid = await _to_frontend(s, ws, [DYN_AXIS_FILE], [sys.executable, DYN_AXIS_FILE, "--run-mode", "sim"])
    src = op.read_text()
    await _refused_both_ways(s, sid, DYN_BLOCK, 64, DYN_AXIS_FILE, src, "tile_b = 1\n", "tile_b = 64\n",
                             catalog_id="F-3", says=("exceeds the axis length 32",))
    assert op.read_text() == src, "a refused change must not touch the file"
    ok = await s.ok("apply_tuning_patch", session_id=sid, knob=DYN_BLOCK, value=3, catalog_id="F-3",
                    rationale="legal: the last block is the tail")
    assert ok["round"] == 1 and "tile_b = 3" in op.read_text()
    assert any("axis 32 (from the run) in 11 block(s) of 3" in c for c in ok["legality_checked"]), ok


async def _fixed_view_extent(s: Session, ws: Path) -> None:
    op = ws / HEADS_FILE
    sid = await _to_frontend(s, ws, [HEADS_FILE], [sys.executable, HEADS_FILE, "--run-mode", "sim"])
    src = op.read_text()
    knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid, detail="full"))["knobs"]}
    assert HEADS not in knobs  # a kernel local that reaches only the problem is no knob
    by_knob = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-3", rationale="fewer heads",
                              knob=HEADS, value=2)
    assert f"no knob {HEADS!r}" in by_knob, by_knob
    by_diff = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-3", rationale="fewer heads",
                              diff=_diff(HEADS_FILE, src, src.replace("heads = 8\n", "heads = 2\n")))
    assert "GATE one-change: the change is not a knob change" in by_diff, by_diff
    # ... nor its valid part along that axis
    vs = knobs[f"{HEADS_FILE}:heads_kernel.view#1.valid_shape"]
    valid = await s.refused("apply_tuning_patch", session_id=sid, rationale="fewer heads", knob=vs["id"],
                            value=[1, 2, 16, 64], catalog_id=next(c for c in vs["catalog_ids"] if c.startswith("F-")))
    assert "GATE legality:" in valid and "valid_shape [1, 2, 16, 64]" in valid and "never be computed" in valid, valid
    assert op.read_text() == src, "a refused change must not touch the file"


async def _valid_part_of_a_run_time_block(s: Session, ws: Path) -> None:
    op = ws / BLOCK_ARG_FILE
    sid = await _to_frontend(s, ws, [BLOCK_ARG_FILE], [sys.executable, BLOCK_ARG_FILE, "--run-mode", "sim"])
    src = op.read_text()
    knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid, detail="full"))["knobs"]}
    vs = knobs[f"{BLOCK_ARG_FILE}:rows_kernel.view#1.valid_shape"]
    assert vs["live"] is True, vs  # the keyword sits on the view's second line; the probe records the first
    # listed as what it is: how much of the view is computed, no speed knob; asked for, the search says so
    assert "not a speed knob" in vs["legal_here"] and "the view's extent as it ran" in vs["legal_here"], vs
    asked = await s.ok("propose_candidates", session_id=sid, knob=vs["id"])
    assert asked["candidates"] == [] and "the valid part of a view" in asked["notes"][0], asked
    # the loop's bound is a run-time value (32 rows in blocks of 8): its unroll lists stop at the 4 trips that ran
    unroll = await s.ok("propose_candidates", session_id=sid, knob=f"{BLOCK_ARG_FILE}:rows_kernel.loop#1.unroll_list")
    chains = [c["value"] for c in unroll["candidates"]]
    assert chains and all(max(v) <= 4 for v in chains), chains
    fid = next(c for c in vs["catalog_ids"] if c.startswith("F-"))
    tail = "valid_shape=[hi - lo, 64])"
    for value, why in (([1, 64], "computes 1 of its 8 on every block"), ([16, 64], "claims 16 valid of a view of 8")):
        await _refused_both_ways(s, sid, vs["id"], value, BLOCK_ARG_FILE, src, tail, f"valid_shape={value})",
                                 catalog_id=fid, says=(why, "ran with shape [8, 64]"))
    # ... and so is a shorter tail written as another expression, which the server cannot evaluate before the run
    msg = await s.refused("apply_tuning_patch", session_id=sid, catalog_id=fid, rationale="fewer rows",
                          diff=_diff(BLOCK_ARG_FILE, src, src.replace(tail, "valid_shape=[hi - lo - 7, 64])")))
    assert "GATE legality:" in msg and "'hi - lo - 7', an expression the server cannot evaluate" in msg, msg
    assert op.read_text() == src, "a refused change must not touch the file"
    # the block's own extent, written as a constant, is what ran: admitted, checked on the run
    ok = await s.ok("apply_tuning_patch", session_id=sid, knob=vs["id"], value=[8, 64], catalog_id=fid,
                    rationale="the block as ran")
    assert ok["round"] == 1 and "valid_shape=[8, 64])" in op.read_text()
    assert any("valid extent 8 is the view's along axis 0" in c for c in ok["legality_checked"]), ok


async def _block_past_a_constant_valid_part(s: Session, ws: Path) -> None:
    op = ws / CFG_BLOCK_FILE
    sid = await _to_frontend(s, ws, [CFG_BLOCK_FILE], [sys.executable, CFG_BLOCK_FILE, "--run-mode", "sim"])
    src = op.read_text()
    knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
    block = knobs[f"{CFG_BLOCK_FILE}:Cfg(block)"]
    assert block["tunable"] and block["value"] == 8
    await _refused_both_ways(s, sid, block["id"], 16, CFG_BLOCK_FILE, src, "Cfg(block=8)", "Cfg(block=16)",
                             catalog_id="F-7", says=("its valid part is the constant 8: 8 of every 16 would be",))
    assert op.read_text() == src, "a refused change must not touch the file"


async def _named_offsets(s: Session, ws: Path) -> None:
    op = ws / OFFSET_FILE
    sid = await _to_frontend(s, ws, [OFFSET_FILE], [sys.executable, OFFSET_FILE, "--run-mode", "sim"])
    src = op.read_text()
    listed = await s.ok("list_knobs", session_id=sid, detail="full")
    ids = {k["id"] for k in listed["knobs"] + listed["dead_knobs"] if k["tunable"]}
    assert not any(k.endswith(("rows_kernel.at[1]", "rows_kernel.home", "rows_kernel.col")) for k in ids), sorted(ids)
    for knob, value, old, new in ((f"{OFFSET_FILE}:rows_kernel.at[1]", 8, "at = [lo, 0]", "at = [lo, 8]"),
                                  (f"{OFFSET_FILE}:rows_kernel.home", 32, "home = 0\n", "home = 32\n")):
        by_knob = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-3", rationale="attack",
                                  knob=knob, value=value)
        assert "no knob" in by_knob or "not tunable" in by_knob, by_knob
        by_diff = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-3", rationale="attack",
                                  diff=_diff(OFFSET_FILE, src, src.replace(old, new)))
        assert "GATE one-change:" in by_diff or "GATE legality:" in by_diff, by_diff
    assert op.read_text() == src, "a refused change must not touch the file"


async def _fixed_write(s: Session, ws: Path) -> None:
    """A tile constant also reaches an assemble's offset through arithmetic no loop's index takes part in
    (``[idx * 8, COLS * 1]``): it stays a knob (it sets the tile), but a change that moves where the result is written
    is refused, as an edit and as a diff."""
    op = ws / WRITE_FILE
    sid = await _to_frontend(s, ws, [WRITE_FILE], [sys.executable, WRITE_FILE, "--run-mode", "sim"])
    src = op.read_text()
    knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
    assert knobs[f"{WRITE_FILE}:COLS"]["tunable"]
    await _refused_both_ways(s, sid, f"{WRITE_FILE}:COLS", 32, WRITE_FILE, src, "COLS = 64\n", "COLS = 32\n",
                             catalog_id="F-3", says=("writes axis 1 at a fixed offset (COLS * 1: 64 → 32)",))
    assert op.read_text() == src, "a refused change must not touch the file"


async def _cube_tile_l1_l0(s: Session, ws: Path) -> None:
    op = ws / "matmul_act.py"
    sid = await _to_frontend(s, ws, ["matmul_act.py"], sim_command("matmul_act"))
    knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
    assert knobs[CUBE]["value"] == {"m": [32, 32], "k": [64, 64], "n": [64, 64]}
    src = op.read_text()
    shipped = "set_cube_tile_shapes([32, 32], [64, 64], [64, 64])"
    assert shipped in src
    # each L0 a multiple of 16 and each L1 >= L0 (so no other rule applies): only L1 % L0 != 0 is wrong
    for axis, (m, k, n) in (("m", ([32, 48], [64, 64], [64, 64])), ("n", ([32, 32], [64, 64], [64, 96]))):
        structured = await s.refused("apply_tuning_patch", session_id=sid, knob=CUBE,
                                     value={"m": m, "k": k, "n": n}, catalog_id="F-9", rationale="illegal")
        as_diff = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-9", rationale="illegal",
                                  diff=_diff("matmul_act.py", src, src.replace(
                                      shipped, f"set_cube_tile_shapes({m}, {k}, {n})")))
        for msg in (structured, as_diff):
            assert "GATE legality:" in msg and "L1 % L0" in msg, msg
        assert _reason(structured, axis) == _reason(as_diff, axis), (structured, as_diff)
    assert op.read_text() == src, "a refused change must not touch the file"
    assert (await s.ok("get_status", session_id=sid))["rounds"] == 0


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Chapters]:
    """Each operator's session, played once on one server (a failure in one leaves the other played)."""
    tmp = tmp_path_factory.mktemp("attack-gaps")
    softmax, matmul = _copy(tmp, "upstream_softmax"), _copy(tmp, "matmul_act")
    dynamic = tmp / "dynamic_axis"
    dynamic.mkdir()
    (dynamic / DYN_AXIS_FILE).write_text(DYN_AXIS_OP)
    write = tmp / "fixed_write"
    write.mkdir()
    (write / WRITE_FILE).write_text(WRITE_OP)
    ceil = tmp / "dynamic_ceil"
    ceil.mkdir()
    (ceil / DYN_AXIS_FILE).write_text(DYN_CEIL_OP)
    heads = tmp / "heads"
    heads.mkdir()
    (heads / HEADS_FILE).write_text(HEADS_OP)
    block_arg = tmp / "block_arg"
    block_arg.mkdir()
    (block_arg / BLOCK_ARG_FILE).write_text(BLOCK_ARG_OP)
    cfg_block = tmp / "cfg_block"
    cfg_block.mkdir()
    (cfg_block / CFG_BLOCK_FILE).write_text(CFG_BLOCK_OP)
    offsets = tmp / "offsets"
    offsets.mkdir()
    (offsets / OFFSET_FILE).write_text(OFFSET_OP)
    played = {"upstream_softmax": Chapters(), "matmul_act": Chapters(), "dynamic_axis": Chapters(),
              "heads": Chapters(), "block_arg": Chapters(), "cfg_block": Chapters(), "offsets": Chapters(), "dynamic_ceil": Chapters(), "fixed_write": Chapters()}

    async def scenario() -> None:
        async with connect(softmax) as s:
            await played["upstream_softmax"].play("session", lambda: _kernel_local_block_size(s, softmax))
            await played["matmul_act"].play("session", lambda: _cube_tile_l1_l0(s, matmul))
            await played["dynamic_axis"].play("session", lambda: _dynamic_axis_block(s, dynamic))
            await played["dynamic_ceil"].play("session", lambda: _ceil_dynamic_axis_block(s, ceil))
            await played["heads"].play("session", lambda: _fixed_view_extent(s, heads))
            await played["block_arg"].play("session", lambda: _valid_part_of_a_run_time_block(s, block_arg))
            await played["cfg_block"].play("session", lambda: _block_past_a_constant_valid_part(s, cfg_block))
            await played["offsets"].play("session", lambda: _named_offsets(s, offsets))
            await played["fixed_write"].play("session", lambda: _fixed_write(s, write))

    anyio.run(scenario)
    return played


def test_a_kernel_local_block_size_is_tunable_as_an_edit_and_as_a_diff_attack_2(
        sessions: dict[str, Chapters]) -> None:
    sessions["upstream_softmax"].check("session")


def test_a_cube_tile_with_l1_not_a_multiple_of_l0_is_refused_alike_as_an_edit_and_as_a_diff_attack_3(
        sessions: dict[str, Chapters]) -> None:
    sessions["matmul_act"].check("session")


def test_a_block_over_a_dynamic_axis_reached_through_a_name_is_checked_on_the_axis_the_test_passed(
        sessions: dict[str, Chapters]) -> None:
    sessions["dynamic_axis"].check("session")


def test_a_ceil_division_loop_over_a_dynamic_axis_takes_no_block_past_it_on_either_path(
        sessions: dict[str, Chapters]) -> None:
    sessions["dynamic_ceil"].check("session")


def test_the_extent_of_a_view_no_loop_moves_is_the_problems_not_a_tile(sessions: dict[str, Chapters]) -> None:
    sessions["heads"].check("session")


def test_a_constant_valid_part_of_a_block_only_the_run_knows_is_judged_on_what_ran(
        sessions: dict[str, Chapters]) -> None:
    sessions["block_arg"].check("session")


def test_a_block_a_constant_valid_part_no_longer_covers_is_refused_on_both_paths(
        sessions: dict[str, Chapters]) -> None:
    sessions["cfg_block"].check("session")


def test_an_offset_written_through_a_name_is_no_knob_on_either_path(sessions: dict[str, Chapters]) -> None:
    sessions["offsets"].check("session")


def test_a_tile_that_also_moves_a_fixed_assemble_offset_is_refused_on_both_paths(
        sessions: dict[str, Chapters]) -> None:
    sessions["fixed_write"].check("session")


def _reason(msg: str, axis: str) -> str:
    """The refusal's first line from the offending axis on (what comes before may name the path it came by)."""
    first = msg.splitlines()[0]
    return first[first.index(f"{axis}: L0"):]
