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

:func:`overlay` feeds the admission gate: for every tile call that ran, the value before and after a change, one
entry per kernel execution, with that execution's shapes — the pinned literal, or what a changed tiling source gives
there (evaluated with the old value first, which must reproduce what ran, then with the new one). A tile call that
ran and whose new value the server cannot derive is refused, never passed as "unchecked".

The run arrives as plain data (``ProbeRecord.model_dump()``, as the ledger stores it): this floor does not import
the running layer above it.
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from ..errors import KnobValueError
from . import roles
from .effective import UNKNOWN, SiteValue
from .extract import Site

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
    why: str = ""


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
        tree = ast.parse(text[1:] if text.startswith("\ufeff") else text)
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
        tree = ast.parse(text[1:] if text.startswith("\ufeff") else text)
    except SyntaxError:
        return []
    return sorted((n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, ast.stmt))


@functools.lru_cache(maxsize=64)
def _calls(text: str) -> dict[int, list[tuple[int, str]]]:
    """start line → [(end line, callee short name)] of every call in the file."""
    try:
        tree = ast.parse(text[1:] if text.startswith("\ufeff") else text)
    except SyntaxError:
        return {}
    out: dict[int, list[tuple[int, str]]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = roles.dotted(n.func).rsplit(".", 1)[-1]
            out.setdefault(n.lineno, []).append((n.end_lineno or n.lineno, name))
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
        for end, name in _calls(self.files.get(file, "")).get(line, []):
            if name in {a.rsplit(".", 1)[-1] for a in apis}:
                return line, end
        return line, line

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
        if apis and self.calls_at(file, line, apis):
            return True
        return self.executed(file, line)

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
            hits = [c for line in lines for c in self.calls_at(k.file, line, KIND_APIS[k.kind])]
            if not hits:
                return KnobRun(live=False, why=f"the test never ran the call at {k.file}:{lines[0]}")
            effective: list[Any] = []
            for c in hits:
                v = effective_value(k, c)
                if v not in effective:
                    effective.append(v)
            kernels = sorted({self.kernel_name(c.get("kernel")) for c in hits if c.get("kernel")})
            shapes: list[list[Any]] = []
            for c in hits:
                for s in self.kernel_context(c.get("kernel"))[0]:
                    if s not in shapes:
                        shapes.append(s)
            return KnobRun(live=True, effective=effective, kernels=kernels, shapes=shapes,
                           tests=self.tests_of([c.get("stack", []) for c in hits]))
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
            return KnobRun(live=False, why=f"none of the tiling calls it feeds ran ({where})")
        hits = [c for _, f, line in ran for c in self.calls_at(f, line, set().union(*CONSUMER_APIS.values()))]
        return KnobRun(live=True, effective=[k.value], kernels=sorted({self.kernel_name(c.get("kernel"))
                                                                        for c in hits if c.get("kernel")}),
                       tests=self.tests_of([c.get("stack", []) for c in hits]))

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
            tree = ast.parse(self.files.get(file, ""))
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
                                 dtypes=dtypes, reductions=reds, tests=self.tests_of([c.get("stack", [])])))
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


# ----------------------------------------------------------------------------------------------- derivation


