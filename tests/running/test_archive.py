"""archive_run_dirs / extract_member: a compressed, atomic copy of the run folders, and getting files back."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from pypto_tune.tools.running.artifacts import SKIPPED_MEMBER, archive_run_dirs, extract_member, list_members
from pypto_tune.tools.errors import ArtifactError, InputError


def make_run(root: Path, name: str, trace: str) -> Path:
    run = root / "output" / name
    sim = run / "CostModelSimulationOutput"
    (sim / "graphs").mkdir(parents=True)
    (run / "kernel_aicore").mkdir()
    (run / "kernel_aicore" / "k.o").write_bytes(b"\x7fELF" * 100)
    (sim / "graphs" / "g.dot").write_text("digraph {}")
    (run / "program.json").write_text('{"functions": []}')
    (run / "dyn_topo.txt").write_text("0,1\n")
    (sim / "merged_swimlane.json").write_text(trace)
    (sim / "bubble_analysis.log").write_text("[AIV_25] Execute task num:1\n")
    (sim / "big.bin").write_bytes(b"\0" * 3000)
    return run


def test_round_trip_keeps_the_analysis_files_and_skips_the_bulk(tmp_path: Path) -> None:
    a = make_run(tmp_path, "output_20261202_105835_399586_7014_C0000202", '{"traceEvents": [1]}')
    b = make_run(tmp_path, "output_20261202_105900_000001_7015_C0000202", '{"traceEvents": [2]}')
    dest = tmp_path / "store" / "round-1.tar.gz"
    # max_file_bytes lowered so that big.bin counts as "over the limit" (the default is 200 MB).
    assert archive_run_dirs([a, b], dest, max_file_bytes=1000) == dest
    members = list_members(dest)
    assert f"{a.name}/CostModelSimulationOutput/merged_swimlane.json" in members
    assert f"{b.name}/program.json" in members and f"{b.name}/dyn_topo.txt" in members
    assert not [m for m in members if "kernel_aicore" in m or "/graphs/" in m or m.endswith("big.bin")]
    with tarfile.open(dest) as tar:
        skipped = tar.extractfile(SKIPPED_MEMBER).read().decode()  # type: ignore[union-attr]
    assert "kernel_aicore/ (directory)" in skipped and "big.bin (3000 bytes > 1000)" in skipped

    out = extract_member(dest, f"{b.name}/CostModelSimulationOutput/merged_swimlane.json", tmp_path / "back")
    assert out == tmp_path / "back" / "merged_swimlane.json"
    assert out.read_text() == '{"traceEvents": [2]}'
    # Nothing but the archive is left in the store: the temporary file was renamed into place.
    assert [p.name for p in dest.parent.iterdir()] == ["round-1.tar.gz"]


def test_trace_and_log_are_kept_whatever_their_size(tmp_path: Path) -> None:
    run = make_run(tmp_path, "output_1", '{"traceEvents": [' + "0," * 2000 + "0]}")
    dest = archive_run_dirs([run], tmp_path / "a.tar.gz", max_file_bytes=100)
    assert "output_1/CostModelSimulationOutput/merged_swimlane.json" in list_members(dest)
    assert "output_1/CostModelSimulationOutput/bubble_analysis.log" in list_members(dest)


def test_an_ambiguous_or_missing_suffix_is_an_error_naming_the_candidates(tmp_path: Path) -> None:
    a = make_run(tmp_path, "output_1", "{}")
    b = make_run(tmp_path, "output_2", "{}")
    dest = archive_run_dirs([a, b], tmp_path / "a.tar.gz")
    with pytest.raises(ArtifactError, match="2 members end with 'merged_swimlane.json'"):
        extract_member(dest, "merged_swimlane.json", tmp_path / "x")
    with pytest.raises(ArtifactError, match="no member"):
        extract_member(dest, "nothing.json", tmp_path / "x")
    # Suffixes match at a "/" boundary: "swimlane.json" is not a suffix of "merged_swimlane.json".
    with pytest.raises(ArtifactError, match="no member"):
        extract_member(dest, "output_1/CostModelSimulationOutput/swimlane.json", tmp_path / "x")


def test_a_crafted_member_name_cannot_escape_the_destination(tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar.gz"
    src = tmp_path / "payload"
    src.write_text("pwned")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(src, arcname="../../outside/merged_swimlane.json")
    out = extract_member(evil, "merged_swimlane.json", tmp_path / "dest")
    assert out == tmp_path / "dest" / "merged_swimlane.json" and out.read_text() == "pwned"
    assert not (tmp_path.parent / "outside").exists()


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        archive_run_dirs([], tmp_path / "a.tar.gz")
    with pytest.raises(ArtifactError, match="does not exist"):
        archive_run_dirs([tmp_path / "missing"], tmp_path / "a.tar.gz")
    (tmp_path / "junk.tar.gz").write_bytes(b"not gzip")
    with pytest.raises(ArtifactError, match="cannot read archive"):
        extract_member(tmp_path / "junk.tar.gz", "x", tmp_path / "d")
    assert not list(tmp_path.glob(".a.tar.gz.*"))  # failed attempts leave no temporary file
