"""An operator written every awkward way at once (aliases, option variables, dict(), comments in calls)."""
import pypto as pt
from pypto import frontend
from pypto import experimental as ex

M, K, N = 256, 1024, 2048
BLOCK_M = 128
NBLK = M // BLOCK_M

PASS_OPTS = {
    "cube_l1_reuse_setting": {-1: 2},  # tried {0: 8}: much slower
    "vec_nbuffer_setting": {-2: 1, -1: 2},
}


@frontend.jit(
    runtime_options=dict(run_mode=pt.RunMode.SIM, device_sched_mode=1),
    pass_options=PASS_OPTS,  # shared dict
)
def mm(
    a: pt.Tensor([M, K], pt.DT_FP16),
    b: pt.Tensor([K, N], pt.DT_FP16),
    c: pt.Tensor([M, N], pt.DT_FP32),
):
    ex.set_operation_options(combine_axis=True)
    b.set_cache_policy(pt.CachePolicy.NONE_CACHEABLE, True)
    pt.set_cube_tile_shapes(
        [128, 128],  # m
        [64, 256, 256],  # k: 3-element form
        [256, 256],
    )
    for i in pt.loop_unroll(0, NBLK, 1, name="LOOP_M", unroll_list=[2, 1]):
        pt.set_pass_options(sg_set_scope=1)
        av = pt.view(a, [BLOCK_M, K], [i * BLOCK_M, 0], valid_shape=[BLOCK_M, K])
        pt.set_cube_tile_shapes(m=[64, 128], k=[64, 256], n=[128, 256], enable_split_k=False)
        c[i * BLOCK_M:(i + 1) * BLOCK_M, :] = pt.matmul(av, b, pt.DT_FP32)
        pt.set_pass_options(sg_set_scope=-1)


@pt.frontend.jit
def vec(x: pt.Tensor([M, N], pt.DT_FP32)):
	pt.set_vec_tile_shapes([16, 512])  # tab-indented body, list form
	for j in pt.loop(M // 16, submit_before_loop=False):
		xv = x.view([16, N], [j * 16, 0])
		x[j * 16:(j + 1) * 16, :] = pt.exp(xv)
