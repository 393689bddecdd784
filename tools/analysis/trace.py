"""Single-pass reader for ``merged_swimlane.json`` (domain A.4) into compact columns.

Only the Machine View (``pid == 1``) is kept: newer NPU builds prepend an AICPU view (pid 0) whose thread names
contain "AIC" and would otherwise be counted as cube cores (E.4.26).

Speed and memory (issues 3 and 11, measured in ``benchmarks/``): ``msgspec`` decodes into typed structs that keep
only the fields we use; the writer pretty-prints with indent 4, so when the file has that shape it is decoded in
slices cut at the ``\\n        },`` that closes each top-level event (JSON strings cannot hold a raw newline, so the
cut can never fall inside a string), read into one reused buffer. Each slice's structs are appended to numpy
columns right away and dropped, so peak memory is one slice plus the columns (~95 MB at 500k tasks, labels
included), not the whole document and not one Python object per number. Any other shape is decoded in one go.
``.json.gz`` copies (kept by the ledger) are read the same way.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np

from pypto_tune.tools.errors import ArtifactError

_HINT = "re-run the operator with runtime_debug_mode 1; the trace may have been cut off while being written"
SLICE_BYTES = 4 << 20  # measured: 2–4 MiB slices decode fastest (0.65 s vs 1.0 s at 32 MiB, 163 MiB trace)
_PRETTY_HEAD = re.compile(rb'^\{\s*\n    "traceEvents": \[\s*\n        \{')
_CUT = b"\n        },"


class _Args(msgspec.Struct, gc=False):
    name: str | None = None  # M thread_name
    event_hint: str | None = msgspec.field(default=None, name="event-hint")
    hash_order: str | None = msgspec.field(default=None, name="hashOrder-hint")
    taskId: int | None = None
    seqNo: int | None = None


class _Event(msgspec.Struct, gc=False):
    """Any event: the fallback shape when a trace holds phases other than M/X/s/f/C."""

    ph: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: _Args | None = None


# Tagged by "ph": each phase decodes only the fields it needs (flow and counter events carry no strings we use),
# which measured ~35 % faster than one catch-all struct on a 163 MiB trace. gc=False: these hold no cycles.
class _XArgs(msgspec.Struct, gc=False):
    event_hint: str | None = msgspec.field(default=None, name="event-hint")
    hash_order: str | None = msgspec.field(default=None, name="hashOrder-hint")
    taskId: int | None = None
    seqNo: int | None = None


class _MArgs(msgspec.Struct, gc=False):
    name: str | None = None


# A missing ts / dur decodes as NaN (JSON itself cannot hold a NaN), so one vectorised isnan finds it; a null one
# fails the type and the slice is decoded again with the catch-all shape, which reports or skips it as before.
_NAN = float("nan")


class _X(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    name: str = ""
    pid: int | str | None = None
    tid: int | None = None
    ts: float = _NAN
    dur: float = _NAN
    args: _XArgs | None = None


class _S(msgspec.Struct, gc=False, tag_field="ph", tag="s"):
    pid: int | str | None = None
    tid: int | None = None
    ts: float = _NAN
    id: int | None = None


class _F(msgspec.Struct, gc=False, tag_field="ph", tag="f"):
    pid: int | str | None = None
    tid: int | None = None
    ts: float = _NAN
    id: int | None = None


class _M(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    args: _MArgs | None = None


class _C(msgspec.Struct, gc=False, tag_field="ph", tag="C"):
    pid: int | str | None = None


_Tagged = _X | _S | _F | _M | _C


class _Doc(msgspec.Struct):
    traceEvents: list[_Tagged]


class _AnyDoc(msgspec.Struct):
    traceEvents: list[_Event]


_doc_decoder = msgspec.json.Decoder(_Doc)
_any_doc_decoder = msgspec.json.Decoder(_AnyDoc)
_list_decoder = msgspec.json.Decoder(list[_Tagged])
_any_list_decoder = msgspec.json.Decoder(list[_Event])


def _is_tag_error(exc: Exception) -> bool:
    # an unknown "ph" (B/E/i/...), a missing one, or a field of an unexpected type (e.g. a string flow id):
    # retry the slice with the catch-all shape, which reports real type errors itself
    return isinstance(exc, msgspec.ValidationError)


@dataclass(frozen=True)
class TraceArrays:
    tid: np.ndarray  # int64
    start: np.ndarray  # float64, µs
    dur: np.ndarray
    end: np.ndarray  # start + dur
    leaf: np.ndarray  # uint64 leafHash (0 = HUB / none)

    @property
    def compute(self) -> np.ndarray:
        """Mask of real compute tasks: a leafHash, and not a fake placeholder on core 0."""
        return (self.leaf != 0) & (self.tid >= 1002)


def ordered_sum(values: np.ndarray) -> float:
    """Σ in index order, like Python's ``sum`` of a list (numpy's ``sum`` is pairwise and differs in the last bits;
    the figures are compared with the writer's own, which adds in order)."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