class Repeat:
    """The value of ``[v for _ in …]``: v, as often as the call it reaches takes (the run says how often)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Repeat) and other.value == self.value


class _NoValue(Exception):
    pass


class _Deriver:
    """Evaluates a tile call's arguments with a tiling source set to a given value (see :func:`derive`)."""

    def __init__(self, files: dict[str, str], program: roles.Program, source: Any, value: Any,
                 choice: dict[str, int] | None = None) -> None:
        self.files = files
        self.program = program
        self.source = source  # flows.Source
        self.value = value
        self.choice = choice or {}  # name bound several times → which binding the run took
        self.siblings: dict[str, Any] = {}
        if source.kind == "field":
            self.siblings = _sibling_keywords(files.get(source.file, ""), source.line, source.col)

    def eval(self, node: ast.AST, env: dict[str, Any], locals_: dict[str, list[ast.AST]], depth: int = 0) -> Any:
        if depth > 20:
            raise _NoValue("too deep")
        ev = functools.partial(self.eval, env=env, locals_=locals_, depth=depth + 1)
        src = self.source
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and src.kind == "comprehension" \
                and node.elt.lineno == src.line and node.elt.col_offset == src.col:
            return Repeat(self.value)
        if isinstance(node, ast.Attribute) and src.kind == "field":
            if node.attr == src.field:
                return self.value
            if node.attr in self.siblings:
                return self.siblings[node.attr]
        if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if src.kind == "name" and node.id == src.label:
                return self.value
            if node.id in locals_:
                bound = locals_[node.id]
                value_node = bound[self.choice.get(node.id, 0)] if len(bound) > 1 else bound[0]
                if value_node is _OPAQUE:
                    raise _NoValue(f"{node.id} is rebound in a loop")
                return ev(value_node)
            if node.id in env:
                return env[node.id]
            raise _NoValue(node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            out: list[Any] = []
            for el in node.elts:
                if isinstance(el, ast.Starred):
                    v = ev(el.value)
                    if isinstance(v, Repeat):
                        raise _NoValue("repeat inside a list")
                    out.extend(list(v))
                else:
                    out.append(ev(el))
            return out
        if isinstance(node, ast.Subscript):
            base = ev(node.value)
            if isinstance(base, Repeat):
                if isinstance(node.slice, ast.Slice):
                    raise _NoValue("slice of a repeat")
                return base.value
            idx = ev(node.slice) if not isinstance(node.slice, ast.Slice) else slice(
                *(ev(p) if p is not None else None for p in (node.slice.lower, node.slice.upper, node.slice.step)))
            try:
                return list(base[idx]) if isinstance(idx, slice) else base[idx]
            except (TypeError, IndexError, KeyError):
                raise _NoValue("subscript") from None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = ev(node.left), ev(node.right)
            if not (isinstance(a, int) and isinstance(b, int)):
                raise _NoValue("binop")
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b,
                    ast.FloorDiv: a // b if b else 0}[type(node.op)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tuple", "list") \
                and len(node.args) == 1:
            return ev(node.args[0])
        raise _NoValue(type(node).__name__)

    def call_value(self, call: ast.Call, kind: str, env: dict[str, Any], locals_: dict[str, list[ast.AST]],
                   ran: Any) -> Any:
        args: list[Any] = []
        repeats: list[int] = []
        for a in call.args:
            if isinstance(a, ast.Starred):
                v = self.eval(a.value, env, locals_)
                if isinstance(v, Repeat):
                    repeats.append(len(args))
                    args.append(v)
                else:
                    args.extend(list(v))
            else:
                args.append(self.eval(a, env, locals_))
        if repeats:
            # a *[v for _ in range(n)] fills what the run shows the call had: only one, and n from the run
            if len(repeats) > 1 or not isinstance(ran, list):
                raise _NoValue("repeat length")
            n = len(ran) - (len(args) - 1)
            if n < 0:
                raise _NoValue("repeat length")
            i = repeats[0]
            args = args[:i] + [args[i].value] * n + args[i + 1:]
        kwargs = {kw.arg: self.eval(kw.value, env, locals_) for kw in call.keywords if kw.arg}
        if kind == "vec_tile":
            return list(args[0]) if len(args) == 1 and isinstance(args[0], list) else args
        out = dict(zip(("m", "k", "n", "enable_split_k"), args))
        out.update({k: v for k, v in kwargs.items() if k in ("m", "k", "n", "enable_split_k")})
        return out


def _sibling_keywords(text: str, line: int, col: int) -> dict[str, Any]:
    """The other literal keywords of the call whose keyword value sits at ``line:col``."""
    try:
        tree = ast.parse(text[1:] if text.startswith("\ufeff") else text)
    except SyntaxError:
        return {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and any(kw.value.lineno == line and kw.value.col_offset == col
                                           for kw in n.keywords):
            out = {}
            for kw in n.keywords:
                try:
                    out[kw.arg] = _listify(ast.literal_eval(kw.value))
                except (ValueError, TypeError, SyntaxError):
                    continue
            return out
    return {}


def _listify(v: Any) -> Any:
    return [_listify(x) for x in v] if isinstance(v, (tuple, list)) else v


_OPAQUE = ast.Constant(value=None)  # a binding the deriver cannot follow (loop target, augmented assignment)


def _assignments(fn: ast.AST) -> dict[str, list[ast.AST]]:
    """Every value a name is bound to in a function body (``t = config.cube_tile_shape``; ``a, b = cfg.shape``
    binds ``a`` to ``cfg.shape[0]``); a branch may bind it twice (``if …: tiles = […] else: tiles = [4096]``)."""
    out: dict[str, list[ast.AST]] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            if isinstance(t, ast.Name):
                out.setdefault(t.id, []).append(n.value)
            elif isinstance(t, (ast.Tuple, ast.List)):
                for i, el in enumerate(t.elts):
                    if isinstance(el, ast.Name):
                        out.setdefault(el.id, []).append(
                            ast.Subscript(value=n.value, slice=ast.Constant(value=i), ctx=ast.Load()))
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension, ast.NamedExpr)):
            t = getattr(n, "target", None)
            if isinstance(t, ast.Name):
                out.setdefault(t.id, []).append(_OPAQUE)
    return out


