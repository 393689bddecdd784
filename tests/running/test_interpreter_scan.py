"""The scan of the interpreter's files (tools/running/interpreter_files.py), on folders made here: what it covers,
what it leaves out, and that a root inside another root is walked once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pypto_tune.tools.running import interpreter_files as ifl


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    base = tmp_path / "base"
    std = base / "lib" / "python3.11"
    (std / "site-packages" / "pkg").mkdir(parents=True)
    (std / "json").mkdir()
    (std / "json" / "__init__.py").write_text("# stdlib\n")
    (std / "site-packages" / "pkg" / "mod.py").write_text("# base package\n")
    (base / "bin").mkdir()
    (base / "bin" / "python3.11").write_text("#!/bin/sh\n")
    return base, std, std / "site-packages"


def test_a_root_inside_another_is_walked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, std, _ = _tree(tmp_path)
    opened: list[str] = []
    real = os.scandir

    def counting(path):
        opened.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(ifl.os, "scandir", counting)
    both = ifl.scan([str(std), str(base), str(base / "bin" / "python3.11")])
    assert sorted(opened) == sorted(set(opened)), opened  # no folder twice
    monkeypatch.setattr(ifl.os, "scandir", real)
    expected = {str(p) for p in base.rglob("*")} | {str(base)}
    assert set(both) == expected


def test_skipped_folders_are_left_out_with_all_under_them(tmp_path: Path) -> None:
    base, std, hidden = _tree(tmp_path)
    before = ifl.scan([str(base)], skip=[str(hidden)])
    assert not [p for p in before if p == str(hidden) or p.startswith(f"{hidden}/")]
    (hidden / "pkg" / "mod.py").write_text("# rewritten\n")
    (hidden / "evil.pth").write_text("import os\n")
    assert ifl.changes(before, ifl.scan([str(base)], skip=[str(hidden)])) == []
    (std / "json" / "__init__.py").write_text("# stdlib, rewritten\n")
    assert ifl.changes(before, ifl.scan([str(base)], skip=[str(hidden)])) == [f"changed: {std}/json/__init__.py"]


def test_an_unsandboxed_fingerprint_covers_the_hidden_folders(tmp_path: Path) -> None:
    base, std, hidden = _tree(tmp_path)
    ws = tmp_path / "ws"
    boxed = ifl.take_sync([str(base)], workspace=ws, hidden=[str(hidden)])
    open_ = ifl.take_sync([str(base)], workspace=ws)
    assert f"{hidden}/pkg/mod.py" in open_.entries and f"{hidden}/pkg/mod.py" not in boxed.entries
    assert boxed.skip == [str(ws), str(hidden)] and open_.skip == [str(ws)]


def test_a_fingerprint_survives_its_file_and_reads_the_older_single_skip(tmp_path: Path) -> None:
    import gzip

    import orjson

    base, _, hidden = _tree(tmp_path)
    fp = ifl.take_sync([str(base)], workspace=tmp_path / "ws", hidden=[str(hidden)])
    fp.save(tmp_path / "fp.json.gz")
    back = ifl.Fingerprint.load(tmp_path / "fp.json.gz")
    assert back.entries == fp.entries and back.skip == fp.skip and back.digest == fp.digest
    (tmp_path / "old.json.gz").write_bytes(gzip.compress(orjson.dumps(
        {"roots": [str(base)], "entries": {}, "skip": str(tmp_path / "ws")})))
    assert ifl.Fingerprint.load(tmp_path / "old.json.gz").skip == [str(tmp_path / "ws")]
