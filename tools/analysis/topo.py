"""Readers for ``dyn_topo.txt`` (both column layouts) and ``program.json`` (domain A.7)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from pypto_tune.tools.errors import ArtifactError

_HINT = "re-run the operator; the runtime writes dyn_topo.txt and program.json into the run folder"
# 0.2.0: 9 fixed fields, an empty field, then successors. ref-DSL: 11 fixed fields (…, psgId, wrapId,
# staticSuccCount), then successors.
_FIXED_020 = ("seqNo", "taskId", "rootIndex", "rootHash", "opmagic", "leafIndex", "leafHash", "coreType", "psgId")
CORE_AIV, CORE_AIC, CORE_HUB = 0, 1, 4


@dataclass
class TopoRow:
    seq: int
    task_id: int
    opmagic: int
    leaf_hash: int
    core_type: int  # 0 AIV, 1 AIC, 4 HUB
    psg_id: int
    successors: list[int] = field(default_factory=list)  # task ids in the same seqNo
    wrap_id: int | None = None

    @property
    def key(self) -> int:
        return (self.seq << 32) | self.task_id


@dataclass
class Topo:
    """Columns of dyn_topo.txt (row i of each list is row i of the file, header excluded).

    Only the columns an analysis uses are kept (rootIndex, rootHash and leafIndex are checked for the right
    field count but not stored: at 500k rows every stored column costs tens of MB).
    """

    path: str
    layout: str  # "0.2.0" (10 header columns) or "ref" (11 fixed columns)
    seq: list[int] = field(default_factory=list)
    task_id: list[int] = field(default_factory=list)
    opmagic: list[int] = field(default_factory=list)
    leaf_hash: list[int] = field(default_factory=list)
    core_type: list[int] = field(default_factory=list)
    psg_id: list[int] = field(default_factory=list)
    successors: list[list[int]] = field(default_factory=list)
    wrap_id: list[int | None] = field(default_factory=list)  # ref layout only

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def rows(self) -> list[TopoRow]:
        """Row objects (convenient, slower; the analyses use the columns)."""
        wraps = self.wrap_id or [None] * len(self.seq)
        return [TopoRow(*v) for v in zip(self.seq, self.task_id, self.opmagic, self.leaf_hash, self.core_type,
                                         self.psg_id, self.successors, wraps)]


def parse_topo_text(text: str, path: str = "dyn_topo.txt") -> Topo:
    """Parse dyn_topo.txt; the header decides the layout (a 'wrapId' column means the newer 11-field one)."""
    if not text.strip():
        raise ArtifactError("dyn_topo.txt is empty", path=path, where="line 1",
                            expected="a header 'seqNo,taskId,…' and one row per task", hint=_HINT)
    lines = text.split("\n")
    header = [h.strip() for h in lines[0].split(",")]
    if header[:2] != ["seqNo", "taskId"]:
        raise ArtifactError(f"unexpected dyn_topo.txt header {lines[0][:80]!r}", path=path, where="line 1",
                            expected="'seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,…'",
                            hint=_HINT)
    newer = "wrapId" in header
    nfixed = 11 if newer else 10  # 0.2.0: the 10th field is the empty one before the successors
    t = Topo(path=path, layout="ref" if newer else "0.2.0")
    seq, tid, opm, leaf, core, psg, succ, wrap = (t.seq, t.task_id, t.opmagic, t.leaf_hash, t.core_type, t.psg_id,
                                                  t.successors, t.wrap_id)
    ln = 1
    try:
        for ln, line in enumerate(lines[1:], start=2):
            if not line:
                continue
            parts = line.rstrip("\r").split(",")
            if len(parts) < nfixed:
                raise ArtifactError(f"dyn_topo.txt row has {len(parts)} fields", path=path, where=f"line {ln}",
                                    expected=f"at least {nfixed} comma-separated fields "
                                    f"({'11 fixed' if newer else '9 fixed + an empty one'})", hint=_HINT)
            seq.append(int(parts[0]))
            tid.append(int(parts[1]))
            opm.append(int(parts[4]))
            leaf.append(int(parts[6]))
            core.append(int(parts[7]))
            psg.append(int(parts[8]))
            succ.append([int(x) for x in parts[nfixed:] if x] if len(parts) > nfixed else [])
            if newer:
                wrap.append(int(parts[9]) if parts[9] else None)
    except ValueError:
        raise ArtifactError("non-integer field in dyn_topo.txt", path=path, where=f"line {ln}",
                            expected="integers (successor list may be empty)", hint=_HINT) from None
    return t


_BAD_CHAR = re.compile(r"[^0-9,\-\r\n]")
# _BAD_CHAR has already ruled out anything but digits, '-' and ',', so plain "[^,]" classes suffice (no backtracking).
# groups: seq, taskId, opmagic, leafHash, coreType, psgId, successor tail (comma-separated, may be empty)
_F = r"[^,\n]*"
_C = r"([^,\n]+)"
_ROW_020 = re.compile(rf"^{_C},{_C},{_F},{_F},{_C},{_F},{_C},{_C},{_C},{_F},?([^\n\r]*)\r?$", re.M)
_ROW_REF = re.compile(rf"^{_C},{_C},{_F},{_F},{_C},{_F},{_C},{_C},{_C},{_F},{_F},?([^\n\r]*)\r?$", re.M)
_EMPTY_LINE = re.compile(r"^\r?$", re.M)


def _first_bad_row(body: str, pat: re.Pattern, path: str, nfixed: int, newer: bool) -> None:
    for ln, line in enumerate(body.split("\n"), start=2):
        if line.strip() and not pat.match(line):
            raise ArtifactError(f"dyn_topo.txt row has {len(line.split(','))} fields", path=path, where=f"line {ln}",
                                expected=f"at least {nfixed} comma-separated fields "
                                f"({'11 fixed' if newer else '9 fixed + an empty one'})", hint=_HINT)


@dataclass
class TopoLite:
    """What the analyses need from dyn_topo.txt, read without converting every field to int (4× faster at 500k
    rows). Values stay text: they are only compared and used as labels; successor keys are "seq,taskId"."""

    path: str
    layout: str
    n_rows: int
    rows_with_successors: int  # what the reference's CSV reader keeps (it drops successor-less rows)
    core_of: dict[str, str]  # "seq,taskId" → coreType ("0" AIV, "1" AIC, "4" HUB)
    aiv: list[tuple[str, str, str, str, str, str]]  # AIV rows: (key, leafHash, opmagic, psgId, seqNo, successor ids
    #                                                   joined by ',' — split only where a chain needs them)
    leaf_psg: dict[int, set[int]]  # leafHash ≠ 0 → psgIds


def scan_topo_text(text: str, path: str = "dyn_topo.txt") -> TopoLite:
    """The fast reader; same header/field-count checks as ``parse_topo_text`` and one regex pass that rejects any
    character other than digits, '-' and ',' in the rows (so a non-integer is still an error with its line)."""
    if not text.strip():
        raise ArtifactError("dyn_topo.txt is empty", path=path, where="line 1",
                            expected="a header 'seqNo,taskId,…' and one row per task", hint=_HINT)
    nl = text.find("\n")
    head = text[: nl if nl >= 0 else len(text)]
    header = [h.strip() for h in head.split(",")]
    if header[:2] != ["seqNo", "taskId"]:
        raise ArtifactError(f"unexpected dyn_topo.txt header {head[:80]!r}", path=path, where="line 1",
                            expected="'seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,…'",
                            hint=_HINT)
    body = text[nl + 1:] if nl >= 0 else ""
    bad = _BAD_CHAR.search(body)
    if bad:
        ln = body.count("\n", 0, bad.start()) + 2
        raise ArtifactError("non-integer field in dyn_topo.txt", path=path, where=f"line {ln}",
                            expected="integers (successor list may be empty)", hint=_HINT)
    newer = "wrapId" in header
    nfixed = 11 if newer else 10
    # One C-speed findall instead of a Python split per line (measured 2.3 s → under 1 s at 500k rows).
    rows = (_ROW_REF if newer else _ROW_020).findall(body)
    nl_count = body.count("\n")
    # the usual file: every row ends with "\n" and none is blank → no second pass needed
    if len(rows) not in (nl_count, nl_count + 1) and len(rows) != nl_count + 1 - len(_EMPTY_LINE.findall(body)):
        _first_bad_row(body, _ROW_REF if newer else _ROW_020, path, nfixed, newer)
    keys = [r[0] + "," + r[1] for r in rows]
    core_of = dict(zip(keys, [r[4] for r in rows]))
    pairs = {(r[3], r[5]) for r in rows}
    tails = [r[6] for r in rows]
    with_succ = len(tails) - tails.count("")
    aiv = [(k, r[3], r[2], r[5], r[0], r[6]) for k, r in zip(keys, rows) if r[4] == "0"]
    n = len(rows)
    leaf_psg: dict[int, set[int]] = {}
    for leaf, psg in pairs:
        try:
            h, g = int(leaf), int(psg)
        except ValueError:
            raise ArtifactError("non-integer leafHash or psgId in dyn_topo.txt", path=path,
                                where=f"leafHash {leaf[:40]!r}, psgId {psg[:40]!r}",
                                expected="decimal integers in the leafHash and psgId columns") from None
        if h:
            leaf_psg.setdefault(h, set()).add(g)
    return TopoLite(path=path, layout="ref" if newer else "0.2.0", n_rows=n, rows_with_successors=with_succ,
                    core_of=core_of, aiv=aiv, leaf_psg=leaf_psg)


def _topo_text(path: Path) -> str:
    try:
        text = Path(path).read_bytes().decode("utf-8")  # no newline translation: 10× faster than read_text
    except FileNotFoundError:
        raise ArtifactError("dyn_topo.txt is missing", path=str(path), expected="the task graph the runtime writes",
                            hint=_HINT) from None
    except UnicodeDecodeError as exc:
        raise ArtifactError("dyn_topo.txt is not UTF-8", path=str(path), where=f"byte {exc.start}", hint=_HINT) from None
    return text


def scan_topo(path: Path) -> TopoLite:
    return scan_topo_text(_topo_text(path), str(path))


def read_topo(path: Path) -> Topo:
    return parse_topo_text(_topo_text(path), str(path))


# ---------------------------------------------------------------------------------------------- program.json
class _Op(msgspec.Struct):
    opcode: str = ""
    file: str | None = None
    line: int | None = None


class _Func(msgspec.Struct):
    hash: int | str | None = None
    graphtype: int | None = None
    func_magicname: str = ""
    funcmagic: int | None = None
    operations: list[_Op] = msgspec.field(default_factory=list)


class _Program(msgspec.Struct):
    functions: list[_Func]


@dataclass
class LeafInfo:
    leaf_hash: int
    name: str
    ops: list[tuple[str, str | None, int | None]]  # (opcode, file, line)


@dataclass
class Program:
    path: str
    root_names: dict[int, str]  # rootHash → func_magicname without TENSOR_LOOP_
    root_positions: dict[int, int]  # rootHash → index in functions (the label's <rootIndex>)
    leaves: dict[int, LeafInfo]


def _as_int(v: int | str | None) -> int | None:
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return None


def parse_program_bytes(data: bytes, path: str = "program.json") -> Program:
    if not data.strip():
        raise ArtifactError("program.json is empty", path=path, where="byte 0",
                            expected='{"functions": [...]}', hint=_HINT)
    try:
        prog = msgspec.json.decode(data, type=_Program)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ArtifactError(f"program.json is malformed ({exc})", path=path,
                            expected='{"functions": [{hash, graphtype, operations, …}]} (A.7)', hint=_HINT) from None
    roots: dict[int, str] = {}
    pos: dict[int, int] = {}
    leaves: dict[int, LeafInfo] = {}
    for i, f in enumerate(prog.functions):
        h = _as_int(f.hash)
        if h is None:
            continue
        if f.graphtype == 2:
            roots[h] = f.func_magicname.replace("TENSOR_LOOP_", "")
            pos.setdefault(h, i)
        elif f.graphtype == 3:
            leaves[h] = LeafInfo(h, f.func_magicname, [(o.opcode, o.file, o.line) for o in f.operations])
    return Program(path=path, root_names=roots, root_positions=pos, leaves=leaves)


def read_program(path: Path) -> Program:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ArtifactError("program.json is missing", path=str(path), expected="the function table", hint=_HINT) from None
    return parse_program_bytes(data, str(path))
