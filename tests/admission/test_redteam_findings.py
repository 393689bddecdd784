"""Red-team findings (an independent pass over the gates): each test is one way past them that worked, and now
states how it is stopped. They were written as ``xfail(strict=True)`` against the code of the day and lost the
marker as each gap was closed; a new finding starts that way again.

Most tests work at the library level (``tools/code/admission.admit``, ``TuningService`` on a temp workspace). The session
tests use a stand-in operator (``_FAKEOP``): a file with a real-looking PyPTO kernel that the role analysis and the
editor read like any operator, whose ``main()`` never runs the simulator but copies a recorded SIM run of the softmax
fixture into ``output/`` (a run takes ~0.1 s). It fails its "precision" for a few configurations, so failed rounds can
be produced at will. The end-to-end case over MCP stdio with the real simulator (code in a knob change forges the
measurement) is a chapter of the softmax session in test_attacks_over_stdio.py.
"""

from __future__ import annotations

import difflib
import re
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal, InputError
from pypto_tune.tools.operations.stages import checklist

from tests.sessions import keep_copy, own_interpreter, put_back

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "fixtures" / "operators"
RUNS = ROOT / "fixtures" / "runs"
SOFTMAX = (OPS / "softmax" / "softmax.py").read_text()
MATMUL = (OPS / "matmul" / "matmul.py").read_text()
UPSTREAM = (OPS / "upstream_softmax" / "softmax_op.py").read_text()
SOFTMAX_JIT = '@pypto.frontend.jit(runtime_options={"run_mode": RUN_MODE, "stitch_function_max_num": 128}'

# Python that runs when the module is imported, written as an expression (no statement needed).
PAYLOAD = '(print("PAYLOAD RAN"), 128)[1]'


def _verdict(before: dict[str, str], after: dict[str, str], context: dict[str, str] | None = None) -> Any:
    """The Admission, or the refusal (GateRefusal / InputError) as an exception object."""
    try:
        return admit(before, after, context=context or {})
    except (GateRefusal, InputError) as exc:
        return exc


def _refused(result: Any) -> bool:
    return isinstance(result, GateRefusal)


def _diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


# ============================================================================================================
# 1. Code smuggled past the masked-tree comparison inside a knob change (admission.py _Masker)
# ============================================================================================================


@pytest.mark.parametrize("extra", ["**(print('PAYLOAD RAN') or {})", "*(print('PAYLOAD RAN') or [])",
                                   "bogus=__import__('os').system('true')"], ids=["kwargs", "args", "keyword"])
def test_cube_tile_call_carries_code_beside_a_legal_knob_change(extra: str) -> None:
    old = "pypto.set_cube_tile_shapes([64, 64], [64, 64], [64, 64])"
    new = f"pypto.set_cube_tile_shapes([128, 128], [64, 64], [64, 64], {extra})"
    result = _verdict({"matmul.py": MATMUL}, {"matmul.py": MATMUL.replace(old, new)})
    assert _refused(result), f"admitted: {result.describe() if hasattr(result, 'describe') else result}"


def test_duplicate_option_key_carries_code_beside_a_legal_knob_change() -> None:
    after = SOFTMAX.replace("\nTILE_B = 4\n", "\nTILE_B = 8\n").replace(
        SOFTMAX_JIT, SOFTMAX_JIT.replace('"stitch_function_max_num": 128}',
                                         f'"stitch_function_max_num": 128, "stitch_function_max_num": {PAYLOAD}}}'))
    result = _verdict({"softmax.py": SOFTMAX}, {"softmax.py": after})
    assert _refused(result), f"admitted: {result.describe() if hasattr(result, 'describe') else result}"