# numpy columns of a Trace and their dtypes. key, root and the flow ids are identifiers that are only compared or
# looked up, so a value outside int64/uint64 (never written by PyPTO, tolerated) turns that column into an object
# array; tid and leafHash are computed with and must fit (ArtifactError otherwise).
_TASK_COLUMNS = {"tid": np.int64, "start": np.float64, "dur": np.float64, "key": np.int64, "leaf": np.uint64,
                 "root": np.uint64}
_FLOW_COLUMNS = {"s_id": np.int64, "s_tid": np.int64, "s_ts": np.float64,
                 "f_id": np.int64, "f_tid": np.int64, "f_ts": np.float64}
_COLUMNS = {**_TASK_COLUMNS, **_FLOW_COLUMNS}
_MUST_FIT = {"tid", "leaf", "s_tid", "f_tid"}


def _empty(name: str) -> np.ndarray:
    return np.empty(0, dtype=_COLUMNS[name])


@dataclass
class Trace:
    """Columns of the Machine View. Task ``i`` is the i-th ``X`` event on pid 1, in emission order.

    Task and flow columns are numpy arrays, filled slice by slice while the file is decoded: at 500k tasks and 800k
    flows that is ~60 MB, where Python lists of int/float objects made ``read_trace`` peak at 371 MB instead of
    140 MB, and had to be converted again for every figure (``benchmarks/README.md``).
    """

    path: str
    lane_names: dict[int, str] = field(default_factory=dict)  # tid → thread name
    tid: np.ndarray = field(default_factory=lambda: _empty("tid"))
    start: np.ndarray = field(default_factory=lambda: _empty("start"))  # µs
    dur: np.ndarray = field(default_factory=lambda: _empty("dur"))
    key: np.ndarray = field(default_factory=lambda: _empty("key"))  # seqNo << 32 | taskId (-1 when args lack them)
    leaf: np.ndarray = field(default_factory=lambda: _empty("leaf"))  # leafHash from event-hint (0 = HUB / none)
    root: np.ndarray = field(default_factory=lambda: _empty("root"))  # rootHash from event-hint
    labels: list[str] = field(default_factory=list)
    hash_order: dict[int, str] = field(default_factory=dict)  # task index → hashOrder-hint (newer builds)
    # flow events in emission order, as columns (id, lane, ts): 's' at the predecessor, 'f' at the successor.
    s_id: np.ndarray = field(default_factory=lambda: _empty("s_id"))
    s_tid: np.ndarray = field(default_factory=lambda: _empty("s_tid"))
    s_ts: np.ndarray = field(default_factory=lambda: _empty("s_ts"))
    f_id: np.ndarray = field(default_factory=lambda: _empty("f_id"))
    f_tid: np.ndarray = field(default_factory=lambda: _empty("f_tid"))
    f_ts: np.ndarray = field(default_factory=lambda: _empty("f_ts"))
    other_pid_events: int = 0  # events outside the Machine View (AICPU view), ignored
    event_count: int = 0
    _hint_cache: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    _bufs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # columns being filled (capacity ≥ fill)
    _fill: dict[str, int] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.start)

    def arrays(self) -> "TraceArrays":
        """The task columns plus ``end`` (built once; the cross-check and per-task sums use them)."""
        cached = self.__dict__.get("_arrays")
        if cached is None or len(cached.tid) != len(self.start):
            cached = self.__dict__["_arrays"] = TraceArrays(tid=self.tid, start=self.start, dur=self.dur,
                                                            end=self.start + self.dur, leaf=self.leaf)
        return cached

    @property
    def flow_s(self) -> dict[int, tuple[int, float]]:
        """flow id → (tid, ts) of the 's' events (a convenience view; the last event of an id wins)."""
        return {i: (t, x) for i, t, x in zip(self.s_id.tolist(), self.s_tid.tolist(), self.s_ts.tolist())}

    @property
    def flow_f(self) -> dict[int, tuple[int, float]]:
        return {i: (t, x) for i, t, x in zip(self.f_id.tolist(), self.f_tid.tolist(), self.f_ts.tolist())}

    def core_index(self, i: int) -> int:
        return (int(self.tid[i]) - 1000) // 2

    def is_fake(self, i: int) -> bool:
        """Fake placeholder tasks live on core 0 (A.3/A.4.4)."""
        return bool(self.tid[i] < 1002)

    def _push(self, name: str, values: list | np.ndarray) -> None:
        """Append one slice's values to a column.

        Copied into one buffer per column that doubles when full, not kept as per-slice chunks: ~2,500 chunks
        left ~60 MB of freed-but-resident heap between the label strings after they were joined (measured at
        500k tasks: RSS 185 MB, 125 MB after ``malloc_trim``). The unused tail of a buffer is never written, so it
        costs address space, not memory.
        """
        if isinstance(values, np.ndarray):
            arr = values
        else:
            try:
                arr = np.array(values, dtype=_COLUMNS[name])
            except OverflowError:
                if name in _MUST_FIT:
                    raise _too_wide(self) from None
                arr = np.array(values, dtype=object)
        buf = self._bufs.get(name)
        n = self._fill.get(name, 0)
        need = n + len(arr)
        widen = arr.dtype == object and buf is not None and buf.dtype != object
        if buf is None or need > len(buf) or widen:
            grown = np.empty(max(need, 2 * len(buf) if buf is not None else 0, 1024),
                             dtype=object if widen else (arr.dtype if buf is None else buf.dtype))
            if n:
                grown[:n] = buf[:n]
            buf = self._bufs[name] = grown
        buf[n:need] = arr
        self._fill[name] = need

    def _join(self) -> None:
        """Publish the filled part of each column buffer as the column."""
        for name in _COLUMNS:
            buf = self._bufs.pop(name, None)
            if buf is not None:
                setattr(self, name, buf[: self._fill.pop(name)])