def _call_and_function(text: str, line: int, callee: str) -> tuple[ast.Call | None, ast.AST | None, str]:
    try:
        tree = ast.parse(text[1:] if text.startswith("\ufeff") else text)
    except SyntaxError:
        return None, None, roles.MODULE
    found: list[tuple[ast.Call, ast.AST | None, str]] = []

    def visit(node: ast.AST, fn: ast.AST | None, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child, child.name if scope == roles.MODULE else f"{scope}.{child.name}")
                continue
            if isinstance(child, ast.Call) and child.lineno == line and \
                    roles.dotted(child.func).rsplit(".", 1)[-1] == callee:
                found.append((child, fn, scope))
            visit(child, fn, scope)

    visit(tree, None, roles.MODULE)
    return found[0] if found else (None, None, roles.MODULE)


def derive(files: dict[str, str], program: roles.Program, source: Any, site: Site, old: Any, new: Any,
           ran: Any) -> Any:
    """What the tile call at ``site`` gets when ``source`` changes from ``old`` to ``new``.

    The call's arguments are evaluated with the source at ``old`` first: that must give exactly ``ran`` (the value
    the run recorded), or the server's model of how the value flows is wrong and nothing is derived (raises
    ``_NoValue``). Then with ``new``."""
    callee = "set_vec_tile_shapes" if site.knob.kind == "vec_tile" else "set_cube_tile_shapes"
    call, fn, scope = _call_and_function(files.get(site.file, ""), site.knob.line, callee)
    if call is None:
        raise _NoValue("call not found")
    env = program.env(site.file, scope)
    locals_ = _assignments(fn) if fn is not None else {}
    several = sorted(n for n, b in locals_.items() if len(b) > 1)[:4]
    last: _NoValue | None = None
    for picks in itertools.product(*(range(len(locals_[n])) for n in several)):
        choice = dict(zip(several, picks))
        try:
            before = _Deriver(files, program, source, old, choice).call_value(call, site.knob.kind, env, locals_, ran)
        except _NoValue as exc:
            last = exc
            continue
        if _norm(before) != _norm(ran):
            last = _NoValue(f"the server's reading gives {before!r} where the run had {ran!r}")
            continue
        return _Deriver(files, program, source, new, choice).call_value(call, site.knob.kind, env, locals_, ran)
    raise last or _NoValue("no reading reproduces what ran")


def _norm(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items() if not (k == "enable_split_k" and x is False)}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


# ----------------------------------------------------------------------------------------------- the overlay


@dataclass
class _NameFeed:
    """A name bound to a literal (roles.Binding) seen as a source of the tile calls it feeds."""

    label: str
    consumer_sites: set[tuple[str, str, int]]
    kind: str = "name"
    field: str | None = None
    line: int = 0
    col: int = 0


def source_of(program: roles.Program, site: Site) -> Any:
    """The flows.Source behind a ``tile_source`` knob site (matched by file and position)."""
    at = site.knob.context.get("at") or [site.knob.line, -1]
    return next((s for s in program.sources if s.file == site.file and [s.line, s.col] == list(at)), None)


def _feeder(program: roles.Program, site: Site | None) -> Any:
    """The changed knob as a source of tile calls: a tiling source, a name bound to a literal, or None."""
    if site is None:
        return None
    k = site.knob
    if site.extra.get("source"):
        return source_of(program, site)
    if site.extra.get("binding"):
        b = program.binding(k.file, k.function or roles.MODULE, k.name)
        return _NameFeed(k.name, set(b.consumer_sites)) if b is not None else None
    return None


