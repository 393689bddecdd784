"""Two different jit kernels in one process, one of them called twice: add, scale_by_2, add."""
import torch, pypto
B, N, D = 4, 8, 64


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def add_kernel(x: pypto.Tensor([B, N, D], pypto.DT_FP32), y: pypto.Tensor([B, N, D], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 8, 64)
    for b in pypto.loop(B, name="LOOP_B", idx_name="b"):
        xv = pypto.view(x, [1, N, D], [b, 0, 0])
        y[b:b + 1, :, :] = xv + xv


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def scale_by_2(x: pypto.Tensor([B, N, D], pypto.DT_FP32), y: pypto.Tensor([B, N, D], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 8, 64)
    for b in pypto.loop(B, name="LOOP_B", idx_name="b"):
        xv = pypto.view(x, [1, N, D], [b, 0, 0])
        y[b:b + 1, :, :] = pypto.exp(xv)


x = torch.randn(B, N, D); y = torch.zeros(B, N, D)
add_kernel(x, y)
scale_by_2(x, y)
add_kernel(x, y)
print("done")
# Recorded 2026-12-03 with pypto 0.2.0 (SIM) as `python probe_two_kernels.py` in /tmp/kn_probe (so program.json
# names that path; the defs are on lines 7 and 15 here too). Only program.json is kept of each output folder.
