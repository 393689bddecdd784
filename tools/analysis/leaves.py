"""Per-leafHash figures: analyze_swimlane.py (B.4), analyze_core_usage.py (B.5), the S-3 gap (B.6) and the
leafHash → source mapping of leafhash_to_code.py (A.7), all from one pass over the trace columns.

Differences from the references, on purpose: fake placeholder tasks are never counted (E.4.27 — the reference
would add 1.0 µs samples); lanes are keyed by name after dropping the AICPU view (E.4.26); psgId comes from
``dyn_topo.txt`` instead of splitting the label on ``-`` (which breaks when a colour contains ``-``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from pypto_tune.tools.analysis.bubble_log import core_type_of
from pypto_tune.tools.analysis.models import CoreUsage, CoreUsageRow, LeafStat, LoadGap
from pypto_tune.tools.analysis.topo import Program, Topo
from pypto_tune.tools.analysis.trace import Trace, ordered_sum

SHORT_TASK_US = 10.0  # B.8: tasks shorter than this are dominated by launch overhead
LEAF_GAP_SEVERE_PCT = 20.0  # B.6
# analyze_swimlane's "compute ops" exclude these; leafhash_to_code excludes a longer list (A.7 step 3)
_NON_COMPUTE = {"PHASE1", "PHASE2", "PHASE3", "SYNC_SRC", "SYNC_DST", "COPY_IN", "COPY_OUT", "BAR.V", "BAR.M",
                "EXPAND"}
_CUBE_OPS = {"A_MUL_B", "A_MULACC_B"}
_ORDER_RE = re.compile(r"(l1ReuseInfo|cubeMergeInfo|vecMergeInfo) hashOrder: (\S+?), subGraphCount: (\d+)")


@dataclass
class _Acc:
    count: int = 0
    total: float = 0.0
    lo: float = float("inf")
    hi: float = 0.0
    lanes: set[str] = field(default_factory=set)
    types: set[str] = field(default_factory=set)
    root: int = 0
    hint: str = ""


def accumulate(tr: Trace, acc: dict[int, _Acc] | None = None) -> dict[int, _Acc]:
    """Fold one trace into per-leafHash accumulators (several output folders fold into the same dict).

    Grouped with one stable sort by leafHash, so each group keeps emission order: the first task gives the
    rootHash and the hashOrder hint, and durations are summed in the order the trace lists them.
    """
    acc = {} if acc is None else acc
    names = tr.lane_names
    a = tr.arrays()
    # HUB / bookkeeping tasks (leafHash 0) and fake placeholders on core 0 (tid < 1002) are not compute tasks
    idx = np.flatnonzero(a.compute)
    if not len(idx):
        return acc
    idx = idx[np.argsort(a.leaf[idx], kind="stable")]
    leaves = a.leaf[idx]
    cut = np.flatnonzero(leaves[1:] != leaves[:-1]) + 1
    bounds = [0, *cut.tolist(), len(idx)]
    dur_sorted = a.dur[idx]
    tid_sorted = a.tid[idx]
    hash_order = tr.hash_order
    for b, e in zip(bounds[:-1], bounds[1:]):
        h = int(leaves[b])
        first = int(idx[b])
        x = acc.get(h)
        if x is None:
            x = acc[h] = _Acc(root=int(tr.root[first]))
        ds = dur_sorted[b:e]
        x.count += e - b
        x.total += ordered_sum(ds)
        x.lo = min(x.lo, float(ds.min()))
        x.hi = max(x.hi, float(ds.max()))
        for t in np.unique(tid_sorted[b:e]).tolist():
            nm = names.get(t) or names.get(t - 1) or f"tid_{t}"
            x.lanes.add(nm)
            x.types.add(core_type_of(nm))
        if not x.hint and hash_order:
            for i in idx[b:e].tolist():
                if i in hash_order:
                    x.hint = hash_order[i]
                    break
    return acc


def source_of(program: Program | None, leaf_hash: int) -> tuple[str, list[str], bool]:
    """(``file:first-last`` per file joined by '; ', compute opcodes, is_cube) — leafhash_to_code's mapping."""
    if program is None or leaf_hash not in program.leaves:
        return "", [], False
    ops = program.leaves[leaf_hash].ops
    lines: dict[str, list[int]] = {}
    compute: list[str] = []
    for opcode, file, line in ops:
        if file and line is not None:
            lines.setdefault(file, []).append(line)
        if opcode not in _NON_COMPUTE and not opcode.startswith("L1_TO_L0") and opcode not in compute:
            compute.append(opcode)
    src = "; ".join(f"{f}:{min(v)}-{max(v)}" if min(v) != max(v) else f"{f}:{v[0]}" for f, v in lines.items())
    return src or "(no source info)", compute, any(o[0] in _CUBE_OPS for o in ops)


