"""Scoring one candidate: the shape model with its priors, the latest analysis, this session's history.

Scores are in rough "predicted log2 speed-up" units so that signals of different origin add up; only the order
matters. Three families, in the order they usually weigh:

1. **history** (:mod:`.history`) — what this session measured: stop a direction that regressed or failed, continue
   one that gained, drop knobs that never moved the time;
2. **model** — what the change does to this operator's tasks, read statically from its sources (:mod:`.kernel`) and
   weighed by the priors (``priors.json``): vector task waves on the vector cores, loop-iteration waves, parallel
   tasks, task size, tasks per iteration; the cube tiles' distance to the catalogue's preset, the L0C budget, cube
   task waves; the merge settings; knobs measured to do nothing in SIM;
3. **analysis** — the latest analysis of this operator: the catalogue items it suggests for this stage, short tasks
   (favour fewer, larger tasks and merging), NOT FULL leaves (favour more parallel tasks), the core counts.

The plain ranking (:func:`plain_key`) is the comparison the offline benchmark shows beside it: catalogue priority,
then the nearest value first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pypto_tune.tools.search.priors import Priors

SHORT_TASK_FRACTION = 0.5  # analysis/suggest.py's symptom threshold (B.8: tasks < 10 µs)
W_SUGGESTED = 0.1
W_SYMPTOM = 0.3
W_AIC_FULL_MERGE = 0.2


@dataclass
class Term:
    source: str  # "model" / "prior" / "analysis" / "history"
    name: str
    score: float
    text: str
    evidence: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None


@dataclass
class Facts:
    """What the latest analysis says, reduced to what the ranking uses (all optional)."""

    vector_cores: int
    cube_cores: int
    cores_source: str
    suggestions: dict[str, dict[str, Any]] = field(default_factory=dict)  # catalog id -> suggestion
    short_tasks: dict[str, Any] | None = None
    not_full: list[str] = field(default_factory=list)
    aic_full: bool | None = None
    load_gap_severe: bool = False
    operator_time_us: float | None = None
    present: bool = False
    kernel_share: dict[str, float] = field(default_factory=dict)  # kernel (Python def name) -> share of the time


def read_facts(analysis: dict[str, Any] | None, priors: Priors) -> Facts:
    if not analysis:
        return Facts(priors.vector_cores, priors.cube_cores, "priors (platform layout, domain A.3)")
    vec = cube = 0
    source = ""
    for row in (analysis.get("core_usage") or {}).get("rows", []) or []:
        if row.get("theoretical_source") in ("platform", "given"):
            if row.get("core_type") == "AIV":
                vec = max(vec, int(row.get("theoretical_cores") or 0))
            elif row.get("core_type") == "AIC":
                cube = max(cube, int(row.get("theoretical_cores") or 0))
            source = "analysis core usage (platform core counts)"
    if not vec or not cube:
        lanes = analysis.get("cores") or []
        nv = sum(1 for c in lanes if c.get("core_type") == "AIV")
        nc = sum(1 for c in lanes if c.get("core_type") == "AIC")
        if analysis.get("run_mode") == "sim" and nv and nc:
            # SIM lists every lane, idle ones included (domain A.3): the count is the platform's
            vec, cube = vec or nv, cube or nc
            source = source or "analysis lanes (SIM lists every core)"
        else:
            # on the NPU idle cores have no lane (A.3): a lane count is only a lower bound
            vec = vec or max(nv, priors.vector_cores)
            cube = cube or max(nc, priors.cube_cores)
            source = source or "analysis lanes, at least the platform layout of the priors"
    f = Facts(vec, cube, source, present=True, operator_time_us=analysis.get("operator_time_us"))
    for s in analysis.get("suggestions") or []:
        f.suggestions.setdefault(s.get("catalog_id"), s)
    frac = analysis.get("short_task_fraction") or 0.0
    if frac > SHORT_TASK_FRACTION:
        short = [r for r in analysis.get("leaves") or [] if r.get("short_task")]
        f.short_tasks = {"short_task_fraction": round(frac, 4),
                         "min_avg_task_us": round(min((r.get("avg_us", 0.0) for r in short), default=0.0), 4)}
    usage = analysis.get("core_usage") or {}
    f.not_full = [f"{r.get('core_type')} {r.get('used_cores')}/{r.get('theoretical_cores')}"
                  for r in usage.get("rows", []) or [] if not r.get("full")]
    f.aic_full = usage.get("aic_full")
    f.load_gap_severe = bool((analysis.get("load_gap") or {}).get("severe"))
    f.kernel_share = kernel_shares(analysis)
    return f


def kernel_shares(analysis: dict[str, Any]) -> dict[str, float]:
    """Each jit kernel's share of the operator time, from the analysis' output folders (one per kernel call).

    The kernel of a folder is ``per_dir[i]["kernel"]`` when the analysis carries it (a field the analysis does not
    have yet: see the report), else it is read from the folder's ``program.json`` while the folder still exists
    (``tools/analysis/kernel_name.kernel_of``). Empty unless every folder is named: a partial split would be wrong.
    """
    rows = analysis.get("per_dir") or []
    if len(rows) < 2:
        return {}
    times: dict[str, float] = {}
    for row in rows:
        name = row.get("kernel")
        if isinstance(name, dict):
            name = name.get("name")
        if not name:
            from pathlib import Path

            from pypto_tune.tools.analysis.kernel_name import kernel_of
            from pypto_tune.tools.errors import ArtifactError

            try:
                name = kernel_of(Path(row.get("run_dir", ""))).name
            except (ArtifactError, OSError, ValueError):  # the folder is gone or unreadable: no split at all
                return {}
        times[name] = times.get(name, 0.0) + float(row.get("operator_time_us") or 0.0)
    total = sum(times.values())
    return {k: v / total for k, v in times.items()} if total > 0 else {}


def amdahl(kernel_log2_gain: float, share: float) -> float:
    """Operator-level log2 speed-up when one kernel taking ``share`` of the time speeds up by 2**gain."""
    rest = 1.0 - share + share * 2.0 ** (-kernel_log2_gain)
    return -math.log2(rest) if rest > 0 else kernel_log2_gain


# ------------------------------------------------------------------------------------------------ the model


def _log2(a: float, b: float) -> float:
    return math.log2(a / b) if a > 0 and b > 0 else 0.0


def _waves(n: int, cores: int) -> int:
    return max(1, -(-n // max(cores, 1)))


def vector_terms(fb: dict[str, Any], fa: dict[str, Any], priors: Priors, cores: int) -> list[Term]:
    """Terms for one kernel's vector work, before (fb) and after (fa) the change."""
    terms: list[Term] = []
    ib, ia = fb.get("iterations") or 1, fa.get("iterations") or 1
    if not fb.get("trips"):
        ib = ia = 1  # no loop: one root-function instance
    if ib != ia and priors.has("loop-iteration-waves"):
        wb, wa = _waves(ib, cores), _waves(ia, cores)
        if wb != wa:
            s = priors.weight("loop-iteration-waves") * _log2(wb, wa)
            terms.append(Term("model", "iteration-waves", s,
                              f"loop iterations {ib} → {ia}: {wb} → {wa} wave(s) on {cores} vector cores",
                              {"iterations": [ib, ia], "waves": [wb, wa], "vector_cores": cores},
                              "loop-iteration-waves"))
    for vb, va in zip(fb.get("vec", []), fa.get("vec", [])):
        if vb.get("eff_tile") is None or va.get("eff_tile") is None:
            continue
        tb, ta = vb.get("tasks_per_block"), va.get("tasks_per_block")
        eb, ea = vb["eff_bytes"], va["eff_bytes"]
        if vb["eff_tile"] == va["eff_tile"] and tb == ta and ib == ia:
            if vb.get("tile") != va.get("tile"):
                terms.append(Term("model", "clipped", priors.weight("vec-tile-clipped-by-block"),
                                  f"the loop block is {va.get('block')}: tile {va.get('tile')} is clipped to "
                                  f"{va['eff_tile']}, the same work as now", {"block": va.get("block"),
                                                                           "effective_tile": va["eff_tile"]},
                                  "vec-tile-clipped-by-block"))
            continue
        if tb is not None and ta is not None:
            Tb, Ta = ib * tb, ia * ta
            wb, wa = _waves(Tb, cores), _waves(Ta, cores)
            if wb != wa and priors.has("vec-task-waves"):
                terms.append(Term("model", "task-waves", priors.weight("vec-task-waves") * _log2(wb, wa),
                                  f"vector tasks {Tb} → {Ta} ({wb} → {wa} wave(s) on {cores} cores)",
                                  {"tasks": [Tb, Ta], "waves": [wb, wa]}, "vec-task-waves"))
            pb, pa = min(Tb, cores), min(Ta, cores)
            if pb != pa and priors.has("vec-parallel-tasks"):
                terms.append(Term("model", "parallel", priors.weight("vec-parallel-tasks") * _log2(pa, pb),
                                  f"parallel vector tasks {pb} → {pa} of {cores} cores",
                                  {"parallel_tasks": [pb, pa]}, "vec-parallel-tasks"))
            if tb != ta and priors.has("vec-tasks-per-iteration"):
                terms.append(Term("model", "per-iteration", priors.weight("vec-tasks-per-iteration") * _log2(tb, ta),
                                  f"tiles per loop iteration {tb} → {ta}", {"tiles_per_iteration": [tb, ta]},
                                  "vec-tasks-per-iteration"))
        cap = float(priors.param("vec-task-size", "cap_bytes", 65536))
        if min(eb, cap) != min(ea, cap) and priors.has("vec-task-size"):
            terms.append(Term("model", "task-size", priors.weight("vec-task-size") * _log2(min(ea, cap), min(eb, cap)),
                              f"bytes per vector task {eb} → {ea} (credit up to {int(cap) // 1024} KB)",
                              {"task_bytes": [eb, ea]}, "vec-task-size"))
        if va.get("tile_bytes") and vb.get("tile_bytes") and va["tile_bytes"] != vb["tile_bytes"]:
            # tie-break only: of two tiles doing the same work now, the larger (up to the cap) leaves room for a
            # larger block later (rmsnorm_grid: tile (2,512) at block 1 enables block 2 → 2.63 µs)
            s = 0.01 * _log2(min(va["tile_bytes"], cap), min(vb["tile_bytes"], cap))
            if s:
                terms.append(Term("model", "headroom", s, "", {}))
    return terms


