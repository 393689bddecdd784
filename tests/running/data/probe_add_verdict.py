"""The SIM probe kernel (/tmp/probe/add_probe.py) plus the verdict line our fixture operators print.

Recorded by record_outputs.py; the simulator does not compute outputs (domain A.8), hence the wording."""
import sys, torch, pypto
B, N, D = 32, 32, 256
TILE_B = 1
# --broken-nbuffer: {-2: 1} alone fails to compile in 0.2.0 ("Run pass failed", domain C / E.4 #32).
PASS_OPTIONS = {"vec_nbuffer_setting": {-2: 1}} if "--broken-nbuffer" in sys.argv else {}
@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM}, pass_options=PASS_OPTIONS)
def k(x: pypto.Tensor([B, N, D], pypto.DT_FP32), y: pypto.Tensor([B, N, D], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 4, 256)
    for b in pypto.loop(B // TILE_B, name="LOOP_B", idx_name="b"):
        xv = pypto.view(x, [TILE_B, N, D], [b * TILE_B, 0, 0])
        r = pypto.exp(xv)
        s = pypto.sum(r, -1, keepdim=True)
        y[b*TILE_B:(b+1)*TILE_B, :, :] = r / s
x = torch.randn(B, N, D); y = torch.zeros(B, N, D)
k(x, y)
print("done")
if "--verdict" in sys.argv:
    print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
