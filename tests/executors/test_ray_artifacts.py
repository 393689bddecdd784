"""The driver's side of the Ray executor's artifact transfer: what it accepts from a worker's archive (no Ray)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from pypto_tune.tools.running.executors import ExecutorError
from pypto_tune.tools.running.executors.ray_backend import _unpack


def archive(staging: Path, members: list[tuple[str, bytes | None, str | None]]) -> None:
    """(name, file bytes or None for a folder, link target) → staging/outputs.tar.gz."""
    staging.mkdir(parents=True)
    with tarfile.open(staging / "outputs.tar.gz", "w:gz") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_run_folders_come_into_workspace_output_next_to_earlier_ones(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "output" / "output_1_a").mkdir(parents=True)  # an earlier run with the same name
    staging = tmp_path / "staging"
    archive(staging, [("output/output_1_a", None, None), ("output/output_1_a/sub", None, None),
                      ("output/output_1_a/sub/trace.json", b"{}", None),
                      ("output/output_1_a/latest.json", None, "sub/trace.json")])
    moved = _unpack(staging, ws)
    assert moved == [ws / "output" / "output_1_a_1"]  # adopt_outputs' rule: never overwrite
    assert (moved[0] / "sub" / "trace.json").read_bytes() == b"{}"
    assert (moved[0] / "latest.json").read_bytes() == b"{}"


@pytest.mark.parametrize("member", [
    ("output/../../escaped.txt", b"x", None),  # climbs out of the staging folder
    ("/tmp/absolute.txt", b"x", None),
    ("elsewhere/file.txt", b"x", None),  # not under output/
    ("output", None, None),  # output/ itself is not a run folder
    ("output/output_1_a/link", None, "../../../../etc/passwd"),  # a link out of the tree
])
def test_a_member_outside_the_run_folders_is_refused(tmp_path: Path, member) -> None:
    staging = tmp_path / "staging"
    archive(staging, [member])
    with pytest.raises(ExecutorError):
        _unpack(staging, tmp_path / "ws")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "ws" / "output").exists()