def _clip(x: int, axis: int | None) -> int:
    return min(x, axis) if axis else x


def _preset_distance(tile: dict[str, Any], target: dict[str, Any], mkn: tuple | None) -> float:
    d = 0.0
    axes = dict(zip(("m", "k", "n"), mkn)) if mkn else {}
    for a in ("m", "k", "n"):
        t, g = tile.get(a) or [], target.get(a) or []
        for i in range(min(2, len(t), len(g))):
            d += abs(_log2(_clip(t[i], axes.get(a)), _clip(g[i], axes.get(a))))
    return d


def _clipped_cube(tile: Any, mkn: tuple | None) -> dict[str, list[int]] | None:
    """The cube tile as the matmul of one iteration uses it: every L0/L1 entry clipped to its axis (M, K, N)."""
    if not isinstance(tile, dict) or not mkn or any(not isinstance(x, int) for x in mkn):
        return None
    out = {}
    for a, axis in zip(("m", "k", "n"), mkn):
        t = tile.get(a)
        if not isinstance(t, list) or not t or not all(isinstance(x, int) for x in t):
            return None
        out[a] = [min(x, axis) for x in t]
    return out


def cube_terms(fb: dict[str, Any], fa: dict[str, Any], priors: Priors, cores: int) -> list[Term]:
    cb, ca = fb.get("cube") or {}, fa.get("cube") or {}
    if not cb.get("tile") or not ca.get("tile"):
        return []
    terms: list[Term] = []
    eb, ea = _clipped_cube(cb["tile"], ca.get("mkn")), _clipped_cube(ca["tile"], ca.get("mkn"))
    if eb is not None and eb == ea and cb["tile"] != ca["tile"] and priors.has("cube-tile-clipped-by-axis") \
            and (fb.get("iterations") or 1) == (fa.get("iterations") or 1):
        terms.append(Term("model", "cube-clipped", priors.weight("cube-tile-clipped-by-axis"),
                          f"the matmul of one loop iteration is M,K,N = {ca.get('mkn')}: cube tile {ca['tile']} is "
                          f"clipped to {ea}, the same work as now", {"mkn": ca.get("mkn"), "effective_tile": ea},
                          "cube-tile-clipped-by-axis"))
    target = priors.param("cube-tile-preset", "target")
    if target and priors.has("cube-tile-preset") and ca.get("mkn"):
        db = _preset_distance(cb["tile"], target, cb.get("mkn"))
        da = _preset_distance(ca["tile"], target, ca.get("mkn"))
        if db != da:
            terms.append(Term("model", "cube-preset", priors.weight("cube-tile-preset") * (db - da),
                              f"distance to the catalogue's cube tiles {target} (clipped to M,K,N = "
                              f"{ca.get('mkn')}): {db:.1f} → {da:.1f} log2 steps",
                              {"distance": [round(db, 3), round(da, 3)], "mkn": ca.get("mkn")},
                              "cube-tile-preset"))
    limit = priors.param("cube-l0c-budget", "max_bytes")
    if limit and priors.has("cube-l0c-budget") and ca.get("l0c_bytes") and ca["l0c_bytes"] > limit \
            and not (cb.get("l0c_bytes") and cb["l0c_bytes"] > limit):
        terms.append(Term("model", "l0c", priors.weight("cube-l0c-budget"),
                          f"mL0 x nL0 x 4 B = {ca['l0c_bytes'] // 1024} KB exceeds the {limit // 1024} KB L0C "
                          "accumulator: predicted compile failure", {"l0c_bytes": ca["l0c_bytes"]},
                          "cube-l0c-budget"))
    ib, ia = fb.get("iterations") or 1, fa.get("iterations") or 1
    tb, ta = cb.get("tasks_per_iter"), ca.get("tasks_per_iter")
    if tb and ta and priors.has("cube-parallel-tasks"):
        Tb, Ta = ib * tb, ia * ta
        if Tb != Ta:
            s = _log2(_waves(Tb, cores), _waves(Ta, cores)) + 0.5 * _log2(min(Ta, cores), min(Tb, cores))
            if s:
                terms.append(Term("model", "cube-tasks", priors.weight("cube-parallel-tasks") * s,
                                  f"cube tasks {Tb} → {Ta} on {cores} cube cores", {"cube_tasks": [Tb, Ta]},
                                  "cube-parallel-tasks"))
    return terms


