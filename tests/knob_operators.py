"""Small operators written for the knob tests (candidate generation, legality on what ran), and a real probe record
of one run of them in SIM, taken the way the server takes it.

``ROWS_OP`` (``rows_op.py``, test ``test_rows``) holds the patterns upstream PyPTO code uses, each once:

* ``sigmoid_kernel``: an FP16 [64, 1024] input cast to FP32 under a module-constant tile ``TILE = [8, 1024]``.
  Measured in SIM: a [32, 1024] tile of that kernel fails to compile (``Errcode: FFFFFF``; 128 KB of FP32), [16,
  1024] runs (64 KB);
* ``scale_kernel``: a ``pypto.loop_unroll`` over the 64 rows whose ``unroll_list`` comes from a config dataclass the
  test builds (``RowsConfig(unroll_list=[2, 1])``) and passes in; at 64 rows the factor-2 variant runs 32 times and
  the factor-1 variant is traced and compiled but never executed. Inside the body, a branch-local list read by
  subscripts sets the tile (``tiles[0], tiles[1]``), and a tile call under ``if n == 1:`` only the never-executed
  variant reaches.

``INIT_CFG_OP``: ``ROWS_OP`` with the config a plain class whose ``__init__`` stores the unroll list on the
instance (``self.unroll_list = [2, 1]``, the test builds ``RowsConfig()``), as PyPTO's arctic LSTM model keeps its
unroll list and hidden tile.

``DYN_AXIS_OP`` (``dyn_add.py``, run as ``python dyn_add.py --run-mode sim``): a row-block loop over a dynamic batch
axis written as PyPTO's loop examples write it — the trip count bound to a name (``b_loop = b // tile_b``) from the
input's dynamic first dimension (``b = x.shape[0]``); the test passes a (32, 32, 1, 256) tensor.

``SHADOW_OP`` (``shadow_op.py``, test ``test_shadow``): a matmul whose result a helper activates; the kernel's vector
tile (fed by the module constant ``VEC_TILE``) is replaced by the helper's before any vector operation is built.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROWS_FILE = "rows_op.py"
ROWS_CMD = [ROWS_FILE, f"{ROWS_FILE}::test_rows", "--run_mode", "sim"]

ROWS_OP = '''#!/usr/bin/env python3
"""Two kernels a test runs one after the other: a sigmoid over FP16 rows computed in FP32 under one vector tile,
and a row-block scale whose loop_unroll takes its unroll list from a config the test builds."""
import argparse
import sys
from dataclasses import dataclass, field

import pypto
import torch

ROWS, COLS = 64, 1024
TILE = [8, 1024]


@dataclass
class RowsConfig:
    unroll_list: list = field(default_factory=lambda: [1])
    scale: float = 1.5


def build_sigmoid(run_mode: str):
    mode = {"npu": pypto.RunMode.NPU, "sim": pypto.RunMode.SIM}[run_mode]

    @pypto.frontend.jit(runtime_options={"run_mode": mode})
    def sigmoid_kernel(x: pypto.Tensor((ROWS, COLS), pypto.DT_FP16),
                       y: pypto.Tensor((ROWS, COLS), pypto.DT_FP16)):
        pypto.set_vec_tile_shapes(*TILE)
        xf = pypto.cast(x, pypto.DT_FP32)
        y[:] = pypto.cast(pypto.sigmoid(xf), pypto.DT_FP16)

    return sigmoid_kernel


def build_scale(cfg: RowsConfig, run_mode: str):
    mode = {"npu": pypto.RunMode.NPU, "sim": pypto.RunMode.SIM}[run_mode]

    @pypto.frontend.jit(runtime_options={"run_mode": mode})
    def scale_kernel(y: pypto.Tensor((ROWS, COLS), pypto.DT_FP16),
                     z: pypto.Tensor((ROWS, COLS), pypto.DT_FP32)):
        tiles = [1, 256]
        if COLS > 512:
            tiles = [2, 512]
        for i, n in pypto.loop_unroll(0, ROWS, 1, name="ROW_BLOCKS", idx_name="i", unroll_list=cfg.unroll_list):
            pypto.set_vec_tile_shapes(tiles[0], tiles[1])
            if n == 1:
                pypto.set_vec_tile_shapes(1, 256)
            yb = pypto.view(y, [n, COLS], [i, 0])
            pypto.assemble(pypto.cast(yb, pypto.DT_FP32) * cfg.scale, [i, 0], z)

    return scale_kernel


def test_rows(run_mode: str = "npu") -> None:
    cfg = RowsConfig(unroll_list=[2, 1])
    torch.manual_seed(0)
    x = torch.randn(ROWS, COLS, dtype=torch.float16)
    y = torch.zeros(ROWS, COLS, dtype=torch.float16)
    z = torch.zeros(ROWS, COLS, dtype=torch.float32)
    build_sigmoid(run_mode)(x, y)
    build_scale(cfg, run_mode)(y, z)
    print("\\u2713 rows passed" + (" (SIM: simulated only; numerics not checked)" if run_mode == "sim" else ""))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("example_id", nargs="?")
    parser.add_argument("--run_mode", choices=["npu", "sim"], default="npu")
    test_rows(parser.parse_args().run_mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

_DATACLASS_CFG = """@dataclass
class RowsConfig:
    unroll_list: list = field(default_factory=lambda: [1])
    scale: float = 1.5
