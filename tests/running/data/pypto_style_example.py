"""A test script shaped like PyPTO's own examples (domain F.3), written for pypto-tune's verdict tests.

Like the upstream examples it takes an optional example id ``pypto_style_example::test_softmax``, a ``--run_mode``
option (underscore, default ``npu``), keeps one jit per run mode, prints ``✓ Softmax test passed`` (also in SIM,
where nothing is compared), ``All softmax tests passed!`` after several examples, ``ERROR: …`` for a bad example id
(exit 1), and on NPU without ``TILE_FWK_DEVICE_ID`` prints instructions and returns with exit 0 and no verdict.
Recorded by record_example_outputs.py.
"""
import argparse
import os
import sys

import pypto
import torch

B, N, D = 8, 16, 128


@pypto.frontend.jit
def softmax_kernel_npu(x: pypto.Tensor([B, N, D], pypto.DT_FP32), y: pypto.Tensor([B, N, D], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 16, 128)
    for b in pypto.loop(B, name="LOOP_B", idx_name="b"):
        xv = pypto.view(x, [1, N, D], [b, 0, 0])
        e = pypto.exp(xv - pypto.amax(xv, -1, keepdim=True))
        y[b:b + 1, :, :] = e / pypto.sum(e, -1, keepdim=True)


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def softmax_kernel_sim(x: pypto.Tensor([B, N, D], pypto.DT_FP32), y: pypto.Tensor([B, N, D], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 16, 128)
    for b in pypto.loop(B, name="LOOP_B", idx_name="b"):
        xv = pypto.view(x, [1, N, D], [b, 0, 0])
        e = pypto.exp(xv - pypto.amax(xv, -1, keepdim=True))
        y[b:b + 1, :, :] = e / pypto.sum(e, -1, keepdim=True)


def test_softmax(device_id, run_mode):
    x = torch.rand(B, N, D)
    y = torch.zeros(B, N, D)
    (softmax_kernel_npu if run_mode == "npu" else softmax_kernel_sim)(x, y)
    golden = torch.softmax(x, dim=-1)
    print(f"Input shape: {tuple(x.shape)}")
    print(f"Max difference: {(y - golden).abs().max().item():.6f}")
    if run_mode == "npu":
        torch.testing.assert_close(y, golden, rtol=3e-3, atol=3e-3)
    print("✓ Softmax test passed")
    print()


def test_softmax_twice(device_id, run_mode):
    test_softmax(device_id, run_mode)
    test_softmax(device_id, run_mode)


def main():
    parser = argparse.ArgumentParser(description="softmax example")
    parser.add_argument("example_id", nargs="?")
    parser.add_argument("--run_mode", nargs="?", default="npu", choices=["npu", "sim"])
    args = parser.parse_args()
    examples = {"pypto_style_example::test_softmax": test_softmax,
                "pypto_style_example::test_softmax_twice": test_softmax_twice}
    if args.example_id is not None and args.example_id not in examples:
        print(f"ERROR: Invalid example ID: {args.example_id}")
        print(f"Valid example IDs are: {', '.join(sorted(examples))}")
        sys.exit(1)
    device_id = None
    if args.run_mode == "npu":
        if "TILE_FWK_DEVICE_ID" not in os.environ:
            print("If no NPU environment is available, set --run_mode sim to run in simulation mode;")
            print("otherwise, set the environment variable TILE_FWK_DEVICE_ID.")
            return
        device_id = int(os.environ["TILE_FWK_DEVICE_ID"])
    chosen = [args.example_id] if args.example_id else sorted(examples)
    try:
        for ex_id in chosen:
            print(f"Running Example {ex_id}")
            examples[ex_id](device_id, args.run_mode)
        if len(chosen) > 1:
            print("=" * 60)
            print("All softmax tests passed!")
            print("=" * 60)
    except Exception as e:
        print(f"\nError: {e}")
        raise


if __name__ == "__main__":
    main()
