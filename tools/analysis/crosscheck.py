"""Recompute ``bubble_analysis.log`` from ``merged_swimlane.json`` alone (domain B.9) and compare.

With a single device task the recomputation matches the writer to ~1e-14 µs (B.9.2), so any real disagreement
means the log and the trace describe different things — in SIM that is the multi-device-task corruption (B.9.3).
"""

from __future__ import annotations

import heapq

from pypto_tune.tools.analysis.bubble_log import core_type_of
from pypto_tune.tools.analysis.models import BubbleLog, CrossCheck, LogCore, LogTask
from pypto_tune.tools.analysis.trace import Trace

_FLOW_OFFSET_US = 0.0001  # the writer puts each 's' event 0.0001 µs before the predecessor's end (A.4.1)


_LANE = 1 << 52  # packs (tid, time in 1e-6 µs) into one int key; 2^52 ticks = 4.5e9 µs, far beyond any trace


def _pair(tr: Trace) -> tuple[list[int], list[int]]:
    """Predecessor and successor task indices of every flow pair (B.9.1 step 3), as two parallel lists.

    Times are compared after rounding to 1e-6 µs (one int key per lane and tick); on a miss the neighbouring
    ticks are probed too, so a float that rounds the other way (``s.ts + 0.0001`` vs the predecessor's end) still
    pairs. The first task wins a tie, as in a forward scan. Lookups run through ``map`` (C loops). An exact float
    match (tuple keys) was tried: it hits every flow of the recorded runs but hashing tuples was 40 % slower.
    """
    n = len(tr)
    tid, start, dur = tr.tid, tr.start, tr.dur
    off = _FLOW_OFFSET_US
    if tr.s_id == tr.f_id:
        # the writer emits each edge's 's' and 'f' in the same order: pair by position, no id table
        s_tid, s_ts, c_tid, c_ts = tr.s_tid, tr.s_ts, tr.f_tid, tr.f_ts
    else:
        f_at = dict(zip(tr.f_id, range(len(tr.f_id))))
        js = [f_at.get(i) for i in tr.s_id]
        keep = [k for k, j in enumerate(js) if j is not None]
        s_tid = [tr.s_tid[k] for k in keep]
        s_ts = [tr.s_ts[k] for k in keep]
        c_tid = [tr.f_tid[js[k]] for k in keep]
        c_ts = [tr.f_ts[js[k]] for k in keep]
    rev = range(n - 1, -1, -1)
    by_end = dict(zip(reversed([t * _LANE + round(e * 1e6) for t, e in zip(tid, tr.end)]), rev))
    by_start = dict(zip(reversed([t * _LANE + round(st * 1e6) for t, st in zip(tid, start)]), rev))
    s_keys = [t * _LANE + round((x + off) * 1e6) for t, x in zip(s_tid, s_ts)]
    c_keys = [t * _LANE + round(x * 1e6) for t, x in zip(c_tid, c_ts)]
    ps = list(map(by_end.get, s_keys))
    cs = list(map(by_start.get, c_keys))
    for lst, keys, table in ((ps, s_keys, by_end), (cs, c_keys, by_start)):
        if None in lst:
            for k, v in enumerate(lst):
                if v is None:
                    lst[k] = table.get(keys[k] - 1, table.get(keys[k] + 1))
    if None in ps or None in cs:
        both = [(p, c) for p, c in zip(ps, cs) if p is not None and c is not None]
        ps, cs = [p for p, _ in both], [c for _, c in both]
    return ps, cs


def predecessors(tr: Trace) -> list[list[int]]:
    """Task index → predecessor task indices (see ``_pair``)."""
    preds: list[list[int]] = [[] for _ in range(len(tr))]
    for p, c in zip(*_pair(tr)):
        preds[c].append(p)
    return preds


def recompute_log(tr: Trace) -> tuple[BubbleLog, list[float]]:
    """The writer's B.1 walk over the trace; returns the log it would write and each task's wait-schedule."""
    n = len(tr)
    tid, start, dur = tr.tid, tr.start, tr.dur
    t0 = min((s for t, s in zip(tid, start) if t >= 1002), default=0.0)
    # ready(t) = max(T0, latest predecessor end), folded edge by edge instead of keeping predecessor lists
    ready = [t0] * n
    end = tr.end
    ps, cs = _pair(tr)
    for e, c in zip(map(end.__getitem__, ps), cs):
        if e > ready[c]:
            ready[c] = e
    by_core: dict[int, list[int]] = {}
    for i, t in enumerate(tid):
        lst = by_core.get((t - 1000) >> 1)
        if lst is None:
            by_core[(t - 1000) >> 1] = [i]
        else:
            lst.append(i)
    # every lane with a name is a core, even an empty one (SIM lists idle cores; they print work 0.0)
    for t in tr.lane_names:
        by_core.setdefault((t - 1000) // 2, [])
    wait = [0.0] * n
    cores: list[LogCore] = []
    for core in sorted(by_core):
        tasks = by_core[core]
        lane = tr.lane_names.get(1000 + 2 * core) or tr.lane_names.get(1001 + 2 * core) or f"core_{core}"
        fake = core == 0
        last = t0
        total_wait = 0.0
        sched = 0.0
        n_real = 0
        if not fake:
            for i in tasks:
                r = ready[i]
                s = start[i]
                w = s - (last if last > r else r)
                wait[i] = w
                total_wait += s - last
                sched += w
                last = s + dur[i]
            n_real = len(tasks)
        top = heapq.nlargest(3, tasks, key=wait.__getitem__) if tasks else []
        cores.append(LogCore(
            name=lane, core_type=core_type_of(lane), index=core, n_real=n_real, n_fake=len(tasks) if fake else 0,
            work_us=last - t0, wait_total_us=total_wait, wait_schedule_us=sched,
            wait_predecessor_us=total_wait - sched, line=0,
            top3=[LogTask(key=tr.key[k], label=tr.labels[k], wait_us=wait[k]) for k in top if not fake],
        ))
    # heapq.nlargest equals sorted(..., reverse=True)[:10], which is stable: ties keep emission order like the writer
    order = heapq.nlargest(10, range(n), key=wait.__getitem__)
    top10 = [LogTask(key=tr.key[k], label=tr.labels[k], wait_us=wait[k]) for k in order if tid[k] >= 1002]
    return BubbleLog(path=tr.path + " (recomputed)", top10=top10, cores=cores), wait


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
    out.top10_equal = len(a) == len(b) and all(x[0] == y[0] and abs(x[1] - y[1]) <= tolerance_us
                                               for x, y in zip(a, b))
    if not out.top10_equal:
        notes.append("Top-10 waiting tasks differ between the log and the trace")
    out.agrees = (out.task_counts_equal and out.top10_equal and max(
        out.max_delta_work_us, out.max_delta_wait_us, out.max_delta_schedule_us,
        out.max_delta_predecessor_us) <= tolerance_us)
    out.disagreements = notes[:10]
    return out