"""
_INIT_CFG = """class RowsConfig:
    def __init__(self):
        self.unroll_list = [2, 1]
        self.scale = 1.5
"""
assert _DATACLASS_CFG in ROWS_OP and "RowsConfig(unroll_list=[2, 1])" in ROWS_OP
INIT_CFG_OP = ROWS_OP.replace(_DATACLASS_CFG, _INIT_CFG).replace("RowsConfig(unroll_list=[2, 1])", "RowsConfig()")

# A kernel over a dynamic batch axis, as PyPTO's own examples write one: its tensors' shapes come from the test.
_DYN_OP = '''import sys

import pypto
import torch

RUN_MODE = sys.argv[sys.argv.index("--run-mode") + 1] if "--run-mode" in sys.argv else "npu"


@pypto.frontend.jit(runtime_options={{"run_mode": pypto.RunMode.SIM if RUN_MODE == "sim" else pypto.RunMode.NPU}})
def {name}(x: pypto.Tensor([pypto.DYNAMIC, ...], pypto.DT_FP32),
{indent}out: pypto.Tensor([pypto.DYNAMIC, ...], pypto.DT_FP32)):
{body}

if __name__ == "__main__":
    x = torch.randn({shape})
    out = torch.zeros({shape})
    {name}(x, out)
    print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
'''


def _dyn_op(name: str, body: str, shape: str) -> str:
    return _DYN_OP.format(name=name, indent=" " * (len(name) + 5), body=body, shape=shape)


DYN_AXIS_FILE = "dyn_add.py"
DYN_AXIS_OP = _dyn_op("add_kernel", """    pypto.set_vec_tile_shapes(1, 4, 1, 64)
    b = x.shape[0]
    tile_b = 1
    b_loop = b // tile_b
    for idx in pypto.loop(b_loop):
        lo = idx * tile_b
        hi = (idx + 1) * tile_b
        part = x[lo:hi, ...]
        pypto.assemble(part + 1.0, [lo, 0, 0, 0], out)
""", "32, 32, 1, 256")

# The same kernel counting its blocks by ceil division, as PyPTO's GLM gate does over its dynamic batch
DYN_CEIL_OP = DYN_AXIS_OP.replace("b_loop = b // tile_b", "b_loop = (b + tile_b - 1) // tile_b")
assert DYN_CEIL_OP != DYN_AXIS_OP

# PyPTO's attention examples view [tile, head, q_len, dim] at [b_offset, 0, 0, 0] with ``head = 8`` a kernel local:
# the loop moves the view along the batch, nothing moves it along the heads, so ``heads`` is how much of the tensor
# is computed (2 computes a quarter, faster, and SIM checks no values)
HEADS_FILE = "heads_op.py"
HEADS_OP = _dyn_op("heads_kernel", """    pypto.set_vec_tile_shapes(1, 4, 16, 64)
    heads = 8
    for idx in pypto.loop(x.shape[0]):
        part = pypto.view(x, [1, heads, 16, 64], [idx, 0, 0, 0], valid_shape=[1, heads, 16, 64])
        pypto.assemble(part + 1.0, [idx, 0, 0, 0], out)
