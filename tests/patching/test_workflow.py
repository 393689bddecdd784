"""The calls the session layer makes, in order, on a real workspace: list, debug on, edit, write, drift, revert."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from patching_helpers import DATA

from pypto_tune.tools.errors import KnobValueError
from pypto_tune.tools.patching import (
    check_knob_value, extract_knobs, functional_sources, hash_files, hash_sources, make_snapshot, plan_diff_edit,
    plan_knob_edit, read_sources, restore_snapshot, set_runtime_debug, unified_diff, verify_unchanged, write_sources,
)


def test_a_round_then_its_revert_restores_the_exact_bytes(tmp_path: Path):
    shutil.copy(DATA / "awkward.py", tmp_path / "awkward.py")
    (tmp_path / "awkward.py").write_bytes((tmp_path / "awkward.py").read_bytes().replace(b"\n", b"\r\n"))
    files = ["awkward.py"]
    original = read_sources(tmp_path, files)
    start_hash = hash_files(tmp_path, files)
    assert start_hash == hash_sources(original)

    # S2: runtime debug on; the functional hash (precision binding) does not move.
    debug_hash = write_sources(tmp_path, set_runtime_debug(original, True))
    debugged = read_sources(tmp_path, files)
    assert hash_sources(functional_sources(debugged)) == hash_sources(functional_sources(original))

    # Round 1: one knob, snapshot first, then write.
    snap = make_snapshot(debugged)
    plan = plan_knob_edit(debugged, "vec_nbuffer_setting", {"-2": 1, "-1": 8}, target="awkward.py:12")
    assert len(plan.changes) == 1
    after_hash = write_sources(tmp_path, plan.new_sources)
    assert verify_unchanged(tmp_path, files, after_hash) and after_hash != debug_hash

    # An external edit is drift.
    p = tmp_path / "awkward.py"
    p.write_bytes(p.read_bytes().replace(b"BLOCK_M = 128", b"BLOCK_M = 64"))
    assert not verify_unchanged(tmp_path, files, after_hash)

    # Revert: the snapshot's bytes come back and the hash proves it.
    assert restore_snapshot(tmp_path, snap) == snap.hash == debug_hash
    # S5 (R22): debug off against the pre-toggle baseline gives the original file back.
    write_sources(tmp_path, set_runtime_debug(read_sources(tmp_path, files), False, baseline=original))
    assert hash_files(tmp_path, files) == start_hash
    assert p.read_bytes() == (DATA / "awkward.py").read_bytes().replace(b"\n", b"\r\n")


def test_two_knob_diff_is_reported_with_both_changes_for_the_gate():
    src = {"awkward.py": (DATA / "awkward.py").read_text()}
    one = plan_knob_edit(src, "BLOCK_M", 64).new_sources
    two = plan_knob_edit(one, "combine_axis", False).new_sources
    plan = plan_diff_edit(src, unified_diff(src, two))
    assert sorted(c.knob_id for c in plan.changes) == [
        "awkward.py:BLOCK_M", "awkward.py:mm.set_operation_options#1.combine_axis"]
    # A debug-only diff is zero changes (not a tuning round at all).
    assert plan_diff_edit(src, unified_diff(src, set_runtime_debug(src, True))).changes == []


def test_check_knob_value_uses_the_knobs_own_context():
    knobs = {k.id: k for k in extract_knobs({"awkward.py": (DATA / "awkward.py").read_text()})}
    unroll = knobs["awkward.py:mm.loop_unroll[LOOP_M].unroll_list"]
    assert check_knob_value(unroll, [2, 1]) == [2, 1]
    with pytest.raises(KnobValueError, match="trip count 2"):
        check_knob_value(unroll, [4, 1])
    assert check_knob_value(knobs["awkward.py:PASS_OPTS.vec_nbuffer_setting"], {"-2": 1, "0": 4}) == {-2: 1, 0: 4}


def test_a_cube_tile_whose_operand_tile_overflows_l0a_or_l0b_is_refused_naming_the_buffer():
    # FP16 (16, 128, 512): the B operand's 128 x 512 x 2 B = 128 KB does not fit the 64 KB L0B; PyPTO's FFN example
    # failed to compile with "Alloc tensor size [131072] exceeds MEM_L0B size [65536]" in SIM
    from pypto_tune.tools.errors import KnobValueError
    from pypto_tune.tools.patching.legality import validate

    ctx = {"dtypes": ["DT_FP16"]}
    fits = validate("cube_tile", "set_cube_tile_shapes", None, {"m": [16, 16], "k": [128, 128], "n": [256, 256]}, ctx)
    assert fits["n"] == [256, 256]
    with pytest.raises(KnobValueError, match="L0B"):
        validate("cube_tile", "set_cube_tile_shapes", None, {"m": [16, 16], "k": [128, 128], "n": [512, 512]}, ctx)
    with pytest.raises(KnobValueError, match="L0A"):
        validate("cube_tile", "set_cube_tile_shapes", None, {"m": [256, 256], "k": [256, 256], "n": [16, 16]}, ctx)
    # an FP32 tensor beside the FP16 operands does not make the operand tiles larger than they are
    ctx32 = {"dtypes": ["DT_FP16", "DT_FP32"]}
    assert validate("cube_tile", "set_cube_tile_shapes", None, {"m": [16, 16], "k": [128, 128], "n": [256, 256]},
                    ctx32)["k"] == [128, 128]


def test_an_fp32_cube_tile_steps_k_and_n_by_16_elements():
    # PyPTO's basic_ops matmul, FP32 operands: k or n of 8 or 24 fail with FC4001 in SIM (32-byte aligned as they
    # are), 16, 32 and 48 compile; m of 8 compiles
    from pypto_tune.tools.errors import KnobValueError
    from pypto_tune.tools.patching.legality import validate

    ctx = {"dtypes": ["DT_FP32"]}
    for m, k, n in (([8, 8], [64, 64], [64, 64]), ([32, 32], [16, 32], [48, 48])):
        assert validate("cube_tile", "set_cube_tile_shapes", None, {"m": m, "k": k, "n": n}, ctx)["n"] == n
    for k, n in (([8, 8], [64, 64]), ([64, 64], [8, 8]), ([64, 64], [24, 24])):
        with pytest.raises(KnobValueError, match="multiple of 16 elements"):
            validate("cube_tile", "set_cube_tile_shapes", None, {"m": [32, 32], "k": k, "n": n}, ctx)
