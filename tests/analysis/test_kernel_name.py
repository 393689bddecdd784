"""kernel_of / label_kernel_runs: which jit kernel an output folder belongs to, read from program.json.

Recorded real SIM runs (pypto 0.2.0): fixtures/runs/ (softmax_kernel, rmsnorm_kernel, matmul_kernel, softmax called
twice), tests/analysis/data/sim_two_calls (a kernel `k` called twice) and sim_two_kernels (add_kernel, scale_by_2,
add_kernel again: two different kernels, one repeated, and a name that ends in _<digits>).
"""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest

from pypto_tune.tools.analysis.kernel_name import KernelId, kernel_of, label_kernel_runs
from pypto_tune.tools.errors import ArtifactError

from .analysis_helpers import DATA, run_dirs

FIXTURE_RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


def fixture_dirs(scenario: str) -> list[Path]:
    return sorted((FIXTURE_RUNS / scenario / "output").iterdir())


# ------------------------------------------------------------------------------------------ one output folder
@pytest.mark.parametrize("scenario,name,line", [
    ("softmax_base", "softmax_kernel", 29),
    ("softmax_tuned", "softmax_kernel", 29),
    ("vector_base", "rmsnorm_kernel", 30),
    ("matmul_base", "matmul_kernel", 29),  # program.json is 5.9 MB here
])
def test_fixture_runs_are_named_after_their_python_function(scenario: str, name: str, line: int) -> None:
    (d,) = fixture_dirs(scenario)
    k = kernel_of(d)
    assert isinstance(k, KernelId)
    assert k.name == name and k.source_line == line and k.found_by == "entryhash"
    assert k.func_magicname == f"TENSOR_{name}_2" and k.funcmagic == 2
    # The recorded line is the def line of the kernel in the operator file that produced the run.
    src = (FIXTURE_RUNS.parent / "operators").glob(f"*/{name.removesuffix('_kernel')}.py")
    text = next(src).read_text().splitlines()
    assert text[line - 1].startswith(f"def {name}(")


def test_name_ending_in_digits_is_not_mistaken_for_the_magic_suffix() -> None:
    # func_magicname is TENSOR_scale_by_2_14: stripping trailing "_<digits>" groups would give "scale_by"; the
    # reader takes rawname (or strips exactly "_<funcmagic>").
    first, second, third = run_dirs("sim_two_kernels")
    k = kernel_of(second)
    assert k.name == "scale_by_2" and k.func_magicname == "TENSOR_scale_by_2_14" and k.funcmagic == 14
    assert (kernel_of(first).name, kernel_of(third).name) == ("add_kernel", "add_kernel")


def test_entry_hash_changes_per_call_but_the_identity_does_not() -> None:
    a, b = run_dirs("sim_two_calls")
    ka, kb = kernel_of(a), kernel_of(b)
    assert ka.entry_hash != kb.entry_hash and ka.funcmagic != kb.funcmagic
    assert (ka.name, ka.source_file, ka.source_line) == (kb.name, kb.source_file, kb.source_line) == \
        ("k", "/tmp/ana/twocalls/k.py", 5)


def test_sim_layout_accepts_the_run_folder_its_swimlane_folder_and_the_file(tmp_path: Path) -> None:
    (d,) = fixture_dirs("softmax_base")
    assert kernel_of(d / "CostModelSimulationOutput").name == "softmax_kernel"
    assert kernel_of(d / "program.json").name == "softmax_kernel"


def test_npu_layout_with_everything_in_the_run_folder(tmp_path: Path) -> None:
    # domain F.6: an NPU run folder holds program.json beside the swimlane files (no CostModelSimulationOutput/).
    (src,) = fixture_dirs("softmax_tuned")
    npu = tmp_path / "output" / "output_20261203_100000_000001_4242_C0000202"
    npu.mkdir(parents=True)
    for f in ("program.json", "dyn_topo.txt"):
        shutil.copy(src / f, npu / f)
    shutil.copy(src / "CostModelSimulationOutput" / "bubble_analysis.log", npu / "bubble_analysis.log")
    assert kernel_of(npu).name == "softmax_kernel"