def _lacks(tr: Trace, where: str) -> ArtifactError:
    return ArtifactError("an X event lacks an integer tid, ts or dur", path=tr.path, where=where,
                         expected="X events with tid, ts and dur (A.4.1)", hint=_HINT)


def _too_wide(tr: Trace) -> ArtifactError:
    return ArtifactError("merged_swimlane.json has a tid or leafHash outside 64 bits", path=tr.path,
                         expected="tid a small integer, leafHash an unsigned 64-bit integer (A.4)", hint=_HINT)


def _name_lane(tr: Trace, tid: int, name: str) -> None:
    # lanes are later matched against the int64 tid column; a wider tid would overflow there, not here
    if not -(1 << 63) <= tid < (1 << 63):
        raise _too_wide(tr)
    tr.lane_names.setdefault(tid, name)


def _flow_id(v: object) -> int:
    """A non-integer flow id (not written by PyPTO, tolerated) as a stable 63-bit int."""
    import zlib

    return zlib.crc32(str(v).encode()) | (1 << 40)


def _hint_int(hint: str, tag: str) -> int:
    k = hint.find(tag)
    if k < 0:
        return 0
    k += len(tag)
    e = k
    n = len(hint)
    while e < n and hint[e].isdigit():
        e += 1
    return int(hint[k:e]) if e > k else 0


