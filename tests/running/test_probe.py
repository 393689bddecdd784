"""The run-time probe (tools/running/probe/): what it records from inside a real SIM run, that it changes nothing
the run computes or prints, and that it fails closed and quiet.

Expected values come from the fixture's text (upstream_layernorm's test_layer_norm builds x [128, 512] and
gamma/beta [1, 512] in FP32, LayerNormConfig(block_rows=1, vec_tile_shape=(1, 128)), and takes the static branch).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pypto_tune.tools.analysis import analyze_runs
from pypto_tune.tools.code.codestate import ExecFile
from pypto_tune.tools.running.execution import run_isolated
from pypto_tune.tools.running.probe import DIR_ENV, HOOK_DIR, parse_records, probe_env, read_records
from pypto_tune.tools.running.runner import build_child_env
from tests.conftest import OPERATORS

pytestmark = pytest.mark.process

LN = OPERATORS / "upstream_layernorm" / "layernorm_op.py"
CMD = [sys.executable, "layernorm_op.py", "layernorm_op.py::test_layer_norm", "--run_mode", "sim"]


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _normalise(output: str, root: str) -> list[str]:
    """The run's output without what differs between any two runs: paths of the private copy, times, pids."""
    out = output.replace(root, "<copy>")
    return [re.sub(r"\d+", "#", line) for line in out.splitlines() if line.strip()]


