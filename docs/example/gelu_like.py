"""y = x * exp(x) over [R, C] FP32: a small operator written from scratch for the README's worked example.

The test prints one verdict line, the contract with pypto-tune: ``PRECISION: passed`` / ``PRECISION: failed`` /
``PRECISION: error``. Usage: python gelu_like.py --run-mode sim|npu
"""
import argparse
import sys

import pypto
import torch

R, C = 64, 512
ROWS = 8  # rows per loop iteration

def _run_mode() -> str:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run-mode", choices=("sim", "npu"), default="sim")
    return p.parse_args().run_mode


RUN_MODE_NAME = _run_mode()
RUN_MODE = pypto.RunMode.SIM if RUN_MODE_NAME == "sim" else pypto.RunMode.NPU


@pypto.frontend.jit(runtime_options={"run_mode": RUN_MODE})
def xexp_kernel(x: pypto.Tensor([R, C], pypto.DT_FP32), y: pypto.Tensor([R, C], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(8, 32)
    for i in pypto.loop(R // ROWS, name="LOOP_R", idx_name="i"):
        xv = pypto.view(x, [ROWS, C], [i * ROWS, 0])
        y[i * ROWS:(i + 1) * ROWS, :] = xv * pypto.exp(xv)


def main() -> int:
    try:
        device = "npu:0" if RUN_MODE_NAME == "npu" else "cpu"
        torch.manual_seed(0)
        x = torch.randn(R, C, dtype=torch.float32)
        y = torch.zeros(R, C, dtype=torch.float32)
        x_dev, y_dev = x.to(device), y.to(device)
        xexp_kernel(x_dev, y_dev)
        if RUN_MODE_NAME == "sim":  # the simulator computes no output values: nothing to compare
            print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
            return 0
        ok = torch.allclose(y_dev.cpu(), x * torch.exp(x), rtol=1e-3, atol=1e-5)
        print("PRECISION: passed" if ok else "PRECISION: failed")
        return 0 if ok else 1
    except Exception as exc:  # any error is a verdict too
        print(f"PRECISION: error: {type(exc).__name__}: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