def option_terms(name: str, value: Any, current: Any, feats: list[dict[str, Any]], priors: Priors,
                 facts: Facts) -> list[Term]:
    """Jit/loop options: merge settings, knobs measured to do nothing in SIM, unrolling."""
    terms: list[Term] = []
    if name == "vec_nbuffer_setting" and priors.has("vec-nbuffer-merge"):
        n = value.get(-1) if isinstance(value, dict) else None
        tpi = max((v.get("tasks_per_block") or 1 for f in feats for v in f.get("vec", [])), default=1)
        if isinstance(n, int):
            w = priors.weight("vec-nbuffer-merge")
            if n <= 1:
                terms.append(Term("model", "merge-off", -0.2, "N = 1 merges nothing", {}, "vec-nbuffer-merge"))
            elif tpi > 1 or facts.short_tasks:
                goal = min(16, 2 ** math.ceil(math.log2(max(tpi, 2))))
                s = w * (1.0 - 0.125 * abs(_log2(n, goal)))
                terms.append(Term("model", "merge", s, f"{tpi} vector tile(s) per loop iteration to merge; "
                                  f"N = {n} (nearest to {goal} first)", {"tiles_per_iteration": tpi},
                                  "vec-nbuffer-merge"))
            else:
                terms.append(Term("model", "merge-nothing", 0.1 * w, "one vector tile per iteration: little to "
                                  "merge", {"tiles_per_iteration": tpi}, "vec-nbuffer-merge"))
    elif name in ("cube_l1_reuse_setting", "cube_nbuffer_setting") and priors.has("cube-merge-not-full"):
        if facts.aic_full:
            terms.append(Term("analysis", "aic-full", W_AIC_FULL_MERGE, "all cube leaves FULL (S-6/S-7 "
                              "precondition)", {"aic_full": True}))
        else:
            terms.append(Term("prior", "cube-merge", priors.weight("cube-merge-not-full"),
                              "cube merging slowed matmuls whose cube cores were not all busy", {},
                              "cube-merge-not-full"))
    elif name in (priors.param("no-effect-in-sim", "knobs") or []):
        terms.append(Term("prior", "no-effect", priors.weight("no-effect-in-sim"), "measured to change nothing in SIM",
                          {}, "no-effect-in-sim"))
    elif name == "unroll_list" and priors.has("unroll-small"):
        terms.append(Term("prior", "unroll", priors.weight("unroll-small"), "unrolling changed little", {},
                          "unroll-small"))
    elif name == "submit_before_loop" and priors.has("submit-before-loop"):
        terms.append(Term("prior", "submit", priors.weight("submit-before-loop"), "a barrier in 0.2.0", {},
                          "submit-before-loop"))
    elif name == "combine_axis" and priors.has("combine-axis"):
        terms.append(Term("prior", "combine", priors.weight("combine-axis"), "−0.07 % on softmax", {},
                          "combine-axis"))
    return terms


