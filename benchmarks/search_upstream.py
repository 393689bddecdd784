"""The search on code nobody here wrote: PyPTO's own ``examples/``, as shipped and de-tuned, live over MCP stdio in SIM.

    .venv/bin/python benchmarks/search_upstream.py /work/bench/pypto-r0.2.0 --tuner-checkout /work/bench/pypto-master
    .venv/bin/python benchmarks/search_upstream.py CHECKOUT --only softmax --only ffn_static_gelu --budget 16
    .venv/bin/python benchmarks/search_upstream.py CHECKOUT --list                   # the example tests found
    .venv/bin/python benchmarks/search_upstream.py CHECKOUT --arms grid,random --variants shipped --json out.json
    .venv/bin/python benchmarks/search_upstream.py --tables a.json b.json           # one table from earlier runs

PYPTO_CHECKOUT is a work tree of PyPTO's public repository whose ``examples/`` match the installed wheel (pypto 0.2.0:
tag ``r0.2.0``); ``--tuner-checkout`` is a tree that holds ``tools/scripts/tuner/xgb_tuner.py`` (``master``). Nothing
of PyPTO is copied into this project: each example's folder is copied into a temporary workspace and run there.

**Operators.** Every test an example file makes selectable (the ``examples = {"name::test_fn": …}`` table its
``main`` reads, run as ``python FILE name::test_fn --run_mode sim``, domain F.3) is one operator. Each runs as shipped
through the real server (``start_session`` → ``run_precision_check`` → ``enable_runtime_debug`` →
``collect_swimlane`` → ``analyze_bubbles``); one that does not is listed with the first line of the server's reason.

**Grid (one rule for every operator, ``grid_knobs`` / ``pick_values``).** The knobs are the server's own: ``list_knobs``'
live, tunable knobs whose ``propose_candidates(knob=…, limit=64)`` in the first tuning stage offers at least one
value. A site whose value flows from a tiling source that is itself such a knob (``tune_by``) is the same tile
reached twice: the source (the author's form) stands for both. Each knob's values are its current value plus the
server's candidates, ordered by tile volume (then text). When the product exceeds ``--grid-max`` (64), the knob with
the fewest values takes one more, in turn, while the product stays within the bound; a knob's extra values are evenly
spaced over its volume-ordered candidates, both ends included. The values are chosen once per code measured (the
example's sources, its test command and the grid limit) and kept in the cache: a knob's candidates are the server's
first answer, which a change to the ranking reorders, and the bar the search is measured against should not move with
the search (``--regrid`` chooses anew). Each configuration is written by the server's own edit (``plan_knob_edit``,
knob after knob); one the edit refuses is not in the grid (counted as unwritable).

**De-tuned variant (``detune_value``).** Every live tile knob (vector and cube tiles, the tiling sources that feed them,
list constants that feed a vector tile) is set, one knob after the other, to the smallest power of two ≥ 8 that the
server's legality check accepts, the same for every dimension (the leading, batch axis of a 3-D or higher vector tile:
1; an axis the kernel reduces over, whole at the length it ran with — the server's check on the shapes that ran, which
the edit planner alone does not see; a vector tile's dimension never over the length it ran with).
Where the de-tuned code leaves no measurement (a kernel of so many tasks that the simulator's swimlane limit or the
timeout is passed), the rule is applied again from 16, then 32 and 64: the smallest floor that runs (the table's
variant says which, "detuned ≥16"). The de-tuned code then gets its own session, knob map, grid, search and random
arms.

**Arms.** ``search``: a scripted agent that after the baseline calls only ``propose_candidates`` and
``run_candidates`` (batches of ``--batch``, the first proposals by rank) until ``--budget`` trials ran (when a stage has
no proposal left, its untried items are marked and the stage advanced, as ``search_bench.py`` does); the best kept
speed-up after each trial. ``random``: the expectation (N+1)/(K+1) of uniform draws without replacement over the grid's
N configurations until one of the K within 90 % / 99 % of the grid's best speed-up (domain F.1). ``xgb``: PyPTO's own
``xgb_tuner.main`` (basin hopping, an ``XGBRegressor`` refitted on every real run, one real run in ten steps) on the
same knobs and values, its measurement answered from the grid's cache: runs to the same speed-ups count every real
run it asks for, repeats included (it keeps no memory of what it ran).

**Re-measured trials.** A search trial whose operator time equals, to the last digit, one already measured in the
session (the baseline or an earlier trial): SIM is deterministic, so that is the same effective configuration
(clamped tiles, a value that the kernel never reads) measured again.

**Cache.** Every configuration's result is kept under ``--cache`` (``/work/bench/upstream``) by the SHA-256 of the
workspace's sources and the test command; the session's knob map and the search's trials by the sources, the
budget and the digest of pypto-tune's own code. A re-run measures only what changed; an interrupted run resumes.
The ``--json`` file names the code measured (``own_code``: commit, whether the tree differs, digest); an interpreter
whose ``pypto_tune`` is another checkout's (an editable install made elsewhere) is refused, since the servers it
starts would run that checkout's code.
Exit status: 0 unless the harness itself failed (an operator that does not run, a failed trial or a goal missed is a
result, not an error).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import hashlib
import importlib.util
import io
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# The de-tune rule's floors, tried in turn: the smallest at which the de-tuned operator runs and leaves a measurement
# (tiles of 8 can make a kernel so many tasks that the simulator's swimlane limit or the timeout is passed).
DETUNE_FLOORS = (8, 16, 32, 64)
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "grids"))

DEFAULT_CACHE = Path("/work/bench/upstream")
GRID_MAX = 64
CANDIDATE_LIMIT = 64  # the most propose_candidates returns in one answer
TIMEOUT_S = 300.0
TILE_KINDS = ("vec_tile", "cube_tile", "tile_source", "tile_constant", "local_constant")


# ====================================================================== pure parts (tests/benchmarks/)


@dataclass(frozen=True)
class ExampleTest:
    file: str  # relative to the checkout's examples/
    selector: str  # "name::test_fn", as the file's main() takes it

    @property
    def name(self) -> str:
        return f"{self.file}::{self.selector.split('::')[-1]}"


def discover(examples_dir: Path) -> list[ExampleTest]:
    """Every selectable test of every example file: the string keys of an ``examples = {...}`` dict literal whose keys
    name a test function (``"name::test_fn"``), as the file's own ``main`` dispatches on them."""
    out: list[ExampleTest] = []
    for path in sorted(examples_dir.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        tests = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                    isinstance(t, ast.Name) and t.id == "examples" for t in node.targets):
                for key in node.value.keys:
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and "::" in key.value \
                            and key.value.split("::")[-1] in tests:
                        out.append(ExampleTest(str(path.relative_to(examples_dir)), key.value))
    return out