def test_runtime_debug_mode_value_carries_code_beside_a_legal_knob_change() -> None:
    with_debug = SOFTMAX.replace(SOFTMAX_JIT, SOFTMAX_JIT + ', debug_options={"runtime_debug_mode": 1}')
    after = with_debug.replace("\nTILE_B = 4\n", "\nTILE_B = 8\n").replace(
        '{"runtime_debug_mode": 1}', '{"runtime_debug_mode": (print("PAYLOAD RAN"), 1)[1]}')
    result = _verdict({"softmax.py": with_debug}, {"softmax.py": after})
    assert _refused(result), f"admitted: {result.describe() if hasattr(result, 'describe') else result}"


@pytest.mark.parametrize(("codec", "newline"), [("unicode_escape", "\\n"), ("raw_unicode_escape", "\\u000a")])
def test_an_encoding_declaration_cannot_turn_a_comment_into_code(codec: str, newline: str) -> None:
    after = f"# -*- coding: {codec} -*-\n" + SOFTMAX.replace(
        "\nTILE_B = 4\n", f"\nTILE_B = 8  # rows per block{newline}print('PAYLOAD RAN')\n")
    # what Python executes: the comment hides a statement
    assert "PAYLOAD RAN" in str(compile(after.encode(), "softmax.py", "exec").co_consts)
    result = _verdict({"softmax.py": SOFTMAX}, {"softmax.py": after})
    assert _refused(result), f"admitted: {result.describe() if hasattr(result, 'describe') else result}"


# ============================================================================================================
# 2. Computing less, admitted as a legal knob change (effective.py / legality.py)
# ============================================================================================================

LITERAL_TRIPS = '''import pypto

ROWS, COLS = 64, 512
TILE = 8
NBLK = 8  # = ROWS // TILE


@pypto.frontend.jit()
def k(x: pypto.Tensor([ROWS, COLS], pypto.DT_FP32), y: pypto.Tensor([ROWS, COLS], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(TILE, COLS)
    for i in pypto.loop(NBLK, name="L", idx_name="i"):
        v = pypto.view(x, [TILE, COLS], [i * TILE, 0], valid_shape=[TILE, COLS])
        y[i * TILE:(i + 1) * TILE, :] = pypto.exp(v)
'''


@pytest.mark.parametrize(("old", "new"), [("NBLK = 8", "NBLK = 1"),  # 1 of 8 blocks computed
                                          ("TILE = 8\n", "TILE = 4\n")],  # 8 blocks of 4 rows: half the rows
                         ids=["trips-8-to-1", "block-8-to-4"])
def test_loop_trips_times_block_must_cover_the_axis(old: str, new: str) -> None:
    result = _verdict({"op.py": LITERAL_TRIPS}, {"op.py": LITERAL_TRIPS.replace(old, new)})
    assert _refused(result), f"admitted: {result.describe() if hasattr(result, 'describe') else result}"


def test_valid_shape_cannot_shrink_what_is_computed() -> None:
    after = LITERAL_TRIPS.replace("valid_shape=[TILE, COLS]", "valid_shape=[1, 32]")
    result = _verdict({"op.py": LITERAL_TRIPS}, {"op.py": after})
    assert _refused(result), f"admitted: {result.describe() if hasattr(result, 'describe') else result}"


@pytest.mark.parametrize("value", ["3", "64"])  # 32 // 3 drops 2 rows; 32 // 64 = 0 iterations
def test_upstream_block_that_drops_rows_is_refused_or_flagged(value: str) -> None:
    after = UPSTREAM.replace("tile_b = 4 ", f"tile_b = {value} ")
    result = _verdict({"softmax_op.py": UPSTREAM}, {"softmax_op.py": after})
    assert _refused(result) or any("tile_b" in u or "LOOP_BATCH" in u or "//" in u for u in result.unchecked), (
        f"admitted, checked={result.checked}, unchecked={result.unchecked}")


def test_upstream_vec_tile_that_splits_the_reduce_axis_is_refused_or_flagged() -> None:
    # softmax over dim = 256 (the test builds shape (32, 32, 256)); the shipped (1, 4, 64) already splits it and
    # (1, 4, 32) cuts it finer, which the same rule refuses on softmax.py ("never cut it finer")
    after = UPSTREAM.replace("set_vec_tile_shapes(1, 4, 64)", "set_vec_tile_shapes(1, 4, 32)")
    result = _verdict({"softmax_op.py": UPSTREAM}, {"softmax_op.py": after})
    assert _refused(result) or any("set_vec_tile_shapes" in u for u in result.unchecked), (
        f"admitted as checked: {result.checked}")


