"""Which output folders of a run count (tools/running/run_outputs.py), on a real recorded SIM run folder.

The recorded folder (fixtures/runs/softmax_base) was compiled from ``/tmp/fx/v_smbase/op.py`` at 2026-12-02 13:38:56
local time; its simulator configuration names the folder itself. Each test changes one thing a transplant would.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from pypto_tune.tools.running.run_outputs import check_folder, program_sources

from tests.conftest import RUNS

RECORDED = next((RUNS / "softmax_base" / "output").iterdir())
COMPILED_AT = time.mktime(time.strptime("20261202133856", "%Y%m%d%H%M%S")) + 0.679728
ROOT = "/tmp/fx/v_smbase"


def installed(path: str) -> bool:
    """The run's closure as the server sees it, here only the installed pypto (its loops' functions name its parser)."""
    return "/site-packages/pypto/" in path


def _copy(tmp_path: Path, name: str | None = None) -> Path:
    dest = tmp_path / "output" / (name or RECORDED.name)
    shutil.copytree(RECORDED, dest)
    return dest


def test_the_recorded_folder_counts_for_the_run_that_compiled_it(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    assert [p for p in program_sources(folder / "program.json") if not installed(p)] == [f"{ROOT}/op.py"]
    check = check_folder(folder, run_root=ROOT, files={"op.py"}, started_at=COMPILED_AT - 1, ended_at=COMPILED_AT + 3,
                         closure_file=installed)
    assert check.ok and check.sources == ["op.py"], check.problems


def test_a_kernel_that_only_moves_data_is_known_by_its_functions_file(tmp_path: Path) -> None:
    # PyPTO's concat, view and assemble examples compile to copies whose operations name no file; the function
    # still names the file that defined the kernel
    folder = _copy(tmp_path)
    program = json.loads((folder / "program.json").read_text())
    for fn in program["functions"]:
        for op in fn.get("operations", []):
            op.pop("file", None)
    (folder / "program.json").write_text(json.dumps(program))
    window = dict(started_at=COMPILED_AT - 1, ended_at=COMPILED_AT + 3, closure_file=installed)
    check = check_folder(folder, run_root=ROOT, files={"op.py"}, **window)
    assert check.ok and check.sources == ["op.py"], check.problems
    assert not check_folder(folder, run_root="/tmp/fx/elsewhere", files={"op.py"}, **window).ok


def test_a_folder_compiled_before_the_run_does_not_count(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    check = check_folder(folder, run_root=ROOT, files={"op.py"}, started_at=COMPILED_AT + 60,
                         ended_at=COMPILED_AT + 65)
    assert not check.ok and "outside this run" in check.problems[0]


def test_a_folder_renamed_into_place_does_not_count(tmp_path: Path) -> None:
    stamp = time.strftime("%Y%m%d_%H%M%S")
    folder = _copy(tmp_path, f"output_{stamp}_000001_2_")
    now = time.time()
    check = check_folder(folder, run_root=ROOT, files={"op.py"}, started_at=now - 5, ended_at=now + 5,
                         closure_file=installed)
    assert check.problems == [f"its simulator configuration names the run folder {RECORDED.name}: it was renamed "
                              "into place"]


def test_a_program_of_other_files_does_not_count(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    window = dict(started_at=COMPILED_AT - 1, ended_at=COMPILED_AT + 3, closure_file=installed)
    # compiled at another path (another workspace, or the live files seen through another spelling)
    other = check_folder(folder, run_root="/tmp/fx/elsewhere", files={"op.py"}, **window)
    assert other.problems == [f"program.json names {ROOT}/op.py, which is not a file of this run's recorded copy"]
    # compiled at the path, from a file the recorded tree does not hold
    missing = check_folder(folder, run_root=ROOT, files={"softmax.py"}, **window)
    assert not missing.ok
    # the run's cwd spelled through /proc is the run's root
    data = json.loads((folder / "program.json").read_text())
    for fn in data["functions"]:
        for named in [fn, *fn.get("operations", [])]:
            if named.get("file") == f"{ROOT}/op.py":
                named["file"] = "/proc/self/cwd/./op.py"
    (folder / "program.json").write_text(json.dumps(data))
    assert check_folder(folder, run_root=ROOT, files={"op.py"}, **window).sources == ["op.py"]
    (folder / "program.json").unlink()
    assert check_folder(folder, run_root=ROOT, files={"op.py"}, **window).problems == [
        "it holds no program.json: nothing says what it compiled"]
