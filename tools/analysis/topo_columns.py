"""``dyn_topo.txt`` read into numpy columns, and the AIV chains of B.7 computed on them (``chains.topo_summary``).

Why a second reader: the text reader (``topo.scan_topo_text`` + ``chains.aiv_chains``) keeps every field as a Python
string. At 500k rows that is ~3.5 M objects: ~420 MB peak and ~2.5 s, and in ``pypto-tune analyze`` it runs beside the
trace decode, so its memory adds to the analysis' peak (measured with ``benchmarks/run_bench.py``). Here the file is
read in 4 MiB blocks cut at a newline and tokenised with numpy (newline and comma positions; the digits of each
field summed column-wise), so memory is one block plus a few integer columns, and Python-level work is left to the
AIV rows that have AIV successors (the chain walks).

Same answer as the text reader: it compares fields as text, these columns compare them as numbers, and the two agree
when every number is written canonically (digits only, no leading zero) — what PyPTO writes. A file with anything
else (a sign, a leading zero, ``\\r``, a blank line, a row with too few fields or an empty key field, a value beyond
64 bits, a header it does not know) is not handled here: ``read_columns`` returns ``None`` and the caller uses the
text reader, which also words the errors. ``tests/analysis/test_topo_columns.py`` checks both agree, fuzzed inputs
included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAX_GROUPS_KEPT = 26  # labels A…Z; more distinct shapes are summarised by count only
MAX_LEVELS_KEPT = 16  # the analysis lands in the ledger: long chains keep their depth, not every level
BLOCK_BYTES = 4 << 20
_U64_MAX = np.uint64(2**64 - 1)
_TEN = np.uint64(10)
_ZERO = 48  # b"0"
_COMMA, _NL = 44, 10
# 0-based field numbers (the same in both layouts): seqNo, taskId, opmagic, leafHash, coreType, psgId
_SEQ, _TASK, _OP, _LEAF, _CORE, _PSG = 0, 1, 4, 6, 7, 8
_AIV, _AIC = 0, 1  # coreType


@dataclass
class TopoColumns:
    """What the B.7 chains and the leafHash → psgId map need, as numbers.

    Keys are ``seqNo << 32 | taskId``. Successor entries are (AIV row, key) pairs in file order, for AIV rows only.
    """

    path: str
    layout: str  # "0.2.0" or "ref", as decided by the text reader's rule
    n_rows: int = 0
    rows_with_successors: int = 0  # rows with a non-empty successor part (what the reference's CSV reader keeps)
    key: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))  # every row
    is_aic: np.ndarray = field(default_factory=lambda: np.empty(0, bool))  # every row: coreType == 1
    aiv_key: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))  # AIV rows, in file order
    aiv_leaf: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    aiv_op: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    aiv_psg: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    succ_row: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # index into the AIV rows
    succ_key: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    leaf_psg: dict[int, set[int]] = field(default_factory=dict)  # leafHash ≠ 0 → psgIds (every row)


def _uints(a: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray | None:
    """The decimal numbers a[s:e] (digits only, already checked) as uint64; None if one exceeds 2⁶⁴ − 1."""
    n = e - s
    out = np.zeros(len(n), dtype=np.uint64)
    if not len(n):
        return out
    width = int(n.max())
    if width > 20:
        return None
    top = len(a) - 1
    for j in range(width):
        live = n > j
        d = a[np.minimum(s + j, top)].astype(np.uint64) - np.uint64(_ZERO)  # garbage where not live: masked below
        if j == 19 and (live & (out > (_U64_MAX - d) // _TEN)).any():  # out < 10¹⁹ until the 20th digit
            return None
        out = np.where(live, out * _TEN + d, out)
    return out


def _canonical(a: np.ndarray, s: np.ndarray, e: np.ndarray) -> bool:
    """Every field non-empty and without a leading zero (so its number prints back as the same text)."""
    n = e - s
    if not len(n):
        return True
    return bool(n.min() > 0) and not bool(((a[np.minimum(s, len(a) - 1)] == _ZERO) & (n > 1)).any())


class _Reader:
    def __init__(self, path: str, nfixed: int) -> None:
        self.path = path
        self.nfixed = nfixed  # 0.2.0: 9 fields + the empty one before the successors; ref: 11 fixed fields
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in (
            "key", "is_aic", "aiv_key", "aiv_leaf", "aiv_op", "aiv_psg", "succ_row", "succ_key")}
        self.n_rows = 0
        self.n_aiv = 0
        self.with_succ = 0
        self.leaf_psg: dict[int, set[int]] = {}

    def block(self, data: bytes) -> bool:
        """Add the rows of ``data`` (whole lines); False if the block is outside what this reader handles."""
        if data.translate(None, b"0123456789,\n"):  # anything but digits, commas and newlines
            return False
        a = np.frombuffer(data, dtype=np.uint8)
        ends = np.flatnonzero(a == _NL)
        if a[-1] != _NL:
            ends = np.append(ends, len(a))
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        if (ends == starts).any():  # a blank line
            return False
        cm = np.flatnonzero(a == _COMMA)
        first = np.searchsorted(cm, starts)
        ncomma = np.searchsorted(cm, ends) - first
        nf = self.nfixed
        if (ncomma < nf - 1).any():  # fewer than nfixed fields
            return False

        def bounds(k: int) -> tuple[np.ndarray, np.ndarray]:
            return (starts if k == 0 else cm[first + k - 1] + 1), cm[first + k]

        vals = {}
        for k in (_SEQ, _TASK, _OP, _LEAF, _CORE, _PSG):
            s, e = bounds(k)
            v = _uints(a, s, e) if _canonical(a, s, e) else None
            if v is None:
                return False
            vals[k] = v
        seq, task = vals[_SEQ], vals[_TASK]
        if (seq >= 2**31).any() or (task >= 2**32).any():  # the key would not pack into 64 bits
            return False
        key = (seq << np.uint64(32)) | task
        core = vals[_CORE]
        # the successor part: after the comma that ends field nfixed-1 (0.2.0: the empty 10th field)
        has_c = ncomma >= nf
        tail_at = np.where(has_c, cm[np.minimum(first + nf - 1, len(cm) - 1)] + 1, ends) if len(cm) else ends
        has_tail = has_c & (ends > tail_at)
        self.with_succ += int(np.count_nonzero(has_tail))
        aiv = core == _AIV
        aiv_pos = np.cumsum(aiv) - 1 + self.n_aiv  # index of each AIV row among all AIV rows
        rows = np.flatnonzero(aiv & has_tail)
        if len(rows):
            # entry j of a row starts after comma first+nf-1+j and ends at the next comma or the line end
            n_e = ncomma[rows] - (nf - 1)
            rep = np.repeat(np.arange(len(rows)), n_e)
            ci = np.arange(len(rep)) + np.repeat(first[rows] + nf - 1 - (np.cumsum(n_e) - n_e), n_e)
            s = cm[ci] + 1
            last = ci == np.repeat(first[rows] + ncomma[rows] - 1, n_e)
            e = np.where(last, np.repeat(ends[rows], n_e), cm[np.minimum(ci + 1, len(cm) - 1)])
            keep = e > s  # "a,,b" and a trailing comma leave empty entries, which are skipped
            s, e, rep = s[keep], e[keep], rep[keep]
            succ = _uints(a, s, e) if _canonical(a, s, e) else None
            if succ is None or (succ >= 2**32).any():
                return False
            self.parts["succ_row"].append(aiv_pos[rows][rep])
            self.parts["succ_key"].append((seq[rows][rep] << np.uint64(32)) | succ)
        self.parts["key"].append(key)
        self.parts["is_aic"].append(core == _AIC)
        for name, v in (("aiv_key", key), ("aiv_leaf", vals[_LEAF]), ("aiv_op", vals[_OP]), ("aiv_psg", vals[_PSG])):
            self.parts[name].append(v[aiv])
        leaf, psg = vals[_LEAF], vals[_PSG]
        named = leaf != 0
        if named.any():
            # distinct (leafHash, psgId) pairs, numbered per column first: np.unique(axis=0) on the pairs took
            # ~0.4 s of the ~0.9 s read at 500k rows
            leaves, li = np.unique(leaf[named], return_inverse=True)
            psgs, pi = np.unique(psg[named], return_inverse=True)
            leaves_l, psgs_l, m = leaves.tolist(), psgs.tolist(), len(psgs)
            for x in np.unique(li.reshape(-1) * m + pi.reshape(-1)).tolist():
                self.leaf_psg.setdefault(leaves_l[x // m], set()).add(psgs_l[x % m])
        self.n_rows += len(starts)
        self.n_aiv += int(np.count_nonzero(aiv))
        return True

    def result(self, layout: str) -> TopoColumns:
        cols = {}
        for k in list(self.parts):  # one column at a time: the blocks of the others are not copied meanwhile
            v = self.parts.pop(k)
            if v:
                cols[k] = np.concatenate(v) if len(v) > 1 else v[0]
            del v
        return TopoColumns(path=self.path, layout=layout, n_rows=self.n_rows, rows_with_successors=self.with_succ,
                           leaf_psg=self.leaf_psg, **cols)


def read_columns(path: Path, block_bytes: int = BLOCK_BYTES) -> TopoColumns | None:
    """The columns of ``dyn_topo.txt``, or None when the text reader must decide (see the module doc)."""
    try:
        with open(path, "rb") as fh:
            head = fh.readline()
            try:
                header = [h.strip() for h in head.decode("utf-8").rstrip("\n").split(",")]
            except UnicodeDecodeError:
                return None
            if header[:2] != ["seqNo", "taskId"] or "\r" in head.decode("utf-8"):
                return None
            newer = "wrapId" in header  # the text reader's rule for the 11-field layout
            reader = _Reader(str(path), 11 if newer else 10)
            carry = b""
            while True:
                more = fh.read(block_bytes)
                data = carry + more if carry else more
                if not more:
                    if data and not reader.block(data):
                        return None
                    break
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data
                    continue
                if not reader.block(data[: cut + 1]):
                    return None
                carry = data[cut + 1:]
    except OSError:
        return None  # the text reader reports it
    return reader.result("ref" if newer else "0.2.0")


def group_label(i: int) -> str:
    """A, B, … Z, then Z1, Z2, … (the reference's group labels)."""
    return chr(ord("A") + i) if i < 26 else f"Z{i - 25}"


def _last_match(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of the LAST row whose key equals each query, or -1 — like ``dict(zip(keys, range(n)))`` lookups."""
    if not len(keys) or not len(queries):
        return np.full(len(queries), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    pos = np.searchsorted(ordered, queries, side="right") - 1
    pos_c = np.maximum(pos, 0)
    return np.where((pos >= 0) & (ordered[pos_c] == queries), order[pos_c], -1)


def chains_of(t: TopoColumns, max_groups: int, max_levels: int) -> dict:
    """``chains.aiv_chains`` on the columns (B.7): the same groups, counts, order and candidates, as the plain fields
    of ``AivChains`` (``chains.column_chains`` makes the model; the worker process sends these as they are).

    Lone AIV rows (no AIV successor: most rows of a tiled kernel) are grouped with numpy by their leafHash/opmagic
    pair; only rows with AIV successors are walked in Python, as ``aiv_chains`` walks them. Leaves, opmagics and
    pairs are numbered (``np.unique``) so no per-row Python object is made for the lone rows.
    """
    n_aiv = len(t.aiv_key)
    j = _last_match(t.aiv_key, t.succ_key)  # successor → AIV row (the last with that key, as a dict lookup), or -1
    # a successor that is no AIV row may be an AIC row (the last row with that key): its row's leaf feeds the cube
    miss = np.flatnonzero(j < 0)
    k = _last_match(t.key, t.succ_key[miss])
    cube_rows = t.succ_row[miss[(k >= 0) & t.is_aic[np.maximum(k, 0)]]] if len(miss) else miss
    del miss, k
    leaves, leaf_ix = np.unique(t.aiv_leaf, return_inverse=True)
    ops, op_ix = np.unique(t.aiv_op, return_inverse=True)
    leaf_ix, op_ix = leaf_ix.reshape(-1), op_ix.reshape(-1)
    pairs, pid = np.unique(leaf_ix * max(len(ops), 1) + op_ix, return_inverse=True)
    pid = pid.reshape(-1)
    leaves_l, ops_l = leaves.tolist(), ops.tolist()
    labels = [f"{leaves_l[x // len(ops)]}/{ops_l[x % len(ops)]}" for x in pairs.tolist()]
    del op_ix, pairs
    stop_leaf = np.zeros(len(leaves), dtype=bool)  # leaves with a cube successor: truncated walks stop below them
    stop_leaf[leaf_ix[cube_rows]] = True
    # AIV → AIV edges, each row's targets deduplicated in first-seen order
    hit = np.flatnonzero(j >= 0)
    src, dst = t.succ_row[hit], j[hit]
    del j, hit
    if len(src):
        _, first = np.unique(src * max(n_aiv, 1) + dst, return_index=True)
        first.sort()
        src, dst = src[first], dst[first]
    has_pred = np.zeros(n_aiv, dtype=bool)
    has_pred[dst] = True
    has_succ = np.zeros(n_aiv, dtype=bool)
    has_succ[src] = True
    starts = np.flatnonzero(~has_pred)
    lone = ~has_succ[starts]
    # lone starts form one-node chains: counted per pair, with the position of the first (it decides ties)
    lone_pos = np.flatnonzero(lone)
    lone_groups = []
    if len(lone_pos):
        uniq, at, counts = np.unique(pid[starts[lone_pos]], return_index=True, return_counts=True)
        lone_groups = list(zip(uniq.tolist(), lone_pos[at].tolist(), starts[lone_pos[at]].tolist(), counts.tolist()))
    walked = list(zip(np.flatnonzero(~lone).tolist(), starts[~lone].tolist()))
    succ: dict[int, list[int]] = {}
    if walked:
        dst_l = dst.tolist()
        rows, at = np.unique(src, return_index=True)
        for r, b, e in zip(rows.tolist(), at.tolist(), at[1:].tolist() + [len(dst_l)]):
            succ[r] = dst_l[b:e]
        pid_l = pid.tolist()
        stop_l = stop_leaf[leaf_ix].tolist()

    def walk(start: int, truncate: bool) -> list[list[int]]:
        levels: list[list[int]] = []
        visited = {start}
        frontier = [start]
        while frontier:
            levels.append(frontier)
            nxt = []
            for k in frontier:
                if truncate and stop_l[k]:
                    continue
                for s in succ.get(k, ()):
                    if s not in visited:
                        visited.add(s)
                        nxt.append(s)
            frontier = nxt
        return levels

    def distinct(nodes: list[int]) -> tuple[int, int]:
        idx = np.asarray(nodes, dtype=np.int64)
        return len(np.unique(leaf_ix[idx])), len(np.unique(t.aiv_psg[idx]))

    def grouped(truncate: bool) -> tuple[list[dict], list[tuple[list[int], dict]]]:
        found: dict[tuple, list] = {}  # signature → [count, first start position, levels of that start]
        for p, pos, row, count in lone_groups:
            found[((labels[p],),)] = [count, pos, [[row]]]
        for pos, i in walked:
            levels = walk(i, truncate)
            sig = tuple(tuple(sorted(labels[pid_l[k]] for k in lv)) if len(lv) > 1 else (labels[pid_l[lv[0]]],)
                        for lv in levels)
            x = found.get(sig)
            if x is None:
                found[sig] = [1, pos, levels]
            else:
                x[0] += 1
                if pos < x[1]:
                    x[1], x[2] = pos, levels
        # aiv_chains sorts by count with ties in order of first appearance among the starts
        ordered = sorted(found.items(), key=lambda kv: (-kv[1][0], kv[1][1]))
        out, info = [], []
        for rank, (sig, (count, _, levels)) in enumerate(ordered):
            nodes = [k for lv in levels for k in lv]
            n_leaves, n_psg = distinct(nodes)
            g = {"label": group_label(rank), "count": count, "levels": [list(lv) for lv in sig[:max_levels]],
                 "depth": len(sig), "distinct_leaves": n_leaves, "distinct_psg": n_psg}
            out.append(g)
            info.append((nodes, g))
        return out, info

    trunc, info = grouped(True)
    full = grouped(False)[0] if len(cube_rows) else trunc
    cands = []
    for nodes, g in info:
        if g["distinct_leaves"] >= 2 and g["distinct_psg"] >= 2:  # B.7's sg_set_scope condition
            idx = np.asarray(nodes, dtype=np.int64)
            cands.append({"group": g["label"], "leaf_hashes": sorted({str(leaves_l[x]) for x in leaf_ix[idx].tolist()}),
                          "psg_ids": sorted(set(t.aiv_psg[idx].tolist())), "count": g["count"]})
    return {"aiv_tasks": n_aiv, "total_tasks": t.n_rows, "reference_task_count": t.rows_with_successors,
            "groups": full[:max_groups], "truncated_groups": trunc[:max_groups],
            "scope_candidates": sorted(cands, key=lambda c: c["group"])}