@pytest.mark.parametrize(("old", "new"), [
    ("torch.allclose(got, expected, rtol=1e-3, atol=1e-5)", "torch.allclose(got, expected, rtol=1e3, atol=1e3)"),
    ('print(f"PRECISION: failed (max abs diff {diff:.3e}, rtol=1e-3, atol=1e-5)")\n        return 1',
     'print(f"PRECISION: passed (max abs diff {diff:.3e}, rtol=1e-3, atol=1e-5)")\n        return 0'),
    ("torch.manual_seed(0)", "torch.manual_seed(1)"),
], ids=["tolerance", "verdict-line", "inputs"])
def test_an_algorithm_change_cannot_rewrite_the_test(old: str, new: str) -> None:
    assert old in SOFTMAX
    try:
        result = admit({"softmax.py": SOFTMAX}, {"softmax.py": SOFTMAX.replace(old, new)}, context={},
                       algorithm=True, allow_structural=True)
    except GateRefusal:
        return
    raise AssertionError(f"admitted as an algorithm change: {result.structural_lines}")


# ============================================================================================================
# 3. Problem sizes the role analysis cannot see reaching the harness (roles.py _uses)
# ============================================================================================================

KERNEL_ONLY = """import pypto

ROWS = 64
TILE = 8


@pypto.frontend.jit()
def k(x: pypto.Tensor([64, 512], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(TILE, 512)
    for i in pypto.loop(ROWS // TILE):
        pypto.view(x, [TILE, 512], [i * TILE, 0])
"""
HARNESSES = {
    # the shipped split_harness fixture imports its kernel module exactly like this
    "importlib": ("kernel.py", "harness.py",
                  ("import importlib\nimport torch\n\nkernel = importlib.import_module('kernel')\n"
                   "x = torch.randn(kernel.ROWS, 512)\n")),
    "from-import-in-a-function": ("kernel.py", "harness.py",
                                  ("import torch\n\n\ndef make():\n    from kernel import ROWS\n"
                                   "    return torch.randn(ROWS, 512)\n")),
    "dotted-package-import": ("ops/kernel.py", "ops/harness.py",
                              "import torch\nimport ops.kernel\n\nx = torch.randn(ops.kernel.ROWS, 512)\n"),
    "relative-import": ("pkg/kernel.py", "pkg/harness.py",
                        "import torch\nfrom .kernel import ROWS\n\nx = torch.randn(ROWS, 512)\n"),
}


@pytest.mark.parametrize("form", sorted(HARNESSES))
def test_a_problem_size_used_by_the_harness_is_not_a_knob(form: str) -> None:
    kpath, hpath, harness = HARNESSES[form]
    result = _verdict({kpath: KERNEL_ONLY}, {kpath: KERNEL_ONLY.replace("ROWS = 64", "ROWS = 32")},
                      context={hpath: harness})
    assert _refused(result), f"ROWS admitted as a knob: {result.describe() if hasattr(result, 'describe') else result}"


IN_FILE_USES = {
    "class-attribute": "class Shapes:\n    rows = ROWS\n\n\ndef main():\n    k(torch.randn(Shapes.rows, 512))\n",
    "dataclass-default": ("import dataclasses\n\n\n@dataclasses.dataclass\nclass Cfg:\n    rows: int = ROWS\n\n\n"
                          "def main():\n    k(torch.randn(Cfg().rows, 512))\n"),
    "through-str": "def main():\n    k(torch.randn(int(str(ROWS)), 512))\n",
}


