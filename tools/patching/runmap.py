"""The knob map joins text and run: which knob sites this test runs, and with which values (issue #17).

The static knob list (:func:`.extract.sites_of`) says what the source *could* do; the run-time probe
(``tools/running/probe/``) says what one run of the test *did*: every tiling / option / loop / view call with its
call site and effective arguments, every jit kernel with the tensors it got, the kernel-body statements pypto's
parser traced. :class:`RunMap` joins the two:

* **live / dead** — a call-site knob is live when the probe recorded its call (same file, a line inside the call,
  the API its kind configures); a jit option when its kernel was called; a name or a tiling source when one of the
  tiling consumers it feeds ran. ``None`` when the run says nothing (no record, or an API the probe did not wrap).
* **effective values** — what the call received in each kernel that ran it (``Execution``), with the shapes and
  dtypes that kernel ran on (its input tensors and the views it built), so legality is judged on what ran.
* **sharing** — the other kernels and tests whose code reaches the same site (a helper several kernels call), each
  marked whether this test ran it.

The admission gate judges changes on these runs (tools/patching/runcheck.py, with the derivation of what a changed
source gives at a tile call in tools/patching/derive.py).

The run arrives as plain data (``ProbeRecord.model_dump()``, as the ledger stores it): this floor does not import
the running layer above it.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from . import roles
from .extract import Site
from pypto_tune.tools.code import pysource

# The pypto API each call-site knob kind configures (probe api names, tools/running/probe/hook).
KIND_APIS = {
    "vec_tile": {"set_vec_tile_shapes"}, "cube_tile": {"set_cube_tile_shapes"},
    "pass_option": {"set_pass_options"}, "sg_set_scope": {"set_pass_options"},
    "combine_axis": {"set_operation_options"}, "cache_policy": {"Tensor.set_cache_policy"},
    "valid_shape": {"view", "reshape", "Tensor.view", "Tensor.reshape"}, "loop_option": {"loop", "loop_unroll"},
}
# Consumer kinds of the role analysis → the probe APIs whose call at the consumer's line shows it ran.
CONSUMER_APIS = {
    "vec_tile": {"set_vec_tile_shapes"}, "cube_tile": {"set_cube_tile_shapes"}, "loop": {"loop", "loop_unroll"},
    "unroll": {"loop", "loop_unroll"}, "loop_submit": {"loop", "loop_unroll"}, "pass_options": {"set_pass_options"},
    "operation_options": {"set_operation_options"}, "view": {"view", "reshape", "assemble", "Tensor.view",
                                                             "Tensor.reshape"},
    "cache_policy": {"Tensor.set_cache_policy"},
}
TORCH_DTYPES = {"torch.float16": "DT_FP16", "torch.bfloat16": "DT_BF16", "torch.float32": "DT_FP32",
                "torch.int8": "DT_INT8", "torch.int16": "DT_INT16", "torch.int32": "DT_INT32",
                "torch.int64": "DT_INT64", "torch.uint8": "DT_UINT8", "torch.bool": "DT_BOOL"}


class KnobRun(BaseModel):
    """What the run says about one knob (list_knobs, the round's record, the search)."""

    live: bool | None = Field(None, description="True: this test runs the site; False: it never does (a branch or "
                              "kernel the test does not enter); null: the run says nothing about it")
    effective: list[Any] = Field(default_factory=list, description="the distinct values the site had when it ran")
    kernels: list[str] = Field(default_factory=list, description="jit kernels that ran it")
    tests: list[str] = Field(default_factory=list, description="test functions that ran it")
    shared_with: list[str] = Field(default_factory=list, description="other kernels and tests whose code reaches "
                                   "this site (a change here changes them too)")
    shapes: list[list[Any]] = Field(default_factory=list, description="tensor and view shapes of the kernels that "
                                    "ran it")
    dtypes: list[str] = Field(default_factory=list, description="the dtypes those kernels ran on, with what their "
                              "pypto.cast calls produce (what a tile's buffer must hold)")
    why: str = ""
    unroll: str = Field("", description="for a site inside a pypto.loop_unroll body, or the loop itself: which unroll "
                        "variants executed at the test's shapes and which were only traced (compiled, never run)")


def executes(call: dict[str, Any]) -> bool:
    """Did this recorded call run at the test's shapes? False only when it sat in a ``loop_unroll`` variant whose
    loop has no iteration there (traced and compiled for the other factors' sake, never executed); a variant whose
    bounds are symbolic counts as executing."""
    return all(u.get("iterations") != 0 for u in call.get("unroll") or [])


def replaced_unused(calls: list[dict[str, Any]]) -> bool:
    """Did every executed one of these tile calls see no operation built under it (``ops`` 0: a later tile call of
    its kind replaced it first)? False when the probe did not count (``ops`` absent) or nothing executed."""
    ran = [c for c in calls if executes(c)]
    return bool(ran) and all(c.get("ops") == 0 for c in ran)


_TILE_WORD = {"vec_tile": ("vector", "set_vec_tile_shapes"), "cube_tile": ("cube", "set_cube_tile_shapes")}


def _factors(calls: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The loop_unroll variants the calls sat in: those that executed (with their trip counts) and those only traced."""
    ran: dict[tuple, str] = {}
    idle: dict[tuple, str] = {}
    for c in calls:
        for u in c.get("unroll") or []:
            key = (u.get("file"), u.get("line"), u.get("factor"))
            label = f"factor {u.get('factor')} of the loop_unroll at {u.get('file')}:{u.get('line')}"
            if u.get("iterations") == 0:
                idle.setdefault(key, label)
            else:
                ran.setdefault(key, label + (f" ({u['iterations']} iterations)" if u.get("iterations") else ""))
    idle = {k: v for k, v in idle.items() if k not in ran}
    return [ran[k] for k in sorted(ran, key=str)], [idle[k] for k in sorted(idle, key=str)]


def _describe_variants(calls: list[dict[str, Any]]) -> str:
    ran, idle = _factors(calls)
    out = ("ran in " + ", ".join(ran)) if ran else ""
    if idle:
        out += ("; " if out else "") + "traced and compiled, never executed at the test's shapes: " + ", ".join(idle)
    return out


def unroll_variants(calls: list[dict[str, Any]], file: str, line: int) -> str:
    """What the loop_unroll at ``file:line`` ran: each factor's trip count at the test's shapes (from the ``loop``
    pypto opened for it)."""
    import re

    trips = []
    for c in calls:
        m = re.search(r"_LoopUnroll(\d+)$", str((c.get("kwargs") or {}).get("name", "")))
        a = c.get("args") or []
        if c.get("api") != "loop" or c.get("file") != file or c.get("line") != line or m is None or len(a) != 3:
            continue
        if all(isinstance(x, int) for x in a) and a[2] > 0:
            trips.append((int(m.group(1)), max(0, -(-(a[1] - a[0]) // a[2]))))
        else:
            trips.append((int(m.group(1)), None))
    if not trips:
        return ""
    ran = [f"{p} ({n} iterations)" if n else f"{p} (trip count symbolic)" for p, n in trips if n != 0]
    idle = [str(p) for p, n in trips if n == 0]
    return ("factors run at the test's shapes: " + (", ".join(ran) or "none")
            + (f"; factor(s) {', '.join(idle)} traced and compiled, never executed" if idle else ""))


@dataclass
class Execution:
    """One value a tile call had in one kernel of the run."""

    kernel: str  # kernel name
    kernel_key: str | None
    value: Any
    count: int
    shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    reductions: list[roles.Reduction] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    cast_dtypes: list[str] = field(default_factory=list)  # what the kernel's pypto.cast calls produced

    def describe(self) -> str:
        shapes = ", ".join(str(s) for s in self.shapes[:4]) or "no concrete shapes"
        return f"kernel {self.kernel} ran it with {self.value!r} on {shapes}" + (
            f" ({'/'.join(self.dtypes)})" if self.dtypes else "")


def _scope_of_qualname(qualname: str) -> str:
    return qualname.replace(".<locals>", "")


@functools.lru_cache(maxsize=64)
def _decorators(text: str) -> dict[int, str]:
    """line of each decorator call → the dotted scope of the function it decorates."""
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return {}
    out: dict[int, str] = {}

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name if scope == roles.MODULE else f"{scope}.{child.name}"
                for d in child.decorator_list:
                    for line in range(d.lineno, (d.end_lineno or d.lineno) + 1):
                        out[line] = inner
                visit(child, inner)
            elif not isinstance(child, ast.ClassDef):
                visit(child, scope)

    visit(tree, roles.MODULE)
    return out


def _decorated_scope(text: str, line: int) -> str | None:
    return _decorators(text).get(line)


@functools.lru_cache(maxsize=64)
def _statements(text: str) -> list[tuple[int, int]]:
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return []
    return sorted((n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, ast.stmt))


@functools.lru_cache(maxsize=64)
def _calls(text: str) -> dict[int, list[tuple[int, str]]]:
    """start line → [(end line, callee short name)] of every call in the file."""
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return {}
    out: dict[int, list[tuple[int, str]]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = roles.dotted(n.func).rsplit(".", 1)[-1]
            out.setdefault(n.lineno, []).append((n.end_lineno or n.lineno, name))
    return out


def call_span(text: str, line: int, name: str) -> tuple[int, int]:
    """(first, last) line of the call of ``name`` that starts at ``line`` (``(line, line)`` when there is none)."""
    return next(((line, end) for end, n in _calls(text).get(line, []) if n == name), (line, line))


def call_around(text: str, line: int, names: set[str] | frozenset[str]) -> tuple[int, int, str] | None:
    """(first line, last line, short name) of the call of one of ``names`` that holds ``line``: the one that starts
    there, else the innermost that started before (a ``valid_shape=`` on a view's second line, as PyPTO's examples
    write it; the probe records a call at its first line). None when no such call holds the line."""
    calls = _calls(text)
    for end, name in calls.get(line, []):
        if name in names:
            return line, end, name
    around = [(start, end, name) for start, found in calls.items() if start < line
              for end, name in found if name in names and end >= line]
    return max(around) if around else None


@functools.lru_cache(maxsize=64)
def _casts(text: str) -> dict[str, set[str]]:
    """(dotted) function scope → the dtypes its own ``pypto.cast(x, pypto.DT_…)`` calls name as their target."""
    from .models import DTYPE_BYTES

    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return {}
    out: dict[str, set[str]] = {}

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name if scope == roles.MODULE else f"{scope}.{child.name}")
                continue
            if isinstance(child, ast.Call) and roles.dotted(child.func).rsplit(".", 1)[-1] == "cast":
                arg = next((kw.value for kw in child.keywords if kw.arg == "dtype"),
                           child.args[1] if len(child.args) > 1 else None)
                name = roles.dotted(arg).rsplit(".", 1)[-1] if arg is not None else ""
                if name in DTYPE_BYTES:
                    out.setdefault(scope, set()).add(name)
            visit(child, scope)

    visit(tree, roles.MODULE)
    return out


class RunMap:
    """The join of one source state's knob sites with the probe record of a run of that state."""

    def __init__(self, files: dict[str, str], sites: list[Site], program: roles.Program, run: dict[str, Any] | None):
        self.files = files  # every Python file of the workspace (operator files and context)
        self.sites = sites
        self.program = program
        self.run = run if run and run.get("status") == "reported" else None
        self.status = (run or {}).get("status", "not-probed")
        self.reason = (run or {}).get("reason", "")
        self.kernels: dict[str, dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self.frames: set[tuple[str, int]] = set()
        self.functions: set[tuple[str, str]] = set()  # (file, code name) of every workspace frame recorded
        self.traced: dict[str, set[int]] = {}
        if self.run is not None:
            self.run = _remap(self.run, files)
            self.kernels = {k["key"]: k for k in self.run.get("kernels", [])}
            self.calls = [c for c in self.run.get("calls", []) if c.get("in_workspace")]
            chains = [c.get("stack", []) for c in self.calls] + [
                chain for k in self.kernels.values() for chain in k.get("called_from", [])]
            for chain in chains:
                for fr in chain:
                    if fr.get("in_workspace"):
                        self.frames.add((fr["file"], fr["line"]))
                        self.functions.add((fr["file"], fr["function"]))
            self.traced = {f: set(v) for f, v in self.run.get("traced", {}).items()}
        self._cache: dict[str, KnobRun] = {}

    @property
    def reported(self) -> bool:
        return self.run is not None

    def live_sites(self) -> list[Site]:
        """Sites the run shows live, or every site when the run says nothing (status not 'reported')."""
        return [s for s in self.sites if self.of(s).live is not False]

    def dead_ids(self) -> set[str]:
        return {s.knob.id for s in self.sites if self.of(s).live is False}

    # ------------------------------------------------------------------------------------------- what ran
    def kernel_name(self, key: str | None) -> str:
        k = self.kernels.get(key or "")
        return k["name"] if k else "?"

    def kernels_ran(self) -> dict[str, dict[str, Any]]:
        """Kernel records by static scope key (file, dotted scope)."""
        return {(k["file"], _scope_of_qualname(k["qualname"])): k for k in self.kernels.values()}  # type: ignore[misc]

    def _span(self, file: str, line: int, apis: set[str]) -> tuple[int, int]:
        found = call_around(self.files.get(file, ""), line, {a.rsplit(".", 1)[-1] for a in apis})
        return (found[0], found[1]) if found else (line, line)

    def calls_at(self, file: str, line: int, apis: set[str]) -> list[dict[str, Any]]:
        """Recorded calls of ``apis`` at the call that starts at ``file:line``."""
        lo, hi = self._span(file, line, apis)
        return [c for c in self.calls if c["file"] == file and lo <= c["line"] <= hi and c["api"] in apis]

    def executed(self, file: str, line: int) -> bool:
        """Did the run execute the statement holding ``file:line``? (traced by pypto's parser, or on a frame)"""
        if (file, line) in self.frames:
            return True
        inner = None
        for start, end in _statements(self.files.get(file, "")):
            if start <= line <= end and (inner is None or end - start <= inner[1] - inner[0]):
                inner = (start, end)
        if inner is None:
            return False
        return inner[0] in self.traced.get(file, set()) or any(
            (file, x) in self.frames for x in range(inner[0], inner[1] + 1))

    def consumer_ran(self, kind: str, file: str, line: int) -> bool:
        apis = CONSUMER_APIS.get(kind)
        if kind == "jit_options":  # the jit decorator at this line: its kernel was called
            scope = _decorated_scope(self.files.get(file, ""), line)
            return scope is not None and (file, scope) in self.kernels_ran()
        calls = self.calls_at(file, line, apis) if apis else []
        if calls:
            # a call traced only for loop_unroll variants the test's shapes never execute did not run; a tile call
            # replaced before any operation used it ran, but what it is fed changes nothing
            return any(executes(c) for c in calls) and not (kind in _TILE_WORD and replaced_unused(calls))
        return self.executed(file, line)

    def _replaced_note(self, consumers: list[tuple[str, str, int]]) -> str:
        """For a value none of whose consumers took effect: the tile calls among them that ran but were replaced."""
        replaced = sorted({f"{f}:{line}" for kind, f, line in consumers if kind in _TILE_WORD
                           and replaced_unused(self.calls_at(f, line, CONSUMER_APIS[kind]))})
        if not replaced:
            return ""
        return (f"; {', '.join(replaced[:3])} ran, but a later tile call replaced "
                f"{'it' if len(replaced) == 1 else 'each'} before any operation used its tile")

    def scope_ran(self, file: str, scope: str) -> bool:
        """Did the run execute the function ``scope`` of ``file``? Module level counts as run; a jit kernel when
        it was called; any other function when one of the recorded frames is in it."""
        if scope == roles.MODULE or (file, scope) in self.kernels_ran():
            return True
        if (file, scope.rsplit(".", 1)[-1]) in self.functions:
            return True
        # a function nested in a kernel body that pypto's parser inlined: its statements were traced
        return any((f, sc) in self.kernels_ran() and scope.startswith(sc + ".") for f, sc in [(file, scope)]
                   for _ in [0]) and bool(self.traced.get(file))

    def tests_of(self, stacks: list[list[dict[str, Any]]]) -> list[str]:
        """Test functions on these call stacks: a workspace function named test*, else the outermost one."""
        out: list[str] = []
        for stack in stacks:
            names = [fr["function"] for fr in stack if fr.get("in_workspace")
                     and fr["function"] not in ("<jit>", "<module>")]
            tests = [n for n in names if n.lower().startswith("test")]
            pick = tests[-1] if tests else (names[-1] if names else None)
            if pick and pick not in out:
                out.append(pick)
        return out

    def kernel_context(self, key: str | None) -> tuple[list[list[int]], list[str], list[roles.Reduction]]:
        """Concrete shapes (input tensors, then the views it built), dtypes and reductions of one kernel's run."""
        k = self.kernels.get(key or "")
        shapes: list[list[int]] = []
        dtypes: list[str] = []
        if k is None:
            return shapes, dtypes, []
        for call in (k.get("inputs") or [])[:1]:
            for a in call:
                if isinstance(a, dict) and "$tensor" in a:
                    s = a["$tensor"]
                    if all(isinstance(d, int) for d in s) and s not in shapes:
                        shapes.append(list(s))
                    d = TORCH_DTYPES.get(str(a.get("dtype")), str(a.get("dtype", "")).rsplit(".", 1)[-1])
                    if d.startswith("DT_") and d not in dtypes:
                        dtypes.append(d)
        for c in self.run.get("calls", []) if self.run else []:
            s = c.get("result_shape")
            if c.get("kernel") == key and isinstance(s, list) and s and all(isinstance(d, int) for d in s) \
                    and s not in shapes:
                shapes.append(list(s))
        scope = (k["file"], _scope_of_qualname(k["qualname"]))
        reach = self.program.kernel_reach.get(scope, {scope})
        reds = [r for f, rs in self.program.reductions.items() for r in rs if (f, r.scope) in reach]
        return shapes, dtypes, reds

    def cast_dtypes(self, key: str | None) -> list[str]:
        """The dtypes the ``pypto.cast`` calls of everything the kernel that ran reaches (its body, its nested defs,
        the workspace helpers it calls) name as their target: what its vector ops hold in the unified buffer besides
        its tensors' own dtypes. Read from the text of the kernel the run names, not recorded by the probe: pypto
        attributes an op to the frame that calls it, and a wrapper around ``cast`` would have become that frame in
        the compiled program's source locations."""
        k = self.kernels.get(key or "")
        if k is None:
            return []
        scope = (k["file"], _scope_of_qualname(k["qualname"]))
        out: set[str] = set()
        for f, sc in self.program.kernel_reach.get(scope, {scope}):
            out |= _casts(self.files.get(f, "")).get(sc, set())
        return sorted(out)

    # ------------------------------------------------------------------------------------------- per knob
    def of(self, site: Site) -> KnobRun:
        k = site.knob
        if k.id in self._cache:
            return self._cache[k.id]
        info = self._of(site)
        info.shared_with = self.shared_with(site)
        self._cache[k.id] = info
        return info

    def _of(self, site: Site) -> KnobRun:
        k = site.knob
        if self.run is None:
            return KnobRun(live=None, why=f"the run-time probe did not report ({self.status}"
                           + (f": {self.reason}" if self.reason else "") + ")")
        if k.kind in KIND_APIS:
            lines = k.context.get("lines")
            lines = list(lines.values()) if isinstance(lines, dict) else (lines or [self._anchor_line(site)])
            traced = [c for line in lines for c in self.calls_at(k.file, line, KIND_APIS[k.kind])]
            hits = [c for c in traced if executes(c)]
            variants = _describe_variants(traced)
            if k.kind == "loop_option":
                variants = "; ".join(x for x in [variants] + [unroll_variants(self.calls, k.file, line)
                                                               for line in lines] if x)
            if k.kind in _TILE_WORD and replaced_unused(traced):
                word, api = _TILE_WORD[k.kind]
                return KnobRun(live=False, unroll=variants, why=f"the call at {k.file}:{lines[0]} ran, but no {word} "
                               f"operation was built while its tile was in force: a later {api} replaced it first, "
                               "so its value changes nothing")
            if not hits:
                if traced:
                    idle = ", ".join(_factors(traced)[1])
                    return KnobRun(live=False, unroll=variants, why=f"the call at {k.file}:{lines[0]} sits only in "
                                   f"loop_unroll variants the test's shapes never execute ({idle}): traced and "
                                   "compiled, never run")
                return KnobRun(live=False, why=f"the test never ran the call at {k.file}:{lines[0]}")
            effective: list[Any] = []
            own = [c for c in hits if c.get("origin") == "direct"] if k.kind == "loop_option" else []
            for c in own or hits:  # a loop option: the user's call, not the loops pypto opened for its variants
                v = effective_value(k, c)
                if v not in effective:
                    effective.append(v)
            kernels = sorted({self.kernel_name(c.get("kernel")) for c in hits if c.get("kernel")})
            shapes: list[list[Any]] = []
            dtypes: list[str] = []
            for key in dict.fromkeys(c.get("kernel") for c in hits):  # each kernel that ran it, once
                ran_shapes, ran_dtypes, _ = self.kernel_context(key)
                shapes += [s for s in ran_shapes if s not in shapes]
                dtypes = list(dict.fromkeys(dtypes + ran_dtypes + self.cast_dtypes(key)))
            return KnobRun(live=True, effective=effective, kernels=kernels, shapes=shapes, dtypes=dtypes,
                           unroll=variants, tests=self.tests_of([c.get("stack", []) for c in hits]))
        if k.kind in ("jit_option", "debug_option"):
            kernel = self._kernel_of(site)
            if kernel is None:
                return KnobRun(live=False, why=f"the test never called the jit kernel {k.function}")
            group = next((p for p in k.id.split(".") if p.endswith("_options")), "")
            value = (kernel.get("options") or {}).get(group, {}).get(k.name)
            return KnobRun(live=True, effective=[value], kernels=[kernel["name"]],
                           shapes=self.kernel_context(kernel["key"])[0],
                           tests=self.tests_of(kernel.get("called_from", [])))
        consumers = self._consumers(site)
        if consumers is None:
            return KnobRun(live=None, why="the server does not know where this knob is used")
        if not consumers:
            return KnobRun(live=None, why="it feeds no tiling call (not a tuning knob)")
        scope = k.function or roles.MODULE
        if not self.scope_ran(k.file, scope):
            return KnobRun(live=False, why=f"the test never ran {scope} of {k.file}, where it is set")
        ran = [(kind, f, line) for kind, f, line in consumers if self.consumer_ran(kind, f, line)]
        if not ran:
            where = ", ".join(sorted({f"{f}:{line}" for _, f, line in consumers})[:3])
            return KnobRun(live=False, why=f"none of the tiling calls it feeds took effect ({where})"
                           + self._replaced_note(sorted(consumers)))
        hits = [c for _, f, line in ran for c in self.calls_at(f, line, set().union(*CONSUMER_APIS.values()))
                if executes(c)]
        unroll = "; ".join(x for x in (unroll_variants(self.calls, f, line) for kind, f, line in ran
                                       if kind == "unroll") if x)
        return KnobRun(live=True, effective=[k.value], kernels=sorted({self.kernel_name(c.get("kernel"))
                                                                        for c in hits if c.get("kernel")}),
                       tests=self.tests_of([c.get("stack", []) for c in hits]), unroll=unroll)

    def _anchor_line(self, site: Site) -> int:
        call = site.extra.get("call")
        if call is not None:  # an absent loop option: the loop call's line is the knob's line
            return site.knob.line
        if site.knob.kind == "loop_option" and site.knob.present:
            # a present option sits inside the loop call: find the call that spans it
            for start, ends in _calls(self.files.get(site.file, "")).items():
                for end, name in ends:
                    if name in ("loop", "loop_unroll") and start <= site.knob.line <= end:
                        return start
        return site.knob.line

    def _kernel_of(self, site: Site) -> dict[str, Any] | None:
        scope = site.knob.function or ""
        for (file, sc), k in self.kernels_ran().items():
            if file == site.file and sc == scope:
                return k
        return None

    def _consumers(self, site: Site) -> set[tuple[str, str, int]] | None:
        k = site.knob
        if site.extra.get("source"):
            src = source_of(self.program, site)
            return set(src.consumer_sites) if src is not None else None
        if site.extra.get("binding"):
            scope = k.function or roles.MODULE
            b = self.program.binding(k.file, scope, k.name)
            return set(b.consumer_sites) if b is not None else None
        return None

    # ------------------------------------------------------------------------------------------- sharing
    def shared_with(self, site: Site) -> list[str]:
        """Other kernels and tests whose code reaches this site, each marked whether this test ran it."""
        k = site.knob
        scope = k.function or roles.MODULE
        if site.extra.get("source") and k.context.get("source") == "field":
            return []  # a keyword of this test's own construction: no other test reads it
        if site.extra.get("source") or site.extra.get("binding"):
            consumers = self._consumers(site) or set()
            scopes = {(f, self._scope_at(f, line)) for _, f, line in consumers} | {(k.file, scope)}
        else:
            scopes = {(k.file, scope)}
        kernels = sorted({kk for f, sc in scopes for kk in self.program.kernels_reaching(f, sc)})
        tests = sorted({t for f, sc in scopes for t in self.program.tests_reaching(f, sc)})
        if len(kernels) <= 1 and len(tests) <= 1:
            return []
        ran_kernels = set(self.kernels_ran()) if self.run else set()
        ran_tests = set(self.tests_of([c.get("stack", []) for c in self.calls])) if self.run else set()
        out = []
        for key in kernels:
            mark = "" if not self.run else (" (ran)" if key in ran_kernels else " (not run by this test)")
            out.append(f"kernel {key[1].rsplit('.', 1)[-1]}{mark}")
        for key in tests:
            mark = "" if not self.run else (" (ran)" if key[1] in ran_tests else " (not run by this test)")
            out.append(f"test {key[1]}{mark}")
        return out

    def _scope_at(self, file: str, line: int) -> str:
        best = (roles.MODULE, 0)
        try:
            tree = pysource.parse(self.files.get(file, ""))
        except SyntaxError:
            return roles.MODULE

        def visit(node: ast.AST, scope: str) -> None:
            nonlocal best
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inner = child.name if scope == roles.MODULE else f"{scope}.{child.name}"
                    if child.lineno <= line <= (child.end_lineno or child.lineno):
                        best = (inner, child.lineno)
                        visit(child, inner)
                elif not isinstance(child, ast.ClassDef):
                    visit(child, scope)

        visit(tree, roles.MODULE)
        return best[0]

    # ------------------------------------------------------------------------------------------- executions
    def executions(self, site: Site) -> list[Execution]:
        """Every value the tile call at ``site`` had in the run, per kernel, with that kernel's shapes."""
        k = site.knob
        apis = KIND_APIS.get(k.kind)
        if self.run is None or apis is None:
            return []
        out: list[Execution] = []
        for c in self.calls_at(k.file, k.line, apis):
            shapes, dtypes, reds = self.kernel_context(c.get("kernel"))
            out.append(Execution(kernel=self.kernel_name(c.get("kernel")), kernel_key=c.get("kernel"),
                                 value=effective_value(k, c), count=int(c.get("count", 1)), shapes=shapes,
                                 dtypes=dtypes, reductions=reds, tests=self.tests_of([c.get("stack", [])]),
                                 cast_dtypes=self.cast_dtypes(c.get("kernel"))))
        return out


def knob_map(sources: dict[str, str], context: dict[str, str] | None, run: dict[str, Any] | None) -> RunMap:
    """The knob map of ``sources`` (operator files) joined with ``run`` (a probe record of a run of them, plain
    data; None when there is none). ``context``: the workspace's other Python files."""
    from .extract import sites_of

    files = {**(context or {}), **sources}
    _, sites = sites_of(sources, context)
    return RunMap(files, sites, roles.analyze(files), run)


def effective_value(knob: Any, call: dict[str, Any]) -> Any:
    """The knob's value as one recorded call had it, in the knob's own form."""
    args, kwargs = list(call.get("args") or []), dict(call.get("kwargs") or {})
    kind = knob.kind
    if kind == "vec_tile":
        return list(args[0]) if len(args) == 1 and isinstance(args[0], list) else args
    if kind == "cube_tile":
        out = dict(zip(("m", "k", "n", "enable_split_k"), args))
        out.update({k: v for k, v in kwargs.items() if k in ("m", "k", "n", "enable_split_k")})
        return out
    if kind in ("pass_option", "combine_axis", "loop_option", "sg_set_scope"):
        return kwargs.get(knob.name)
    if kind == "valid_shape":
        return kwargs.get("valid_shape")
    if kind == "cache_policy":
        return args[1] if len(args) > 1 else None
    return None


def _line_map(old: str, new: str) -> dict[int, int]:
    """1-based line of ``old`` → the same line in ``new``, for the lines the two texts share."""
    import difflib

    a, b = old.splitlines(), new.splitlines()
    out: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for i in range(block.size):
            out[block.a + i + 1] = block.b + i + 1
    return out


def _remap(run: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    """The record with its line numbers moved onto ``files`` where the files differ from what ran (the debug
    switch, a pinned multi-line value): the record is of the state a change starts from, the map may be asked about
    the same state with debug options on. Lines the texts do not share are dropped."""
    ran = run.get("ran_sources") or {}
    maps = {f: _line_map(text, files[f]) for f, text in ran.items() if f in files and files[f] != text}
    if not maps:
        return run

    def frame(fr: dict[str, Any]) -> dict[str, Any] | None:
        m = maps.get(fr.get("file"))
        if m is None:
            return fr
        line = m.get(int(fr["line"]))
        return None if line is None else {**fr, "line": line}

    out = dict(run)
    out["calls"] = []
    for c in run.get("calls", []):
        moved = frame(c)
        if moved is None:
            continue
        moved["stack"] = [f for f in (frame(fr) for fr in c.get("stack", [])) if f is not None]
        out["calls"].append(moved)
    out["kernels"] = []
    for k in run.get("kernels", []):
        moved = frame(k) or k
        moved["called_from"] = [[f for f in (frame(fr) for fr in chain) if f is not None]
                                for chain in k.get("called_from", [])]
        out["kernels"].append(moved)
    out["traced"] = {f: sorted(maps[f][x] for x in lines if x in maps[f]) if f in maps else lines
                     for f, lines in run.get("traced", {}).items()}
    return out


# The derivation moved to derive.py; the names the search reads stay importable from here.
from .derive import NoValue as _NoValue, derive, feeder as _feeder, source_of  # noqa: E402,F401  # pyflakes: ignore
