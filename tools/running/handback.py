"""What a sealed run hands back (``sandbox.SealedLayout``): one tar stream, read once, judged and unpacked.

A sealed run has no host folder while it executes: its copy is a read-only tmpfs filled from the ledger's bytes,
its ``output/``, temp, home and capture folders are tmpfs of the sandbox. When the command ends, the sandbox's shell
writes the copy (with ``output/`` inside it) and the capture folder as one tar stream to a descriptor the server
holds (``sandbox.handback_script``). This module reads that stream:

* **the copy** must hold exactly the recorded files with their recorded bytes (and the folders that contain them):
  a file that is not a recorded name, a changed or missing recorded file, voids the run. The copy is a read-only
  mount, so neither the run nor a process outside can normally change it; the check makes the rule explicit and
  catches a writer that remounted it (the account that owns the sandbox's user namespace can; see the README);
* **output folders** are unpacked under a host folder the server chose, each folder's digest computed from the
  stream's bytes as they are written (``execution.dir_digest``'s definition) — so a folder changed on disk after it
  arrived no longer matches the digest the measuring side compares before it analyses;
* **the capture folder**'s files come back as bytes (at most ``capture_max_bytes`` in all).

Pure in what it decides (:func:`judge_copy`), careful in what it writes: only regular files, folders and links are
unpacked; names are relative, without ``..``; a link is created as a link and never written through.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from pypto_tune.tools.code.codestate import ExecFile



@dataclass
class Handback:
    """What came back: ``received`` is False when the stream was empty or unreadable (the run was stopped by a signal
    to its group, or something broke the stream). ``digests``: output folder name → digest of its files as they
    arrived."""

    received: bool = False
    copy_problems: list[str] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)
    captured: dict[str, bytes] = field(default_factory=dict)
    error: str = ""
    # while reading: the copy's members (name → kind, payload) and each output folder's digest records
    _seen: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)
    _folders: dict[str, list[tuple[tuple[str, ...], bytes]]] = field(default_factory=dict, repr=False)


def _clean(name: str) -> str | None:
    """A member name as a relative POSIX path without ``.``/``..`` parts, or None when it is not one."""
    pure = PurePosixPath(name)
    if pure.is_absolute():
        return None
    parts = [p for p in pure.parts if p != "."]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def judge_copy(seen: Mapping[str, tuple[str, str]], files: Mapping[str, ExecFile]) -> list[str]:
    """What is wrong with the copy as handed back: ``seen`` maps each relative name outside ``output/`` to
    ``(kind, payload)`` — ``("file", sha256)``, ``("link", target)``, ``("dir", "")`` or ``("other", "")``.
    Every recorded file must be there with its bytes (a link with its target); nothing else may be, but the folders
    that hold recorded files."""
    problems: list[str] = []
    folders = {str(parent) for rel in files for parent in PurePosixPath(rel).parents if str(parent) != "."}
    for rel, f in sorted(files.items()):
        if rel == "output" or rel.startswith("output/"):
            continue  # shadowed by the run's own output folder
        got = seen.get(rel)
        if f.link is not None:
            ok = got == ("link", f.link)
        else:
            ok = got == ("file", hashlib.sha256(f.data).hexdigest())
        if not ok:
            problems.append(f"{rel} (changed or missing)" if got is not None else f"{rel} (missing)")
    for rel, (kind, _) in sorted(seen.items()):
        if rel in files or (kind == "dir" and rel in folders):
            continue
        problems.append(f"{rel} (not a recorded file: nothing but the recorded files may be in the run's copy)")
    return problems


def _folder_digest(entries: list[tuple[tuple[str, ...], bytes]]) -> str:
    """``execution.dir_digest`` of a folder from its entries, each ``(relative parts, record)`` as that function
    hashes them, in the order it walks (sorted by parts)."""
    h = hashlib.sha256()
    for _, record in sorted(entries, key=lambda e: e[0]):
        h.update(record)
    return h.hexdigest()


def unpack(stream: BinaryIO, *, copy_prefix: str, capture_prefix: str | None, files: Mapping[str, ExecFile],
           output_dest: Path, capture_max_bytes: int) -> Handback:
    """Read a handback stream: ``copy_prefix`` is the workspace path without its leading ``/`` (as tar names it),
    ``capture_prefix`` the capture folder's; output folders are unpacked into ``output_dest`` (created), which no
    run folder may leave. The stream is read whole (the server drained it from the socket); members' bytes are
    hashed and written from slices of it, never copied."""
    back = Handback()
    output_dest.mkdir(parents=True, exist_ok=True)
    data = stream.read()
    try:
        with memoryview(data) as view, tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for m in tar:
                back.received = True
                _take(back, m, view[m.offset_data:m.offset_data + m.size] if m.isfile() else view[:0],
                      copy_prefix=copy_prefix, capture_prefix=capture_prefix, output_dest=output_dest,
                      capture_max_bytes=capture_max_bytes)
    except (tarfile.TarError, OSError, EOFError) as exc:
        back.error = f"the run's handback stream could not be read: {exc}"
        return back
    if back.received:
        back.copy_problems += judge_copy(back._seen, files)
        back.digests = {top: _folder_digest(entries) for top, entries in back._folders.items()}
    return back


def _take(back: Handback, m: tarfile.TarInfo, content: memoryview, *, copy_prefix: str,
          capture_prefix: str | None, output_dest: Path, capture_max_bytes: int) -> None:
    """One member of the stream: a capture file, a file of the copy (noted for :func:`judge_copy`), or a member of
    an output folder (written under ``output_dest``, its digest record noted)."""
    name = _clean(m.name)
    if name is None:
        back.copy_problems.append(f"{m.name} (a name outside the run's folders)")
        return
    if capture_prefix and name.startswith(capture_prefix + "/"):
        rel = name[len(capture_prefix) + 1:]
        if m.isfile() and "/" not in rel and sum(map(len, back.captured.values())) + m.size <= capture_max_bytes:
            back.captured[rel] = bytes(content)
        return
    if name == copy_prefix or not name.startswith(copy_prefix + "/"):
        return
    rel = name[len(copy_prefix) + 1:]
    if rel != "output" and not rel.startswith("output/"):
        kind = "file" if m.isfile() else "link" if m.issym() else "dir" if m.isdir() else "other"
        payload = hashlib.sha256(content).hexdigest() if kind == "file" else m.linkname if kind == "link" else ""
        back._seen[rel] = (kind, payload)
        return
    inner = rel[len("output/"):] if rel != "output" else ""
    if not inner:
        return
    top, _, within = inner.partition("/")
    target = output_dest / inner
    if m.isdir():
        target.mkdir(parents=True, exist_ok=True)
        back._folders.setdefault(top, [])
        return
    if not within or not (m.isfile() or m.issym()):
        return  # a file or link directly in output/ is no run folder (run_outputs counts only folders)
    target.parent.mkdir(parents=True, exist_ok=True)
    if m.issym():
        os.symlink(m.linkname, target)
        record = b"L" + within.encode() + b"\0" + m.linkname.encode() + b"\0"
    else:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            done = 0
            while done < len(content):
                done += os.write(fd, content[done:])
        finally:
            os.close(fd)
        record = b"F" + within.encode() + b"\0" + hashlib.sha256(content).digest()
    back._folders.setdefault(top, []).append((tuple(within.split("/")), record))
