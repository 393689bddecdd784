"""Reading, hashing and atomically writing operator files; snapshots that prove a revert restored the bytes.

Text is kept exact: files are decoded from bytes (no newline translation; undecodable bytes survive through
``surrogateescape``), so CRLF files and odd encodings round-trip byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path, PurePosixPath

from ..errors import InputError, PatchError
from .models import Snapshot

ENCODING = "utf-8"
ERRORS = "surrogateescape"  # keeps any byte sequence recoverable: decode → encode is the identity


def to_bytes(text: str) -> bytes:
    return text.encode(ENCODING, ERRORS)


def hash_bytes(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        # Length-prefixed so that no two different (path, bytes) sets can produce the same stream.
        h.update(f"{len(path.encode())}:{path}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def hash_sources(sources: dict[str, str]) -> str:
    """sha256 over the sorted (path, bytes) pairs; the same number :func:`hash_files` gives for the files on disk."""
    return hash_bytes({p: to_bytes(t) for p, t in sources.items()})


def _resolve(workspace: Path, rel: str) -> Path:
    """The file inside ``workspace``; refuses absolute paths and paths that leave the workspace."""
    pure = PurePosixPath(rel.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise InputError(f"operator file {rel!r} must be a relative path inside the workspace",
                         hint="pass paths relative to the workspace, without '..'")
    root = Path(workspace).resolve()
    path = (root / Path(*pure.parts)).resolve()
    if root != path and root not in path.parents:
        raise InputError(f"operator file {rel!r} resolves outside the workspace ({path})",
                         hint="operator files must live inside the workspace (symlinks out are refused)")
    return path


def hash_files(workspace: Path, files: list[str]) -> str:
    """Drift check: hash of the files as they are on disk now (bytes, no decoding). A missing file hashes as absent."""
    data: dict[str, bytes] = {}
    for rel in files:
        path = _resolve(workspace, rel)
        try:
            data[rel] = path.read_bytes()
        except FileNotFoundError:
            data[rel] = b"\0<missing>"  # never equal to a real file's bytes' hash contribution of an empty file
    return hash_bytes(data)


def read_sources(workspace: Path, files: list[str]) -> dict[str, str]:
    """Exact text of each file (bytes decoded, no newline translation). InputError names a missing file."""
    out: dict[str, str] = {}
    for rel in files:
        path = _resolve(workspace, rel)
        try:
            out[rel] = path.read_bytes().decode(ENCODING, ERRORS)
        except FileNotFoundError:
            raise InputError(f"operator file {rel} does not exist in {workspace}",
                             hint="check operator_files; revert_patch restores the last recorded state") from None
        except IsADirectoryError:
            raise InputError(f"operator file {rel} is a directory") from None
    return out


def _atomic_write(path: Path, data: bytes) -> None:
    """temp file in the same directory + fsync + rename + fsync(dir): a crash leaves the old or the new file."""
    mode = None
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".pypto-tune.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def write_sources(workspace: Path, sources: dict[str, str]) -> str:
    """Write every file whose bytes differ from disk, atomically; return the hash of ``sources``.

    Afterwards the files are read back and hashed; a mismatch (a concurrent writer, a full disk that lied) raises
    PatchError instead of letting the session believe the wrong state.
    """
    expected = hash_sources(sources)
    for rel in sorted(sources):
        path = _resolve(workspace, rel)
        data = to_bytes(sources[rel])
        try:
            if path.read_bytes() == data:
                continue
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, data)
    actual = hash_files(workspace, list(sources))
    if actual != expected:
        raise PatchError(f"after writing, the files on disk hash to {actual[:12]}…, expected {expected[:12]}…",
                         hint="another process is editing the operator files; stop it and call revert_patch")
    return expected


def take_snapshot(workspace: Path, files: list[str]) -> Snapshot:
    sources = read_sources(workspace, files)
    return Snapshot(sources=sources, hash=hash_sources(sources))


def make_snapshot(sources: dict[str, str]) -> Snapshot:
    return Snapshot(sources=dict(sources), hash=hash_sources(sources))


def restore_snapshot(workspace: Path, snapshot: Snapshot) -> str:
    """Write the snapshot's bytes back and prove it: returns the restored hash (== snapshot.hash)."""
    if hash_sources(snapshot.sources) != snapshot.hash:
        raise PatchError("the snapshot's text does not match its own hash (corrupted record)",
                         hint="restore from an earlier round's snapshot")
    return write_sources(workspace, snapshot.sources)


def verify_unchanged(workspace: Path, files: list[str], expected_hash: str) -> bool:
    """True when the files on disk still hash to ``expected_hash`` (the drift check)."""
    return hash_files(workspace, files) == expected_hash