def overlay(files_before: dict[str, str], program_before: roles.Program, run: RunMap, sites_b: list[Site],
            sites_a: list[Site], values_b: dict[str, SiteValue], values_a: dict[str, SiteValue],
            change: Any, changed_site: Site | None) -> tuple[dict[str, SiteValue], dict[str, SiteValue]]:
    """Replace the static values of every tile call that ran by its per-kernel run values (see module doc).

    ``change``: the one KnobChange being admitted (or None); ``changed_site``: its site in the before state.
    Raises KnobValueError when a tile call that ran would get a value the server cannot derive."""
    if not run.reported:
        return values_b, values_a
    vb, va = dict(values_b), dict(values_a)
    after_by_id = {s.knob.id: s for s in sites_a}
    source = _feeder(program_before, changed_site)
    for site in sites_b:
        k = site.knob
        if k.kind not in ("vec_tile", "cube_tile") or not k.present:
            continue
        execs = run.executions(site)
        if not execs:
            continue  # never ran in this test: the static check (if any) stands
        before = vb.get(k.id)
        after = va.get(k.id)
        if after is None or k.id not in after_by_id:
            continue
        static_after = after.value
        static_before = before.value if before is not None else UNKNOWN
        fed = source is not None and any(f == site.file and line == k.line for _, f, line in source.consumer_sites)
        unchanged = static_before is not UNKNOWN and static_after is not UNKNOWN and static_before == static_after
        if unchanged or (static_after is UNKNOWN and not fed and after_by_id[k.id].knob.value == k.value):
            after_values = [e.value for e in execs]
            if unchanged and static_before is not UNKNOWN:
                after_values = [static_after for _ in execs]
        elif static_after is not UNKNOWN:
            after_values = [static_after for _ in execs]
        elif fed:
            after_values = []
            for e in execs:
                try:
                    after_values.append(derive(files_before, program_before, source, site, change.before,
                                               change.after, e.value))
                except _NoValue as exc:
                    raise KnobValueError(
                        f"{k.id} ran with {e.value!r} (kernel {e.kernel}); the server cannot tell what "
                        f"{change.knob_id} = {change.after!r} gives there ({exc})", rule="C/derive",
                        legal="a change whose value at every tile call that ran the server can compute",
                        hint=f"pin the call instead: apply_tuning_patch(knob='{k.id}', value=<literals>)") from None
        else:
            raise KnobValueError(
                f"{k.id} ran with {execs[0].value!r} (kernel {execs[0].kernel}) and the change makes its value "
                "something the server cannot evaluate", rule="C/derive",
                legal="a change whose value at every tile call that ran the server can compute",
                hint=f"pin the call instead: apply_tuning_patch(knob='{k.id}', value=<literals>)")
        vb.pop(k.id, None)
        va.pop(k.id, None)
        for i, (e, new) in enumerate(zip(execs, after_values)):
            key = f"{k.id}@{e.kernel}#{i + 1}"
            ctx = dict(k.context, tensor_shapes=e.shapes or k.context.get("tensor_shapes", []),
                       dtypes=e.dtypes or k.context.get("dtypes", []), reductions=e.reductions,
                       current=e.value, ran=e.describe())
            vb[key] = SiteValue(k.id, k.kind, k.line, e.value, ctx)
            va[key] = SiteValue(k.id, k.kind, k.line, new, ctx)
    return vb, va


# ----------------------------------------------------------------------------------------------- loop blocks


def _kernel_dims(run: RunMap, key: str | None) -> list[int]:
    k = run.kernels.get(key or "")
    dims: list[int] = []
    for call in (k.get("inputs") or [])[:1] if k else []:
        for a in call:
            if isinstance(a, dict) and "$tensor" in a:
                dims.extend(d for d in a["$tensor"] if isinstance(d, int))
    return sorted(set(dims))