def _leaf_root(tr: Trace, hints: list[str]) -> tuple[list[int], list[int]]:
    """leafHash and rootHash of each ``event-hint``.

    "Task:[s-f-o], rootHash:R, callOpMagic:C, leafHash:L, TaskId:T": the middle part repeats for every task of the
    same call op, so it is parsed once per distinct value.
    """
    subs = [h[h.find(", rootHash:"):h.rfind(", TaskId:")] if h else "" for h in hints]
    cache = tr._hint_cache
    for sub in set(subs).difference(cache):
        cache[sub] = (_hint_int(sub, "leafHash:"), _hint_int(sub, "rootHash:")) if sub else (0, 0)
    vals = [cache[sub] for sub in subs]
    return [v[0] for v in vals], [v[1] for v in vals]


def _absorb(tr: Trace, events: list, where: str) -> None:
    """Append one decoded slice to the columns.

    Column-wise comprehensions instead of one branchy loop per event: measured ~2× faster on 420k events. Slices
    decoded with the catch-all ``_Event`` shape (unknown phases present) take the plain loop below.
    """
    if events and type(events[0]) is _Event:
        _absorb_generic(tr, events, where)
        return
    tr.event_count += len(events)
    mine = [e for e in events if e.pid == 1]
    tr.other_pid_events += len(events) - len(mine)
    buckets: dict[type, list] = {_X: [], _S: [], _F: [], _M: [], _C: []}
    for e in mine:
        buckets[e.__class__].append(e)
    xs, flows_s, flows_f = buckets[_X], buckets[_S], buckets[_F]
    for e in buckets[_M]:
        if e.name == "thread_name" and isinstance(e.tid, int) and e.args is not None and e.args.name:
            _name_lane(tr, e.tid, e.args.name)
    base = len(tr.labels)
    try:
        tid = np.array([e.tid for e in xs], dtype=np.int64)
    except TypeError:  # a None (the struct type allows only int or None)
        raise _lacks(tr, where) from None
    except OverflowError:
        raise _too_wide(tr) from None
    start = np.array([e.ts for e in xs], dtype=np.float64)
    dur = np.array([e.dur for e in xs], dtype=np.float64)
    if np.isnan(start).any() or np.isnan(dur).any():
        raise _lacks(tr, where)
    args = [e.args for e in xs]
    try:
        keys = [(a.seqNo << 32) | a.taskId for a in args]
    except (TypeError, AttributeError):
        keys = [(a.seqNo << 32) | a.taskId if a is not None and a.seqNo is not None and a.taskId is not None
                else -1 for a in args]
    leaves, roots = _leaf_root(tr, [a.event_hint if a is not None and a.event_hint else "" for a in args])
    tr._push("tid", tid)
    tr._push("start", start)
    tr._push("dur", dur)
    tr._push("key", keys)
    tr._push("leaf", leaves)
    tr._push("root", roots)
    tr.labels.extend([e.name for e in xs])
    for i, a in enumerate(args):
        if a is not None and a.hash_order:
            tr.hash_order[base + i] = a.hash_order
    for ev_list, kind in ((flows_s, "s_"), (flows_f, "f_")):
        try:
            ids = np.array([e.id for e in ev_list], dtype=np.int64)
            tids = np.array([e.tid for e in ev_list], dtype=np.int64)
            tss = np.array([e.ts for e in ev_list], dtype=np.float64)
            complete = not np.isnan(tss).any()
        except (TypeError, OverflowError):  # a missing id / tid, or one beyond int64
            complete = False
        if complete:
            tr._push(kind + "id", ids)
            tr._push(kind + "tid", tids)
            tr._push(kind + "ts", tss)
        else:  # edges without an id, a time or a lane are dropped, as the generic reader does
            ok = [e for e in ev_list if e.id is not None and e.ts == e.ts and e.tid is not None]
            tr._push(kind + "id", [e.id for e in ok])
            tr._push(kind + "tid", [e.tid for e in ok])
            tr._push(kind + "ts", [e.ts for e in ok])


