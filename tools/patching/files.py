"""Reading, hashing and atomically writing operator files; snapshots that prove a revert restored the bytes.

Text is kept exact: files are decoded from bytes (no newline translation; undecodable bytes survive through
``surrogateescape``), so CRLF files and odd encodings round-trip byte for byte.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import InputError, PatchError
from .models import Snapshot
from .nofollow import LinkRefused, Tree, open_tree, parts_of

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


def _parts(rel: str) -> tuple[str, ...]:
    """The components of an operator file's path; refuses absolute paths and paths that leave the workspace."""
    try:
        return parts_of(rel, what="operator file")
    except InputError:
        raise InputError(f"operator file {rel!r} must be a relative path inside the workspace",
                         hint="pass paths relative to the workspace, without '..'") from None


def _read(tree: Tree, rel: str) -> bytes:
    """The file's bytes, reached without following a link (a link on the way is refused: ``LinkRefused``)."""
    _parts(rel)
    try:
        return tree.read(rel)
    except IsADirectoryError:
        raise InputError(f"operator file {rel} is a directory") from None
    except NotADirectoryError:
        raise FileNotFoundError(rel) from None


def hash_files(workspace: Path, files: list[str]) -> str:
    """Drift check: hash of the files as they are on disk now (bytes, no decoding). A missing file hashes as absent;
    a file reached through a symbolic link hashes as the link (never as what it points at)."""
    data: dict[str, bytes] = {}
    with open_tree(workspace) as tree:
        for rel in files:
            try:
                data[rel] = _read(tree, rel)
            except FileNotFoundError:
                data[rel] = b"\0<missing>"  # never equal to a real file's bytes' hash contribution of an empty file
            except LinkRefused as exc:
                data[rel] = b"\0<link>" + exc.message.encode()
    return hash_bytes(data)


def read_sources(workspace: Path, files: list[str]) -> dict[str, str]:
    """Exact text of each file (bytes decoded, no newline translation). InputError names a missing file;
    ``LinkRefused`` (an InputError) a file or folder on its way that is now a symbolic link."""
    out: dict[str, str] = {}
    with open_tree(workspace) as tree:
        for rel in files:
            try:
                out[rel] = _read(tree, rel).decode(ENCODING, ERRORS)
            except FileNotFoundError:
                raise InputError(f"operator file {rel} does not exist in {workspace}",
                                 hint="check operator_files; revert_patch restores the last recorded state") from None
    return out


def _atomic_write(tree: Tree, rel: str, data: bytes) -> None:
    """temp file in the same directory + fsync + rename + fsync(dir), all relative to directory descriptors opened
    without following links: a crash leaves the old or the new file, and a link never redirects the write."""
    tree.write(rel, data)


def write_sources(workspace: Path, sources: dict[str, str]) -> str:
    """Write every file whose bytes differ from disk, atomically; return the hash of ``sources``.

    No write follows a symbolic link (``nofollow.py``): a folder on the way that is now a link is refused before
    anything is written (``LinkRefused``); a file replaced by a link is replaced back (the link, not its target).
    Afterwards the files are read back and hashed; a mismatch (a concurrent writer, a full disk that lied) raises
    PatchError instead of letting the session believe the wrong state.
    """
    expected = hash_sources(sources)
    with open_tree(workspace) as tree:
        for rel in sorted(sources):
            _parts(rel)
            tree.check_parents(rel)  # every folder checked before the first byte is written
        for rel in sorted(sources):
            data = to_bytes(sources[rel])
            try:
                if _read(tree, rel) == data:
                    continue
            except (FileNotFoundError, LinkRefused):
                pass
            _atomic_write(tree, rel, data)
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