def _flat_ints(v: Any) -> list[int] | None:
    """A value as the vector of integers it is made of (a tile, a cube tile's m/k/n, a number), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v]
    if isinstance(v, dict) and set(v) >= {"m", "k", "n"}:
        return _flat_ints([v["m"], v["k"], v["n"]])
    if isinstance(v, list):
        out: list[int] = []
        for x in v:
            f = _flat_ints(x)
            if f is None:
                return None
            out += f
        return out
    return None


def volume(v: Any) -> float:
    """The ordering key of a value: the product of its integers (a tile's element count), else 0."""
    f = _flat_ints(v)
    return float(math.prod(f)) if f else 0.0


def _key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


@dataclass
class GridKnob:
    id: str
    kind: str
    current: Any
    candidates: list[Any]  # the server's values, current excluded
    values: list[Any] = field(default_factory=list)  # chosen: current first


def grid_knobs(knobs: list[dict[str, Any]], candidates: dict[str, list[Any]]) -> list[GridKnob]:
    """The grid's knobs from ``list_knobs``' live knobs and each knob's proposed values (see the module's rule):
    live, tunable, the kernel ran (or unknown), at least one candidate; a site tuned through a source that is itself
    a grid knob is left to the source."""
    chosen = [k for k in knobs if k.get("tunable") and k.get("live") is not False and k.get("kernel_ran") is not False
              and candidates.get(k["id"])]
    ids = {k["id"] for k in chosen}
    out = []
    for k in chosen:
        if any(s != k["id"] and s in ids for s in k.get("tune_by", [])):
            continue
        cands, seen = [], {_key(k["value"])}
        for c in candidates[k["id"]]:
            if _key(c) not in seen:
                seen.add(_key(c))
                cands.append(c)
        out.append(GridKnob(k["id"], k["kind"], k["value"], cands))
    return out


def _spread(values: list[Any], n: int) -> list[Any]:
    """``n`` values evenly spaced over ``values`` ordered by volume (then text), both ends included (the smallest and
    the largest tile the server offers); one value: the middle one."""
    ordered = sorted(values, key=lambda v: (volume(v), _key(v)))
    if n >= len(ordered):
        return ordered
    if n == 1:
        return [ordered[(len(ordered) - 1) // 2]]
    return [ordered[round(i * (len(ordered) - 1) / (n - 1))] for i in range(n)]


def pick_values(knobs: list[GridKnob], max_configs: int = GRID_MAX) -> list[GridKnob]:
    """Fill each knob's ``values`` (current first): the knob with the fewest values takes one more, in turn (ties: the
    knob map's order), while the product stays within ``max_configs``."""
    counts = [1] * len(knobs)
    full = [len(k.candidates) == 0 for k in knobs]
    while not all(full):
        i = min((j for j in range(len(knobs)) if not full[j]), key=lambda j: counts[j])
        if math.prod(counts) // counts[i] * (counts[i] + 1) > max_configs:
            full[i] = True
            continue
        counts[i] += 1
        full[i] = counts[i] - 1 >= len(knobs[i].candidates)
    for k, n in zip(knobs, counts):
        k.values = [k.current, *_spread(k.candidates, n - 1)]
    return knobs


def configurations(knobs: list[GridKnob]) -> list[dict[str, Any]]:
    """The product of the knobs' values as {knob id: value} (the first knob varies slowest); index 0 is the shipped
    configuration."""
    import itertools

    return [dict(zip([k.id for k in knobs], combo)) for combo in itertools.product(*(k.values for k in knobs))]


def is_tile(knob: dict[str, Any]) -> bool:
    """A live knob that sets a tile (the de-tune rule's domain): tile calls, the sources that feed them, and list
    constants that feed a vector tile. Loop blocks, options and buffer counts are not tiles."""
    if knob["kind"] in ("vec_tile", "cube_tile"):
        return True
    if knob["kind"] == "tile_source":
        return True
    if knob["kind"] in ("tile_constant", "local_constant"):
        return isinstance(knob["value"], list) and bool(knob.get("feeds"))
    return False


def cube_call_sites(knobs: list[dict[str, Any]]) -> set[str]:
    """``file:line`` of every cube tile call in the knob map (a tiling source's ``feeds`` names calls so)."""
    return {f"{k['id'].split(':', 1)[0]}:{k['line']}" for k in knobs if k["kind"] == "cube_tile" and k.get("line")}


def detune_shape(knob: dict[str, Any], cube_sites: set[str] = frozenset()) -> tuple[str, int] | None:  # type: ignore[assignment]
    """The form of the value the de-tune rule writes: ("vec", rank), ("cube", 0), ("cube_src", rank), ("int", 0).
    A tiling source that feeds a cube tile call (``cube_sites``) is a cube source: its leading axis is the cube's m,
    not a batch axis."""
    v, eff = knob["value"], (knob.get("effective") or [None])[0]
    feeds = set(knob.get("feeds", []))
    if knob["kind"] == "cube_tile":
        return ("cube", 0)
    if isinstance(v, int) and not isinstance(v, bool):
        return ("int", 0)
    ref = v if isinstance(v, list) else eff
    if isinstance(ref, list) and ref and all(isinstance(x, int) for x in ref):
        return ("cube_src" if feeds & cube_sites else "vec", len(ref))
    return None


def detune_value(shape: tuple[str, int], legal: Callable[[Any], bool],
                 keep: dict[int, int] | None = None, cap: list[int] | None = None, floor: int = 8) -> Any | None:
    """The de-tune rule: every dimension the same smallest power of two ≥ ``floor`` that ``legal`` accepts (the leading, batch
    axis of a vector tile of rank ≥ 3: 1; a reduced axis of a vector tile, ``keep``, whole at the length it ran
    with: splitting it does not compile; a vector tile's dimension at most the length it ran with, ``cap``: PyPTO
    refuses a tile dimension over its tensor's); None when no power up to 512 is legal."""
    form, rank = shape
    for e in range(max(3, floor.bit_length() - 1), 10):
        p = 2 ** e
        if form == "cube":
            v: Any = {"m": [p, p], "k": [p, p], "n": [p, p]}
        elif form == "int":
            v = p
        elif form == "vec":
            v = [1] * (rank >= 3) + [p] * (rank - (rank >= 3))
            v = [keep.get(i, d) for i, d in enumerate(v)] if keep else v
            v = [min(d, c) for d, c in zip(v, cap)] if cap and len(cap) == len(v) else v
        else:
            v = [p] * rank
        if legal(v):
            return v
    return None


def _ran_shapes(knob: dict[str, Any], rank: int) -> list[list[int]]:
    return [s for s in knob.get("shapes") or [] if len(s) == rank and all(isinstance(d, int) for d in s)]


def _ran_extent(knob: dict[str, Any]) -> list[int] | None:
    """A vector tile's largest length per dimension over the shapes that ran (None: nothing ran at its rank)."""
    value = knob["value"] if isinstance(knob["value"], list) else (knob.get("effective") or [None])[0]
    if knob["kind"] != "vec_tile" or not isinstance(value, list):
        return None
    shapes = _ran_shapes(knob, len(value))
    return [max(s[i] for s in shapes) for i in range(len(value))] if shapes else None


def _reduced_axes(knob: dict[str, Any], files: dict[str, str]) -> dict[int, int]:
    """The vector tile's reduced axes and the length each ran with (the knob map's shapes; the server's program)."""
    from pypto_tune.tools.patching import roles
    from pypto_tune.tools.patching.effective import reduced_axes

    value = knob["value"] if isinstance(knob["value"], list) else (knob.get("effective") or [None])[0]
    if knob["kind"] != "vec_tile" or not isinstance(value, list):
        return {}
    rank, file = len(value), knob["id"].split(":", 1)[0]
    shapes = _ran_shapes(knob, rank)
    axes = reduced_axes(roles.analyze(files).reductions.get(file, []), rank)
    return {a: max(s[a] for s in shapes) for a in axes} if shapes else {}


def _legal_at_run_shapes(knob: dict[str, Any], value: Any, files: dict[str, str]) -> bool:
    """The server's tile checks on what ran: a vector tile on the shapes and dtypes that ran (its tail in whole 32-byte
    blocks of them), a cube tile on the dtypes that ran (the edit planner alone sees no run: a factory-built kernel's
    dims and dtypes are run-time values to it)."""
    from pypto_tune.tools.errors import PyptoTuneError
    from pypto_tune.tools.patching import legality, roles
    from pypto_tune.tools.patching.effective import SiteValue, check_vec_tile

    if knob["kind"] == "cube_tile" and knob.get("dtypes"):
        try:
            legality.validate("cube_tile", None, None, value, {"dtypes": knob["dtypes"], "current": knob["value"]})
        except PyptoTuneError:
            return False
        return True
    if knob["kind"] != "vec_tile" or not isinstance(value, list):
        return True
    shapes = _ran_shapes(knob, len(value))
    if not shapes:
        return True
    file = knob["id"].split(":", 1)[0]
    sv = SiteValue(knob["id"], "vec_tile", knob.get("line") or 0, value,
                   {"tensor_shapes": shapes, "dtypes": knob.get("dtypes") or []})
    try:
        program = roles.analyze(files)
        check_vec_tile(sv, program.reductions.get(file, []), None, transposes=program.transposes.get(file, []))
    except PyptoTuneError:
        return False
    return True


def random_expectation(times: list[float | None], shipped_us: float, frac: float) -> tuple[float, int, float]:
    """Random search over the grid: (expected draws (N+1)/(K+1), K, the grid's best speed-up). N counts every
    configuration (failures too), K those whose speed-up over shipped is ≥ ``frac`` of the best."""
    ok = [t for t in times if t is not None]
    best = shipped_us / min(ok)
    k = sum(1 for t in ok if shipped_us / t >= frac * best - 1e-12)
    return (len(times) + 1) / (k + 1), k, best


def reach(curve: list[float], target: float) -> int | None:
    """The first trial (1-based) whose best-so-far speed-up reaches ``target``; None if none does."""
    return next((i + 1 for i, s in enumerate(curve) if s >= target - 1e-9), None)


def search_curve(baseline_us: float, trials: list[dict[str, Any]]) -> list[float]:
    """The best kept speed-up after each trial (a failed trial's time never counts)."""
    best, out = baseline_us, []
    for t in trials:
        if t.get("decision") == "kept" and t.get("time_us") is not None:
            best = min(best, float(t["time_us"]))
        out.append(baseline_us / best)
    return out


def remeasured(baseline_us: float | None, trials: list[dict[str, Any]]) -> tuple[int, int]:
    """(no effect, other repeats): trials whose operator time equals, to the last digit, the kept state's they were
    tried from (in SIM: the change had no effect, or ran the kept configuration again); and trials whose time equals
    another run measured before them in the session (an upper bound on re-measured configurations: SIM is
    deterministic, so a configuration measured again gives the same time — two different ones may too)."""
    kept = baseline_us
    seen = {baseline_us} if baseline_us is not None else set()
    flat = repeat = 0
    for t in trials:
        x = t.get("time_us")
        if x is None:
            continue
        if x == kept:
            flat += 1
        elif x in seen:
            repeat += 1
        seen.add(x)
        if t.get("decision") == "kept":
            kept = x
    return flat, repeat


def failed_trials(trials: list[dict[str, Any]]) -> int:
    """Trials that ran and gave no time (a compile failure, an invalid run); a candidate the server refused at
    ``run_candidates`` (its admission, before any run) is counted apart."""
    return sum(1 for t in trials if t.get("time_us") is None and not t.get("refused"))


def best_curve(times: Iterable[float | None], shipped_us: float) -> list[float]:
    """Best speed-up so far after each run of a sequence of measured times (None: a failed run)."""
    best, out = shipped_us, []
    for t in times:
        if t is not None:
            best = min(best, t)
        out.append(shipped_us / best)
    return out


def _cell(v: Any, fmt: str = "") -> str:
    if v is None:
        return "—"
    return format(v, fmt) if fmt else str(v)


def _remeasured_cell(v: Any) -> str:
    return f"{v[0]} · {v[1]}" if isinstance(v, (list, tuple)) else _cell(v)


def table(rows: list[dict[str, Any]]) -> str:
    """The result table, one row per operator variant (see ``summarise``)."""
    head = ("| operator | variant | N (unwritable) | shipped µs | grid best µs (×) | search best × | search 90 % | "
            "random 90 % | XGB 90 % | search 99 % | random 99 % | XGB 99 % | no effect · other repeats | failed · refused | "
            "wall s (uncached) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = [head]
    for r in rows:
        if (r.get("detune_floor") or 8) != 8:
            r = r | {"variant": f"{r['variant']} ≥{r['detune_floor']}"}
        if r.get("error"):
            out.append(f"| {r['operator']} | {r['variant']} | — | — | — | — | — | — | — | — | — | — | — | — | "
                       f"{_cell(r.get('wall_s'), '.0f')} |")
            continue

        def trials(x: Any, budget: Any) -> str:
            return f">{budget}" if x is None and budget else _cell(x)

        out.append(
            f"| {r['operator']} | {r['variant']} | {_cell(r.get('N'))} ({_cell(r.get('unwritable'))}) | "
            f"{_cell(r.get('baseline_us'), '.3f')} | {_cell(r.get('grid_best_us'), '.3f')} "
            f"({_cell(r.get('grid_speedup'), '.2f')}×) | {_cell(r.get('search_best'), '.2f')} | "
            f"{trials(r.get('search90'), r.get('search_trials'))} | {_cell(r.get('random90'), '.1f')} | "
            f"{trials(r.get('xgb90'), r.get('xgb_runs'))} | {trials(r.get('search99'), r.get('search_trials'))} | "
            f"{_cell(r.get('random99'), '.1f')} | {trials(r.get('xgb99'), r.get('xgb_runs'))} | "
            f"{_remeasured_cell(r.get('remeasured'))}/{_cell(r.get('search_trials'))} | {_cell(r.get('failed'))} · "
            f"{_cell(r.get('refused', 0))} | "
            f"{_cell(r.get('wall_s'), '.0f')} ({_cell(r.get('uncached_s'), '.0f')}) |")
    return "\n".join(out)


# ====================================================================== the cache


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def code_digest() -> str:
    """pypto-tune's own code (what the server's answers depend on)."""
    h = hashlib.sha256()
    for d in ("tools", "server", "prompts", "pypto_tune"):
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in (".py", ".json", ".md") and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(ROOT)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def own_code() -> dict[str, Any]:
    """The pypto-tune code this run measures: its commit, whether the tree differs from it, and ``code_digest``.
    The servers run whatever ``pypto_tune`` this interpreter imports; an editable install of another checkout would
    measure that checkout's code under this one's name, so that is refused."""
    import subprocess

    spec = importlib.util.find_spec("pypto_tune.tools")
    where = Path(spec.origin).resolve().parent if spec and spec.origin else None
    if where != (ROOT / "tools").resolve():
        raise SystemExit(f"this interpreter imports pypto-tune from {where}, not from {ROOT}: run the benchmark with "
                         f"that checkout's own environment (or `pip install -e {ROOT}` into this one)")

    def git(*a: str) -> str:
        r = subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    return {"commit": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--", "tools", "server", "prompts", "pypto_tune")),
            "digest": code_digest()}


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.json"

    def get(self, kind: str, key: str) -> Any | None:
        p = self._path(kind, key)
        return json.loads(p.read_text()) if p.is_file() else None

    def put(self, kind: str, key: str, value: Any) -> None:
        p = self._path(kind, key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(value, indent=1, default=str))
        tmp.replace(p)


# ====================================================================== one operator's workspace


@dataclass
class Operator:
    test: ExampleTest
    folder: Path  # the example's folder in the checkout
    sources: dict[str, str]  # the operator file, as this variant has it
    context: dict[str, str]  # the folder's other Python files

    @property
    def file(self) -> str:
        return Path(self.test.file).name

    def command(self) -> list[str]:
        return [self.file, self.test.selector, "--run_mode", "sim"]

    def key(self, sources: dict[str, str] | None = None) -> str:
        return digest(sources or self.sources, self.context, self.command())

    @contextlib.contextmanager
    def workspace(self, sources: dict[str, str] | None = None, prefix: str = "upstream-"):
        tmp = Path(tempfile.mkdtemp(prefix=prefix))
        ws = tmp / "ws"
        shutil.copytree(self.folder, ws, ignore=shutil.ignore_patterns("__pycache__", "output", ".pypto-tune"))
        for name, text in (sources or self.sources).items():
            (ws / name).write_text(text)
        try:
            yield tmp, ws
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def load_operator(checkout: Path, test: ExampleTest) -> Operator:
    path = checkout / "examples" / test.file
    context = {p.name: p.read_text() for p in sorted(path.parent.glob("*.py")) if p.name != path.name}
    return Operator(test, path.parent, {path.name: path.read_text()}, context)


def measure(cache: Cache, op: Operator, sources: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """One SIM run of ``sources`` (cached by content): the row measure_grid.py writes for a configuration."""
    from measure_grid import judge_complete, run_folder

    key = op.key(sources)
    hit = cache.get("runs", key)
    if hit is not None:
        return judge_complete(hit)
    with op.workspace(sources, prefix="upstream-run-") as (tmp, ws):
        home = tmp / "home"
        home.mkdir()
        row = run_folder(ws, [sys.executable, *op.command()], home=home, timeout_s=timeout_s)
    cache.put("runs", key, row)
    return row


def first_line(text: str) -> str:
    return next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")[:300]


# ====================================================================== the session: baseline, knob map, search


async def session(op: Operator, *, budget: int, batch: int, with_search: bool, check_only: bool = False) -> dict[str, Any]:
    """One real session over MCP stdio on the operator: the baseline, the knob map (``list_knobs`` and every live
    knob's candidates) and, with ``with_search``, the search arm; with ``check_only``, only whether it runs
    (``start_session`` and ``run_precision_check``)."""
    from mcp import Client, StdioServerParameters
    from search_bench import Agent, Refused

    out: dict[str, Any] = {"trials": [], "knobs": [], "candidates": {}, "stages": []}
    t0 = time.monotonic()
    with op.workspace(prefix="upstream-session-") as (tmp, ws):
        params = StdioServerParameters(command=sys.executable, args=["-m", "pypto_tune.server.cli", "serve",
                                                                     "--workspace", str(ws), "--log-level", "WARNING"],
                                       cwd=str(ws))
        async with Client(params, mode="legacy") as client:
            a = Agent(client)
            try:
                sid = (await a.call("start_session", workspace=str(ws), operator_files=[op.file],
                                    test_command=[sys.executable, *op.command()], run_mode="sim",
                                    goal_speedup=1000.0))["session_id"]
            except Refused as exc:
                out["error"] = "start_session: " + first_line(str(exc))
                return out
            pre = await a.call("run_precision_check", session_id=sid)
            if pre["verdict"] != "passed":
                by_role = {r: [d["text"] for d in pre.get("deciding_lines", []) if d.get("role") == r]
                           for r in ("exception", "error", "fail")}
                lines = by_role["exception"] or by_role["error"] or by_role["fail"]
                out["error"] = first_line(lines[0] if lines else pre.get("reason", "")) or pre["verdict"]
                out["error_detail"] = {"verdict": pre["verdict"], "reason": pre.get("reason"),
                                       "key_output": (pre.get("key_output") or "")[-2000:]}
                return out
            if check_only:
                out["runs"] = True
                out["wall_s"] = time.monotonic() - t0
                return out
            await a.call("enable_runtime_debug", session_id=sid)
            out["measured_sources"] = {op.file: (ws / op.file).read_text()}
            try:
                col = await a.call("collect_swimlane", session_id=sid)
            except Refused as exc:  # e.g. an invalid measurement (a run past the simulator's swimlane limit)
                out["error"] = "collect_swimlane: " + first_line(str(exc))
                return out
            out["baseline_us"] = col["operator_time_us"]
            an = await a.call("analyze_bubbles", session_id=sid, lang="en")
            out["stage"] = an.get("stage")
            kn = await a.call("list_knobs", session_id=sid)
            out["knobs"] = kn["knobs"]
            for k in kn["knobs"]:
                if not k["tunable"]:
                    continue
                try:
                    p = await a.call("propose_candidates", session_id=sid, knob=k["id"], limit=CANDIDATE_LIMIT)
                    out["candidates"][k["id"]] = [c["value"] for c in p["candidates"] if c["knob"] == k["id"]]
                except Refused as exc:
                    out["candidates"][k["id"]] = []
                    out.setdefault("candidate_refusals", {})[k["id"]] = first_line(str(exc))
            out["knob_map_s"] = time.monotonic() - t0
            if with_search:
                await _search(a, sid, out, budget, batch)
            try:
                await a.call("stop_session", session_id=sid, reason="benchmark budget spent")
            except Refused as exc:  # the search ran every stage to its end: the session has finished by itself
                if "GATE finished" not in str(exc):
                    raise
                out["search_stop"] = out.get("search_stop") or first_line(str(exc))
    out["wall_s"] = time.monotonic() - t0
    return out


async def _search(a: Any, sid: str, out: dict[str, Any], budget: int, batch: int) -> None:
    from search_bench import PROPOSE_REFUSED, next_batch

    trials = out["trials"]
    t0 = time.monotonic()
    while len(trials) < budget:
        ranked: list[dict] = []
        step = await next_batch(a, sid, out["stages"], min(batch, budget - len(trials)), max(batch, 4), ranked)
        if isinstance(step, str):
            if step.startswith(PROPOSE_REFUSED):
                out["search_stop"] = PROPOSE_REFUSED + first_line(step[len(PROPOSE_REFUSED):])
            elif step != "the session finished":
                out["search_stop"] = step
            break
        status, cands = step
        job = await a.call("run_candidates", session_id=sid, candidates=[c["id"] for c in cands], wait=False)
        while job["status"] not in ("done", "failed", "cancelled"):
            job = await a.call("wait_job", job_id=job["job_id"], timeout_s=60)
        if job["status"] != "done":
            raise RuntimeError(f"run_candidates job {job['status']}: {job.get('error')}")
        by_id = {x["candidate"]: x for x in job["result"]["trials"]}
        out.setdefault("refusals", []).extend(job["result"].get("refused") or [])
        for c in cands:  # in the server's rank order
            x = by_id.get(c["id"], {})
            trials.append({"stage": status["stage"], "knob": c["knob"], "value": c["value"],
                           "time_us": x.get("operator_time_us"), "decision": x.get("decision"),
                           "result_type": x.get("result_type"), "refused": not x})
        # what the server ranked, and why, at this batch: the places taken and the ones behind them
        out.setdefault("rankings", []).append([{"knob": c["knob"], "value": c["value"], "score": c.get("score"),
                                                "why": c.get("why")} for c in ranked])
        print("    " + ", ".join(f"{t['knob'].split(':')[-1]}={json.dumps(t['value'])} "
                                 f"{'-' if t['time_us'] is None else round(t['time_us'], 3)} {t['decision']}"
                                 for t in trials[-len(cands):]), file=sys.stderr, flush=True)
    out["search_s"] = time.monotonic() - t0


def check_runs(cache: Cache, op: Operator) -> dict[str, Any]:
    """Whether the operator runs in SIM through the server (cached by its code and pypto-tune's)."""
    key = digest("check", op.key(), code_digest())
    hit = cache.get("check", key)
    if hit is None:
        hit = asyncio.run(session(op, budget=0, batch=1, with_search=False, check_only=True))
        cache.put("check", key, hit)
    return hit


def run_session(cache: Cache, op: Operator, *, budget: int, batch: int, with_search: bool) -> dict[str, Any]:
    code = code_digest()
    map_key = digest("knob-map", op.key(), code)
    search_key = digest("search", op.key(), code, budget, batch)
    if with_search:
        hit = cache.get("search", search_key)
        if hit is not None:
            return hit
    else:
        hit = cache.get("search", map_key) or None
        if hit is not None:
            return hit
    res = asyncio.run(session(op, budget=budget, batch=batch, with_search=with_search))
    res["code_digest"] = code
    cache.put("search", search_key if with_search else map_key, res)
    if with_search:
        cache.put("search", map_key, {k: v for k, v in res.items() if k != "trials"} | {"trials": []})
    return res


# ====================================================================== de-tuning, grids, the XGBoost tuner


def _plan(sources: dict[str, str], context: dict[str, str], knob_id: str, value: Any) -> dict[str, str]:
    """The server's own edit of one knob; the same sources when the knob already has the value."""
    from pypto_tune.tools.errors import InputError
    from pypto_tune.tools.patching import plan_knob_edit

    try:
        return plan_knob_edit(sources, knob_id, value, context=context).new_sources
    except InputError as exc:
        if "already is" in exc.message:
            return sources
        raise


def detune(op: Operator, knobs: list[dict[str, Any]], candidates: dict[str, list[Any]],
           floor: int = 8) -> tuple[dict[str, str], list]:
    """The de-tuned sources of an operator and the edits made: every live tile knob of the knob map (one per tile: a
    site tuned through a tile source is left to the source), by ``detune_value`` from ``floor``."""
    from pypto_tune.tools.errors import PyptoTuneError

    live = [k for k in knobs if k.get("tunable") and k.get("live") is not False and k.get("kernel_ran") is not False
            and is_tile(k)]
    ids = {k["id"] for k in live}
    cube_sites = cube_call_sites(knobs)
    sources, edits = dict(op.sources), []
    for k in live:
        if any(s != k["id"] and s in ids for s in k.get("tune_by", [])):
            continue
        shape = detune_shape(k, cube_sites)
        if shape is None:
            edits.append((k["id"], None, "no integer tile to de-tune"))
            continue
        # A source that feeds a cube tile is judged where it lands: the edit planner sees only the source's literal
        # (the cube call reads it through expressions), so the value must also be one the server proposes for it,
        # which the admission's legality on what ran (dtypes, L0 alignment and sizes) has passed.
        offered = {_key(c) for c in candidates.get(k["id"], [])} if shape[0] == "cube_src" else None

        def legal(v: Any, k: dict[str, Any] = k, offered: set[str] | None = offered) -> bool:
            if offered is not None and _key(v) not in offered:
                return False
            try:
                _plan(sources, op.context, k["id"], v)
                return _legal_at_run_shapes(k, v, {**op.context, **sources})
            except PyptoTuneError:
                return False

        v = detune_value(shape, legal, keep=_reduced_axes(k, {**op.context, **sources}), cap=_ran_extent(k),
                         floor=floor)
        if v is None:
            edits.append((k["id"], None, "no legal power of two"))
            continue
        sources = _plan(sources, op.context, k["id"], v)
        edits.append((k["id"], v, ""))
    return sources, edits


def frozen_knobs(cache: Cache, key: str, built: list[GridKnob], regrid: bool = False) -> list[GridKnob]:
    """The grid's values as they were first chosen for this code (``key``: the measured sources, the test command and
    the grid limit), so that a change to the ranking — whose first answer supplies each knob's candidates — does not
    move the bar the search is measured against. ``built`` (this run's choice) is kept the first time, after
    ``--regrid``, and when the knob map no longer has the frozen grid's knobs."""
    frozen = None if regrid else cache.get("grids", key)
    by_id = {k.id: k for k in built}
    if frozen and {k["id"] for k in frozen} == set(by_id) and all(
            _key(k["values"][0]) == _key(by_id[k["id"]].current) for k in frozen):
        return [GridKnob(k["id"], k["kind"], by_id[k["id"]].current, by_id[k["id"]].candidates, k["values"])
                for k in frozen]
    cache.put("grids", key, [{"id": k.id, "kind": k.kind, "values": k.values} for k in built])
    return built


def build_grid(op: Operator, measured: dict[str, str], knob_map: dict[str, Any], max_configs: int,
               cache: Cache | None = None, regrid: bool = False) -> dict[str, Any]:
    """The grid's knobs, values and the sources of each configuration (measured code: runtime debug on); with a
    ``cache``, the values first chosen for this code (``frozen_knobs``)."""
    from pypto_tune.tools.errors import PyptoTuneError

    knobs = pick_values(grid_knobs(knob_map["knobs"], knob_map["candidates"]), max_configs)
    if cache is not None:
        knobs = frozen_knobs(cache, digest(op.key(measured), max_configs), knobs, regrid)
    configs = []
    unwritable = []
    for cfg in configurations(knobs):
        src = dict(measured)
        try:
            for k in knobs:
                if _key(cfg[k.id]) != _key(k.current):
                    src = _plan(src, op.context, k.id, cfg[k.id])
        except PyptoTuneError as exc:
            unwritable.append({"config": cfg, "why": first_line(exc.message)})
            continue
        configs.append({"config": cfg, "sources": src})
    return {"knobs": [{"id": k.id, "kind": k.kind, "values": k.values, "candidates": len(k.candidates)}
                      for k in knobs], "configs": configs, "unwritable": unwritable}


def measure_grid_rows(cache: Cache, op: Operator, grid: dict[str, Any], timeout_s: float) -> list[dict[str, Any]]:
    rows = []
    for i, c in enumerate(grid["configs"]):
        cached = cache.get("runs", op.key(c["sources"])) is not None
        r = measure(cache, op, c["sources"], timeout_s)
        t = r.get("operator_time_us") if r.get("compiled") and r.get("valid", True) else None
        rows.append({"config": c["config"], "time_us": t, "run_s": r.get("wall_s"), "error": None if t is not None else
                     (r.get("log_errors") or r.get("invalid_reasons") or [r.get("error") or "invalid run"])[0]})
        if not cached:
            print(f"    [{i + 1}/{len(grid['configs'])}] "
                  + ", ".join(f"{k.split(':')[-1]}={json.dumps(v)}" for k, v in c["config"].items())
                  + f": {'%.3f µs' % t if t is not None else 'FAILED ' + str(rows[-1]['error'])[:120]} "
                  f"({r.get('wall_s')} s)", file=sys.stderr, flush=True)
    return rows


def xgb_encoding(knobs: list[dict[str, Any]]) -> list[list[list[int]]]:
    """Each knob's values as the integer vectors xgb_tuner needs (its README: "parameters … as vectors of integers"):
    the value's own integers where they tell the values apart, else the value's index."""
    out = []
    for k in knobs:
        enc = [_flat_ints(v) for v in k["values"]]
        if any(e is None for e in enc) or len({json.dumps(e) for e in enc}) != len(enc) \
                or len({len(e) for e in enc}) != 1:  # type: ignore[arg-type]
            enc = [[i] for i in range(len(k["values"]))]
        out.append(enc)  # type: ignore[arg-type]
    return out


class _Enough(Exception):
    pass


def run_xgb(tuner_dir: Path, knobs: list[dict[str, Any]], rows: list[dict[str, Any]], shipped_us: float,
            target99: float) -> dict[str, Any]:
    """PyPTO's xgb_tuner.main on the grid's knobs and values; each real run it asks for is answered from the grid
    (the same configuration's SIM result). Stops once a real run reached ``target99`` or its own budget ends."""
    enc = xgb_encoding(knobs)
    names = [f"k{i}" for i in range(len(knobs))]
    index = {tuple(_key(r["config"][k["id"]]) for k in knobs): r for r in rows}
    lines = [{"line": i + 1, "string": "{%s}" % n, n: e} for i, (n, e) in enumerate(zip(names, enc))]
    config = {"build_folder": "unused", "test_name": "unused", "results_folder": "measurements", "save_best_k": 1,
              "repeats": 1, "files": [{"grid.py": lines}]}
    runs: list[float | None] = []
    asked: list[dict[str, Any]] = []

    def measure_perf(self: Any, json_config: Any, run_params: list[dict[str, Any]]) -> float | None:
        written = run_params[0]["lines"]
        combo = []
        for i, k in enumerate(knobs):
            vec = json.loads(written[i + 1])
            combo.append(_key(k["values"][enc[i].index(vec)]))
        r = index.get(tuple(combo))
        t = r["time_us"] if r is not None else None
        runs.append(t)
        asked.append({"config": tuple(combo), "time_us": t})
        if t is not None and shipped_us / t >= target99 - 1e-9:
            raise _Enough
        return t

    sys.path.insert(0, str(tuner_dir))
    cwd = os.getcwd()
    tmp = Path(tempfile.mkdtemp(prefix="upstream-xgb-"))
    try:
        import tuner  # PyPTO's, from the checkout given

        tuner = importlib.reload(tuner)
        tuner.parse_json = lambda: json.loads(json.dumps(config))
        tuner.Execution.measure_perf = measure_perf
        import xgb_tuner

        xgb_tuner = importlib.reload(xgb_tuner)  # re-seeds random and numpy (42) as a fresh run of the tuner would
        os.chdir(tmp)
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                xgb_tuner.main()
                finished = "its budget (1 000 steps, one real run in ten)"
            except _Enough:
                finished = "99 % reached"
    finally:
        os.chdir(cwd)
        sys.path.remove(str(tuner_dir))
        shutil.rmtree(tmp, ignore_errors=True)
    distinct = len({a["config"] for a in asked})
    return {"runs": runs, "stopped_at": finished, "distinct_configs": distinct,
            "encoding": ["integers" if enc[i][0] != [0] or len(k["values"]) == 1 else "index"
                         for i, k in enumerate(knobs)]}


def xgb_expressible(knob: dict[str, Any]) -> str:
    """How the tuner would write the knob (it inserts a formatted line after a named line of the file), or why not."""
    kid = knob["id"]
    if "set_vec_tile_shapes" in kid or "set_cube_tile_shapes" in kid:
        return "a set_*_tile_shapes line after the call"
    if knob["kind"] == "tile_source":
        return "a set_*_tile_shapes line after the call the source feeds"
    if knob["kind"] in ("tile_constant", "local_constant"):
        return "an assignment line after the constant's"
    if knob["kind"] == "jit_option":
        return "a dict entry line inside the jit options"
    if knob["kind"] == "loop_option":
        return "not expressible: a keyword argument of the loop call (an inserted line cannot change it)"
    return f"not expressible as an inserted line ({knob['kind']})"


# ====================================================================== one operator variant


def run_variant(cache: Cache, op: Operator, variant: str, args: argparse.Namespace,
                tuner_dir: Path | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Session (baseline, knob map, search), grid, random expectation and XGBoost for one variant; returns its result
    and the session (whose knob map the de-tune rule reads)."""
    t0 = time.monotonic()
    res: dict[str, Any] = {"operator": op.test.name, "selector": op.test.selector, "variant": variant}
    arms = set(args.arms)
    ses = run_session(cache, op, budget=args.budget, batch=args.batch, with_search="search" in arms)
    if ses.get("error"):
        res.update(error=ses["error"], wall_s=time.monotonic() - t0)
        return res, ses
    res["baseline_us"] = ses["baseline_us"]
    res["search_trials"] = len(ses["trials"]) if "search" in arms else None
    grid = (build_grid(op, ses["measured_sources"], ses, args.grid_max, cache, args.regrid)
            if arms & {"grid", "random", "xgb"} else None)
    if grid is not None:
        res["grid_knobs"] = [{k: v for k, v in g.items()} | {"xgb_writes_it_as": xgb_expressible(
            next(k for k in ses["knobs"] if k["id"] == g["id"]))} for g in grid["knobs"]]
        res["unwritable"] = len(grid["unwritable"])
        res["unwritable_examples"] = grid["unwritable"][:3]
        if not grid["knobs"]:
            res["note"] = "no live knob with candidates: no grid"
    rows = measure_grid_rows(cache, op, grid, args.timeout) if grid and grid["knobs"] else []
    shipped = rows[0]["time_us"] if rows else None
    if rows and shipped is not None and any(r["time_us"] is not None for r in rows):
        times = [r["time_us"] for r in rows]
        r90, k90, best = random_expectation(times, shipped, 0.9)
        r99, k99, _ = random_expectation(times, shipped, 0.99)
        res.update(N=len(rows), failed_configs=sum(t is None for t in times), grid_shipped_us=shipped,
                   grid_best_us=shipped / best, grid_speedup=best, random90=r90, random99=r99, K90=k90, K99=k99,
                   grid_best_config=min((r for r in rows if r["time_us"] is not None),
                                        key=lambda r: r["time_us"])["config"],
                   grid_failures=[r for r in rows if r["time_us"] is None][:3])
        base = ses["baseline_us"]
        target90, target99 = 0.9 * best, 0.99 * best
        if "search" in arms:
            curve = search_curve(base, ses["trials"])
            res.update(search_curve=curve, search_best=curve[-1] if curve else 1.0,
                       search90=reach(curve, target90), search99=reach(curve, target99),
                       remeasured=remeasured(base, ses["trials"]),
                       failed=failed_trials(ses["trials"]), refused=sum(1 for t in ses["trials"] if t.get("refused")),
                       failed_kept=sum(1 for t in ses["trials"] if t["time_us"] is None and t["decision"] == "kept"),
                       stages=ses.get("stages"), search_stop=ses.get("search_stop"), rankings=ses.get("rankings"),
                       trials=ses["trials"])
        if "xgb" in arms and tuner_dir is not None:
            try:
                x = run_xgb(tuner_dir, grid["knobs"], rows, shipped, target99)
                xc = best_curve(x["runs"], shipped)
                res.update(xgb_runs=len(x["runs"]), xgb90=reach(xc, target90), xgb99=reach(xc, target99),
                           xgb_distinct=x["distinct_configs"], xgb_stopped=x["stopped_at"],
                           xgb_encoding=x["encoding"])
            except ImportError as exc:
                res["xgb_error"] = f"{type(exc).__name__}: {exc} (pip install -e '.[bench]')"
    elif rows:
        res["note"] = "the grid's shipped configuration did not run: " + str(rows[0]["error"])
    res["session_s"] = ses.get("wall_s")
    res["grid_s"] = sum(r.get("run_s") or 0 for r in rows)  # the SIM runs' own wall time, cached or not
    res["wall_s"] = time.monotonic() - t0
    res["uncached_s"] = (ses.get("wall_s") or 0) + res["grid_s"]
    return res, ses


def run_operator(cache: Cache, checkout: Path, test: ExampleTest, args: argparse.Namespace,
                 tuner_dir: Path | None) -> list[dict[str, Any]]:
    op = load_operator(checkout, test)
    out = []
    if args.arms == ["run"]:
        t0 = time.monotonic()
        chk = check_runs(cache, op)
        return [{"operator": test.name, "selector": test.selector, "variant": "shipped", "error": chk.get("error"),
                 "runs": not chk.get("error"), "wall_s": time.monotonic() - t0}]
    shipped, ses = run_variant(cache, op, "shipped", args, tuner_dir) if "shipped" in args.variants else (None, None)
    if shipped is not None:
        out.append(shipped)
    if "detuned" in args.variants:
        if ses is None:
            ses = run_session(cache, op, budget=args.budget, batch=args.batch, with_search=False)
        if ses.get("error"):
            out.append({"operator": test.name, "variant": "detuned", "error": "shipped does not run"})
            return out
        tried: list[dict[str, Any]] = []
        for floor in DETUNE_FLOORS:
            sources, edits = detune(op, ses["knobs"], ses["candidates"], floor=floor)
            if sources == op.sources:
                res = {"operator": test.name, "variant": "detuned", "error": "no live tile to de-tune"}
                break
            if tried and sources == tried[-1]["sources"]:
                continue  # every tile already at its floor or above: the same code again
            res, _ = run_variant(cache, Operator(test, op.folder, sources, op.context), "detuned", args, tuner_dir)
            tried.append({"floor": floor, "sources": sources, "error": res.get("error")})
            if not res.get("error"):
                break
        res.update(detune_edits=edits, detune_floor=tried[-1]["floor"] if tried else floor,
                   detune_floors_failed=[{"floor": t["floor"], "error": t["error"]} for t in tried if t["error"]])
        out.append(res)
    return out


def tables_from(paths: list[Path]) -> str:
    """One table from several runs' JSON files, each row summarised again from its trials (the run's own columns may
    come from an older version of this script)."""
    rows = []
    for p in paths:
        for r in json.loads(p.read_text())["results"]:
            if r.get("trials") is not None and r.get("baseline_us") is not None:
                r["remeasured"] = remeasured(r["baseline_us"], r["trials"])
                r["failed"] = failed_trials(r["trials"])
                r["refused"] = sum(1 for t in r["trials"] if t.get("refused"))
            rows.append(r)
    return table(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("checkout", type=Path, nargs="?", help="PyPTO work tree whose examples/ match the installed pypto")
    ap.add_argument("--tuner-checkout", type=Path, default=None,
                    help="PyPTO work tree holding tools/scripts/tuner/xgb_tuner.py (default: the checkout)")
    ap.add_argument("--only", action="append", default=[],
                    help="run the operators whose FILE::test_fn or selector contains this text (repeatable)")
    ap.add_argument("--budget", type=int, default=16, help="search trials per operator variant (default 16)")
    ap.add_argument("--batch", type=int, default=2, help="candidates per run_candidates call (default 2)")
    ap.add_argument("--grid-max", type=int, default=GRID_MAX, help=f"configurations per grid (default {GRID_MAX})")
    ap.add_argument("--regrid", action="store_true",
                    help="choose each grid's values anew from this code's candidates (default: as first chosen)")
    ap.add_argument("--arms", default="grid,random,search,xgb",
                    help="comma-separated: grid,random,search,xgb; 'run' alone: only whether each operator runs")
    ap.add_argument("--variants", default="shipped,detuned", help="comma-separated: shipped,detuned")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per SIM run")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--list", action="store_true", help="list the example tests found and exit")
    ap.add_argument("--tables", type=Path, nargs="+", default=None, metavar="JSON",
                    help="print one table from the --json files of earlier runs (one per operator, say) and exit")
    args = ap.parse_args(argv)
    if args.tables:
        print(tables_from(args.tables))
        return 0
    if args.checkout is None:
        ap.error("PYPTO_CHECKOUT is required (a work tree of PyPTO's repository at the installed version's tag)")
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    checkout = args.checkout.resolve()
    tests = discover(checkout / "examples")
    if args.only:
        tests = [t for t in tests if any(o in t.name or o in t.selector for o in args.only)]
    if args.list:
        for t in tests:
            print(f"{t.file} {t.selector}")
        return 0
    tuner_root = (args.tuner_checkout or checkout).resolve() / "tools" / "scripts" / "tuner"
    tuner_dir = tuner_root if (tuner_root / "xgb_tuner.py").is_file() else None
    if "xgb" in args.arms and tuner_dir is None:
        print(f"no xgb_tuner.py under {tuner_root}: the XGBoost arm is skipped", file=sys.stderr)
    code = own_code()
    cache = Cache(args.cache)
    results: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for i, test in enumerate(tests, 1):
        print(f"[{i}/{len(tests)}] {test.name}", file=sys.stderr, flush=True)
        results += run_operator(cache, checkout, test, args, tuner_dir)
        for r in results[-2:]:
            if r["operator"] == test.name:
                print(f"  {r['variant']}: " + (r.get("error") or
                                             f"N {r.get('N')}, grid {r.get('grid_speedup') or 0:.2f}×, search "
                                             f"90 % at {r.get('search90')}, random {r.get('random90') or 0:.1f}, "
                                             f"XGB {r.get('xgb90')}"), file=sys.stderr, flush=True)
    print(table(results))
    bad = [r for r in results if r.get("error") and r["variant"] == "shipped"]
    if bad:
        print("\nOperators that do not run in SIM with pypto 0.2.0 (first error line):")
        for r in bad:
            print(f"- {r['operator']}: {r['error']}")
    for r in results:
        for note in ("note", "xgb_error"):
            if r.get(note):
                print(f"- {r['operator']} ({r['variant']}): {r[note]}")
    print(f"\nwall {time.monotonic() - t0:.0f} s; cache {args.cache}")
    if args.json:
        args.json.write_text(json.dumps({"checkout": str(checkout), "code": code, "arms": args.arms, "budget": args.budget,
                                         "batch": args.batch, "grid_max": args.grid_max, "results": results},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
