"""Writing inside a folder tree without ever following a symbolic link.

Why: the server writes into a folder the agent can also write (revert, restore, quarantine, reports, run copies).
A path string is resolved by the kernel at the moment of the write, so a check made before it ("is this inside the
workspace?") says nothing about what the write reaches: a recorded folder replaced by a symbolic link made
``revert_patch`` delete and rewrite a file outside the workspace, and pointed at ``.pypto-tune/`` it overwrote the
ledger (issue #16). Here every write walks from a directory file descriptor of the root, one component at a time,
each opened ``O_NOFOLLOW | O_DIRECTORY``; the last component is created, replaced or removed relative to its parent's
descriptor (``dir_fd=``), never through a path. A component that is a symbolic link stops the walk with
:class:`LinkRefused`, naming it.

The final component may itself be a link: replacing it (``rename`` over it) or unlinking it acts on the link, never
on what it points at, so restoring a file that was swapped for a link is safe. Reads use the same walk, with
``O_NOFOLLOW`` on the file itself.

No PyPI library does this (measured options, 2026-12: ``safe-open`` is unmaintained since 2023; ``openat2`` with
``RESOLVE_NO_SYMLINKS`` has no Python binding in the standard library); the standard library's ``dir_fd`` support
is what ``shutil.rmtree`` itself uses to avoid symlink attacks.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from ..errors import InputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SERVER_DIR = ".pypto-tune"  # the server's own folder (tools/code/workspace.LEDGER_DIR; patching sits below it)


class LinkRefused(InputError):
    """A write (or read) would have gone through a symbolic link; nothing was written through it."""

    code = "link"


def parts_of(rel: str | PurePosixPath, *, what: str = "path") -> tuple[str, ...]:
    """The components of a relative POSIX path inside a tree; refuses absolute paths, ``..`` and empty paths."""
    pure = PurePosixPath(str(rel).replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\x00" in str(rel):
        raise InputError(f"{what} {str(rel)!r} must be a relative path inside the folder, without '..'",
                         hint="pass paths relative to the workspace")
    return tuple(p for p in pure.parts if p != ".")


def _refuse_link(root: Path, parts: tuple[str, ...], i: int, dfd: int | None) -> LinkRefused:
    shown = "/".join(parts[: i + 1])
    target = ""
    try:
        target = os.readlink(parts[i], dir_fd=dfd) if dfd is not None else os.readlink(root)
    except OSError:
        pass
    return LinkRefused(
        f"{shown} (under {root}) is now a symbolic link{f' to {target}' if target else ''}: the server never writes "
        "through a link, so nothing was written there",
        hint=f"remove the link (rm {root / shown} removes only the link) or put the folder back, then call again")


class Tree:
    """A root folder opened once; every operation below walks it without following links.

    Directory descriptors are cached per folder for the life of the object (``close`` or a ``with`` block releases
    them): materialising a run copy of thousands of files opens each folder once.
    """

    def __init__(self, root: str | os.PathLike[str], *, allow_server_dir: bool = False) -> None:
        self.root = Path(root)
        self.allow_server_dir = allow_server_dir
        try:
            self._root_fd = os.open(self.root, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and self.root.is_symlink()):
                raise _refuse_link(self.root, (self.root.name,), 0, None) from None
            raise
        self._dirs: dict[tuple[str, ...], int] = {(): self._root_fd}

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._dirs.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._dirs.clear()

    # ------------------------------------------------------------------------------------------------ walking
    def _check(self, parts: tuple[str, ...]) -> None:
        if parts and parts[0] == _SERVER_DIR and not self.allow_server_dir:
            raise InputError(f"refusing to write {'/'.join(parts)}: {_SERVER_DIR}/ belongs to the server (ledger, "
                             "blobs) and is never the target of a workspace write",
                             hint="workspace files live outside .pypto-tune/")

    def dir_fd(self, parts: tuple[str, ...], *, create: bool = False) -> int:
        """Descriptor of the folder ``root/parts``; each component opened without following a link."""
        cached = self._dirs.get(parts)
        if cached is not None:
            return cached
        parent = self.dir_fd(parts[:-1], create=create)
        name = parts[-1]
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                pass
            return self.dir_fd(parts, create=False)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(parent, name):
                raise _refuse_link(self.root, parts, len(parts) - 1, parent) from None
            raise
        self._dirs[parts] = fd
        return fd

    def _parent(self, rel: str | PurePosixPath, *, create: bool) -> tuple[int, str, tuple[str, ...]]:
        parts = parts_of(rel)
        self._check(parts)
        return self.dir_fd(parts[:-1], create=create), parts[-1], parts

    def check_parents(self, rel: str | PurePosixPath) -> None:
        """Refuse (``LinkRefused``) when any existing folder on the way to ``rel`` is a link; creates nothing."""
        parts = parts_of(rel)
        self._check(parts)
        for i in range(1, len(parts)):
            try:
                self.dir_fd(parts[:i])
            except FileNotFoundError:
                return
            except NotADirectoryError:
                return

    # ---------------------------------------------------------------------------------------------- reading
    def read(self, rel: str | PurePosixPath) -> bytes:
        dfd, name, parts = self._parent(rel, create=False)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse_link(self.root, parts, len(parts) - 1, dfd) from None
            raise
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def lstat(self, rel: str | PurePosixPath) -> os.stat_result | None:
        try:
            dfd, name, _ = self._parent(rel, create=False)
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    # ---------------------------------------------------------------------------------------------- writing
    def write(self, rel: str | PurePosixPath, data: bytes, *, mode: int | None = None,
              executable: bool | None = None, durable: bool = True) -> None:
        """Atomically put ``data`` at ``rel``: a temp file in the same folder, fsync, rename over the name (which
        replaces a link there, never its target), fsync of the folder. Missing folders are created.

        ``mode``: permission bits; default the replaced file's (a link's are not taken), else 0644. ``executable``
        sets or clears the owner/group/other x bits on top.
        """
        dfd, name, _ = self._parent(rel, create=True)
        if mode is None:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644
            except FileNotFoundError:
                mode = 0o644
        if executable is True:
            mode |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        elif executable is False:
            mode &= ~(stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.pypto-tune.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), mode)
                if durable:
                    os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        if durable:
            try:
                os.fsync(dfd)
            except OSError:
                pass

    def symlink(self, rel: str | PurePosixPath, target: str) -> None:
        """Create the link ``rel`` → ``target`` (what a recorded relative link held); replaces what is there."""
        dfd, name, parts = self._parent(rel, create=True)
        self._remove_entry(dfd, name, parts)
        os.symlink(target, name, dir_fd=dfd)

    def remove(self, rel: str | PurePosixPath) -> None:
        """Remove the entry at ``rel``: a file or a link (the link itself), or a real folder and all below it."""
        dfd, name, parts = self._parent(rel, create=False)
        self._remove_entry(dfd, name, parts)

    def _forget(self, parts: tuple[str, ...]) -> None:
        """Drop cached descriptors of ``parts`` and every folder below it (it is being removed or moved)."""
        for key in [k for k in self._dirs if k and k[:len(parts)] == parts]:
            os.close(self._dirs.pop(key))

    def _remove_entry(self, dfd: int, name: str, parts: tuple[str, ...]) -> None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            # rmtree with dir_fd walks by descriptors and does not follow links (shutil.rmtree.avoids_symlink_attacks)
            self._forget(parts)
            shutil.rmtree(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)

    def move_to(self, rel: str | PurePosixPath, dest: Tree, dest_rel: str | PurePosixPath) -> None:
        """Move the entry at ``rel`` (a link moves as the link) to ``dest_rel`` under another open tree."""
        sfd, sname, sparts = self._parent(rel, create=False)
        dfd, dname, _ = dest._parent(dest_rel, create=True)
        self._forget(sparts)
        os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)

    def mkdir(self, rel: str | PurePosixPath) -> None:
        """Create the folder ``rel`` (and missing parents), without following links; it must not exist yet."""
        parts = parts_of(rel)
        self._check(parts)
        parent = self.dir_fd(parts[:-1], create=True)
        os.mkdir(parts[-1], 0o755, dir_fd=parent)


def _is_link(dfd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


@contextmanager
def open_tree(root: str | os.PathLike[str], *, allow_server_dir: bool = False) -> Iterator[Tree]:
    tree = Tree(root, allow_server_dir=allow_server_dir)
    try:
        yield tree
    finally:
        tree.close()