@pytest.mark.sim
@pytest.mark.anyio
async def test_the_probe_records_the_run_and_changes_nothing_it_computes(tmp_path: Path) -> None:
    """Delivered as RunOps.run delivers it (RunSpec.pythonpath_first + capture_env, read with parse_records), in the
    sandbox and — where the person allowed ``--unsandboxed`` — without it: the same record either way."""
    text = LN.read_text(encoding="utf-8")
    files = {"layernorm_op.py": ExecFile(data=text.encode())}
    runs = {}
    for name, probed, sandboxed in (("plain", False, True), ("probed", True, True), ("unsandboxed", True, False)):
        ws = tmp_path / name
        ws.mkdir()
        hooks = {"pythonpath_first": (str(HOOK_DIR),), "capture_env": DIR_ENV} if probed else {}
        iso = await run_isolated(files, CMD, workspace=ws, env=build_child_env(run_mode="sim"), timeout_s=600,
                                 tag="probe-test", sandboxed=sandboxed, **hooks)
        assert iso.result.exit_code == 0, iso.result.output_tail
        assert (iso.sandbox == "none") == (not sandboxed), iso.sandbox
        record = parse_records(iso.captured, [str(ws), iso.exec_dir])
        assert (record.status == "reported") == probed, record  # nothing captured without the hooks
        runs[name] = (iso, analyze_runs(list(iso.output_dirs), run_mode="sim"), record)
    (plain, plain_an, _), (probed, probed_an, record) = runs["plain"], runs["probed"]

    # never changes what the kernel computes: same simulated time and tasks, the same output line for line
    assert probed_an.operator_time_us == plain_an.operator_time_us
    assert probed_an.e2e_us == plain_an.e2e_us
    assert [d.task_count for d in probed_an.per_dir] == [d.task_count for d in plain_an.per_dir]
    # (in the sandbox the run names its folders under the workspace's own path, where its copy is mounted)
    assert _normalise(probed.result.output_head + probed.result.output_tail, str(tmp_path / "probed")) == \
        _normalise(plain.result.output_head + plain.result.output_tail, str(tmp_path / "plain"))

    assert not record.faults, record
    assert record.pypto_version == "0.2.0"
    kernel, = record.kernels
    assert (kernel.name, kernel.file, kernel.in_workspace) == ("layer_norm_kernel", "layernorm_op.py", True)
    assert kernel.compiled is True and kernel.ran is True and kernel.calls == 1 and kernel.error is None
    assert [(t.shape, t.dtype) for t in kernel.tensors()] == [([128, 512], "torch.float32"), ([1, 512],
                                                              "torch.float32"), ([1, 512], "torch.float32"),
                                                             ([128, 512], "torch.float32")]
    assert kernel.options["runtime_options"] == {"run_mode": 1, "stitch_function_max_num": 128}  # RunMode.SIM → 1
    assert [f.function for f in kernel.called_from[0]][:1] == ["_run"]

    static_tile = _line_of(text, "pypto.set_vec_tile_shapes(*config.vec_tile_shape)")
    dynamic_tile = _line_of(text, "pypto.set_vec_tile_shapes(1, hidden)")
    tiles = [c for c in record.calls if c.api == "set_vec_tile_shapes"]
    assert [(c.file, c.line, c.args, c.count, c.kernel == kernel.key) for c in tiles] == \
        [("layernorm_op.py", static_tile, [1, 128], 1, True)]
    # the largest tensor the vector operations under the tile took: the [128, 512] output each row is assembled into
    assert tiles[0].extent == {"2": [128, 512]}
    assert {f.function for f in tiles[0].stack} >= {"<jit>", "_run", "test_layer_norm"}
    # the jit's options reach pypto through set_options, called by pypto for the kernel (measured, G.2's gap)
    assert any(c.api == "set_options" and c.origin == "pypto" and c.kwargs.get("runtime_options", {}).get("run_mode")
               == 1 for c in record.calls)
    loop_line = _line_of(text, 'name="LOOP_ROWS"')
    loop = next(c for c in record.calls if c.api == "loop" and c.line == loop_line)
    assert loop.args == [0, 128, 1] and loop.kwargs["name"] == "LOOP_ROWS"  # rows // block_rows = 128 // 1
    assert any(c.result_shape == [1, 512] for c in record.calls if c.api in ("view", "Tensor.view"))
    traced = set(record.traced["layernorm_op.py"])
    assert static_tile in traced and dynamic_tile not in traced  # the dynamic branch never ran
    # the script's folder heads sys.path: the private copy, mounted at the workspace's own path in the sandbox
    assert str(tmp_path / "probed") in record.sys_path
    assert str(HOOK_DIR) not in record.sys_path
    assert any(m.endswith("pypto/__init__.py") for m in record.modules)

    # unsandboxed: the copy is where it lies on the host (its path heads sys.path), the record is the same
    bare_iso, bare_an, bare = runs["unsandboxed"]
    assert bare_an.operator_time_us == plain_an.operator_time_us
    assert bare_iso.exec_dir in bare.sys_path and str(HOOK_DIR) not in bare.sys_path
    assert [k.model_dump() for k in bare.kernels] == [k.model_dump() for k in record.kernels]
    assert [c.model_dump() for c in bare.calls] == [c.model_dump() for c in record.calls]
    assert bare.traced == record.traced


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_hook_chains_to_the_sitecustomize_it_shadows_and_leaves_sys_path_alone(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\nMARK = 'theirs'\n")
    base = build_child_env(run_mode="sim")
    code = ("import os, sys, sitecustomize; print(os.environ.get('THEIRS_RAN'), sitecustomize.MARK); "
            f"print({str(HOOK_DIR)!r} in sys.path, 'pypto_tune_probe' in sys.modules)")
    env = probe_env(dict(base, PYTHONPATH=str(theirs)), tmp_path / "records")
    (tmp_path / "records").mkdir()
    out = _python(code, env, tmp_path)
    assert out.returncode == 0 and out.stderr == ""
    # theirs ran under its own name; the hook left sys.path alone and, pypto never imported, never loaded the probe
    assert out.stdout.splitlines() == ["yes theirs", "False False"]
    assert not list((tmp_path / "records").iterdir())  # pypto was never imported: nothing to say


def test_a_probe_that_cannot_write_changes_nothing_and_is_reported_as_silent(tmp_path: Path) -> None:
    base = build_child_env(run_mode="sim")
    code = "import pypto; print('imported', pypto.set_vec_tile_shapes.__name__)"
    plain = _python(code, base, tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = probe_env(base, blocker / "records")  # a folder that cannot exist: every write fails
    probed = _python(code, env, tmp_path)
    assert (probed.returncode, probed.stdout, probed.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert plain.stdout.strip() == "imported set_vec_tile_shapes"  # the wrapper keeps the original's name
    record = read_records(blocker / "records", [str(tmp_path)])
    assert record.status == "no-report" and "no probe record" in record.reason
    # a record that is not the probe's is said to be unreadable, never guessed from
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "probe-1.json").write_text("{not json")
    assert read_records(bad, [str(tmp_path)]).status == "unreadable"
    (bad / "probe-1.json").write_text('{"kernels": [{"key": 1}]}')
    assert read_records(bad, [str(tmp_path)]).status == "unreadable"


def test_every_spelling_of_the_workspace_in_a_record_is_the_workspace(tmp_path: Path) -> None:
    """A test command may name the operator ``/./WS/op.py`` (issue #16 attack a): Python keeps that spelling in the
    file names the probe records, and the sites it ran are still the workspace's (else they would look dead)."""
    ws = str(tmp_path / "ws")
    spellings = [f"{ws}/op.py", f"/.{ws}/op.py", f"/{ws}/op.py", f"{ws}/sub/../op.py", f"{ws}/./op.py"]
    raw = {"kernels": [{"key": f"k{i}", "name": "k", "qualname": "k", "file": f, "line": 3, "calls": 1, "ran": True}
                       for i, f in enumerate(spellings)],
           "calls": [{"api": "set_vec_tile_shapes", "file": f, "line": 5, "function": "<jit>", "kernel": f"k{i}",
                      "args": [1, 8]} for i, f in enumerate(spellings)],
           "traced": {f: [5] for f in spellings}}
    record = parse_records({"probe-1.json": json.dumps(raw).encode()}, [ws])
    assert record.status == "reported", record
    assert {(k.file, k.in_workspace) for k in record.kernels} == {("op.py", True)}
    assert {(c.file, c.in_workspace, c.kernel) for c in record.calls} == {("op.py", True, "op.py:3:k")}
    assert record.traced == {"op.py": [5]}
    outside = parse_records({"probe-1.json": json.dumps(raw).encode()}, [str(tmp_path / "other")])
    assert {k.in_workspace for k in outside.kernels} == {False}


def test_without_the_record_folder_the_hook_does_nothing(tmp_path: Path) -> None:
    base = build_child_env(run_mode="sim")
    env = probe_env(base, tmp_path / "unused")
    env.pop(DIR_ENV)
    out = _python("import sys, pypto; print('pypto_tune_probe' in sys.modules)", env, tmp_path)
    assert out.stdout.strip() == "False" and out.stderr == ""  # not even loaded
    assert not (tmp_path / "unused").exists()


def test_the_hook_folder_holds_only_the_hook() -> None:
    """It goes first on the run's PYTHONPATH: anything else in it would shadow a module of the test."""
    names = sorted(p.name for p in HOOK_DIR.iterdir() if p.name != "__pycache__")
    assert names == ["pypto_tune_probe.py", "sitecustomize.py"]


@pytest.mark.sim
def test_a_tile_replaced_before_any_operation_used_it_counts_none(tmp_path: Path) -> None:
    """Each tile call carries the operations built while its tile was in force: the kernel's vector tile none (the
    helper's replaced it before the first vector operation), the helper's its two, the cube tile the matmul."""
    from tests.knob_operators import SHADOW_CMD, SHADOW_FILE, SHADOW_OP, line_of, probe_run, write_rows_op

    ws = write_rows_op(tmp_path / "ws", SHADOW_OP, SHADOW_FILE)
    record, probed = probe_run(ws, SHADOW_CMD)
    assert record is not None and record["faults"] == [], record
    # counting hooks the call that records each operation's source line: the lines pypto writes stay the user's
    _, plain = probe_run(ws, SHADOW_CMD, probed=False)
    assert _locations(probed) == _locations(plain) and (str(ws / SHADOW_FILE), line_of(SHADOW_OP, "exp(x)")) in \
        _locations(probed)
    ops = {(c["api"], c["line"]): c["ops"] for c in record["calls"] if c["api"].endswith("_tile_shapes")}
    assert ops == {("set_cube_tile_shapes", line_of(SHADOW_OP, "set_cube_tile_shapes")): 1,
                   ("set_vec_tile_shapes", line_of(SHADOW_OP, "set_vec_tile_shapes(*VEC_TILE)")): 0,
                   ("set_vec_tile_shapes", line_of(SHADOW_OP, "set_vec_tile_shapes(16, 64)")): 2}


def _locations(dirs: list[Path]) -> list[tuple[str, int]]:
    """Every (file, line) an output folder's program.json names."""
    out: list[tuple[str, int]] = []

    def walk(o: object) -> None:
        if isinstance(o, dict):
            if isinstance(o.get("file"), str) and isinstance(o.get("line"), int):
                out.append((o["file"], o["line"]))
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    for d in dirs:
        walk(json.loads((d / "program.json").read_text()))
    return sorted(out)


def test_a_vector_tiles_extent_is_the_largest_tensor_its_operations_took_or_nothing_it_cannot_read() -> None:
    import importlib.util
    from types import SimpleNamespace as T

    spec = importlib.util.spec_from_file_location("probe_hook_under_test", HOOK_DIR / "pypto_tune_probe.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)  # type: ignore[union-attr]
    extent: dict = {}
    hook._widen(extent, (T(shape=[16, 1024]), 0.0))  # maximum(x, 0.0): a scalar has no shape
    hook._widen(extent, (T(shape=[16, 128]), [0, 0], T(shape=[8, 2048])))  # assemble(src, offsets, dst)
    hook._widen(extent, ([T(shape=[4, 4, 4])],))  # a list of tensors (concat)
    assert extent == {"2": [16, 2048], "3": [4, 4, 4]}
    hook._widen(extent, (T(shape=[None, 64]),))  # a dimension known only at run time
    assert extent["2"] == [None, 2048]
    hook._widen(extent, (T(shape=object()),))  # a shape it cannot read: the reader then claims no bound
    from pypto_tune.tools.running.probe.reader import _extent
    assert _extent(extent) is None