def leaf_stats(acc: dict[int, _Acc], *, program: Program | None, topo_rows_psg: dict[int, set[int]],
               outer_loops: int) -> list[LeafStat]:
    """Rows sorted by total descending (analyze_swimlane's order)."""
    out = []
    for h, a in acc.items():
        ctype = "AIC" if "AIC" in a.types else ("AIV" if "AIV" in a.types else sorted(a.types)[0])
        order, sgc = "", None
        if a.hint:
            want = "l1ReuseInfo" if ctype == "AIC" else "vecMergeInfo"
            for kind, ho, cnt in _ORDER_RE.findall(a.hint):
                if kind == want or (ctype == "AIC" and kind == "cubeMergeInfo" and not order):
                    order, sgc = ho, int(cnt)
        src, compute, cube = source_of(program, h)
        avg = a.total / a.count
        tpi = (sgc / outer_loops) if sgc is not None and outer_loops > 0 else None
        grans, hint = merge_guide(ctype, tpi, avg)
        out.append(LeafStat(
            leaf_hash=str(h), core_type=ctype, count=a.count, min_us=a.lo, max_us=a.hi, avg_us=avg,
            total_us=a.total, lanes_used=len(a.lanes),
            root_name=program.root_names.get(a.root, "") if program else "",
            hash_order=order, subgraph_count=sgc,
            tasks_per_iter=tpi, merge_granularities=grans, merge_hint=hint,
            source=src, compute_ops=compute, is_cube=cube or ctype == "AIC",
            psg_ids=sorted(topo_rows_psg.get(h, set())), short_task=avg < SHORT_TASK_US,
        ))
    out.sort(key=lambda r: -r.total_us)
    return out


def merge_guide(core_type: str, tasks_per_iter: float | None, avg_us: float) -> tuple[list[int], str]:
    """analyze_swimlane's merge guide (B.4): with t/iter > 1, granularities of {2, 4, 8, 16} that are ≤ 4·t/iter;
    capped at 8 for tasks averaging < 10 µs (B.8: 16 regressed). The hint uses 0.2.0's integer keys (C, S-5/S-6):
    the reference prints the newer string-key form, which 0.2.0 rejects ("Unable to cast")."""
    if tasks_per_iter is None or round(tasks_per_iter) <= 1:
        return [], ""
    grans = [g for g in (2, 4, 8, 16) if g <= 4 * round(tasks_per_iter)]
    if avg_us < SHORT_TASK_US:
        grans = [g for g in grans if g <= 8]
    if not grans:
        return [], ""
    if core_type == "AIC":
        return grans, f"cube_l1_reuse_setting={{-1: {grans[0]}}} (then cube_nbuffer_setting={{-1: {grans[0]}}})"
    return grans, f"vec_nbuffer_setting={{-2: 1, -1: {grans[0]}}}"


def core_usage(leaves: list[LeafStat], theoretical: dict[str, int], source: str) -> CoreUsage:
    """FULL iff used ≥ theoretical (B.5). ``theoretical`` = platform core counts per type."""
    rows = []
    for r in leaves:
        theo = theoretical.get(r.core_type, 0)
        rows.append(CoreUsageRow(
            leaf_hash=r.leaf_hash, core_type=r.core_type, used_cores=r.lanes_used, theoretical_cores=theo,
            theoretical_source=source, usage_pct=r.lanes_used / theo * 100.0 if theo else 0.0,
            full=theo > 0 and r.lanes_used >= theo, psg_ids=r.psg_ids,
        ))

    def all_of(t: str) -> bool | None:
        sel = [x.full for x in rows if x.core_type == t]
        return all(sel) if sel else None

    return CoreUsage(rows=rows, all_full=all(x.full for x in rows), aic_full=all_of("AIC"), aiv_full=all_of("AIV"))


def load_gap(leaves: list[LeafStat]) -> LoadGap:
    """S-3 gap (B.6): (total₁ − total₂)/total₁·100 over leaf rows sorted by total; severe above 20 %."""
    if len(leaves) < 2 or leaves[0].total_us <= 0:
        return LoadGap(first_leaf=leaves[0].leaf_hash if leaves else "",
                       first_total_us=leaves[0].total_us if leaves else 0.0)
    a, b = leaves[0], leaves[1]
    gap = (a.total_us - b.total_us) / a.total_us * 100.0
    return LoadGap(gap_pct=gap, first_leaf=a.leaf_hash, second_leaf=b.leaf_hash, first_total_us=a.total_us,
                   second_total_us=b.total_us, severe=gap > LEAF_GAP_SEVERE_PCT)


def psg_by_leaf(topo: Topo | None) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    if topo is None:
        return out
    for h, p in zip(topo.leaf_hash, topo.psg_id):
        if h:
            s = out.get(h)
            if s is None:
                out[h] = {p}
            else:
                s.add(p)
    return out


def short_task_fraction(traces: list[Trace]) -> float:
    """Share of real compute tasks (leafHash ≠ 0, not fake) with duration < 10 µs, 0..1."""
    n = short = 0
    for tr in traces:
        a = tr.arrays()
        ds = a.dur[a.compute]
        n += len(ds)
        short += int(np.count_nonzero(ds < SHORT_TASK_US))
    return short / n if n else 0.0
