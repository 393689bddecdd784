"""The model harnesses change only what SIM needs, and stop when the checkout's text is not what a recipe expects."""

from __future__ import annotations

import pytest

from benchmarks.model_harnesses import HARNESSES, harness_text

GATE = next(h for h in HARNESSES if h.folder == "glm_gate")
SHIPPED = '''import os
import torch
import torch_npu
import pypto
from utils.get_format import get_format


def check_args(w):
    assert w.dim() == 2
    assert get_format(w) == 'ND'


@pypto.frontend.jit(
    runtime_options={
    "stitch_cfgcache_size": 2500000},
)
def kernel(x):
    pypto.set_cube_tile_shapes([32, 32], [512, 1024], [16, 16])


if __name__ == "__main__":
    main()
'''


def test_a_harness_keeps_the_kernel_and_adds_a_selectable_sim_test():
    text = harness_text(GATE, SHIPPED)
    assert "pypto.set_cube_tile_shapes([32, 32], [512, 1024], [16, 16])" in text  # the author's tiles, as shipped
    assert "torch_npu" not in text and "get_format" not in text
    assert '"run_mode": pypto.RunMode.SIM if "sim" in sys.argv' in text
    assert 'examples = {"gate::test_gate_sim"' in text and 'print("\\u2713 gate test passed")' in text
    compile(text, "glm_gate_sim.py", "exec")


def test_a_checkout_whose_text_moved_stops_the_harness_naming_it():
    with pytest.raises(SystemExit, match="expected this text once"):
        harness_text(GATE, SHIPPED.replace('"stitch_cfgcache_size": 2500000', '"stitch_cfgcache_size": 1'))
