"""Files: exact reads, atomic verified writes, path safety, drift hash, snapshots that prove a revert."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pypto_tune.tools.errors import InputError, PatchError
from pypto_tune.tools.patching import (
    hash_files, hash_sources, make_snapshot, read_sources, restore_snapshot, take_snapshot, verify_unchanged,
    write_sources,
)
from pypto_tune.tools.patching import files as files_mod
from pypto_tune.tools.patching import nofollow
from pypto_tune.tools.patching.nofollow import LinkRefused


def test_read_then_write_is_byte_exact_for_crlf_tabs_and_undecodable_bytes(tmp_path: Path):
    raw = b"x = 1\r\n\ty = 2\n# caf\xc3\xa9 \xff\xfe\r\nlast"
    (tmp_path / "op.py").write_bytes(raw)
    src = read_sources(tmp_path, ["op.py"])
    assert src["op.py"].startswith("x = 1\r\n\ty = 2\n")
    (tmp_path / "op.py").write_bytes(b"changed")
    h = write_sources(tmp_path, src)
    assert (tmp_path / "op.py").read_bytes() == raw
    assert h == hash_sources(src) == hash_files(tmp_path, ["op.py"])


def test_write_only_touches_files_whose_bytes_differ_and_leaves_no_temp_files(tmp_path: Path):
    (tmp_path / "a.py").write_text("a\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("b\n")
    os.utime(tmp_path / "a.py", (1, 1))
    write_sources(tmp_path, {"a.py": "a\n", "sub/b.py": "B\n"})
    assert (tmp_path / "a.py").stat().st_mtime == 1
    assert (tmp_path / "sub" / "b.py").read_text() == "B\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.py", "b.py", "sub"]


def test_file_mode_is_kept(tmp_path: Path):
    p = tmp_path / "op.py"
    p.write_text("x\n")
    p.chmod(0o754)
    write_sources(tmp_path, {"op.py": "y\n"})
    assert p.stat().st_mode & 0o777 == 0o754


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch):
    p = tmp_path / "op.py"
    p.write_text("old\n")

    def boom(*args, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(nofollow.os, "replace", boom)
    with pytest.raises(OSError):
        write_sources(tmp_path, {"op.py": "new\n"})
    assert p.read_text() == "old\n"
    assert [q.name for q in tmp_path.iterdir()] == ["op.py"]


def test_write_verifies_what_is_on_disk(tmp_path: Path, monkeypatch):
    (tmp_path / "op.py").write_text("old\n")
    real = files_mod._atomic_write
    monkeypatch.setattr(files_mod, "_atomic_write", lambda tree, rel, data: real(tree, rel, data + b"#"))
    with pytest.raises(PatchError, match="another process"):
        write_sources(tmp_path, {"op.py": "new\n"})


@pytest.mark.parametrize("bad", ["../x.py", "/etc/passwd", "a/../../x.py", ""])
def test_paths_outside_the_workspace_are_refused(tmp_path: Path, bad: str):
    with pytest.raises(InputError):
        read_sources(tmp_path, [bad])
    with pytest.raises(InputError):
        write_sources(tmp_path, {bad: "x"})


def test_a_symlink_out_of_the_workspace_is_refused(tmp_path: Path):
    outside = tmp_path / "outside.py"
    outside.write_text("x\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "op.py").symlink_to(outside)
    with pytest.raises(LinkRefused, match="op.py .*is now a symbolic link to .*outside.py"):
        read_sources(ws, ["op.py"])


def test_missing_file_is_an_input_error_naming_it(tmp_path: Path):
    with pytest.raises(InputError, match="op.py does not exist"):
        read_sources(tmp_path, ["op.py"])


def test_drift_hash_notices_any_byte_and_a_missing_file(tmp_path: Path):
    (tmp_path / "op.py").write_bytes(b"x = 1\n")
    h = hash_files(tmp_path, ["op.py"])
    assert verify_unchanged(tmp_path, ["op.py"], h)
    (tmp_path / "op.py").write_bytes(b"x = 1\r\n")
    assert not verify_unchanged(tmp_path, ["op.py"], h)
    (tmp_path / "op.py").unlink()
    assert hash_files(tmp_path, ["op.py"]) != hash_sources({"op.py": ""})


def test_hash_depends_on_paths_and_bytes_not_on_dict_order():
    assert hash_sources({"a": "1", "b": "2"}) == hash_sources({"b": "2", "a": "1"})
    assert hash_sources({"a": "12"}) != hash_sources({"a1": "2"})
    assert hash_sources({"a": "x\n"}) != hash_sources({"a": "x\r\n"})


def test_snapshot_restore_gives_the_bytes_back_and_proves_it(tmp_path: Path):
    (tmp_path / "op.py").write_bytes(b"a = 1\r\n")
    snap = take_snapshot(tmp_path, ["op.py"])
    (tmp_path / "op.py").write_bytes(b"a = 2\r\n")
    assert restore_snapshot(tmp_path, snap) == snap.hash
    assert (tmp_path / "op.py").read_bytes() == b"a = 1\r\n"
    corrupt = snap.model_copy(update={"hash": make_snapshot({"op.py": "zzz"}).hash})
    with pytest.raises(PatchError, match="corrupted"):
        restore_snapshot(tmp_path, corrupt)


def test_a_folder_replaced_by_a_link_is_refused_before_any_file_is_written(tmp_path: Path):
    """Issue #16: a recorded folder swapped for a symbolic link must not redirect the write (to a file outside the
    workspace, or into the server's own .pypto-tune/): refused, the target untouched, and the other file of the
    same write not written either."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "op.py").write_text("someone else's file\n")
    (ws / "a.py").write_text("a\n")
    (ws / "sub").symlink_to(outside)
    with pytest.raises(LinkRefused, match="sub .*is now a symbolic link to .*outside: the server never writes"):
        write_sources(ws, {"a.py": "A\n", "sub/op.py": "x\n"})
    assert (outside / "op.py").read_text() == "someone else's file\n"
    assert (ws / "a.py").read_text() == "a\n"


def test_an_operator_file_replaced_by_a_link_is_replaced_back_and_the_target_is_untouched(tmp_path: Path):
    ws = tmp_path / "ws"
    (ws / ".pypto-tune").mkdir(parents=True)
    ledger = ws / ".pypto-tune" / "ledger.sqlite3"
    ledger.write_bytes(b"SQLite format 3\0")
    (ws / "op.py").symlink_to(".pypto-tune/ledger.sqlite3")
    write_sources(ws, {"op.py": "x = 1\n"})
    assert not (ws / "op.py").is_symlink() and (ws / "op.py").read_text() == "x = 1\n"
    assert ledger.read_bytes() == b"SQLite format 3\0"


def test_the_servers_own_folder_is_never_a_workspace_write_target(tmp_path: Path):
    with pytest.raises(InputError, match="belongs to the server"):
        write_sources(tmp_path, {".pypto-tune/ledger.sqlite3": "x"})