def analysis_terms(catalog_id: str, before: list[dict[str, Any]], after: list[dict[str, Any]], merges: bool,
                   facts: Facts) -> list[Term]:
    """The latest analysis: the catalogue items it suggests, and the direction its symptoms ask for."""
    if not facts.present:
        return []
    terms: list[Term] = []
    s = facts.suggestions.get(catalog_id)
    if s is not None:
        terms.append(Term("analysis", "suggested", W_SUGGESTED, f"the analysis suggests {catalog_id} "
                          f"(#{s.get('priority')}: {s.get('symptom')})",
                          {"catalog_id": catalog_id, "priority": s.get("priority"), "symptom": s.get("symptom"),
                           **{k: v for k, v in (s.get("evidence") or {}).items() if k != "symptoms"}}))
    tb = _total_tasks(before)
    ta = _total_tasks(after)
    if facts.short_tasks and (merges or (tb and ta and ta < tb)):
        terms.append(Term("analysis", "short-tasks", W_SYMPTOM, "most tasks are shorter than 10 µs: fewer, larger "
                          "tasks" if not merges else "most tasks are shorter than 10 µs: merge them",
                          dict(facts.short_tasks)))
    if facts.not_full and tb and ta and _parallel(after, facts) > _parallel(before, facts):
        terms.append(Term("analysis", "core-fill", W_SYMPTOM, "leaves run on fewer cores than the platform has "
                          "(NOT FULL): more parallel tasks", {"not_full": facts.not_full[:3]}))
    return terms


