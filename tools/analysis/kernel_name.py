"""Which jit kernel an output folder belongs to, read from its ``program.json`` (domain A.7).

pypto writes one output folder per kernel call. Its ``program.json`` describes the compiled program, and the
Python function is recorded like this (pypto 0.2.0, every recorded run in ``fixtures/runs/`` and
``tests/analysis/data/``, and a probe with two different kernels, ``tests/analysis/data/sim_two_kernels/``):

* the top-level ``entryhash`` is the ``hash`` of the kernel's function, and ``curr_funcmagic`` its ``funcmagic``;
* that function (``graphtype`` 0, ``functype`` 2, the child of ``PROGRAM_ENTRY``) has ``rawname`` =
  ``"TENSOR_" + <the Python def name>`` (pypto's parser calls ``pypto.function(node.name, …)``), ``func_magicname``
  = ``rawname + "_" + funcmagic``, and ``file`` / ``line`` = the file and line of the ``def``.

So ``rawname`` is the field that carries the Python name; ``func_magicname`` carries it too but with a numeric
suffix that changes with every compilation (``TENSOR_softmax_kernel_2``, then ``_14`` for the second call), and a
name like ``scale_by_2`` makes a blind "strip ``_<digits>``" wrong. ``entryhash`` also changes per call, so the
identity of a kernel across calls is (name, file, line).

Reading: ``program.json`` reaches megabytes (5.9 MB for the matmul fixture) and all but a few hundred bytes of it
are the functions' operations and tensors. The file is memory-mapped and decoded by msgspec into structs that
hold only the scalar fields used here; msgspec skips everything else in C without building Python objects, so
naming a kernel costs a few KiB of Python memory and ~30 ms for the largest fixture. Files over
:data:`PROGRAM_MAX_BYTES` are refused.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec
from pydantic import BaseModel, Field

from pypto_tune.tools.analysis.layout import PROGRAM_NAME, SIM_SUBDIR, run_timestamp
from pypto_tune.tools.errors import ArtifactError

#: A program.json larger than this is refused rather than scanned (the largest recorded one is 5.9 MB).
PROGRAM_MAX_BYTES = 512 * 1024 * 1024
_TENSOR_PREFIX = "TENSOR_"
_ENTRY_GRAPHTYPE = 5
_KERNEL_FUNCTYPE = 2
_HINT = "re-run the operator; pypto writes program.json into every output folder when it compiles a kernel"


class KernelId(BaseModel):
    """The jit kernel one output folder belongs to."""

    name: str = Field(description="the Python name of the jit function, e.g. 'softmax_kernel'")
    source_file: str | None = Field(None, description="the file of the kernel's def, as pypto recorded it")
    source_line: int | None = Field(None, description="the line of the kernel's def")
    func_magicname: str = Field(description="pypto's name of the function in this compilation, "
                                            "e.g. 'TENSOR_softmax_kernel_2' (the suffix changes per call)")
    funcmagic: int | None = Field(None, description="pypto's function number in this compilation")
    entry_hash: str = Field(description="program.json 'entryhash' (changes with every compilation)")
    found_by: str = Field(description="how the kernel's function was found: 'entryhash', 'curr_funcmagic' "
                                      "or 'functype' (the only root function of the program)")


class KernelRun(BaseModel):
    """One output folder of a run, named after its kernel."""

    run_dir: str
    kernel: KernelId
    call: int = Field(description="1-based: this is the n-th output folder of this kernel in the list, oldest first")
    calls: int = Field(description="how many output folders of this kernel the list holds")
    label: str = Field(description="'softmax_kernel', or 'softmax_kernel#2' when the kernel ran more than once; "
                                   "two different kernels with the same Python name get '@file:line'")


# Only the scalar fields; unknown keys (operations, tensors, rawtensors, ...) are skipped by the decoder.
class _Func(msgspec.Struct):
    hash: int | str | None = None
    funcmagic: int | None = None
    func_magicname: str | None = None
    rawname: str | None = None
    graphtype: int | None = None
    functype: int | None = None
    file: str | None = None
    line: int | None = None


class _Program(msgspec.Struct):
    functions: list[_Func]
    entryhash: int | str | None = None
    curr_funcmagic: int | None = None


def _program_path(run_dir: Path) -> Path:
    """program.json of a run folder in either layout; also accepts the SIM swimlane folder or the file itself."""
    p = Path(run_dir)
    if p.name == PROGRAM_NAME and not p.is_dir():
        return p
    if p.name == SIM_SUBDIR:
        # SIM keeps program.json one level above CostModelSimulationOutput/ (A.1); NPU in the run folder itself.
        p = p.parent
    return p / PROGRAM_NAME


def _decode(path: Path) -> _Program:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, after the map that needs it
    except FileNotFoundError:
        raise ArtifactError("program.json is missing", path=str(path), expected="the function table pypto writes "
                            "into every output folder (A.7)", hint=_HINT) from None
    except IsADirectoryError:
        raise ArtifactError("program.json is a folder, not a file", path=str(path), hint=_HINT) from None
    except OSError as exc:
        raise ArtifactError(f"program.json cannot be read ({exc.strerror})", path=str(path), hint=_HINT) from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise ArtifactError("program.json is empty", path=str(path), where="byte 0",
                                expected='{"entryhash": …, "functions": [...]}', hint=_HINT)
        if size > PROGRAM_MAX_BYTES:
            raise ArtifactError(f"program.json is {size} bytes, more than the {PROGRAM_MAX_BYTES} this reader accepts",
                                path=str(path), hint="this is not a program.json pypto writes; check the folder")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                return msgspec.json.decode(mm, type=_Program)
            except msgspec.ValidationError as exc:
                raise ArtifactError(f"program.json does not have the expected shape ({exc})", path=str(path),
                                    expected='{"entryhash": "…", "curr_funcmagic": n, "functions": [{"hash", '
                                             '"funcmagic", "rawname", "graphtype", …}]} (A.7)', hint=_HINT) from None
            except msgspec.DecodeError as exc:
                raise ArtifactError(f"program.json is not valid JSON ({exc})", path=str(path),
                                    expected="a complete JSON document (a run cut off while writing leaves a "
                                             "truncated file)", hint=_HINT) from None


def _hash_key(v: int | str | None) -> str | None:
    """Hashes are written as strings in 0.2.0 and as numbers in some files: compare their decimal text."""
    if v is None:
        return None
    s = str(v).strip()
    return s or None


def _find_kernel(prog: _Program, path: Path) -> tuple[_Func, str]:
    funcs = [f for f in prog.functions if f.graphtype != _ENTRY_GRAPHTYPE]
    entry = _hash_key(prog.entryhash)
    by_hash = [f for f in funcs if entry is not None and _hash_key(f.hash) == entry]
    by_magic = [f for f in funcs if prog.curr_funcmagic is not None and f.funcmagic == prog.curr_funcmagic]
    for found, field in ((by_hash, "entryhash"), (by_magic, "curr_funcmagic")):
        if len(found) > 1:
            raise ArtifactError(f"program.json has {len(found)} functions matching its {field}", path=str(path),
                                where=field, expected="exactly one kernel function", hint=_HINT)
    if by_hash and by_magic and by_hash[0] is not by_magic[0]:
        # Both fields are written by the same compilation: disagreeing, they cannot both describe this file.
        raise ArtifactError("program.json's entryhash and curr_funcmagic name different functions "
                            f"({by_hash[0].func_magicname!r} and {by_magic[0].func_magicname!r})", path=str(path),
                            hint=_HINT)
    if by_hash:
        return by_hash[0], "entryhash"
    if by_magic:
        return by_magic[0], "curr_funcmagic"
    roots = [f for f in funcs if f.functype == _KERNEL_FUNCTYPE and f.graphtype == 0]
    if len(roots) == 1:
        return roots[0], "functype"
    raise ArtifactError("program.json names no kernel function", path=str(path),
                        where=f"entryhash={prog.entryhash!r}, curr_funcmagic={prog.curr_funcmagic!r}",
                        expected="a function whose hash is the entryhash, named TENSOR_<python name> (A.7)",
                        hint=_HINT)


def _python_name(f: _Func, path: Path) -> str:
    if f.rawname:
        name = f.rawname
    elif f.func_magicname and f.funcmagic is not None and f.func_magicname.endswith(f"_{f.funcmagic}"):
        name = f.func_magicname[: -len(f"_{f.funcmagic}")]
    else:
        raise ArtifactError("program.json's kernel function has neither 'rawname' nor a 'func_magicname' ending "
                            "in its 'funcmagic'", path=str(path), where=f"function {f.func_magicname!r}",
                            expected='"rawname": "TENSOR_<python name>"', hint=_HINT)
    if name.startswith(_TENSOR_PREFIX) and len(name) > len(_TENSOR_PREFIX):
        name = name[len(_TENSOR_PREFIX):]
    if not name.isidentifier():
        raise ArtifactError(f"program.json's kernel name {name!r} is not a Python identifier", path=str(path),
                            where=f"function {f.func_magicname!r}", expected="TENSOR_<python def name>", hint=_HINT)
    return name


def kernel_of(run_dir: Path) -> KernelId:
    """Name the jit kernel of one output folder from its ``program.json``.

    ``run_dir`` is an ``output_<ts>`` folder in the SIM or the NPU layout (``program.json`` sits in the run folder
    in both, A.1); its ``CostModelSimulationOutput/`` folder or the ``program.json`` path itself are accepted too.
    Raises :class:`ArtifactError` naming the file when ``program.json`` is missing, empty, not JSON, of another
    shape, or names no kernel function.
    """
    path = _program_path(Path(run_dir))
    prog = _decode(path)
    func, found_by = _find_kernel(prog, path)
    return KernelId(
        name=_python_name(func, path), source_file=func.file, source_line=func.line,
        func_magicname=func.func_magicname or "", funcmagic=func.funcmagic,
        entry_hash=_hash_key(prog.entryhash) or _hash_key(func.hash) or "", found_by=found_by,
    )


def _call_order(d: Path) -> tuple[int, float, str]:
    ts = run_timestamp(d)
    return (0, ts, d.name) if ts is not None else (1, 0.0, d.name)


def label_kernel_runs(run_dirs: Sequence[Path]) -> list[KernelRun]:
    """Name each output folder of one run after its kernel, oldest folder first.

    Folders are ordered by the timestamp in their ``output_<ts>`` name (the order of the kernel calls; folders
    without one come last, by name). A kernel that has several folders gets ``#1``, ``#2``… in that order
    (``softmax_kernel#2`` is its second call); a kernel with one folder keeps its bare name. Two different kernels
    that share a Python name (different file or def line) are told apart as ``name@file.py:line``. Any folder whose
    kernel cannot be named raises :class:`ArtifactError` for that folder.
    """
    dirs = sorted((Path(d) for d in run_dirs), key=_call_order)
    kernels = [kernel_of(d) for d in dirs]

    def ident(k: KernelId) -> tuple[str, str | None, int | None]:
        return (k.name, k.source_file, k.source_line)

    idents_by_name: dict[str, set[tuple[str, str | None, int | None]]] = {}
    for k in kernels:
        idents_by_name.setdefault(k.name, set()).add(ident(k))
    total: dict[tuple[str, str | None, int | None], int] = {}
    for k in kernels:
        total[ident(k)] = total.get(ident(k), 0) + 1

    seen: dict[tuple[str, str | None, int | None], int] = {}
    out: list[KernelRun] = []
    for d, k in zip(dirs, kernels, strict=True):
        key = ident(k)
        seen[key] = seen.get(key, 0) + 1
        base = k.name
        if len(idents_by_name[k.name]) > 1:
            where = Path(k.source_file).name if k.source_file else "?"
            base = f"{k.name}@{where}:{k.source_line if k.source_line is not None else '?'}"
        label = f"{base}#{seen[key]}" if total[key] > 1 else base
        out.append(KernelRun(run_dir=str(d), kernel=k, call=seen[key], calls=total[key], label=label))
    return out
