"""What a campaign tunes: manifests (TOML, YAML) and folders of operators, and the errors a person can act on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pypto_tune.tools.campaign.manifest import load, load_manifest, scan_folder
from pypto_tune.tools.errors import InputError

from tests.conftest import OPERATORS

TOML = """
name = "lib"
batch = 3
trials = 20

[defaults]
run_mode = "sim"
goal_speedup = 4
trials = 5

[[operator]]
name = "softmax"
workspace = "work/softmax"
source = "{ops}/softmax"
operator_files = ["softmax.py"]
test_command = "python softmax.py --run-mode sim"

[[operator]]
workspace = "/abs/rmsnorm"
operator_files = "rmsnorm.py"
test_command = ["python", "rmsnorm.py", "--run-mode", "sim"]
goal_speedup = 2
trials = 1
wall_h = 0.5
"""


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text.replace("{ops}", str(OPERATORS)))
    return p


def test_a_toml_manifest_resolves_defaults_paths_and_commands(tmp_path: Path) -> None:
    spec = load_manifest(write(tmp_path, TOML))
    assert (spec.name, spec.batch, spec.trials, spec.concurrency) == ("lib", 3, 20, None)
    soft, rms = spec.operators
    assert soft.workspace == (tmp_path / "work" / "softmax").resolve() and soft.source == OPERATORS / "softmax"
    assert soft.test_command == ["python", "softmax.py", "--run-mode", "sim"]  # a string is split like a shell would
    assert (soft.goal_speedup, soft.trials, soft.wall_h) == (4, 5, 1.0)
    # the operator's own keys win over [defaults]; its name defaults to its workspace's folder name
    assert (rms.name, rms.workspace, rms.operator_files) == ("rmsnorm", Path("/abs/rmsnorm"), ["rmsnorm.py"])
    assert (rms.goal_speedup, rms.trials, rms.wall_h) == (2, 1, 0.5)
    # the digest a resume checks covers the operators and the batch, not the overall budgets
    raised = load_manifest(write(tmp_path, TOML.replace("trials = 20", "trials = 40")))
    assert raised.digest() == spec.digest()
    assert load_manifest(write(tmp_path, TOML.replace("batch = 3", "batch = 2"))).digest() != spec.digest()


def test_a_yaml_manifest_reads_the_same_keys(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    text = f"""
name: lib
defaults: {{run_mode: sim, goal_target_us: 3.5}}
operator:
  - name: softmax
    workspace: work/softmax
    source: {OPERATORS}/softmax
    operator_files: [softmax.py]
    test_command: [python, softmax.py, --run-mode, sim]
"""
    spec = load_manifest(write(tmp_path, text, "c.yaml"))
    assert spec.operators[0].goal_target_us == 3.5 and spec.operators[0].goal == "≤ 3.5 µs"


@pytest.mark.parametrize("change, words", [
    (("goal_speedup = 4", ""), "exactly one of goal_speedup or goal_target_us"),  # R1: never guessed
    (("goal_speedup = 4", "goal_speedup = 4\ngoal_target_us = 3"), "exactly one of goal_speedup"),
    (('name = "softmax"', 'name = "softmax"\ncolor = "red"'), "unknown key(s) color"),
    (('workspace = "/abs/rmsnorm"', 'name = "r2"\nworkspace = "work/softmax"'), "shared by several operators"),
    (('operator_files = "rmsnorm.py"\n', 'operator_files = "rmsnorm.py"\nname = "softmax"\n'), "used twice"),
    (("batch = 3", "batch = 17"), "batch"),
    (("trials = 5", "trials = -1"), "trials"),
    (('source = "{ops}/softmax"', 'source = "/nowhere/at/all"'), "is not a folder"),
    (("[[operator]]", "[[operator]]\n[oops"), "not valid TOML"),
])
def test_a_bad_manifest_is_refused_naming_the_problem(tmp_path: Path, change: tuple[str, str], words: str) -> None:
    with pytest.raises(InputError) as e:
        load_manifest(write(tmp_path, TOML.replace(*change, 1)))
    assert words in str(e.value), str(e.value)
    assert e.value.hint  # and the way out


def test_a_folder_of_operators_gives_one_operator_per_kernel_folder(tmp_path: Path) -> None:
    spec = scan_folder(OPERATORS, copy_to=tmp_path / "copies", goal_speedup=3.0, trials=2)
    by = {o.name: o for o in spec.operators}
    assert set(by) >= {"softmax", "rmsnorm", "matmul", "upstream_softmax", "split_harness", "layer_norm_multi"}
    # the test is the script with a __main__ block (test_* first); the run-mode flag is the script's own spelling
    assert by["split_harness"].operator_files == ["kernels.py"]
    assert by["split_harness"].test_command == [sys.executable, "test_kernels.py", "--run-mode", "sim"]
    assert by["upstream_softmax"].test_command == [sys.executable, "softmax_op.py", "--run_mode", "sim"]
    # copies are tuned, never the folder itself; the copy is made from the operator's folder on the first start
    assert by["softmax"].workspace == tmp_path / "copies" / "softmax"
    assert by["softmax"].source == OPERATORS / "softmax"
    assert all(o.goal_speedup == 3.0 and o.trials == 2 for o in spec.operators)


def test_a_folder_without_a_goal_or_with_two_test_scripts_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="goal"):
        scan_folder(OPERATORS, copy_to=tmp_path)
    op = tmp_path / "ops" / "twice"
    op.mkdir(parents=True)
    (op / "k.py").write_text("@pypto.frontend.jit()\ndef k(): pass\nif __name__ == '__main__':\n    k()\n")
    (op / "run.py").write_text("if __name__ == '__main__':\n    pass\n")
    with pytest.raises(InputError, match="cannot tell the test script") as e:
        scan_folder(tmp_path / "ops", goal_speedup=2.0)
    assert "manifest" in e.value.hint
    with pytest.raises(InputError, match="does not exist|not a folder|cannot read"):
        load(tmp_path / "missing.toml")