def _total_tasks(feats: list[dict[str, Any]]) -> int | None:
    total = 0
    for f in feats:
        it = (f.get("iterations") or 1) if f.get("trips") else 1
        for v in f.get("vec", []):
            if v.get("tasks_per_block") is None:
                return None
            total += it * v["tasks_per_block"]
        cube = f.get("cube") or {}
        if cube.get("tasks_per_iter"):
            total += it * cube["tasks_per_iter"]
    return total or None


def _parallel(feats: list[dict[str, Any]], facts: Facts) -> int:
    total = 0
    for f in feats:
        it = (f.get("iterations") or 1) if f.get("trips") else 1
        for v in f.get("vec", []):
            total += min(it * (v.get("tasks_per_block") or 1), facts.vector_cores)
        cube = f.get("cube") or {}
        if cube.get("tasks_per_iter"):
            total += min(it * cube["tasks_per_iter"], facts.cube_cores)
    return total


# ------------------------------------------------------------------------------------------------ plain ranking


def step_distance(current: Any, value: Any) -> float:
    """How far a value is from the current one, in log2 steps summed over its components (plain ranking)."""
    from pypto_tune.tools.search.history import components

    a, b = components(current), components(value)
    if a is None or b is None or len(a) != len(b):
        return 1.0
    return sum(abs(_log2(max(y, 0.5), max(x, 0.5))) for x, y in zip(a, b))
