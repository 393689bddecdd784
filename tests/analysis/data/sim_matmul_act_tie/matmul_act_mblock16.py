"""SiLU(A @ B): a matmul followed by a vector activation, A[256, 512] @ B[512, 512] FP16 -> FP32.

A search-benchmark operator for pypto-tune. Four knobs span its grid (grid.json,
../../../benchmarks/grids/matmul_act.json): M_BLOCK (rows of A per loop iteration), the cube m and n
tiles (L0/L1 pairs of set_cube_tile_shapes) and the pass option cube_l1_reuse_setting. They ship
deliberately poor. Usage: python matmul_act.py --run-mode sim|npu   (default sim)
"""
import argparse
import os
import sys

import pypto
import torch

M, K, N = 256, 512, 512  # problem size, not a knob
M_BLOCK = 16


def _parse_run_mode() -> str:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-mode", choices=("sim", "npu"), default="sim")
    return parser.parse_args().run_mode


RUN_MODE_NAME = _parse_run_mode()
# Resolved before the jit is defined so the decorator below stays a plain literal dict.
RUN_MODE = pypto.RunMode.SIM if RUN_MODE_NAME == "sim" else pypto.RunMode.NPU


@pypto.frontend.jit(
    runtime_options={"run_mode": RUN_MODE, "stitch_function_max_num": 128},
    pass_options={"cube_l1_reuse_setting": {-1: 1}},
)
def matmul_silu(
    a: pypto.Tensor([M, K], pypto.DT_FP16),
    b: pypto.Tensor([K, N], pypto.DT_FP16),
    c: pypto.Tensor([M, N], pypto.DT_FP32),
):
    pypto.set_cube_tile_shapes([64, 64], [64, 256], [256, 256])
    pypto.set_vec_tile_shapes(32, 256)
    for mb in pypto.loop(M // M_BLOCK, name="LOOP_M", idx_name="mb"):
        m0 = mb * M_BLOCK
        a_rows = pypto.view(a, [M_BLOCK, K], [m0, 0])
        acc = pypto.matmul(a_rows, b, pypto.DT_FP32)
        c[m0:m0 + M_BLOCK, :] = acc * pypto.sigmoid(acc)


def main() -> int:
    try:
        if RUN_MODE_NAME == "npu":
            import torch_npu  # noqa: F401  (registers the npu device; only present on Ascend hosts)

            device = f"npu:{os.environ.get('TILE_FWK_DEVICE_ID', '0')}"
        else:
            device = "cpu"
        torch.manual_seed(0)
        a = torch.randn(M, K, dtype=torch.float16) / 8
        b = torch.randn(K, N, dtype=torch.float16) / 8
        c = torch.zeros(M, N, dtype=torch.float32)
        a_dev, b_dev, c_dev = a.to(device), b.to(device), c.to(device)
        matmul_silu(a_dev, b_dev, c_dev)
        if RUN_MODE_NAME == "sim":
            print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
            return 0
        torch.npu.synchronize()
        expected = torch.nn.functional.silu(a.float() @ b.float())
        got = c_dev.cpu()
        diff = (got - expected).abs().max().item()
        if torch.allclose(got, expected, rtol=1e-2, atol=1e-2):
            print(f"PRECISION: passed (max abs diff {diff:.3e})")
            return 0
        print(f"PRECISION: failed (max abs diff {diff:.3e}, rtol=1e-2, atol=1e-2)")
        return 1
    except Exception as exc:  # the verdict line is the contract with the server
        print(f"PRECISION: error: {type(exc).__name__}: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