def test_reading_the_largest_program_json_stays_small_in_memory() -> None:
    # 5.9 MB of program.json: the kernel name must not cost a decoded copy of it.
    (d,) = fixture_dirs("matmul_base")
    assert (d / "program.json").stat().st_size > 5_000_000
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        kernel_of(d)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, peak  # a json.load of this file peaks at well over 50 MB; a read_bytes at 5.9 MB
    assert time.perf_counter() - t0 < 2.0


# ------------------------------------------------------------------------------------------ broken artifacts
def _write(tmp_path: Path, content: str | bytes) -> Path:
    d = tmp_path / "output_20261203_100000_000001_1_C0000202"
    d.mkdir(exist_ok=True)
    p = d / "program.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return d


def test_missing_program_json_names_the_file() -> None:
    empty_run = run_dirs("sim_matmul")[0]  # a recorded run folder the simulator left empty
    with pytest.raises(ArtifactError) as err:
        kernel_of(empty_run)
    assert "missing" in str(err.value) and str(empty_run / "program.json") in str(err.value)
    assert err.value.hint


@pytest.mark.parametrize("content,words", [
    ("", "empty"),
    ('{"entryhash": "1", "functions": [{"hash": "1", "rawname": "TENSOR_k"', "not valid JSON"),
    ("\x00\x01garbage", "not valid JSON"),
    ('{"entryhash": "1"}', "expected shape"),
    ('{"entryhash": "1", "functions": {"hash": "1"}}', "expected shape"),
    ('{"entryhash": "7", "functions": [{"hash": "0", "graphtype": 5, "func_magicname": "PROGRAM_ENTRY"}]}',
     "names no kernel function"),
    ('{"entryhash": "7", "curr_funcmagic": 2, "functions": [{"hash": "7", "funcmagic": 3, "graphtype": 0, '
     '"rawname": "TENSOR_a"}, {"hash": "8", "funcmagic": 2, "graphtype": 0, "rawname": "TENSOR_b"}]}',
     "name different functions"),
    ('{"entryhash": "7", "functions": [{"hash": "7", "graphtype": 0, "func_magicname": "TENSOR_k_x"}]}',
     "neither 'rawname'"),
    ('{"entryhash": "7", "functions": [{"hash": "7", "graphtype": 0, "rawname": "TENSOR_not a name"}]}',
     "not a Python identifier"),
])
def test_corrupt_program_json_is_a_clear_artifact_error(tmp_path: Path, content: str, words: str) -> None:
    d = _write(tmp_path, content)
    with pytest.raises(ArtifactError) as err:
        kernel_of(d)
    assert words in str(err.value)
    assert "program.json" in str(err.value) and err.value.path.endswith("program.json")


def test_handmade_npu_program_without_a_kernel_function_is_refused() -> None:
    # tests/analysis/data/npu_handmade's program.json has only PROGRAM_ENTRY, a root and leaves.
    (d,) = run_dirs("npu_handmade")
    with pytest.raises(ArtifactError, match="names no kernel function"):
        kernel_of(d)


def test_a_folder_named_program_json_is_an_artifact_error(tmp_path: Path) -> None:
    d = tmp_path / "output_20261203_100000_000001_1_C0000202"
    (d / "program.json").mkdir(parents=True)
    with pytest.raises(ArtifactError, match="folder"):
        kernel_of(d)


def test_fallbacks_when_entryhash_is_absent(tmp_path: Path) -> None:
    prog = {"curr_funcmagic": 21, "functions": [
        {"hash": "0", "graphtype": 5, "funcmagic": 20, "func_magicname": "PROGRAM_ENTRY"},
        {"hash": "9", "graphtype": 0, "functype": 2, "funcmagic": 21, "func_magicname": "TENSOR_rope_21"}]}
    k = kernel_of(_write(tmp_path, json.dumps(prog)))
    assert (k.name, k.found_by) == ("rope", "curr_funcmagic")  # and the name came from func_magicname
    del prog["curr_funcmagic"]
    k = kernel_of(_write(tmp_path, json.dumps(prog)))
    assert (k.name, k.found_by) == ("rope", "functype")


