"""Offline evaluation of the candidate search (issue #12): replay measured SIM grids under the server's rules.

    .venv/bin/python benchmarks/search_offline.py                     # every grid in benchmarks/grids/
    .venv/bin/python benchmarks/search_offline.py rmsnorm_grid matmul_act --batch 1,2,4
    .venv/bin/python benchmarks/search_offline.py --no-holdout        # priors may use the replayed operator's grid
    .venv/bin/python benchmarks/search_offline.py --json out.json     # every trajectory, machine-readable

Each grid (``benchmarks/grids/<op>.json``, measured exhaustively by ``benchmarks/grids/measure_grid.py``) is the
universe: a configuration's operator time is looked up, never simulated. A replay starts from the shipped
configuration and follows the server's rules:

* each trial is **one knob** (as the server counts knobs: the whole ``set_cube_tile_shapes`` call is one knob, so
  its m and n tiles may change together) away from the **kept** state; a trial whose configuration is not in the
  grid cannot be measured, so the proposer is asked only for values that are (``search(only=...)``);
* keep on **strict** gain (SIM is deterministic); a compile failure is rolled back and does not count toward the
  stage's no-gain counter (R13); **never retry** a (knob, value) from the same kept state or code that failed;
* **stage order**: FRONTEND first; SWIMLANE_1 only after FRONTEND's exit — 5 consecutive no-gain rounds, or no
  candidate left — then INCORE_1 (5), SWIMLANE_2 (8), ... as ``tools/session/tuning_loop.STAGES``; candidates cite a catalogue id
  of the current stage, so a knob serving no id of the stage is not proposed in it;
* **batches** (``--batch k``): ``run_candidates`` runs k trials from the same kept state in parallel; the fastest, if
  a strict gain, is kept; a batch without a gain adds its measured trials to the no-gain counter.

Per operator it prints the grid size N, the grid's best and the best any one-knob keep-on-gain walk can reach inside
the grid, then for each ranking the best speed-up after 4 / 8 / 12 trials and the trials needed to reach 90 % / 99 %
of the grid's speed-up, beside random search's expected (N+1)/(K+1) over the whole grid. Rankings (``--rankings``):

* ``model`` — history + shape model with priors + analysis (tools/search/rank.py), without an analysis;
* ``model+analysis`` — the same with real stage-entry analyses: the simulator runs the shipped configuration (the
  FRONTEND baseline) and each configuration kept at a SWIMLANE_n / INCORE_n entry, once (cached, SIM is
  deterministic; ``--analyses-cache``);
* ``model-nohistory`` / ``history-only`` — ablations: the model without the session's history, and the history
  alone on top of the catalogue's order;
* ``plain`` — catalogue priority, then the nearest value;
* ``random1`` — one-knob moves in random order under the same rules (mean over ``--seeds``).

``--holdout`` (default) drops the prior rules whose only support is the replayed operator's own grid. The rule
weights themselves were chosen while looking at these grids; only new grids can test them blind.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.patching import extract_knobs
from pypto_tune.tools.patching._cst import canon
from pypto_tune.tools.search import (
    AdmissionCache,
    TriedChange,
    code_hash,
    load_priors,
    norm_value,
    search,
)
from pypto_tune.tools.search.cache import admission_state_key, state_key, value_key

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ROOT / "benchmarks" / "grids"
OPERATORS = ROOT / "fixtures" / "operators"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "pypto-tune-search-offline-cache.json"
DEFAULT_PROBES = Path(tempfile.gettempdir()) / "pypto-tune-search-offline-probes.json"
CHECKPOINTS = (4, 8, 12)
STAGE_SEQUENCE = [s for s in tuning_loop.STAGES]
# ranking name -> (search ranking, signal families). Ablations: the model without the session's history, and the
# history alone on top of the catalogue's order (no shape model, no priors).
VARIANTS = {
    "model": ("model", frozenset({"model", "history", "analysis"})),
    "model+analysis": ("model", frozenset({"model", "history", "analysis"})),
    "model-nohistory": ("model", frozenset({"model", "analysis"})),
    "history-only": ("model", frozenset({"history"})),
    "plain": ("plain", frozenset()),
}


def _load_measure_grid():
    """The grid tool's own ``render`` / ``configurations``: a configuration's sources are made exactly as measured."""
    spec = importlib.util.spec_from_file_location("measure_grid", GRIDS / "measure_grid.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def held_out(name: str) -> bool:
    """Grids kept out of any tuning of the ranking (their grid.json says ``"held_out": true``)."""
    spec = OPERATORS / name / "grid.json"
    return spec.is_file() and bool(json.loads(spec.read_text()).get("held_out"))


def offline_cache(path: str | Path) -> AdmissionCache:
    """The replay's admission cache (a JSON file): its entries are answers of the server's admission, so they hold
    only for the code that gave them. A cache written by other admission code is emptied first (its knob vectors,
    keyed by the extractor's version, may stay): on 2026-12-05 a stale refusal ("the server cannot tell what
    vec_rows = 64 gives there") outlived the derive fix that made it legal."""
    cache = AdmissionCache(path)
    version = _code_digest("patching", "code", "search")
    if cache.entries.get("__code__") != {"version": version}:
        vectors = cache.entries.get("__grid_vectors__", {})
        cache.entries.clear()
        cache.entries.update({"__code__": {"version": version}, "__grid_vectors__": vectors})
    return cache


@functools.lru_cache(maxsize=8)
def _code_digest(*packages: str) -> str:
    """A digest of the code of these ``pypto_tune.tools`` packages, computed once per process. The admission's
    answers come from the knob map and derive (patching), the admission (code) and the search's own checks (search);
    a grid's knob vectors from the extractor alone (patching): a vector cached before the extractor learnt a new kind
    of knob would hide it from the replay."""
    import hashlib

    import pypto_tune.tools as tools

    h = hashlib.sha256()
    for sub in packages:
        for f in sorted((Path(tools.__file__).parent / sub).glob("*.py")):
            h.update(f"{sub}/{f.name}".encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def _extractor_version() -> str:
    return _code_digest("patching")


def _vkey(v: Any) -> str:
    return repr(canon(norm_value(v)))


class Grid:
    """One measured grid: every configuration as sources, server knob vector and operator time."""

    def __init__(self, name: str, mg, cache: dict[str, Any]) -> None:
        self.name = name
        self.data = json.loads((GRIDS / f"{name}.json").read_text())
        op_dir = OPERATORS / name
        spec = json.loads((op_dir / "grid.json").read_text())
        files = sorted({k["file"] for k in spec["knobs"]})
        self.sources = {f: (op_dir / f).read_text() for f in files}
        self.context = {p.name: p.read_text() for p in sorted(op_dir.glob("*.py")) if p.name not in files}
        digests = self.data.get("source_sha256") or {}
        import hashlib

        self.stale = [f for f, h in digests.items() if (op_dir / f).is_file()
                      and hashlib.sha256((op_dir / f).read_bytes()).hexdigest() != h]
        knobs = {k["name"]: k for k in spec["knobs"]}
        self.rows = []
        for row in self.data["configs"]:
            src = dict(self.sources)
            for name_, value in row["knobs"].items():
                k = knobs[name_]
                src[k["file"]] = src[k["file"]].replace(k["shipped"], mg.render(k, value), 1)
            ck = f"vec:{_extractor_version()}:" + state_key(src, self.context)
            vec = cache.get(ck)
            if vec is None:
                vec = {k.id: _vkey(k.value) for k in extract_knobs(src, self.context) if k.present and k.tunable}
                cache[ck] = vec
            ok = bool(row.get("compiled")) and row.get("valid", True) and row.get("operator_time_us") is not None
            self.rows.append({"knobs": row["knobs"], "vec": vec, "time": row["operator_time_us"] if ok else None,
                              "shipped": row.get("shipped", False)})
        # Rows the server's knob vector cannot tell apart differ only in grid knobs the server cannot see (the
        # attention grid's ``rows_per_tile``, a helper's default argument). No move of the search changes such a
        # knob, so a neighbour keeps it where the kept row has it; keying rows by the vector alone sent a move to
        # whichever of the colliding rows came last.
        self.by_vec: dict[str, list[dict[str, Any]]] = {}
        for r in self.rows:
            self.by_vec.setdefault(json.dumps(r["vec"], sort_keys=True), []).append(r)
        self.hidden = sorted({k for same in self.by_vec.values() if len(same) > 1 for k in same[0]["knobs"]
                              if len({json.dumps(r["knobs"][k]) for r in same}) > 1})
        ship = next(r for r in self.rows if r["shipped"])
        self.ship = ship
        ok = [r for r in self.rows if r["time"] is not None]
        self.best = min(r["time"] for r in ok)
        self.speedup = ship["time"] / self.best
        self.n = len(self.rows)

    def neighbour(self, row: dict[str, Any], knob_id: str, value: Any) -> dict[str, Any] | None:
        """The row one move of the search leads to from ``row``: ``knob_id`` set to ``value``, the knobs the
        server cannot see left as they are."""
        same = self.by_vec.get(json.dumps({**row["vec"], knob_id: _vkey(value)}, sort_keys=True), [])
        return next((r for r in same if all(r["knobs"][h] == row["knobs"][h] for h in self.hidden)), None)

    def _steps(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The rows a one-knob move from ``row`` reaches with a strict gain (what a replay can keep)."""
        out = []
        for other in self.rows:
            if other["time"] is None or other["time"] >= row["time"] or set(other["vec"]) != set(row["vec"]):
                continue
            if any(other["knobs"][h] != row["knobs"][h] for h in self.hidden):
                continue
            if sum(1 for k in row["vec"] if row["vec"][k] != other["vec"][k]) == 1:
                out.append(other)
        return out

    def floor(self, pct: float, *, staged: bool = True) -> int | None:
        """The fewest trials any ranking can need to reach ``pct`` % of the grid's speed-up: the shortest walk from
        shipped by one-knob moves that each keep a strict gain. None: no such walk reaches it.

        ``staged`` (the default) follows the stage rules a replay and a session follow: a move is made in a stage
        whose catalogue ids its knob serves, and a stage is left only after its exit — ``no_gain_threshold``
        trials without gain, or every candidate of the stage tried — so leaving it costs at least the smaller of
        the two (a lower bound: the trials that exit are counted, which they were not before 2026-12-05).
        ``staged=False`` ignores stages: a breadth-first walk over the gains alone."""
        target = self.best / (pct / 100) * (1 + 1e-9)
        if not staged:
            depth = {id(self.ship): 0}
            queue = [self.ship]
            for row in queue:
                if row["time"] <= target:
                    return depth[id(row)]
                for other in self._steps(row):
                    if id(other) not in depth:
                        depth[id(other)] = depth[id(row)] + 1
                        queue.append(other)
            return None
        import heapq

        prefixes = {k.id: {c[:2] for c in k.catalog_ids} for k in extract_knobs(self.sources, self.context)}
        rows = {id(r): r for r in self.rows}
        best_cost: dict[tuple[int, int], int] = {}
        heap = [(0, 0, id(self.ship))]
        while heap:
            cost, si, rid = heapq.heappop(heap)
            if best_cost.get((rid, si), cost + 1) <= cost:
                continue
            best_cost[(rid, si)] = cost
            row = rows[rid]
            if row["time"] <= target:
                return cost
            stage = STAGE_SEQUENCE[si]
            in_stage = [(o, k) for o, k in self._moves(row) if stage.catalog_prefix in prefixes.get(k, set())]
            for other, _ in in_stage:
                if other["time"] is not None and other["time"] < row["time"]:
                    heapq.heappush(heap, (cost + 1, si, id(other)))
            if si + 1 < len(STAGE_SEQUENCE):
                heapq.heappush(heap, (cost + min(stage.no_gain_threshold, len(in_stage)), si + 1, rid))
        return None

    def _moves(self, row: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
        """Every row one knob away from ``row`` (failed ones too), with the knob that moved."""
        out = []
        for other in self.rows:
            if other is row or set(other["vec"]) != set(row["vec"]):
                continue
            if any(other["knobs"][h] != row["knobs"][h] for h in self.hidden):
                continue
            diff = [k for k in row["vec"] if row["vec"][k] != other["vec"][k]]
            if len(diff) == 1:
                out.append((other, diff[0]))
        return out

    def good(self, pct: float) -> int:
        return sum(1 for r in self.rows if r["time"] is not None and self.ship["time"] / r["time"]
                   >= self.speedup * pct / 100 - 1e-12)

    def random_expected(self, pct: float) -> float:
        return (self.n + 1) / (self.good(pct) + 1)

    def on_grid_share(self, cache: AdmissionCache, record: dict[str, Any] | None) -> tuple[int, int]:
        """How many of the search's FRONTEND proposals from shipped (all of them, unfiltered) land on a row of this
        grid: (on grid, proposed). A replay can follow only those; where the search mostly pins a call the grid
        does not vary (a tile set from a dict or a NamedTuple field, pinned at the call), the replay measures
        little of what a live session does, and ``search_live.py`` is the measure."""
        prop = search(self.sources, stage="FRONTEND", context=self.context, history=[], priors=load_priors(),
                      limit=None, ranking="model", cache=cache, kept_hash=code_hash(self.sources), run=record,
                      budget_s=0.0)
        cands = list(prop.candidates)
        return sum(1 for c in cands if self.neighbour(self.ship, c.knob, c.value) is not None), len(cands)

    def reachable_best(self) -> float:
        """The best time a one-knob, keep-on-strict-gain walk can reach inside the grid (any order, any stage)."""
        seen, stack, best = {id(self.ship)}, [self.ship], self.ship["time"]
        while stack:
            r = stack.pop()
            best = min(best, r["time"])
            for other in self._steps(r):
                if id(other) not in seen:
                    seen.add(id(other))
                    stack.append(other)
        return best

    def best_stages(self) -> set[str]:
        """Stages whose catalogue ids the knobs that differ between shipped and the grid best serve."""
        best = min((r for r in self.rows if r["time"] is not None), key=lambda r: r["time"])
        diff = [k for k in best["vec"] if best["vec"][k] != self.ship["vec"].get(k)]
        by_id = {k.id: k for k in extract_knobs(self.sources, self.context)}
        stages = set()
        for kid in diff:
            ids = by_id[kid].catalog_ids if kid in by_id else []
            groups = {g for g, p in (("frontend", "F-"), ("swimlane", "S-"), ("incore", "I-")) if any(
                c.startswith(p) for c in ids)}
            stages.add("frontend" if "frontend" in groups else "/".join(sorted(groups)) or "?")
        return stages


class Probes:
    """The run-time probe's record of each kept state, as a session has it (issue #17).

    A session probes every precision run, so the server's search always ranks from the kept state's record: what
    ran, with which values (a tile built in the test, a starred argument, a config dataclass). Without it the
    search sees only the static reading, and on operators written in the upstream examples' style it finds no
    on-grid candidate at all (an offline replay of upstream_activation or upstream_ffn then makes no trial). So a
    replay asks for the record of every state it ranks from: the state's sources run once in a scratch copy of the
    operator, SIM, with the probe hook on (``probe_env``: what a probed run's environment gets), read as the server
    reads it and stored as the server stores it (``ran_sources`` set, the module list left out). SIM and the probe
    are deterministic, so the JSON cache (keyed by operator and code hash) is the record."""

    def __init__(self, path: Path, mg, enabled: bool) -> None:
        self.path, self.mg, self.enabled = path, mg, enabled
        self.data: dict[str, Any] = json.loads(path.read_text()) if enabled and path.is_file() else {}
        self.runs = 0

    def get(self, grid: "Grid", sources: dict[str, str]) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        key = f"{grid.name}:{code_hash(sources)}"
        if key not in self.data:
            self.data[key] = self._probe(grid, sources)
            self.runs += 1
            self.path.write_text(json.dumps(self.data))
        return self.data[key]

    def _probe(self, grid: "Grid", sources: dict[str, str]) -> dict[str, Any]:
        import os
        import shutil
        import subprocess

        from pypto_tune.tools.running.probe import probe_env, read_records
        from pypto_tune.tools.running.runner import build_child_env

        op_dir = OPERATORS / grid.name
        spec = self.mg.load_spec(op_dir)
        work = Path(tempfile.mkdtemp(prefix=f"probe_{grid.name}_"))
        try:
            dst = work / op_dir.name
            shutil.copytree(op_dir, dst, ignore=shutil.ignore_patterns("output", "__pycache__", ".pypto-tune"))
            for rel, text in sources.items():
                (dst / rel).write_text(text)
            (work / "home").mkdir()
            (work / "record").mkdir()
            env = probe_env(build_child_env(run_mode="sim", base={**os.environ, "HOME": str(work / "home")}),
                            work / "record")
            done = subprocess.run([sys.executable, *spec["command"]], cwd=dst, env=env, capture_output=True,
                                  timeout=600, stdin=subprocess.DEVNULL)
            record = read_records(work / "record", [str(dst)])
            if done.returncode != 0 and record.reported:
                record = record.model_copy(update={"faults": [*record.faults, f"exit {done.returncode}"]})
            record = record.model_copy(update={"ran_sources": dict(sources)})
            return record.model_dump(mode="json", exclude={"modules"})
        finally:
            shutil.rmtree(work, ignore_errors=True)


class Analyses:
    """Real analyses of grid configurations, for the replays that rank with one (``--analysis``).

    A session analyses the baseline before FRONTEND and re-collects at every SWIMLANE_n / INCORE_n entry (R15), so a
    replay needs the analysis of the shipped configuration and of each configuration it keeps at a stage entry. They
    are produced the way the grid was measured (``measure_grid.run_config`` in a scratch copy, SIM), analysed with
    ``analyze_runs`` and kept in a JSON cache; SIM is deterministic, so a cached analysis is the analysis. Each output
    folder's kernel name is added as ``per_dir[i]["kernel"]`` while the folder exists (the field the search reads
    to weigh kernels by their share of the time; see tools/search/rank.kernel_shares)."""

    def __init__(self, path: Path, mg, enabled: bool) -> None:
        self.path, self.mg, self.enabled = path, mg, enabled
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
        self.runs = 0

    def get(self, grid: Grid, knobs: dict[str, Any]) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        key = f"{grid.name}:{json.dumps(knobs, sort_keys=True)}"
        if key not in self.data:
            import shutil

            from pypto_tune.tools.analysis import analyze_runs
            from pypto_tune.tools.analysis.kernel_name import kernel_of
            from pypto_tune.tools.errors import ArtifactError

            op_dir = OPERATORS / grid.name
            spec = self.mg.load_spec(op_dir)
            row = self.mg.run_config(op_dir, spec, knobs, timeout_s=300, keep=True)
            self.runs += 1
            work = Path(row["kept_at"])
            try:
                dirs = sorted(p for p in work.rglob("output_*") if (p / "CostModelSimulationOutput"
                                                                     / "bubble_analysis.log").is_file())
                if not dirs:
                    self.data[key] = None
                else:
                    a = analyze_runs(dirs, run_mode="sim").model_dump(mode="json")
                    for d in a.get("per_dir", []):
                        try:
                            d["kernel"] = kernel_of(Path(d["run_dir"])).name
                        except (ArtifactError, OSError):
                            continue  # unnamed: the search then does not split the time by kernel
                    self.data[key] = a
            finally:
                shutil.rmtree(work, ignore_errors=True)
            self.path.write_text(json.dumps(self.data))
        return self.data[key]


def _moved(grid: Grid, row: dict[str, Any], c: Any) -> dict[str, Any] | None:
    """The grid row a candidate leads to: its knob moved, and a linked pair's second knob too (rule linked-pair)."""
    out = grid.neighbour(row, c.knob, c.value)
    if out is not None and c.pair_with is not None:
        out = grid.neighbour(out, c.pair_with.knob, c.pair_with.value)
    return out


def _cache_key(cache: AdmissionCache, skey: str, c: Any) -> str:
    """The key the search admitted a candidate under (a pair's: both knobs, both values; ``search.pairs``)."""
    if c.pair_with is None:
        return cache.key(skey, c.knob, c.value)
    return cache.key(skey, f"{c.knob}+{c.pair_with.knob}", value_key([c.value, c.pair_with.value]))


def replay(grid: Grid, ranking: str, *, batch: int = 1, budget: int = 40, holdout: bool = True,
           cache: AdmissionCache, seed: int = 0, analyses: Analyses | None = None,
           probes: Probes | None = None) -> dict[str, Any]:
    """One replay; returns the trajectory (best time after each trial) and the trials. ``probes``: rank from each
    kept state's probe record, as a session does (see :class:`Probes`)."""
    priors = load_priors(holdout=grid.name if holdout else None)
    rng = random.Random(seed)
    kept, kept_row = dict(grid.sources), grid.ship
    kept_t = kept_row["time"]
    history: list[TriedChange] = []
    trials: list[dict[str, Any]] = []
    best_after: list[float] = []
    best = kept_t
    kept_version = 0  # how many changes were kept so far: trials with the same number share their kept state
    for sdef in STAGE_SEQUENCE:
        no_gain = 0
        # the stage's entry analysis: the baseline for FRONTEND, a fresh collection of the kept state otherwise
        analysis = analyses.get(grid, kept_row["knobs"]) if analyses is not None else None
        while len(trials) < budget:
            def on_grid(knob_id: str, value: Any, row=kept_row) -> bool:
                return grid.neighbour(row, knob_id, value) is not None

            kh = code_hash(kept)
            record = probes.get(grid, kept) if probes is not None else None
            if ranking == "random1":
                prop = search(kept, stage=sdef.name, context=grid.context, history=history, priors=priors,
                              limit=None, ranking="plain", cache=cache, only=on_grid, kept_hash=kh,
                              analysis=analysis, run=record)
                cands = list(prop.candidates)
                rng.shuffle(cands)
                cands = cands[:batch]
            else:
                mode, signals = VARIANTS[ranking]
                prop = search(kept, stage=sdef.name, context=grid.context, history=history, priors=priors,
                              limit=batch, ranking=mode, cache=cache, only=on_grid, kept_hash=kh,
                              analysis=analysis, signals=signals, run=record)
                cands = prop.candidates
            if not cands:
                break  # every candidate of this stage tried: the stage is exhausted
            results = []
            for c in cands:
                row = _moved(grid, kept_row, c)
                assert row is not None
                results.append((c, row))
            winner = min((x for x in results if x[1]["time"] is not None and x[1]["time"] < kept_t),
                         key=lambda x: x[1]["time"], default=None)
            # the key the search admitted under (with the record it judged on, if it was given one)
            skey = admission_state_key(kept, grid.context, record if record and record.get("status") == "reported"
                                       else None)
            for c, row in results:
                t = row["time"]
                if winner is not None and c.id == winner[0].id:
                    outcome = "kept"
                elif t is None:
                    outcome = "failed"
                elif t > kept_t:
                    outcome = "regression"
                elif t < kept_t:
                    outcome = "not-chosen"  # a gain another trial of the batch beat
                else:
                    outcome = "no-gain"
                entry = cache.get(_cache_key(cache, skey, c)) or {}
                history.append(TriedChange(knob_id=c.knob, value=c.value, before_value=c.before, from_kept_hash=kh,
                                           outcome=outcome, failure_type="compile-failure" if t is None else None,
                                           before_us=kept_t, after_us=t, semantic_hash=entry.get("semantic_hash"),
                                           round=len(trials) + 1, stage=sdef.name, catalog_id=c.catalog_id,
                                           pair_with=c.pair_with))
                if t is not None:
                    best = min(best, t)
                trials.append({"stage": sdef.name, "knob": c.knob.split(":", 1)[-1] + (
                               f" + {c.pair_with.knob.split(':', 1)[-1]} = {c.pair_with.value!r}" if c.pair_with
                               else ""), "value": c.value, "time_us": t, "outcome": outcome, "from_kept": kept_version, "score": c.score,
                               "why": c.why})
                best_after.append(best)
            if winner is not None:
                c, row = winner
                entry = cache.get(_cache_key(cache, skey, c))
                kept = dict(entry["sources"])  # type: ignore[index]
                kept_row, kept_t = row, row["time"]
                kept_version += 1
                no_gain = 0
            else:
                no_gain += sum(1 for _, row in results if row["time"] is not None)
            if no_gain >= sdef.no_gain_threshold:
                break
        if len(trials) >= budget:
            break
    return {"trials": trials, "best_after": best_after, "final_us": best}


def _reach(best_after: list[float], target: float) -> int | None:
    for i, t in enumerate(best_after, 1):
        if t <= target * (1 + 1e-9):
            return i
    return None


def summarise(grid: Grid, runs: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """Checkpoints and trials-to-target. For several runs (random1): means over the runs that reached the target,
    and how many never did."""
    out: dict[str, Any] = {}
    for pct in (90, 99):
        target = grid.best / (pct / 100)
        hits = [_reach(r["best_after"], target) for r in runs]
        reached = [h for h in hits if h is not None]
        out[f"trials_{pct}"] = statistics.mean(reached) if reached else None
        out[f"batches_{pct}"] = statistics.mean(math.ceil(h / batch) for h in reached) if reached else None
        out[f"missed_{pct}"] = len(hits) - len(reached)
    for cp in CHECKPOINTS:
        sp = [grid.ship["time"] / (r["best_after"][min(cp, len(r["best_after"])) - 1] if r["best_after"]
                                   else grid.ship["time"]) for r in runs]
        out[f"speedup_{cp}"] = statistics.mean(sp)
    out["trials_total"] = statistics.mean(len(r["trials"]) for r in runs)
    out["final_speedup"] = statistics.mean(grid.ship["time"] / r["final_us"] for r in runs)
    return out


def _fmt_trials(s: dict[str, Any], pct: int, n_runs: int, batch: int) -> str:
    v = s[f"trials_{pct}"]
    if v is None:
        return "never"
    txt = f"{v:.1f}" if n_runs > 1 else f"{v}"
    if batch > 1:
        b = s[f"batches_{pct}"]
        txt += f" ({b:.1f} batches)" if n_runs > 1 else f" ({b:.0f} batches)"
    miss = s[f"missed_{pct}"]
    return txt + (f"; {miss}/{n_runs} never" if miss else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grids", nargs="*", help="grid names (default: every benchmarks/grids/*.json)")
    ap.add_argument("--batch", default="1,4", help="batch sizes to simulate, comma-separated (default 1,4)")
    ap.add_argument("--budget", type=int, default=40, help="maximum trials per replay")
    ap.add_argument("--seeds", type=int, default=20, help="random1 replays per grid and batch size")
    ap.add_argument("--rankings", default="model,plain,random1",
                    help="model, model+analysis (runs the simulator for stage-entry analyses, cached), plain, random1")
    ap.add_argument("--analyses-cache", type=Path, default=Path(tempfile.gettempdir())
                    / "pypto-tune-search-offline-analyses.json")
    ap.add_argument("--probe", action="store_true", help="rank from each kept state's run-time probe record, as a "
                    "session does (one SIM run per new state, cached; needed for the upstream-style operators)")
    ap.add_argument("--probes-cache", type=Path, default=DEFAULT_PROBES)
    ap.add_argument("--no-holdout", action="store_true")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"admission cache (default {DEFAULT_CACHE})")
    ap.add_argument("--json", type=Path, help="write every trajectory here")
    ap.add_argument("--trace", action="store_true", help="print each model/plain trajectory")
    ap.add_argument("--include-held-out", action="store_true",
                    help="also replay the held-out grids (grid.json 'held_out': true), which are left out by default "
                    "so that nobody tunes the ranking while looking at them")
    args = ap.parse_args(argv)
    names = args.grids or sorted(p.stem for p in GRIDS.glob("*.json")
                                 if args.include_held_out or not held_out(p.stem))
    batches = [int(x) for x in args.batch.split(",") if x]
    rankings = [x for x in args.rankings.split(",") if x]
    cache = offline_cache(args.cache)
    vec_cache: dict[str, Any] = cache.entries.setdefault("__grid_vectors__", {})  # type: ignore[assignment]
    mg = _load_measure_grid()
    analyses = Analyses(args.analyses_cache, mg, enabled="model+analysis" in rankings)
    probes = Probes(args.probes_cache, mg, enabled=args.probe)
    report: dict[str, Any] = {}
    t0 = time.monotonic()
    for name in names:
        if not (GRIDS / f"{name}.json").is_file() or not (OPERATORS / name / "grid.json").is_file():
            print(f"{name}: no measured grid (benchmarks/grids/{name}.json) or no grid.json: skipped")
            continue
        grid = Grid(name, mg, vec_cache)
        reach = grid.reachable_best()
        stages = grid.best_stages()
        print(f"\n## {name}: N = {grid.n} configurations, shipped {grid.ship['time']:.3f} µs, grid best "
              f"{grid.best:.3f} µs ({grid.speedup:.2f}×); best one-knob keep-on-gain walk can reach "
              f"{reach:.3f} µs ({grid.ship['time'] / reach:.2f}×, {grid.best / reach * 100:.0f} % of the speed-up)")
        print(f"   knobs of the grid best: {', '.join(sorted(stages))} stage; random search expects "
              f"{grid.random_expected(90):.2f} / {grid.random_expected(99):.2f} trials for 90 % / 99 % "
              f"(K = {grid.good(90)} / {grid.good(99)})" + (f"; STALE grid: {grid.stale} changed since measured"
                                                              if grid.stale else ""))
        print("   | ranking | batch | ×@4 | ×@8 | ×@12 | trials→90 % | trials→99 % | trials run | final × |")
        print("   |---|---|---|---|---|---|---|---|---|")
        report[name] = {"n": grid.n, "shipped_us": grid.ship["time"], "best_us": grid.best,
                        "reachable_best_us": reach, "best_stages": sorted(stages),
                        "random_expected_90": grid.random_expected(90),
                        "random_expected_99": grid.random_expected(99), "runs": {}}
        for b in batches:
            for rk in rankings:
                seeds = range(args.seeds) if rk == "random1" else range(1)
                runs = [replay(grid, rk, batch=b, budget=args.budget, holdout=not args.no_holdout, cache=cache,
                               seed=s, analyses=analyses if rk == "model+analysis" else None, probes=probes)
                        for s in seeds]
                s = summarise(grid, runs, b)
                n = len(runs)
                print(f"   | {rk} | {b} | {s['speedup_4']:.2f} | {s['speedup_8']:.2f} | {s['speedup_12']:.2f} | "
                      f"{_fmt_trials(s, 90, n, b)} | {_fmt_trials(s, 99, n, b)} | {s['trials_total']:.0f} | "
                      f"{s['final_speedup']:.2f} |")
                report[name]["runs"][f"{rk}/b{b}"] = {"summary": s, "trajectories": runs if rk != "random1"
                                                      else None}
                if args.trace and rk != "random1":
                    for i, t in enumerate(runs[0]["trials"], 1):
                        tt = "FAIL" if t["time_us"] is None else f"{t['time_us']:.3f}"
                        print(f"      {i:2d} {t['stage']:<11} {t['knob']} = {t['value']!r}: {tt} {t['outcome']}")
        cache.save()
    print(f"\n(wall {time.monotonic() - t0:.0f} s; admission cache {cache.hits} hits / {cache.misses} misses: "
          f"{args.cache}; simulator runs for analyses: {analyses.runs}, for probe records: {probes.runs})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