def loop_checks(files_before: dict[str, str], program_before: roles.Program, run: RunMap, change: Any,
                changed_site: Site | None) -> tuple[list[str], list[str]]:
    """Domain C (F-1, F-3) on the loops a changed block size feeds, with the axis taken from what ran.

    A loop ``pypto.loop(…, X // B, …)`` whose block ``B`` comes from the changed knob: the run recorded its trip
    count S with the old block b, so the axis X lies in [S·b, S·b + b − 1]; the kernel's input tensors name the
    one dimension in that range. The new block must be ≥ 1, ≤ X and divide X (floor division drops the rest); a
    ceil-division loop ``(X + B − 1) // B`` only needs 1 ≤ B ≤ X. Returns (checked, unchecked) lines; raises
    KnobValueError for an illegal block."""
    feeder = _feeder(program_before, changed_site)
    if feeder is None or not run.reported or change is None:
        return [], []
    checked: list[str] = []
    unchecked: list[str] = []
    for kind, file, line in sorted(feeder.consumer_sites):
        if kind != "loop":
            continue
        for rec in run.calls_at(file, line, {"loop", "loop_unroll"}):
            call, fn, scope = _call_and_function(files_before.get(file, ""), line, rec["api"])
            if call is None:
                continue
            pos = [a for a in call.args if not isinstance(a, ast.Starred)]
            stop_node = pos[0] if len(pos) == 1 else (pos[1] if len(pos) >= 2 else None)
            args = rec.get("args") or []
            stop_ran = args[0] if len(args) == 1 else (args[1] if len(args) >= 2 else None)
            if not (isinstance(stop_node, ast.BinOp) and isinstance(stop_node.op, ast.FloorDiv)) \
                    or not isinstance(stop_ran, int):
                continue
            where = f"the loop at {file}:{line}"
            env = program_before.env(file, scope)
            locals_ = _assignments(fn) if fn is not None else {}
            try:
                b_old = _Deriver(files_before, program_before, feeder, change.before).eval(stop_node.right, env,
                                                                                         locals_)
                b_new = _Deriver(files_before, program_before, feeder, change.after).eval(stop_node.right, env,
                                                                                        locals_)
            except _NoValue:
                continue  # the divisor is not the changed block
            if b_old == b_new or not isinstance(b_old, int) or not isinstance(b_new, int) or b_old < 1:
                continue
            left = stop_node.left
            ceil = (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub)
                    and isinstance(left.left, ast.BinOp) and isinstance(left.left.op, ast.Add))
            lo, hi = ((stop_ran - 1) * b_old + 1, stop_ran * b_old) if ceil else \
                (stop_ran * b_old, stop_ran * b_old + b_old - 1)
            axes = [d for d in _kernel_dims(run, rec.get("kernel")) if lo <= d <= hi]
            if len(axes) != 1:
                unchecked.append(f"{where} ran {stop_ran} iteration(s) of {b_old}; the server cannot tell which "
                                 "axis it blocks, so whether the new block divides it was not checked")
                continue
            x = axes[0]
            if b_new < 1 or b_new > x or (not ceil and x % b_new):
                why = ("a block must be ≥ 1" if b_new < 1 else f"block {b_new} exceeds the axis length {x}"
                       if b_new > x else f"{x} is not a multiple of {b_new}: the last {x % b_new} rows would never "
                       "be computed (floor division drops them)")
                raise KnobValueError(f"{change.knob_id} = {change.after!r} makes {where} block {b_new}: {why} — "
                                     f"the run blocked an axis of {x} ({stop_ran} × {b_old}, kernel "
                                     f"{run.kernel_name(rec.get('kernel'))})", rule="C/F-3",
                                     legal="a block size that divides the axis it blocks",
                                     hint=f"choose a divisor of {x}")
            trips = -(-x // b_new) if ceil else x // b_new
            checked.append(f"{where}: axis {x} (from the run) in {trips} block(s) of {b_new}")
    return checked, unchecked


def annotate_unchecked(run: RunMap, unchecked: list[str], checked: list[str]) -> list[str]:
    """The static 'not checked' notes, less the loops the run check covered, and with the loops that never ran in
    this test said so (their value changes nothing this test measures)."""
    covered = {c.split(":", 2)[0].removeprefix("the loop at ") + ":" + c.split(":", 2)[1] for c in checked
               if c.startswith("the loop at ")}
    out = []
    for note in unchecked:
        head = note.split(" ", 1)[0]
        file, _, line = head.partition(":")
        if head in covered:
            continue
        if run.reported and line.isdigit() and file in run.files and not run.executed(file, int(line)):
            note += " (this line never ran in this test)"
        out.append(note)
    return out