""", "4, 8, 16, 64")

# PyPTO's dynamic_mul in small: the block is the kernel's int argument, chosen by the test at run time (by run
# mode), so only the run knows it (8); the view spells its valid part on its second line, the tail as an expression
# of the loop index
BLOCK_ARG_FILE = "block_arg_op.py"
BLOCK_ARG_OP = '''import sys

import pypto
import torch

RUN_MODE = sys.argv[sys.argv.index("--run-mode") + 1] if "--run-mode" in sys.argv else "npu"


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM if RUN_MODE == "sim" else pypto.RunMode.NPU})
def rows_kernel(x: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32),
                out: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32), tile_b: int):
    pypto.set_vec_tile_shapes(8, 64)
    n = x.shape[0]
    for idx in pypto.loop((n + tile_b - 1) // tile_b):
        lo = idx * tile_b
        hi = pypto.min(lo + tile_b, n)
        part = pypto.view(x, [tile_b, 64], [lo, 0],
                          valid_shape=[hi - lo, 64])
        pypto.assemble(part + 1.0, [lo, 0], out)


if __name__ == "__main__":
    x = torch.randn(32, 64)
    out = torch.zeros(32, 64)
    rows_kernel(x, out, {"sim": 8, "npu": 16}[RUN_MODE])
    print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
'''

# The block-argument kernel writing its block back through a named offset list beside the loop's offset, and
# reading a fixed column offset through a name: where each result goes, never a tile. Each reaches its call through a
# copy (``edge = at``, ``col = home``), which computes nothing
OFFSET_FILE = "offset_op.py"
OFFSET_OP = (BLOCK_ARG_OP
             .replace("        pypto.assemble(part + 1.0, [lo, 0], out)",
                      "        at = [lo, 0]\n        edge = at\n        pypto.assemble(part + 1.0, edge, out)")
             .replace("    n = x.shape[0]\n", "    n = x.shape[0]\n    home = 0\n    col = home\n")
             .replace("[lo, 0],\n                          valid_shape", "[lo, col],\n                          valid_shape"))
assert OFFSET_OP.count("at = [lo, 0]") == 1 and OFFSET_OP.count("[lo, col]") == 1 and "edge = at" in OFFSET_OP

# A tile constant that also reaches an assemble's offset through arithmetic no loop's index takes part in: the knob
# map keeps it a tile (it is computed), but a change of it would move where the result is written
WRITE_FILE = "write_op.py"
WRITE_OP = '''import sys

import pypto
import torch

COLS = 64
RUN_MODE = sys.argv[sys.argv.index("--run-mode") + 1] if "--run-mode" in sys.argv else "npu"


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM if RUN_MODE == "sim" else pypto.RunMode.NPU})
def write_kernel(x: pypto.Tensor((64, 64), pypto.DT_FP32), out: pypto.Tensor((64, 128), pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(8, COLS)
    for idx in pypto.loop(8):
        part = pypto.view(x, [8, 64], [idx * 8, 0])
        pypto.assemble(part + 1.0, [idx * 8, COLS * 1], out)


if __name__ == "__main__":
    write_kernel(torch.randn(64, 64), torch.zeros(64, 128))
    print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
'''

# A row block reshaped into groups and reduced per group, as PyPTO's GLM expert selection does: the group tile is
# rank 3 over a [1, 4, 40] reshape, smaller on its middle axis than any 2-D tensor of the kernel
GROUPS_FILE = "groups_op.py"
GROUPS_OP = '''import sys

import pypto
import torch

RUN_MODE = sys.argv[sys.argv.index("--run-mode") + 1] if "--run-mode" in sys.argv else "npu"


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM if RUN_MODE == "sim" else pypto.RunMode.NPU})
def groups_kernel(x: pypto.Tensor([32, 160], pypto.DT_FP32), out: pypto.Tensor([32, 8], pypto.DT_FP32)):
    for idx in pypto.loop(32):
        part = pypto.view(x, [1, 160], [idx, 0])
        pypto.set_vec_tile_shapes(1, 160)
        groups = pypto.reshape(pypto.sigmoid(part), [1, 4, 40])
        pypto.set_vec_tile_shapes(1, 2, 40)
        top = pypto.amax(groups, -1, False)
        pypto.set_vec_tile_shapes(1, 8)
        pypto.assemble(pypto.expand_clone(pypto.amax(top, -1, True), [1, 8]), [idx, 0], out)


if __name__ == "__main__":
    groups_kernel(torch.randn(32, 160), torch.zeros(32, 8))
    print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
'''

# The same kernel with its block in a config object and its valid part written as a constant: the valid part
# covers the block of 8, so a block of 16 would compute 8 of every 16 rows
CFG_BLOCK_FILE = "cfg_block_op.py"
CFG_BLOCK_OP = (BLOCK_ARG_OP
                .replace("RUN_MODE = sys", "from dataclasses import dataclass\n\n\n@dataclass\nclass Cfg:\n"
                         "    block: int = 8\n\n\nRUN_MODE = sys")
                .replace("valid_shape=[hi - lo, 64])", "valid_shape=[8, 64])")
                .replace("    x = torch.randn(32, 64)", "    cfg = Cfg(block=8)\n    x = torch.randn(32, 64)")
                .replace('{"sim": 8, "npu": 16}[RUN_MODE]', "cfg.block"))

SHADOW_FILE = "shadow_op.py"
SHADOW_CMD = [SHADOW_FILE, f"{SHADOW_FILE}::test_shadow", "--run_mode", "sim"]

# PyPTO's FFN example in small: the kernel's vector tile is replaced by the helper's before any vector operation, so
# its value (and the constant feeding it) changes nothing; the cube tile shapes the matmul.
SHADOW_OP = '''#!/usr/bin/env python3
"""A matmul whose result a helper activates: the kernel sets a vector tile before the matmul, and the helper sets
its own before its first vector operation (the pattern of PyPTO's FFN example)."""
import argparse
import sys

import pypto
import torch

M, K, N = 32, 64, 64
VEC_TILE = [8, 32]


def activate(x: pypto.tensor) -> pypto.tensor:
    pypto.set_vec_tile_shapes(16, 64)
    return pypto.mul(pypto.exp(x), 0.5)


def build(run_mode: str):
    mode = {"npu": pypto.RunMode.NPU, "sim": pypto.RunMode.SIM}[run_mode]

    @pypto.frontend.jit(runtime_options={"run_mode": mode})
    def mm_act_kernel(a: pypto.Tensor((M, K), pypto.DT_FP16), b: pypto.Tensor((K, N), pypto.DT_FP16),
                      out: pypto.Tensor((M, N), pypto.DT_FP16)):
        pypto.set_cube_tile_shapes([16, 16], [64, 64], [64, 64])
        pypto.set_vec_tile_shapes(*VEC_TILE)
        c = pypto.matmul(a, b, pypto.DT_FP16)
        out[:] = activate(c)

    return mm_act_kernel


def test_shadow(run_mode: str = "npu") -> None:
    torch.manual_seed(0)
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    out = torch.zeros(M, N, dtype=torch.float16)
    build(run_mode)(a, b, out)
    print("\\u2713 shadow passed" + (" (SIM: simulated only; numerics not checked)" if run_mode == "sim" else ""))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("example_id", nargs="?")
    parser.add_argument("--run_mode", choices=["npu", "sim"], default="npu")
    test_shadow(parser.parse_args().run_mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def write_rows_op(folder: Path, text: str = ROWS_OP, name: str = ROWS_FILE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return folder


def probe_run(ws: Path, cmd: list[str] = ROWS_CMD, *, probed: bool = True) -> tuple[dict[str, Any] | None, list[Path]]:
    """Run the test once in SIM in ``ws`` (with the server's probe hook when ``probed``): the record as the ledger
    keeps it (``ProbeRecord.model_dump``), and the output folders the run wrote."""
    from pypto_tune.tools.running.probe import probe_env, read_records
    from pypto_tune.tools.running.runner import build_child_env

    rec = Path(tempfile.mkdtemp(prefix="knob-probe-"))
    try:
        env = build_child_env(run_mode="sim")
        if probed:
            env = probe_env(env, rec)
        before = set(ws.glob("output/output_*"))
        proc = subprocess.run([sys.executable, *cmd], cwd=ws, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and "passed" in proc.stdout, (proc.stdout[-2000:], proc.stderr[-2000:])
        dirs = sorted(set(ws.glob("output/output_*")) - before)
        if not probed:
            return None, dirs
        record = read_records(rec, [str(ws.resolve())]).model_dump(mode="json")
        return json.loads(json.dumps(record)), dirs
    finally:
        shutil.rmtree(rec, ignore_errors=True)