def _absorb_generic(tr: Trace, events: list, where: str) -> None:
    tr.event_count += len(events)
    tids: list = []
    tss: list = []
    durs: list = []
    keys: list = []
    hints: list = []
    flows: dict[str, tuple[list, list, list]] = {"s": ([], [], []), "f": ([], [], [])}
    base = len(tr.labels)
    for ev in events:
        if ev.pid != 1:
            tr.other_pid_events += 1
            continue
        ph = ev.ph
        if ph == "X":
            t = ev.tid
            if not isinstance(t, int) or ev.ts is None or ev.dur is None:
                raise _lacks(tr, where)
            a = ev.args
            ok = a is not None and a.taskId is not None and a.seqNo is not None
            keys.append((a.seqNo << 32) | a.taskId if ok else -1)
            hints.append(a.event_hint if a is not None and a.event_hint else "")
            if a is not None and a.hash_order:
                tr.hash_order[base + len(tids)] = a.hash_order
            tids.append(t)
            tss.append(ev.ts)
            durs.append(ev.dur)
            tr.labels.append(ev.name)
        elif ph in ("s", "f"):
            if ev.id is None or ev.ts is None or not isinstance(ev.tid, int):
                continue
            ids, ftids, ftss = flows[ph]
            ids.append(ev.id if isinstance(ev.id, int) else _flow_id(ev.id))
            ftids.append(ev.tid)
            ftss.append(ev.ts)
        elif ph == "M":
            if ev.name == "thread_name" and isinstance(ev.tid, int) and ev.args is not None and ev.args.name:
                _name_lane(tr, ev.tid, ev.args.name)
    leaves, roots = _leaf_root(tr, hints)
    for name, values in (("tid", tids), ("start", tss), ("dur", durs), ("key", keys), ("leaf", leaves),
                         ("root", roots)):
        tr._push(name, values)
    for kind, (ids, ftids, ftss) in flows.items():
        tr._push(kind + "_id", ids)
        tr._push(kind + "_tid", ftids)
        tr._push(kind + "_ts", ftss)


def _decode_error(path: str, exc: Exception, base: int) -> ArtifactError:
    msg = str(exc)
    m = re.search(r"byte (\d+)", msg)
    where = f"byte {base + int(m.group(1))}" if m else (f"after byte {base}" if base else "")
    truncated = "truncated" in msg.lower()
    return ArtifactError(("merged_swimlane.json is truncated" if truncated else "merged_swimlane.json is malformed")
                         + f" ({msg})", path=path, where=where,
                         expected='a JSON object {"traceEvents": [...]} (A.4)', hint=_HINT)


def parse_trace_bytes(data: bytes, path: str = "merged_swimlane.json") -> Trace:
    """Decode a whole trace document already in memory (one msgspec pass)."""
    tr = Trace(path=path)
    if not data.strip():
        raise ArtifactError("merged_swimlane.json is empty", path=path, where="byte 0",
                            expected='{"traceEvents": [...]}', hint=_HINT)
    try:
        try:
            doc = _doc_decoder.decode(data)
        except msgspec.ValidationError as exc:
            if not _is_tag_error(exc):
                raise
            doc = _any_doc_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _decode_error(path, exc, 0) from None
    _absorb(tr, doc.traceEvents, "")
    return _checked(tr)


def _checked(tr: Trace) -> Trace:
    tr._join()
    if len(tr) == 0 and not tr.lane_names:
        raise ArtifactError("merged_swimlane.json has no Machine View events", path=tr.path,
                            expected="pid 1 thread_name and X events (A.4.1)", hint=_HINT)
    return tr


_TAIL = re.compile(rb"\]\s*\}\s*$")


