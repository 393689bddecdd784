"""What a cube tile cuts, read from the run: the probe records the operands of the first matmul built under each cube
tile (their shapes and transposes), and the run picture takes M, K and N from them — a batched product with B
transposed included, which no view shows (PyPTO's tiling_config runtime test: [4, 64, 512] @ [4, 128, 512] with
``b_trans``). Without M, K and N the shape model has nothing to say about a cube tile: every candidate of that test
scored the same, and the search took the smallest moves first."""

from __future__ import annotations

from pathlib import Path

import pytest

from pypto_tune.tools.running.probe.reader import _operands
from pypto_tune.tools.search import runpicture

BMM_FILE = "bmm_op.py"
BMM_OP = '''import sys

import pypto
import torch


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def bmm_kernel(a: pypto.Tensor((2, 32, 64), pypto.DT_FP16), b: pypto.Tensor((2, 48, 64), pypto.DT_FP16),
               out: pypto.Tensor((2, 32, 48), pypto.DT_FP16)):
    pypto.set_cube_tile_shapes([16, 16], [32, 32], [16, 16])
    out.move(pypto.matmul(a, b, a.dtype, b_trans=True))


if __name__ == "__main__":
    a, b = torch.randn(2, 32, 64, dtype=torch.float16), torch.randn(2, 48, 64, dtype=torch.float16)
    out = torch.zeros(2, 32, 48, dtype=torch.float16)
    bmm_kernel(a, b, out)
    print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
'''


@pytest.mark.sim
def test_a_batched_product_with_b_transposed_is_read_as_its_m_k_n(tmp_path: Path) -> None:
    from tests.knob_operators import probe_run, write_rows_op

    ws = write_rows_op(tmp_path / "ws", BMM_OP, BMM_FILE)
    record, _ = probe_run(ws, [BMM_FILE])
    assert record is not None and record["faults"] == [], record
    (cube,) = [c for c in record["calls"] if c["api"] == "set_cube_tile_shapes"]
    assert cube["operands"] == {"a": [2, 32, 64], "b": [2, 48, 64], "a_trans": False, "b_trans": True}
    rm, pic = runpicture.build({BMM_FILE: BMM_OP}, None, record)
    (kernel,) = [f for f in pic.features() if f.get("cube")]
    assert kernel["cube"]["mkn"] == (32, 64, 48) and kernel["cube"]["batch"] == 2
    # one [32, 48] product per batch entry, cut by m = 16 and n = 16: 2 × 2 × 3 tasks
    assert kernel["cube"]["tasks_per_iter"] == 12


@pytest.mark.parametrize("raw", [
    {"a": [2, 32, 64], "b": [2, 48, -64]},  # a negative extent
    {"a": [2] * 9, "b": [2, 48]},  # more dims than any tensor
    {"a": [32, 64], "b": [48, 64], "b_trans": "yes"},  # a transpose that is no bool
    {"a": "[32, 64]", "b": [48, 64]},
    [32, 64],
])
def test_forged_operands_in_a_record_are_dropped(raw) -> None:
    assert _operands(raw) is None


def test_operands_as_the_hook_writes_them_are_kept() -> None:
    ok = _operands({"a": [None, 64], "b": [64, 128], "a_trans": False, "b_trans": False})
    assert ok is not None and ok.a == [None, 64] and ok.b_trans is False
