"""Recompute ``bubble_analysis.log`` from ``merged_swimlane.json`` alone (domain B.9) and compare.

With a single device task the recomputation matches the writer to ~1e-14 µs (B.9.2), so any real disagreement
means the log and the trace describe different things — in SIM that is the multi-device-task corruption (B.9.3).

Vectorised with numpy (issue 3, measured at 500k tasks: 2.1 s of Python loops → ~0.3 s). The per-core sums are
taken with ``cumsum`` over each core's tasks in emission order, which adds in the same order as the writer's loop,
so the recomputed figures stay bit-comparable with the log instead of picking up pairwise-summation differences.
"""

from __future__ import annotations

import numpy as np

from pypto_tune.tools.analysis.bubble_log import core_type_of
from pypto_tune.tools.analysis.models import BubbleLog, CrossCheck, LogCore, LogTask
from pypto_tune.tools.analysis.trace import Trace

_FLOW_OFFSET_US = 0.0001  # the writer puts each 's' event 0.0001 µs before the predecessor's end (A.4.1)
_TICKS_PER_US = 1e6  # times are compared after rounding to 1e-6 µs
_LANE_BITS = 52  # (lane rank, tick) packed in one int64: 2^52 ticks = 4.5e9 µs, 2^11 lanes


def _lookup(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of the first task (in emission order) whose key equals each query, or -1."""
    order = np.argsort(keys, kind="stable")  # stable + side='left' → the lowest index wins a tie
    ordered = keys[order]
    pos = np.searchsorted(ordered, queries, side="left")
    pos_c = np.minimum(pos, len(ordered) - 1)
    hit = (pos < len(ordered)) & (ordered[pos_c] == queries)
    return np.where(hit, order[pos_c], -1)


def _probe(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``_lookup`` that retries a miss one tick below, then one above: a float that rounds the other way
    (``s.ts + 0.0001`` against the predecessor's end) still pairs."""
    found = _lookup(keys, queries)
    for delta in (-1, 1):
        miss = found < 0
        if not miss.any():
            break
        found[miss] = _lookup(keys, queries[miss] + delta)
    return found


def _flow_columns(tr: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pred lane, 's' ts, succ lane, 'f' ts) of every flow edge."""
    if np.array_equal(tr.s_id, tr.f_id):
        # the writer emits each edge's 's' and 'f' in the same order: pair by position, no id table
        return tr.s_tid, tr.s_ts, tr.f_tid, tr.f_ts
    f_ids = tr.f_id.tolist()
    f_at = dict(zip(f_ids, range(len(f_ids))))  # the last 'f' of an id wins
    js = [f_at.get(i) for i in tr.s_id.tolist()]
    keep = np.asarray([k for k, j in enumerate(js) if j is not None], dtype=np.int64)
    at = np.asarray([js[k] for k in keep.tolist()], dtype=np.int64)
    return tr.s_tid[keep], tr.s_ts[keep], tr.f_tid[at], tr.f_ts[at]


def pair_flows(tr: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Predecessor and successor task indices of every flow edge (B.9.1 step 3), as two int64 arrays.

    An 's' event pairs with the task on its lane that ends 0.0001 µs after it, an 'f' event with the task on its
    lane that starts at it. Edges where either end has no task are dropped.
    """
    empty = np.empty(0, dtype=np.int64)
    s_tid, s_ts, c_tid, c_ts = _flow_columns(tr)
    if not len(tr) or not len(s_tid):
        return empty, empty
    a = tr.arrays()
    lanes = np.unique(a.tid)
    if len(lanes) >= 1 << (63 - _LANE_BITS):
        raise ValueError(f"{len(lanes)} lanes: too many to pack into one key")
    shift = np.int64(1) << _LANE_BITS

    def keys(tids: np.ndarray, times: np.ndarray) -> np.ndarray:
        rank = np.searchsorted(lanes, tids)
        known = (rank < len(lanes)) & (lanes[np.minimum(rank, len(lanes) - 1)] == tids)
        k = np.where(known, rank, len(lanes)) * shift  # an unknown lane gets a rank no task has
        return k + np.rint(times * _TICKS_PER_US).astype(np.int64)

    task_rank = np.searchsorted(lanes, a.tid) * shift
    by_end = task_rank + np.rint(a.end * _TICKS_PER_US).astype(np.int64)
    by_start = task_rank + np.rint(a.start * _TICKS_PER_US).astype(np.int64)
    s_tid_a, c_tid_a = np.asarray(s_tid, dtype=np.int64), np.asarray(c_tid, dtype=np.int64)
    ps = _probe(by_end, keys(s_tid_a, np.asarray(s_ts, dtype=np.float64) + _FLOW_OFFSET_US))
    cs = _probe(by_start, keys(c_tid_a, np.asarray(c_ts, dtype=np.float64)))
    ok = (ps >= 0) & (cs >= 0)
    return (ps, cs) if ok.all() else (ps[ok], cs[ok])


def predecessors(tr: Trace) -> list[list[int]]:
    """Task index → predecessor task indices (see ``pair_flows``)."""
    preds: list[list[int]] = [[] for _ in range(len(tr))]
    ps, cs = pair_flows(tr)
    for p, c in zip(ps.tolist(), cs.tolist()):
        preds[c].append(p)
    return preds


def _top(wait: np.ndarray, candidates: np.ndarray, k: int) -> list[int]:
    """The ``k`` largest waits among ``candidates``, ties in emission order (like a stable descending sort)."""
    if not len(candidates):
        return []
    w = wait[candidates]
    if len(candidates) > 4 * k:
        # only values ≥ the k-th largest can be in the top k; keep every tie of it, then sort those stably
        kth = np.partition(w, len(w) - k)[len(w) - k]
        sel = np.flatnonzero(w >= kth)
        candidates, w = candidates[sel], w[sel]
    order = np.argsort(-w, kind="stable")[:k]
    return candidates[order].tolist()


def recompute_log(tr: Trace) -> tuple[BubbleLog, np.ndarray]:
    """The writer's B.1 walk over the trace; returns the log it would write and each task's wait-schedule."""
    n = len(tr)
    a = tr.arrays()
    tid, start, end = a.tid, a.start, a.end
    real = tid >= 1002
    t0 = float(start[real].min()) if real.any() else 0.0
    # ready(t) = max(T0, latest predecessor end)
    ready = np.full(n, t0)
    ps, cs = pair_flows(tr)
    if len(ps):
        np.maximum.at(ready, cs, end[ps])
    core = (tid - 1000) >> 1
    order = np.argsort(core, kind="stable")  # each core's tasks in emission order, as the writer walks them
    core_sorted = core[order]
    first = np.ones(n, dtype=bool)
    first[1:] = core_sorted[1:] != core_sorted[:-1]
    prev_end = np.empty(n)
    prev_end[1:] = end[order][:-1]
    prev_end[first] = t0
    s_o = start[order]
    wait_o = s_o - np.maximum(prev_end, ready[order])
    gap_o = s_o - prev_end
    wait = np.zeros(n)
    wait[order] = wait_o
    bounds = np.flatnonzero(first).tolist() + [n]
    seg = {int(core_sorted[b]): (b, e) for b, e in zip(bounds[:-1], bounds[1:])}
    # every lane with a name is a core, even an empty one (SIM lists idle cores; they print work 0.0)
    for t in tr.lane_names:
        seg.setdefault((t - 1000) // 2, (0, 0))
    end_o = end[order]
    wait[~real] = 0.0
    cores: list[LogCore] = []
    for c in sorted(seg):
        b, e = seg[c]
        lane = tr.lane_names.get(1000 + 2 * c) or tr.lane_names.get(1001 + 2 * c) or f"core_{c}"
        fake = c == 0
        idx = order[b:e]
        if fake or b == e:
            work = total_wait = sched = 0.0
        else:
            work = float(end_o[e - 1]) - t0
            total_wait = float(np.cumsum(gap_o[b:e])[-1])
            sched = float(np.cumsum(wait_o[b:e])[-1])
        top = [] if fake else _top(wait, idx, 3)
        cores.append(LogCore(
            name=lane, core_type=core_type_of(lane), index=c, n_real=0 if fake else e - b,
            n_fake=e - b if fake else 0, work_us=work, wait_total_us=total_wait, wait_schedule_us=sched,
            wait_predecessor_us=total_wait - sched, line=0,
            top3=[LogTask(key=int(tr.key[k]), label=tr.labels[k], wait_us=float(wait[k])) for k in top],
        ))
    # the writer ranks every task and then leaves out the fake ones, so a fake task can take a slot (kept as is)
    top10 = [k for k in _top(wait, np.arange(n), 10) if real[k]]
    log = BubbleLog(path=tr.path + " (recomputed)", cores=cores,
                    top10=[LogTask(key=int(tr.key[k]), label=tr.labels[k], wait_us=float(wait[k])) for k in top10])
    return log, wait


def _top10_agree(a: list[tuple[int, float]], b: list[tuple[int, float]], tolerance_us: float) -> bool:
    """Both Top-10 lists rank the same tasks with the same waits, ties (waits within ``tolerance_us``) in any order.

    The recomputed waits differ from the writer's in the last bits (~1e-15 µs), so two tasks whose waits tie to
    within rounding can swap places, and a tie at the cut-off can bring in another task of the same wait. Measured on
    matmul_act with M_BLOCK 16 (cube m tile 64): 5.633888888888889 vs 5.63388888888889 swapped two tasks and the
    whole run was declared invalid ("Top-10 waiting tasks differ"), a legal trial lost as data-less. A rewritten
    log still fails here: its waits differ by more than the tolerance at some rank, or a task keeps a different wait.
    """
    if len(a) != len(b) or any(abs(x[1] - y[1]) > tolerance_us for x, y in zip(a, b)):
        return False
    if not a:
        return True
    cut = min(a[-1][1], b[-1][1])  # tasks tied with the 10th place may differ: the cut-off falls inside the tie
    above_a = {k for k, w in a if w > cut + tolerance_us}
    above_b = {k for k, w in b if w > cut + tolerance_us}
    wait_b = dict(b)
    return above_a == above_b and all(abs(w - wait_b[k]) <= tolerance_us for k, w in a if k in wait_b)


def compare(log: BubbleLog, recomputed: BubbleLog, tolerance_us: float = 1e-6) -> CrossCheck:
    """Max |Δ| per field over cores present in both, task counts and Top-10 (ids and waits)."""
    mine = {c.name: c for c in recomputed.cores}
    out = CrossCheck(tolerance_us=tolerance_us)
    notes: list[str] = []
    for c in log.cores:
        r = mine.get(c.name)
        if r is None:
            if c.n_real or c.n_fake:
                out.task_counts_equal = False
                notes.append(f"[{c.name}] is in the log but has no lane in the trace")
            continue
        d = (abs(c.work_us - r.work_us), abs(c.wait_total_us - r.wait_total_us),
             abs(c.wait_schedule_us - r.wait_schedule_us), abs(c.wait_predecessor_us - r.wait_predecessor_us))
        out.max_delta_work_us = max(out.max_delta_work_us, d[0])
        out.max_delta_wait_us = max(out.max_delta_wait_us, d[1])
        out.max_delta_schedule_us = max(out.max_delta_schedule_us, d[2])
        out.max_delta_predecessor_us = max(out.max_delta_predecessor_us, d[3])
        if (c.n_real, c.n_fake) != (r.n_real, r.n_fake):
            out.task_counts_equal = False
            notes.append(f"[{c.name}] task count log {c.n_real}+{c.n_fake} fake vs trace {r.n_real}+{r.n_fake} fake")
        elif max(d) > tolerance_us and len(notes) < 8:
            notes.append(f"[{c.name}] log work/wait/sched/pred {c.work_us:.6f}/{c.wait_total_us:.6f}/"
                         f"{c.wait_schedule_us:.6f}/{c.wait_predecessor_us:.6f} vs trace {r.work_us:.6f}/"
                         f"{r.wait_total_us:.6f}/{r.wait_schedule_us:.6f}/{r.wait_predecessor_us:.6f}")
    a = [(t.key, t.wait_us) for t in log.top10]
    b = [(t.key, t.wait_us) for t in recomputed.top10]
    out.top10_equal = _top10_agree(a, b, tolerance_us)
    if not out.top10_equal:
        notes.append("Top-10 waiting tasks differ between the log and the trace")
    out.agrees = (out.task_counts_equal and out.top10_equal and max(
        out.max_delta_work_us, out.max_delta_wait_us, out.max_delta_schedule_us,
        out.max_delta_predecessor_us) <= tolerance_us)
    out.disagreements = notes[:10]
    return out
