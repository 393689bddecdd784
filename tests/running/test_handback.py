"""What a sealed run hands back (tools/running/handback.py): the copy judged against the recorded files, output
folders unpacked with the digest the measuring side compares. Pure: built from tar streams written here."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from pypto_tune.tools.code.codestate import ExecFile
from pypto_tune.tools.running.execution import dir_digest
from pypto_tune.tools.running.handback import judge_copy, unpack

FILES = {"op.py": ExecFile(data=b"TILE = 4\n"), "pkg/util.py": ExecFile(data=b"u = 1\n"),
         "link": ExecFile(data=b"op.py", link="op.py")}


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _as_handed(**extra: tuple[str, str]) -> dict[str, tuple[str, str]]:
    seen = {"op.py": ("file", _sha(b"TILE = 4\n")), "pkg": ("dir", ""), "pkg/util.py": ("file", _sha(b"u = 1\n")),
            "link": ("link", "op.py")}
    seen.update(extra)
    return seen


def test_the_recorded_files_and_their_folders_are_a_clean_copy() -> None:
    assert judge_copy(_as_handed(), FILES) == []


def test_a_file_that_is_not_a_recorded_name_voids_the_copy_a_pyc_first() -> None:
    problems = judge_copy(_as_handed(**{"__pycache__": ("dir", ""),
                                        "__pycache__/op.cpython-311.pyc": ("file", _sha(b"forged"))}), FILES)
    assert [p.split(" ")[0] for p in problems] == ["__pycache__", "__pycache__/op.cpython-311.pyc"], problems
    assert all("not a recorded file" in p for p in problems)


def test_a_changed_missing_or_relinked_recorded_file_voids_the_copy() -> None:
    assert judge_copy(_as_handed(**{"op.py": ("file", _sha(b"TILE = 1\n"))}), FILES) == ["op.py (changed or missing)"]
    seen = _as_handed(**{"link": ("link", "pkg/util.py")})
    del seen["pkg/util.py"]
    assert judge_copy(seen, FILES) == ["link (changed or missing)", "pkg/util.py (missing)"]


def _stream(members: list[tuple[str, bytes | None, str | None]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def test_output_folders_arrive_with_the_digest_of_their_bytes_and_capture_files_as_bytes(tmp_path: Path) -> None:
    ws = "tmp/x/ws"
    members = [(ws, None, None), (f"{ws}/op.py", b"TILE = 4\n", None), (f"{ws}/pkg", None, None),
               (f"{ws}/pkg/util.py", b"u = 1\n", None), (f"{ws}/link", None, "op.py"), (f"{ws}/output", None, None),
               (f"{ws}/output/output_1", None, None), (f"{ws}/output/output_1/a-b", None, None),
               (f"{ws}/output/output_1/a-b/x.json", b"{}", None), (f"{ws}/output/output_1/a", None, None),
               (f"{ws}/output/output_1/a/b.txt", b"bb", None), (f"{ws}/output/output_1/l", None, "a/b.txt"),
               (f"{ws}/output/stray.txt", b"not a folder", None), ("../escape", b"x", None),
               ("run/pypto-tune/capture/r.json", b"{\"v\": 1}", None)]
    back = unpack(_stream(members), copy_prefix=ws, capture_prefix="run/pypto-tune/capture", files=FILES,
                  output_dest=tmp_path / "output", capture_max_bytes=1 << 20)
    assert back.received and back.error == ""
    assert back.copy_problems == ["../escape (a name outside the run's folders)"]
    assert back.captured == {"r.json": b"{\"v\": 1}"}
    assert sorted(p.name for p in (tmp_path / "output").iterdir()) == ["output_1"]
    assert back.digests == {"output_1": dir_digest(tmp_path / "output" / "output_1")}


def test_an_empty_stream_is_no_handback(tmp_path: Path) -> None:
    back = unpack(io.BytesIO(b""), copy_prefix="ws", capture_prefix=None, files=FILES, output_dest=tmp_path / "o",
                  capture_max_bytes=0)
    assert not back.received and back.digests == {}