def _parse_stream(tr: Trace, fh: BinaryIO, head: bytes, slice_bytes: int) -> Trace:
    """Slice-wise decode of the writer's indent-4 layout; ``head`` = bytes already read from ``fh``.

    Each slice is decoded in place as a JSON array: the byte before its first event (the '[' of the document, or
    the ',' that separated it from the previous slice) becomes '[', the ',' after its last event becomes ']'.
    The file is read with ``readinto`` into one buffer that is reused for every slice (the unfinished event at its
    end moves to the front): a fresh 4 MiB ``bytes`` per read cost a new mapping and its page faults each time.
    """
    start = head.index(b"[")
    filled = len(head) - start  # buf[:filled] holds file bytes base … base + filled
    buf = bytearray(max(2 * slice_bytes, filled))
    buf[:filled] = head[start:]
    base = start  # file offset of buf[0]
    while True:
        if len(buf) < filled + slice_bytes:  # an event longer than the free space: grow (rare)
            buf.extend(bytes(filled + slice_bytes - len(buf)))
        with memoryview(buf) as mv:
            got = fh.readinto(mv[filled:filled + slice_bytes])
        filled += got
        if got:
            cut = buf.rfind(_CUT, 0, filled)
            if cut < 0:
                continue
            end = cut + len(_CUT) - 1  # index of the ',' after the last complete event
        else:
            lo = max(0, filled - 256)
            m = _TAIL.search(bytes(buf[lo:filled])) if filled else None
            if m is None:
                raise ArtifactError("merged_swimlane.json is truncated (the closing ']}' is missing)", path=tr.path,
                                    where=f"byte {base + filled}", expected='the document to end with "]\\n}"',
                                    hint=_HINT)
            end = lo + m.start()  # index of the array's closing ']'
        buf[0] = 0x5B  # '['
        buf[end] = 0x5D  # ']'
        where = f"bytes {base}-{base + end}"
        with memoryview(buf) as mv:
            try:
                try:
                    events = _list_decoder.decode(mv[: end + 1])
                except msgspec.ValidationError as exc:
                    if not _is_tag_error(exc):
                        raise
                    events = _any_list_decoder.decode(mv[: end + 1])
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise _decode_error(tr.path, exc, base) from None
        _absorb(tr, events, where)
        del events
        if not got:
            return _checked(tr)
        buf[: filled - end] = buf[end:filled]  # keeps the ',' slot for the next slice's '['
        filled -= end
        base += end


def read_trace(path: Path, slice_bytes: int = SLICE_BYTES) -> Trace:
    """Read ``merged_swimlane.json`` (or a ``.json.gz`` copy) into columns; errors name the file and byte."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rb") as fh:
            head = fh.read(4096)
            if _PRETTY_HEAD.match(head):
                return _parse_stream(Trace(path=str(p)), fh, head, slice_bytes)
            data = head + fh.read()
    except FileNotFoundError:
        raise ArtifactError("merged_swimlane.json is missing", path=str(p), expected="the swimlane trace",
                            hint="collect with runtime_debug_mode 1") from None
    except (OSError, EOFError) as exc:
        raise ArtifactError(f"merged_swimlane.json cannot be read ({exc})", path=str(p), hint=_HINT) from None
    return parse_trace_bytes(data, str(p))


# ---------------------------------------------------------------------------------------------- labels (A.4.3)
LABEL_LAYOUTS = {"0.2.0": (20, 0x7FF, 0xFFFFF), "ref": (16, 0x3FF, 0xFFFF)}


def formal_name(key: int, layout: str = "0.2.0") -> str:
    """``<seq>-<func>-<op>`` for a task key ``seqNo << 32 | taskId``: 0.2.0 splits taskId as func = bits 20–30,
    op = bits 0–19; the newer writer (ref-DSL) as func = bits 16–25, op = bits 0–15 (E.4.25)."""
    shift, fmask, omask = LABEL_LAYOUTS[layout]
    return f"{key >> 32}-{(key >> shift) & fmask}-{key & omask}"


def detect_label_layout(tr: Trace, sample: int = 2000) -> str:
    """Which bit split produced the labels of this trace ("0.2.0", "ref", or "" when undecidable).

    Decided by data, not by version: for each real task the label must start with ``formal_name(key)``; a layout
    is chosen only when it explains every sampled label and the other does not.
    """
    ok = {name: True for name in LABEL_LAYOUTS}
    real = np.flatnonzero((tr.key >= 0) & (tr.tid >= 1002))[:sample].tolist()
    seen = len(real)
    for i in real:
        k = int(tr.key[i])
        lab = tr.labels[i]
        for name in LABEL_LAYOUTS:
            if ok[name] and not lab.startswith(formal_name(k, name) + "-"):
                ok[name] = False
    good = [n for n, v in ok.items() if v]
    if seen == 0 or not good:
        return ""
    return good[0] if len(good) == 1 else "either"  # small ids: both splits give the same names
