"""Keep a compressed copy of each measured run's output folders, and get single files back out of it.

The run folders under ``<workspace>/output/`` are the evidence behind every number in the ledger, but they are big
(``kernel_aicore/`` / ``kernel_aicpu/`` hold compiled kernels, ``graphs/*.dot`` the simulator's graphs) and the
user may delete them. The archive keeps what the analyses read — program.json, dyn_topo.txt, the swim input,
bubble_analysis.log, merged_swimlane.json, the SIM reports — and skips the bulk (domain A.1).
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

from pypto_tune.tools.errors import ArtifactError, InputError

#: Directories never archived: compiled kernels and graph dumps, large and not read by any analysis.
SKIP_DIRS = frozenset({"kernel_aicore", "kernel_aicpu", "graphs"})
#: Files above this size are skipped, except the trace / log / swim input (KEEP_ALWAYS).
MAX_FILE_BYTES = 200 * 1024 * 1024
#: Names kept whatever their size: the trace, the bubble log and the raw swim input the numbers come from.
KEEP_ALWAYS = ("merged_swimlane.json", "bubble_analysis.log", "_simulate.swim.json", "dyn_topo.txt",
               "program.json")
#: Member added to every archive that lists what was left out, so a missing file is explained, not a mystery.
SKIPPED_MEMBER = "SKIPPED.txt"


def _keep_always(name: str) -> bool:
    return name in KEEP_ALWAYS or (name.startswith("tilefwk_L1_prof_data") and name.endswith(".json")) \
        or name.endswith(".log")


def archive_run_dirs(run_dirs: list[Path], dest: Path, *, max_file_bytes: int = MAX_FILE_BYTES) -> Path:
    """Write one ``.tar.gz`` holding each run folder under its own name (``output_<ts>/...``); return ``dest``.

    Skips ``kernel_aicore/``, ``kernel_aicpu/``, ``graphs/`` and files larger than ``max_file_bytes`` unless they
    are the trace / logs / swim input; the skipped paths are listed in ``SKIPPED.txt`` inside the archive.
    Symlinks are stored as links, never followed (a link could point anywhere on the machine).
    The archive is written to a temporary file next to ``dest`` and renamed into place, so a crash never leaves
    a half-written archive under the final name.
    """
    if not run_dirs:
        raise InputError("no run folders to archive", hint="run the operator first; its output/ folder is archived")
    names: list[str] = []
    for d in run_dirs:
        if not d.is_dir():
            raise ArtifactError("run folder to archive does not exist", path=str(d))
        names.append(d.name)
    if len(set(names)) != len(names):
        raise InputError(f"two run folders share a name: {names}", hint="archive them separately")
    dest.parent.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
            for d in run_dirs:
                for root, dirs, files in os.walk(d, followlinks=False):
                    rel_root = Path(root).relative_to(d.parent)
                    for sub in sorted(dirs):
                        if sub in SKIP_DIRS:
                            skipped.append(f"{rel_root / sub}/ (directory)")
                    dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
                    for f in sorted(files):
                        p = Path(root) / f
                        arc = str(rel_root / f)
                        try:
                            size = p.lstat().st_size
                        except OSError as exc:
                            skipped.append(f"{arc} (unreadable: {exc.strerror})")
                            continue
                        if size > max_file_bytes and not p.is_symlink() and not _keep_always(f):
                            skipped.append(f"{arc} ({size} bytes > {max_file_bytes})")
                            continue
                        tar.add(p, arcname=arc, recursive=False)
            body = ("\n".join(skipped) + "\n" if skipped else "(nothing skipped)\n").encode()
            info = tarfile.TarInfo(SKIPPED_MEMBER)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp_name, dest)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    return dest


def list_members(archive: Path) -> list[str]:
    """Names of the regular files in an archive written by :func:`archive_run_dirs`."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            return [m.name for m in tar.getmembers() if m.isfile()]
    except (OSError, tarfile.TarError) as exc:
        raise ArtifactError(f"cannot read archive: {exc}", path=str(archive)) from exc


def extract_member(archive: Path, member_suffix: str, dest_dir: Path) -> Path:
    """Copy the one regular file whose name ends with ``member_suffix`` (at a ``/`` boundary) to ``dest_dir``.

    Returns ``dest_dir / <basename>``. Only the file's bytes are written, under its base name, so a crafted
    member name (``../../x``) cannot write outside ``dest_dir``. Raises :class:`ArtifactError` when no member or
    several members match (then pass a longer suffix, e.g.
    ``output_<ts>/CostModelSimulationOutput/merged_swimlane.json``).
    """
    suffix = member_suffix.strip("/")
    if not suffix or "\x00" in suffix:
        raise InputError("member_suffix is empty", hint="e.g. 'merged_swimlane.json'")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            matches = [m for m in tar.getmembers()
                       if m.isfile() and (m.name == suffix or m.name.endswith("/" + suffix))]
            if not matches:
                raise ArtifactError(f"no member ends with {suffix!r}", path=str(archive),
                                    hint="list_members(archive) shows what the archive holds")
            if len(matches) > 1:
                raise ArtifactError(f"{len(matches)} members end with {suffix!r}: "
                                    + ", ".join(m.name for m in matches[:5]), path=str(archive),
                                    hint="pass a longer suffix that includes the run folder name")
            member = matches[0]
            src = tar.extractfile(member)
            assert src is not None  # regular file
            dest_dir.mkdir(parents=True, exist_ok=True)
            out = dest_dir / Path(member.name).name
            fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=dest_dir)
            try:
                with os.fdopen(fd, "wb") as fh:
                    while chunk := src.read(1024 * 1024):
                        fh.write(chunk)
                os.replace(tmp_name, out)
            except BaseException:
                try:
                    os.unlink(tmp_name)
                except FileNotFoundError:
                    pass
                raise
            return out
    except (OSError, tarfile.TarError) as exc:
        raise ArtifactError(f"cannot read archive: {exc}", path=str(archive)) from exc