def test_numeric_hashes_compare_equal_to_string_hashes(tmp_path: Path) -> None:
    prog = {"entryhash": 16866664956829715982, "functions": [
        {"hash": "16866664956829715982", "graphtype": 0, "rawname": "TENSOR_k", "funcmagic": 2}]}
    assert kernel_of(_write(tmp_path, json.dumps(prog))).name == "k"


# ------------------------------------------------------------------------------------------ folders of one run
def test_repeated_calls_are_numbered_in_call_order() -> None:
    labels = [r.label for r in label_kernel_runs(fixture_dirs("softmax_two_calls"))]
    assert labels == ["softmax_kernel#1", "softmax_kernel#2"]


def test_two_kernels_one_repeated_in_one_run() -> None:
    runs = label_kernel_runs(run_dirs("sim_two_kernels"))
    assert [(r.label, r.call, r.calls) for r in runs] == [
        ("add_kernel#1", 1, 2), ("scale_by_2", 1, 1), ("add_kernel#2", 2, 2)]
    assert [Path(r.run_dir).name for r in runs] == [d.name for d in run_dirs("sim_two_kernels")]


def test_order_comes_from_the_folder_timestamps_not_the_argument_order() -> None:
    dirs = run_dirs("sim_two_kernels")
    runs = label_kernel_runs([dirs[2], dirs[0], dirs[1]])
    # The first call of add_kernel is the oldest folder, whatever order the caller passed.
    assert [(Path(r.run_dir).name, r.label) for r in runs] == [
        (dirs[0].name, "add_kernel#1"), (dirs[1].name, "scale_by_2"), (dirs[2].name, "add_kernel#2")]


def test_a_single_call_keeps_the_bare_name() -> None:
    assert [r.label for r in label_kernel_runs(fixture_dirs("matmul_base"))] == ["matmul_kernel"]


def test_same_python_name_from_two_files_is_told_apart(tmp_path: Path) -> None:
    def prog(file: str, line: int, magic: int) -> str:
        return json.dumps({"entryhash": str(magic), "functions": [
            {"hash": str(magic), "graphtype": 0, "rawname": "TENSOR_kernel", "funcmagic": magic, "file": file,
             "line": line}]})
    dirs = []
    for i, (file, line) in enumerate([("/ws/a/op.py", 5), ("/ws/b/op2.py", 9), ("/ws/a/op.py", 5)]):
        d = tmp_path / f"output_20261203_10000{i}_000001_1_C0000202"
        d.mkdir()
        (d / "program.json").write_text(prog(file, line, 2 + 12 * i))
        dirs.append(d)
    assert [r.label for r in label_kernel_runs(dirs)] == ["kernel@op.py:5#1", "kernel@op2.py:9", "kernel@op.py:5#2"]


def test_one_unreadable_folder_names_itself(tmp_path: Path) -> None:
    good = fixture_dirs("softmax_base")[0]
    bad = tmp_path / "output_20261203_100000_000001_1_C0000202"
    bad.mkdir()
    with pytest.raises(ArtifactError) as err:
        label_kernel_runs([good, bad])
    assert str(bad) in str(err.value)


def test_sim_two_kernels_data_really_calls_add_kernel_twice() -> None:
    # Guards the scenario itself: if someone re-records it with another probe, the expectations above lose meaning.
    probe = (DATA / "sim_two_kernels" / "probe_two_kernels.py").read_text()
    assert probe.count("add_kernel(x, y)") == 2
    for d in run_dirs("sim_two_kernels"):  # the recorded def lines are the copy's def lines
        k = kernel_of(d)
        assert probe.splitlines()[k.source_line - 1].startswith(f"def {k.name}(")
