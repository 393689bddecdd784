import torch, pypto
M, K, N = 256, 1024, 2048
@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def k(a: pypto.Tensor([M, K], pypto.DT_FP16), b: pypto.Tensor([K, N], pypto.DT_FP16), c: pypto.Tensor([M, N], pypto.DT_FP32)):
    pypto.set_cube_tile_shapes([128, 128], [64, 256], [256, 256])
    for i in pypto.loop(2, name="LOOP_I", idx_name="i"):
        av = pypto.view(a, [128, K], [i * 128, 0])
        r = pypto.matmul(av, b, pypto.DT_FP32)
        c[i * 128:(i + 1) * 128, :] = r
a = torch.randn(M, K).half(); b = torch.randn(K, N).half(); c = torch.zeros(M, N)
k(a, b, c)
print("done")
