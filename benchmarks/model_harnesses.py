"""SIM harnesses for three of PyPTO's model kernels, written the way a user without an NPU writes them, into a folder
``search_upstream.py`` measures like PyPTO's own ``examples/``.

    .venv/bin/python benchmarks/model_harnesses.py PYPTO_CHECKOUT OUT        # writes OUT/examples/<model>/…
    .venv/bin/python benchmarks/search_upstream.py OUT --tuner-checkout PYPTO_MASTER --grid-max 27 --json models.json

The model files under ``models/`` of a PyPTO checkout (tag ``r0.2.0`` for pypto 0.2.0) run only on an NPU: they import
``torch_npu``, capture an NPU graph, check formats on the device. A harness keeps the kernel's code as shipped — every
tile, loop and option the author wrote — and changes only what a user changes to run it in SIM: the run mode, the
NPU-only imports and checks, CPU tensors, one shape of the test's, and a selectable test that prints the verdict line
(``examples = {"name::test_fn": …}``, as the examples' ``main`` has it). Nothing of PyPTO is copied into this
project: the recipes below are read against the checkout's files when this script runs, and the harness is written
outside the project (``OUT``). A recipe whose text no longer matches the checkout stops with the line it expected.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

MAIN = '''

# ---- the harness changes a user makes to run this model kernel in SIM on a machine without an NPU ----
def {test}(device_id=None):
{body}
    print("\\u2713 {name} test passed")  # in SIM the server says what a pass means


def sim_main():
    ap = argparse.ArgumentParser()
    ap.add_argument("example_id", nargs="?")
    ap.add_argument("--run_mode", default="npu", choices=["npu", "sim"])
    args = ap.parse_args()
    examples = {{"{name}::{test}": {{"function": {test}}}}}
    for ex_id, ex in examples.items():
        if args.example_id in (None, ex_id):
            ex["function"](None)


if __name__ == "__main__":
    sim_main()
'''
SIM_MODE = '"run_mode": pypto.RunMode.SIM if "sim" in sys.argv else pypto.RunMode.NPU,'


@dataclass(frozen=True)
class Harness:
    folder: str  # under OUT/examples/
    source: str  # the model file, relative to the checkout
    name: str  # the selector's first part
    test: str  # the test function the harness adds
    edits: tuple[tuple[str, str], ...]  # (text as shipped, text in the harness), each found exactly once
    body: str  # the test's body: CPU tensors at one of the model test's shapes, then the model's own entry point
    drop: tuple[str, ...] = ()  # regular expressions of NPU-only lines removed (format checks)


def _glm_edits(options: str, wrap: str) -> tuple[tuple[str, str], ...]:
    """The GLM models' harness edits: no NPU imports, the run mode first in the jit's runtime options (``options``:
    their text as shipped; ``wrap``: what follows the run mode before the shipped first option), argv read by the
    harness, and its own ``__main__``."""
    return (("import torch_npu\n", ""), ("from utils.get_format import get_format\n", ""),
            (options, options.replace("runtime_options={", "runtime_options={" + SIM_MODE + wrap, 1)),
            ("import os\n", "import os\nimport sys\nimport argparse\n"), ('if __name__ == "__main__":\n    main()', ""))


GLM_DROP = (r"\n\s*assert get_format\([a-z_]+\) == 'ND'",)  # a device format check: there is no device

HARNESSES = (
    Harness("arctic", "models/arctic/sum_lstm.py", "sum_lstm", "test_sum_lstm",
            edits=(('runtime_options={"device_sched_mode": 1,', 'runtime_options={"run_mode": mode, "device_sched_mode": 1,'),
                   ("import os\n", "import os\nimport sys\nimport argparse\nimport torch\n")),
            body='''    torch.manual_seed(0)
    states_4d = torch.randn(BATCH_SIZE, D_GATE_4, dtype=torch.float16)
    z4_4d = torch.randn(BATCH_SIZE, D_GATE_4, dtype=torch.float16)
    prev_cell = torch.randn(BATCH_SIZE, D_GATE, dtype=torch.float16)
    w = [torch.randn(D_GATE, dtype=torch.float16) for _ in range(4)]
    h_out = torch.zeros(BATCH_SIZE, D_GATE, dtype=torch.float16)
    c_out = torch.zeros(BATCH_SIZE, D_GATE, dtype=torch.float16)
    kernel = sum_lstm(run_mode="sim" if "sim" in sys.argv else "npu")
    kernel(states_4d, z4_4d, prev_cell, *w, h_out, c_out, LstmConfig(alpha=0.1, eps_cell=1e-6, eps_state=1e-6))'''),
    Harness("glm_gate", "models/glm_v4_5/glm_gate.py", "gate", "test_gate_sim",
            edits=_glm_edits('    runtime_options={\n    "stitch_cfgcache_size": 2500000},', ""), drop=GLM_DROP,
            body='''    bs, ne, h_num = 64, 160, 5120
    torch.manual_seed(0)
    hidden_states = torch.rand((bs, h_num), dtype=torch.float32)
    mm_weight = torch.rand((ne, h_num), dtype=torch.float32)
    router_logits_out = torch.rand((bs, ne), dtype=torch.float32)
    gate(hidden_states, mm_weight, router_logits_out)'''),
    Harness("glm_select", "models/glm_v4_5/glm_select_experts.py", "select_experts", "test_select_experts_sim",
            edits=_glm_edits('    runtime_options={"stitch_function_max_num": 128,', "\n" + " " * 21), drop=GLM_DROP,
            body='''    bs, ne, top_k = 32, 160, 8
    torch.manual_seed(0)
    router_logits = torch.rand((bs, ne), dtype=torch.float32)
    e_score_bias = torch.rand((ne), dtype=torch.bfloat16)
    topk_weights = torch.rand((bs, top_k), dtype=torch.float32)
    topk_ids = torch.zeros((bs, top_k), dtype=torch.int32)
    select_experts(router_logits, top_k, True, 1, 1, e_score_bias, topk_weights, topk_ids)'''),
)


def harness_text(h: Harness, shipped: str) -> str:
    """The model file as shipped with the harness's edits applied and its selectable SIM test appended."""
    text = shipped
    for old, new in h.edits:
        if text.count(old) != 1:
            raise SystemExit(f"{h.source}: expected this text once, found it {text.count(old)} times: {old!r}")
        text = text.replace(old, new)
    for pattern in h.drop:
        text = re.sub(pattern, "", text)
    return text.rstrip("\n") + "\n" + MAIN.format(test=h.test, name=h.name, body=h.body)


def write(checkout: Path, out: Path) -> list[Path]:
    written = []
    for h in HARNESSES:
        folder = out / "examples" / h.folder
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / (Path(h.source).stem + "_sim.py")
        target.write_text(harness_text(h, (checkout / h.source).read_text()))
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path, help="PyPTO work tree (tag r0.2.0 for pypto 0.2.0)")
    ap.add_argument("out", type=Path, help="where to write OUT/examples/<model>/ (outside this project)")
    args = ap.parse_args(argv)
    for path in write(args.checkout, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
