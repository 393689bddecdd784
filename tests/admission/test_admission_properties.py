"""Property: for random mixtures of edits, admission accepts iff exactly one knob changed and nothing else did.

The edits are drawn from three families on two operators of different styles (a single-file softmax; a kernel with a
separate harness holding its constants in a tuple, dicts, a list and an int):
* knob edits (a legal new value of one knob, written in place),
* non-knob edits (the computation, the test's inputs, a problem size, a new statement, the verdict text),
* formatting edits (comments, blank lines) that must never count.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal, InputError

OPS = Path(__file__).resolve().parents[2] / "fixtures" / "operators"
# The verdict depends only on the class of a mixture — how many knobs moved (0, 1, 2+), whether anything structural
# changed, whether formatting changed — and each class is pinned below with @example; the random draws add which
# knobs, edits and spellings are combined. 25 of them (each a libcst admission, ~0.2 s CPU) over the pinned classes
# find what 60 found; FUZZ_EXAMPLES raises it for a deeper run.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))

SOFTMAX = (OPS / "softmax" / "softmax.py").read_text()
KERNELS = (OPS / "split_harness" / "kernels.py").read_text()
HARNESS = (OPS / "split_harness" / "test_kernels.py").read_text()

# (knob id, old text, new text) — each a legal value on its own and in any combination with the others.
SOFTMAX_KNOBS = [
    ("softmax.py:TILE_B", "\nTILE_B = 4\n", "\nTILE_B = 2\n"),  # (the docstring mentions "TILE_B = 4" too)
    ("softmax.py:TILE_B", "\nTILE_B = 4\n", "\nTILE_B = 8\n"),
    ("softmax.py:softmax_kernel.set_vec_tile_shapes#1", "set_vec_tile_shapes(1, 4, 256)",
     "set_vec_tile_shapes(1, 8, 256)"),
    ("softmax.py:softmax_kernel.set_vec_tile_shapes#1", "set_vec_tile_shapes(1, 4, 256)",
     "set_vec_tile_shapes(2, 4, 256)"),
    ("softmax.py:softmax_kernel.runtime_options.stitch_function_max_num", '"stitch_function_max_num": 128',
     '"stitch_function_max_num": 256'),
    ("softmax.py:softmax_kernel.pass_options.vec_nbuffer_setting", "@pypto.frontend.jit(",
     '@pypto.frontend.jit(pass_options={"vec_nbuffer_setting": {-2: 1, -1: 2}}, '),
    ("softmax.py:softmax_kernel.loop[LOOP_B].unroll_list", 'idx_name="b")', 'idx_name="b", unroll_list=[2, 1])'),
]
SOFTMAX_STRUCTURAL = [
    ("= e / s", "= e"),  # the computation
    ("torch.manual_seed(0)", "torch.manual_seed(1)"),  # the test's inputs
    ("B, N, D = 32, 32, 256", "B, N, D = 16, 32, 256"),  # a problem size (also used by the harness)
    ("pypto.exp(xv - row_max)", "pypto.exp(xv)"),
    ("        s = pypto.sum(e, -1, keepdim=True)\n",
     "        s = pypto.sum(e, -1, keepdim=True)\n        s = s * 1.0\n"),  # a new statement
    ('print("PRECISION: passed (SIM', 'print("PRECISION:  passed (SIM'),  # the verdict text
]
FORMATTING = [
    ("import torch\n", "import torch  # tensors\n"),
    ("\n\ndef main()", "\n\n# the harness\ndef main()"),
    ("import os\n", "import os\n\n"),
]
KERNEL_KNOBS = [
    ("kernels.py:VEC_TILE", "VEC_TILE = (1, 64)", "VEC_TILE = (4, 128)"),
    ("kernels.py:BLOCK_TOKENS", "BLOCK_TOKENS = 4", "BLOCK_TOKENS = 8"),
    ("kernels.py:UNROLL", "UNROLL = [1]", "UNROLL = [2, 1]"),
    ("kernels.py:PASS_OPTS.vec_nbuffer_setting", '{"vec_nbuffer_setting": {-2: 1, -1: 1}}',
     '{"vec_nbuffer_setting": {-2: 1, -1: 4}}'),
    ("kernels.py:RUNTIME_OPTS.stitch_function_max_num", '"stitch_function_max_num": 128}',
     '"stitch_function_max_num": 64}'),
]
KERNEL_STRUCTURAL = [
    ("g * pypto.sigmoid(g) * u", "g * u"),
    ("TOKENS, DIM = 128, 512", "TOKENS, DIM = 64, 512"),  # shared with the harness: a problem size
    ("        t0 = t * BLOCK_TOKENS\n", "        t0 = t * BLOCK_TOKENS\n        t0 = t0 + 0\n"),
]


def _judge(before: dict[str, str], after: dict[str, str], context: dict[str, str]) -> tuple[str, str | None]:
    try:
        a = admit(before, after, context=context)
    except GateRefusal as exc:
        return "refused:" + exc.rule, None
    except InputError:
        return "nothing", None
    return "admitted", a.change.knob_id if a.change else None


def _apply(text: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def _check(path: str, src: str, knob_edits: list, struct_edits: list, fmt_edits: list,
           context: dict[str, str]) -> None:
    # one value per knob (two values of the same knob cannot both be written)
    chosen: dict[str, tuple[str, str, str]] = {}
    for e in knob_edits:
        chosen.setdefault(e[0], e)
    after = _apply(src, [(o, n) for _, o, n in chosen.values()] + list(struct_edits) + list(fmt_edits))
    verdict, knob = _judge({path: src}, {path: after}, context)
    if len(chosen) == 1 and not struct_edits:
        assert verdict == "admitted" and knob == next(iter(chosen)), (verdict, knob, chosen, struct_edits)
    elif not chosen and not struct_edits:
        assert verdict == "nothing", (verdict, fmt_edits)
    else:
        assert verdict.startswith("refused:"), (verdict, chosen, struct_edits)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(knobs=st.lists(st.sampled_from(SOFTMAX_KNOBS), max_size=3, unique=True),
       structural=st.lists(st.sampled_from(SOFTMAX_STRUCTURAL), max_size=2, unique=True),
       fmt=st.lists(st.sampled_from(FORMATTING), max_size=2, unique=True))
# every class of mixture, whatever the draws: nothing; formatting only; one knob (alone, reformatted); two or three
# knobs; a structural edit alone, reformatted, beside one knob, beside two knobs
@example(knobs=[], structural=[], fmt=[])
@example(knobs=[], structural=[], fmt=FORMATTING[:2])
@example(knobs=[SOFTMAX_KNOBS[5]], structural=[], fmt=[])
@example(knobs=[SOFTMAX_KNOBS[6]], structural=[], fmt=FORMATTING[1:])
@example(knobs=[SOFTMAX_KNOBS[0], SOFTMAX_KNOBS[1]], structural=[], fmt=[])  # two values of one knob: one change
@example(knobs=[SOFTMAX_KNOBS[0], SOFTMAX_KNOBS[2]], structural=[], fmt=[FORMATTING[0]])
@example(knobs=SOFTMAX_KNOBS[2:5], structural=[], fmt=[])
@example(knobs=[], structural=[SOFTMAX_STRUCTURAL[2]], fmt=[])
@example(knobs=[], structural=[SOFTMAX_STRUCTURAL[5]], fmt=[FORMATTING[2]])
@example(knobs=[SOFTMAX_KNOBS[4]], structural=[SOFTMAX_STRUCTURAL[0]], fmt=[])
@example(knobs=[SOFTMAX_KNOBS[1], SOFTMAX_KNOBS[3]], structural=SOFTMAX_STRUCTURAL[3:5], fmt=[])
@pytest.mark.slow  # long for the unit tier (scripts/test.sh --fast); the full suite runs it
def test_single_file_operator(knobs, structural, fmt) -> None:
    _check("softmax.py", SOFTMAX, knobs, structural, fmt, {})


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(knobs=st.lists(st.sampled_from(KERNEL_KNOBS), max_size=3, unique=True),
       structural=st.lists(st.sampled_from(KERNEL_STRUCTURAL), max_size=2, unique=True))
@example(knobs=[], structural=[])
@example(knobs=[KERNEL_KNOBS[0]], structural=[])
@example(knobs=KERNEL_KNOBS[2:5], structural=[])
@example(knobs=[], structural=[KERNEL_STRUCTURAL[1]])  # a problem size the harness uses
@example(knobs=[KERNEL_KNOBS[3]], structural=[KERNEL_STRUCTURAL[2]])
@pytest.mark.slow  # long for the unit tier (scripts/test.sh --fast); the full suite runs it
def test_kernel_with_a_separate_harness(knobs, structural) -> None:
    _check("kernels.py", KERNELS, knobs, structural, [], {"test_kernels.py": HARNESS})


@pytest.mark.parametrize(("knob", "old", "new"), SOFTMAX_KNOBS)
def test_every_single_knob_edit_is_admitted_alone(knob: str, old: str, new: str) -> None:
    verdict, got = _judge({"softmax.py": SOFTMAX}, {"softmax.py": SOFTMAX.replace(old, new, 1)}, {})
    assert (verdict, got) == ("admitted", knob)


KERNEL_ONLY = """import pypto

ROWS = 64
TILE = 8


@pypto.frontend.jit()
def k(x: pypto.Tensor([64, 512], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(TILE, 512)
    for i in pypto.loop(ROWS // TILE):
        pypto.view(x, [TILE, 512], [i * TILE, 0])
"""
HARNESS_USING_ROWS = "import torch\nimport kernel\n\nx = torch.randn(kernel.ROWS, 512)\n"


def test_the_harness_decides_that_a_shared_constant_is_a_problem_size() -> None:
    """ROWS reaches the problem only through the harness file: without it as context it would look tunable."""
    before = {"kernel.py": KERNEL_ONLY}
    # (64 → 32 would also be refused as computing half the rows: the loop must cover the tensor)
    after = {"kernel.py": KERNEL_ONLY.replace("ROWS = 64", "ROWS = 128")}
    assert _judge(before, after, {}) == ("admitted", "kernel.py:ROWS")
    try:
        admit(before, after, context={"harness.py": HARNESS_USING_ROWS})
    except GateRefusal as exc:
        assert exc.rule == "one-change" and "harness.py:4" in exc.message
    else:
        raise AssertionError("a constant the harness builds its inputs from was admitted as a knob")