@pytest.mark.parametrize("form", sorted(IN_FILE_USES))
def test_a_problem_size_used_in_the_same_file_is_not_a_knob(form: str) -> None:
    src = KERNEL_ONLY.replace("import pypto\n", "import pypto\nimport torch\n") + "\n\n" + IN_FILE_USES[form]
    result = _verdict({"op.py": src}, {"op.py": src.replace("ROWS = 64", "ROWS = 32")})
    assert _refused(result), f"ROWS admitted as a knob: {result.describe() if hasattr(result, 'describe') else result}"


# ============================================================================================================
# Session tests on a stand-in operator (no simulator)
# ============================================================================================================

_FAKEOP = '''"""Stand-in operator for gate tests: the kernel is never run; main() copies a recorded SIM run."""
import json
import os
import re
import shutil
import sys
import time

B, N, D = 32, 32, 256
TILE_B = 4
COUNTER = ""

if os.environ.get("FAKEOP_DEFINE_KERNEL"):  # never set: the kernel is only read by the server
    import pypto

    @pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM, "stitch_function_max_num": 128})
    def kern(x: pypto.Tensor([B, N, D], pypto.DT_FP32), y: pypto.Tensor([B, N, D], pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(1, 4, 256)
        for b in pypto.loop(B // TILE_B, name="LOOP_B", idx_name="b"):
            xv = pypto.view(x, [TILE_B, N, D], [b * TILE_B, 0, 0])
            y[b * TILE_B:(b + 1) * TILE_B, :, :] = pypto.exp(xv)


def main() -> int:
    me = open(os.path.abspath(__file__)).read()
    tile = eval(re.search(r"^TILE_B = (.+)$", me, re.M).group(1))
    vec = re.search(r"set_vec_tile_shapes\\((.+)\\)$", me, re.M).group(1).replace(" ", "")
    if tile == 2 or vec in ("1,8,256", "1,2*4,256"):
        print("PRECISION: failed (stand-in: this configuration fails)")
        return 1
    src = "softmax_base"
    if vec == "1,16,256" and COUNTER:  # a kernel whose time varies from run to run (as on an NPU)
        n = int(open(COUNTER).read()) if os.path.exists(COUNTER) else 0
        open(COUNTER, "w").write(str(n + 1))
        src = "softmax_tuned" if n == 2 else "softmax_base"  # run 3 (the 2nd measurement) is the lucky one
    # The recorded runs are data of the workspace (a run sees nothing else). The copy is passed off as this run's
    # compilation of this file — a new name, its own name in the simulator configuration, this file in program.json
    # (the server cannot tell such a forgery in recorded code from a run: README, "What the sandbox cannot see").
    name = "output_%s_%d_C0000202" % (time.strftime("%Y%m%d_%H%M%S_000000"), os.getpid())
    dest = os.path.join("output", name)
    shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded", src), dest)
    ini = os.path.join(dest, "CostModelSimulationOutput", "_simulate.config.ini")
    text = open(ini).read()
    open(ini, "w").write(re.sub(r"output/output_[^/]+/", "output/" + name + "/", text))
    prog = os.path.join(dest, "program.json")
    text = re.sub(r'"file": "[^"]*"', '"file": ' + json.dumps(os.path.abspath(__file__)), open(prog).read())
    open(prog, "w").write(text)
    print("PRECISION: passed (SIM: compiled and simulated; numerics not checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
HONEST_US = 36.405  # max_work_time of fixtures/runs/softmax_base (the stand-in's every measurement)
VEC = "fakeop.py:kern.set_vec_tile_shapes#1"
TILE_B = "fakeop.py:TILE_B"


def _fake_ws(tmp_path: Path, tile_b: int = 4, counter: Path | None = None) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    text = _FAKEOP.replace("TILE_B = 4\n", f"TILE_B = {tile_b}\n", 1)
    for src in ("softmax_base", "softmax_tuned"):  # the recorded runs it copies: data of its workspace
        shutil.copytree(next((RUNS / src / "output").iterdir()), ws / "recorded" / src)
    if counter is not None:
        text = text.replace('COUNTER = ""', f"COUNTER = {str(counter)!r}", 1)
    (ws / "fakeop.py").write_text(text)
    return ws


def _service(ws: Path) -> Any:
    from pypto_tune.tools.service import TuningService

    return TuningService(default_workspace=ws, python=sys.executable)


async def _frontend(svc: Any, ws: Path, python: str = sys.executable) -> str:
    sid = svc.start_session(workspace=str(ws), operator_files=["fakeop.py"], test_command=[python, "fakeop.py"],
                            run_mode="sim", goal_speedup=100.0).session_id
    assert (await svc.run_precision_check(sid)).verdict == "passed"
    svc.enable_runtime_debug(sid)
    assert (await svc.collect_swimlane(sid)).operator_time_us == pytest.approx(HONEST_US, abs=1e-3)
    assert svc.analyze_bubbles(sid, lang="en").stage == "FRONTEND"
    return sid


@pytest.fixture(scope="module")
def at_frontend(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], tuple[Path, str]]:
    """The stand-in's session brought to FRONTEND once (baseline checked against HONEST_US, analysis) for the tests
    that start there; each gets the workspace back as it was then, at the same path, and a fresh service resumes the
    session from its ledger."""
    root = tmp_path_factory.mktemp("stand-in-at-frontend")
    ws = _fake_ws(root)
    sid = anyio.run(_frontend, _service(ws), ws)
    copy = keep_copy(ws, root / "at-frontend")

    def fresh() -> tuple[Path, str]:
        put_back(copy, ws)
        return ws, sid

    return fresh


def test_stand_in_operator_works(at_frontend: Callable[[], tuple[Path, str]]) -> None:
    """Not a finding: the stand-in behaves (baseline, a round that fails, a round that is measured honestly)."""
    ws, sid = at_frontend()

    async def scenario() -> None:
        svc = _service(ws)
        svc.apply_tuning_patch(sid, knob=TILE_B, value=2, catalog_id="F-3", rationale="t")
        assert (await svc.run_precision_check(sid)).verdict == "failed"
        assert svc.record_round(sid).decision == "failed"
        svc.apply_tuning_patch(sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="t")
        assert (await svc.run_precision_check(sid)).verdict == "passed"
        assert (await svc.collect_swimlane(sid)).operator_time_us == pytest.approx(HONEST_US, abs=1e-3)
        assert svc.record_round(sid).decision == "reverted"

    anyio.run(scenario)


# ------------------------------------------------------------------------------------------------ retries (R19)


@pytest.mark.parametrize(("knob", "first", "old", "new", "cid"), [
    (TILE_B, 2, "\nTILE_B = 4\n", "\nTILE_B = +2\n", "F-3"),
    (VEC, [1, 8, 256], "set_vec_tile_shapes(1, 4, 256)", "set_vec_tile_shapes(1, 2 * 4, 256)", "F-10"),
], ids=["TILE_B=+2", "vec=2*4"])
def test_a_failed_value_respelled_is_not_retried(at_frontend: Callable[[], tuple[Path, str]], knob: str, first: Any,
                                                 old: str, new: str, cid: str) -> None:
    ws, sid = at_frontend()

    async def scenario() -> None:
        svc = _service(ws)
        svc.apply_tuning_patch(sid, knob=knob, value=first, catalog_id=cid, rationale="first try")
        assert (await svc.run_precision_check(sid)).verdict == "failed"
        assert svc.record_round(sid).decision == "failed"
        src = (ws / "fakeop.py").read_text()
        with pytest.raises(GateRefusal, match="no-retry"):
            svc.apply_tuning_patch(sid, diff=_diff("fakeop.py", src, src.replace(old, new)), catalog_id=cid,
                                   rationale="the same value, spelled differently")

    anyio.run(scenario)


# ------------------------------------------------------------------------------------------------ stages (R14)


def test_a_stage_cannot_be_left_without_running_anything(at_frontend: Callable[[], tuple[Path, str]]) -> None:
    ws, sid = at_frontend()

    async def scenario() -> None:
        svc = _service(ws)
        h = svc.ctx.find(sid)
        runs_at_entry = len(h.ledger.rows("runs", sid))
        values = {TILE_B: 8, VEC: [1, 32, 256], "fakeop.py:kern.loop[LOOP_B].unroll_list": [2, 1]}
        st = svc.ctx.state(h, sid)
        for item in checklist(st, "frontend"):
            if item["status"] != "untried":
                continue
            knob = next(k for k in values if item["catalog_id"] in next(
                x for x in svc.list_knobs(sid).knobs if x.id == k).catalog_ids)
            svc.apply_tuning_patch(sid, knob=knob, value=values[knob], catalog_id=item["catalog_id"],
                                   rationale="open and close")
            svc.revert_patch(sid)
        assert len(h.ledger.rows("runs", sid)) == runs_at_entry  # nothing was run in this stage
        with pytest.raises(GateRefusal, match="stage-exit"):
            svc.advance_stage(sid, reason="every item 'tried'")

    anyio.run(scenario)


# ------------------------------------------------------------------------------------------------ the numbers


def test_a_round_cannot_be_remeasured_until_the_number_suits(tmp_path: Path) -> None:
    ws = _fake_ws(tmp_path, counter=tmp_path / "runs-of-the-candidate")

    async def scenario() -> None:
        svc = _service(ws)
        sid = await _frontend(svc, ws)
        svc.apply_tuning_patch(sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="bigger tile")
        assert (await svc.run_precision_check(sid)).verdict == "passed"
        first = await svc.collect_swimlane(sid)
        assert first.operator_time_us == pytest.approx(HONEST_US, abs=1e-3)  # no gain: the agent does not record
        with pytest.raises(GateRefusal, match="measure-once"):
            await svc.collect_swimlane(sid)  # ... it measures again
        rec = svc.record_round(sid)
        assert rec.decision == "reverted" and rec.after_us == pytest.approx(HONEST_US, abs=1e-3)

    anyio.run(scenario)


async def _forged_round(svc: Any, sid: str) -> tuple[str, float | None]:
    """A legal round whose honest time equals the kept time; returns (decision, after_us) — or raises a refusal."""
    svc.apply_tuning_patch(sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="bigger tile")
    assert (await svc.run_precision_check(sid)).verdict == "passed"
    await svc.collect_swimlane(sid)
    rec = svc.record_round(sid)
    return rec.decision, rec.after_us


def _scale_logs(root: Path, factor: float = 100.0) -> int:
    n = 0
    for log in root.rglob("bubble_analysis.log"):
        text = log.read_text()
        log.write_text(re.sub(r"(Time: )([0-9.]+)", lambda m: m.group(1) + repr(float(m.group(2)) / factor), text))
        n += 1
    return n


async def _measured_while_forged(ws: Path, sid: str, armed: dict[str, bool], reason: str) -> Any:
    """One round measured while the forgery is armed: the measurement is invalid, naming ``reason``, and the round
    is not kept. Returns the collection result for test-specific checks."""
    svc = _service(ws)
    armed["on"] = True
    svc.apply_tuning_patch(sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="bigger tile")
    assert (await svc.run_precision_check(sid)).verdict == "passed"
    collected = await svc.collect_swimlane(sid)
    assert not collected.valid
    assert any(reason in r for r in collected.invalid_reasons), collected.invalid_reasons
    assert svc.record_round(sid).decision != "kept"
    return collected


def test_outputs_cannot_be_rewritten_between_the_run_and_its_analysis(at_frontend: Callable[[], tuple[Path, str]],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A watcher process polling output/ wins this race in practice (tried: first attempt, -99 %); here the write
    happens deterministically right after the move, where such a watcher acts."""
    from pypto_tune.tools.running import execution

    ws, sid = at_frontend()
    armed = {"on": False}
    real_adopt = execution.adopt_outputs

    def adopt_then_agent_writes(copy: Path, workspace: Path, digests: Any = None, **kw: Any) -> list[Path]:
        moved = real_adopt(copy, workspace, digests, **kw)
        if armed["on"]:
            for d in moved:
                _scale_logs(d)
        return moved

    monkeypatch.setattr(execution, "adopt_outputs", adopt_then_agent_writes)

    async def scenario() -> None:
        collected = await _measured_while_forged(ws, sid, armed, "changed after the run ended")
        assert collected.operator_time_us is None

    anyio.run(scenario)


def test_a_log_rewritten_inside_the_copy_before_it_leaves_disagrees_with_its_trace(
        at_frontend: Callable[[], tuple[Path, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewritten before the folder leaves the sandbox (so the digest of the handed-back bytes already holds the forged
    log — only the run itself can still do that): the log's figures no longer match the ones recomputed from
    merged_swimlane.json (B.9)."""
    from pypto_tune.tools.running import execution

    ws, sid = at_frontend()
    armed = {"on": False}
    real_take = execution.take_handback

    def take_forged(fd: int, *, dest: Path, **kw: Any) -> Any:
        back = real_take(fd, dest=dest, **kw)
        if armed["on"]:  # as if the run had written these bytes: the stream's digests are the forged folder's
            assert _scale_logs(dest / "output") > 0
            back.digests = {name: execution.dir_digest(dest / "output" / name) for name in back.digests}
        return back

    monkeypatch.setattr(execution, "take_handback", take_forged)

    async def scenario() -> None:
        await _measured_while_forged(ws, sid, armed, "disagree")

    anyio.run(scenario)


def test_the_private_copy_cannot_be_swapped_during_the_run(at_frontend: Callable[[], tuple[Path, str]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A watcher polling .pypto-tune/exec/ did this for real on the unsealed sandbox (a kernel module imported after
    torch: swap when the copy appears, restore when its output/ appears: kept at -92.5 %). The sealed run has no host
    folder that holds its copy: the swap, deterministically around the command, lands in the run's own empty folder
    — its only host folder — and reaches nothing; the run measures the recorded bytes."""
    from pypto_tune.tools.running import execution

    ws, sid = at_frontend()
    armed = {"on": False}
    real_run = execution.run_command
    swapped: list[str] = []

    async def swap_during_run(argv: list[str], *, cwd: Path, **kw: Any) -> Any:
        target = Path(cwd) / "fakeop.py"
        if armed["on"]:
            swapped.extend(p.name for p in Path(cwd).iterdir())  # what a watcher finds there: nothing
            recorded = (ws / "fakeop.py").read_bytes()
            target.write_bytes(recorded.replace(b'src = "softmax_base"', b'src = "softmax_tuned"'))
        return await real_run(argv, cwd=cwd, **kw)

    monkeypatch.setattr(execution, "run_command", swap_during_run)

    async def scenario() -> None:
        svc = _service(ws)
        armed["on"] = True
        svc.apply_tuning_patch(sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="bigger tile")
        result = await svc.run_precision_check(sid)
        assert result.verdict == "passed" and swapped == []
        assert svc.ctx.find(sid).ledger.rows("runs", sid)[-1]["tampered"] == []
        collected = await svc.collect_swimlane(sid)
        assert collected.operator_time_us == pytest.approx(HONEST_US, abs=1e-3), \
            "the swapped file reached the run: it measured the tuned recording"

    anyio.run(scenario)


@pytest.mark.parametrize("put_back", [False, True], ids=["left-in-place", "removed-before-the-run"])
def test_the_interpreter_environment_is_part_of_the_code_state(tmp_path: Path, put_back: bool) -> None:
    """A .pth file in the test interpreter's site-packages runs in every later run (here: it rewrites the log's
    figures at exit). The server scanned the interpreter's folders before the baseline, so the run is discarded —
    also when the file was removed again before the run (the folder's ctime cannot be put back)."""
    python, site = own_interpreter(tmp_path)  # the checklist asks it to import pypto
    ws = _fake_ws(tmp_path)

    async def scenario() -> None:
        svc = _service(ws)
        sid = await _frontend(svc, ws, python=python)  # its runs add __pycache__ files: not a change
        # the agent, behind the server's back, outside the workspace:
        pth = site / "zz_agent.pth"
        pth.write_text(
            "import atexit; atexit.register(lambda: [p.write_text(__import__('re').sub(r'(Time: )([0-9.]+)', "
            "lambda m: m.group(1) + repr(float(m.group(2)) / 100), p.read_text())) "
            "for p in __import__('pathlib').Path('output').rglob('bubble_analysis.log')])\n")
        if put_back:
            pth.unlink()
        svc.apply_tuning_patch(sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="bigger tile")
        result = await svc.run_precision_check(sid)
        assert result.verdict == "error"
        assert "interpreter's files changed" in result.reason
        expected = f"changed: {site}" if put_back else f"added: {pth}"
        assert expected in result.reason, result.reason

    anyio.run(scenario)


# ------------------------------------------------------------------------------------------------ the ledger


def test_a_confirmation_inserted_into_the_ledger_is_not_a_persons_answer(tmp_path: Path) -> None:
    ws = _fake_ws(tmp_path, tile_b=2)  # the stand-in's baseline fails

    async def scenario() -> None:
        svc = _service(ws)
        sid = svc.start_session(workspace=str(ws), operator_files=["fakeop.py"],
                                test_command=[sys.executable, "fakeop.py"], run_mode="sim",
                                goal_speedup=10.0).session_id
        for _ in range(3):
            assert (await svc.run_precision_check(sid)).verdict == "failed"
        with pytest.raises(GateRefusal, match="baseline-retry"):
            await svc.run_precision_check(sid)
        st = svc.ctx.state(svc.ctx.find(sid), sid)
        question = st.pending_question
        last = max(int(r["id"]) for r in st.rows["precision_records"])
        con = sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3")
        con.execute("INSERT INTO confirmations(session_id, at, kind, detail, source, question_id) "
                    "VALUES (?, '2026-12-03T00:00:00', 'baseline-retry', ?, 'cli', ?)", (sid, str(last),
                                                                                         int(question["id"])))
        con.commit()
        con.close()
        with pytest.raises(GateRefusal, match="ledger-integrity"):
            await svc.run_precision_check(sid)
        findings = svc.get_status(sid).ledger_findings
        assert any(f.startswith("confirmations row") and "not written by this server" in f for f in findings)

    anyio.run(scenario)


def test_a_deleted_or_rewritten_ledger_row_is_found(at_frontend: Callable[[], tuple[Path, str]]) -> None:
    """With the triggers dropped, a failed round's decision deleted (to try the value again) and a measurement's
    figure rewritten: the rewritten row is left out, the deleted one is reported."""
    ws, sid = at_frontend()

    async def scenario() -> None:
        svc = _service(ws)
        svc.apply_tuning_patch(sid, knob=TILE_B, value=2, catalog_id="F-3", rationale="t")
        assert (await svc.run_precision_check(sid)).verdict == "failed"
        assert svc.record_round(sid).decision == "failed"
        con = sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3")
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
            con.execute(f"DROP TRIGGER {name}")
        con.execute("DELETE FROM round_decisions WHERE session_id = ?", (sid,))
        con.execute("UPDATE measurements SET operator_time_us = 1.0 WHERE session_id = ?", (sid,))
        con.commit()
        con.close()
        svc2 = _service(ws)  # a fresh server reading the same ledger
        findings = svc2.get_status(sid).ledger_findings
        assert any("round_decisions row" in f and "deleted" in f for f in findings), findings
        assert any("measurements row" in f and "seal does not match" in f for f in findings), findings
        assert svc2.get_status(sid).baseline_us is None  # the rewritten baseline measurement is not evidence
        with pytest.raises(GateRefusal, match="ledger-integrity"):  # nor is the round, reopened by the deletion
            svc.apply_tuning_patch(sid, knob=TILE_B, value=2, catalog_id="F-3", rationale="again")

    anyio.run(scenario)
