"""Which names are tuning knobs: a data-flow pass over every Python file of the workspace.

A name bound to a literal (a module constant, or a local of the kernel or of the function around it) is a knob only
if **every** use of it ends in a tuning consumer: the arguments of ``set_vec_tile_shapes`` / ``set_cube_tile_shapes``,
``pypto.loop`` bounds and options, ``pypto.view`` shapes and offsets, slices of tensors inside the kernel, pass and
jit options, static ``range`` loops of the kernel. A name that also reaches the problem itself — a tensor signature,
tensor creation, the harness building its inputs, a condition, anything this pass does not recognise — is never a
knob (issue #10: ``ROWS = 64`` used by the kernel's blocking and by ``torch.randn(ROWS, 512)`` must not be tunable,
or a "speed-up" could come from computing less).

Uses are followed through arithmetic, through assignments to other names (``b_loop = bs // tile_b``), through calls
of functions defined in the workspace (argument → parameter), through closures (the upstream style defines the jit
inside a factory whose locals it reads) and across files (``from kernels import VEC_TILE``, ``kernels.B``).
``print`` and logging calls are ignored. What cannot be followed (``getattr``, ``globals()``, ``exec``) is not
seen; the admission gate documents that limit.

Pure: sources in, :class:`Program` out. Positions are 1-based lines (``ast``).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from pypto_tune.tools.code import pysource

from . import flows
from .flows import dotted

MODULE = "<module>"

# pypto calls whose arguments configure tiling / blocking (tuning consumers). For view-like calls the first
# argument is the tensor (data), only the rest configures the block.
TUNING_CALLS = {
    "set_vec_tile_shapes": "vec_tile", "set_cube_tile_shapes": "cube_tile", "loop": "loop", "loop_unroll": "loop",
    "set_pass_options": "pass_options", "experimental.set_operation_options": "operation_options",
    "set_operation_options": "operation_options", "view": "view", "reshape": "view", "assemble": "view",
}
DATA_FIRST_ARG = {"view", "reshape", "assemble"}
PYPTO_SCALAR_PASSTHROUGH = {"min", "max"}
JIT_NAMES = {"frontend.jit", "jit", "frontend.parser.entry.jit"}
REDUCTIONS = {"sum", "amax", "amin", "max", "min", "mean", "prod", "reduce_sum", "reduce_max", "reduce_min",
              "var", "std", "logsumexp", "softmax", "argmax", "argmin"}
# Pure builtins a value may pass through on its way to a consumer.
TRANSPARENT_BUILTINS = {"min", "max", "int", "abs", "tuple", "list", "len", "round", "sum"}
# Calls whose result goes nowhere the run can compute with (str()/format()/repr() do return a value that can be
# turned back into a number: not harmless).
HARMLESS_CALLS = {"print"}
HARMLESS_PREFIXES = ("logging.", "log.", "logger.", "LOG.", "LOGGER.")


_MISSING = object()

Consumer = tuple[str, str, int]  # (kind, file, line): a tuning consumer and where it is


@dataclass
class Binding:
    """A name bound once to a literal: a knob candidate."""

    file: str
    scope: str  # MODULE or the dotted function path ("softmax.softmax_kernel")
    name: str
    line: int
    value: Any  # the literal (python value)
    local: bool
    consumers: set[str] = field(default_factory=set)  # tuning consumers reached (vec_tile, loop, view, slice...)
    problems: list[str] = field(default_factory=list)  # "file:line: what" for each non-tuning use
    consumer_sites: set[tuple[str, str, int]] = field(default_factory=set)  # (kind, file, line) of each consumer

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file, self.scope, self.name)

    @property
    def is_knob(self) -> bool:
        return bool(self.consumers) and not self.problems


@dataclass
class Reduction:
    scope: str
    line: int
    axes: list[int]


@dataclass
class Transpose:
    """A ``pypto.transpose`` in a kernel scope: the axes it swaps, or the permutation it applies."""

    scope: str
    line: int
    axes: list[int]  # two axes swapped, or a whole permutation

    def permute(self, tile: list[int]) -> list[int] | None:
        """The tile as the transposed tensor is tiled, or None when the transpose is not of the tile's rank."""
        rank = len(tile)
        if len(self.axes) == 2:
            a, b = (x + rank if x < 0 else x for x in self.axes)
            if not (0 <= a < rank and 0 <= b < rank):
                return None
            out = list(tile)
            out[a], out[b] = out[b], out[a]
            return out
        if sorted(self.axes) != list(range(rank)):
            return None
        return [tile[i] for i in self.axes]


@dataclass
class Program:
    bindings: dict[tuple[str, str, str], Binding]
    kernel_scopes: set[tuple[str, str]]  # (file, scope) of jit functions, their nested defs and helpers they call
    reductions: dict[str, list[Reduction]]  # file -> reductions inside kernel scopes
    literals: dict[tuple[str, str], dict[str, Any]]  # (file, scope) -> names bound once to a literal there
    jit_scopes: set[tuple[str, str]] = field(default_factory=set)  # the jit-decorated functions themselves
    transposes: dict[str, list[Transpose]] = field(default_factory=dict)  # file -> transposes inside kernel scopes
    # (file, jit scope) -> every (file, scope) that kernel runs: its nested defs and the helpers it calls
    kernel_reach: dict[tuple[str, str], set[tuple[str, str]]] = field(default_factory=dict)
    # (file, test function) -> every (file, scope) it runs (module-level functions named test*)
    entry_reach: dict[tuple[str, str], set[tuple[str, str]]] = field(default_factory=dict)
    sources: list[Any] = field(default_factory=list)  # flows.Source: comprehension literals, config fields

    def kernels_reaching(self, file: str, scope: str) -> list[tuple[str, str]]:
        """The jit kernels whose run includes ``scope`` of ``file`` (sorted)."""
        return sorted(k for k, r in self.kernel_reach.items() if (file, scope) in r)

    def tests_reaching(self, file: str, scope: str) -> list[tuple[str, str]]:
        """The test functions whose run includes ``scope`` of ``file``, directly or through a kernel (sorted)."""
        kernels = set(self.kernels_reaching(file, scope))
        return sorted(t for t, r in self.entry_reach.items() if (file, scope) in r or kernels & r)

    def binding(self, file: str, scope: str, name: str) -> Binding | None:
        return self.bindings.get((file, scope, name))

    def env(self, file: str, scope: str) -> dict[str, Any]:
        """Literal names visible in ``scope``: module literals, then enclosing functions', then its own."""
        out = dict(self.literals.get((file, MODULE), {}))
        if scope != MODULE:
            parts = scope.split(".")
            for i in range(1, len(parts) + 1):
                out.update(self.literals.get((file, ".".join(parts[:i])), {}))
        return out


# ---------------------------------------------------------------------------------------------------- helpers


def literal_value(node: ast.AST) -> Any:
    """The Python value of a literal node (constants, ±numbers, tuples/lists/dicts of literals); raises ValueError."""
    return ast.literal_eval(node)


def _is_literal(node: ast.AST) -> bool:
    try:
        literal_value(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _module_path(path: str) -> str:
    p = PurePosixPath(path)
    return ".".join(p.with_suffix("").parts)


def _import_table(tree: ast.Module, path: str = "") -> dict[str, str]:
    """Local name → module path, for ``import m``, ``import m as x``, ``from m import n``, relative imports (resolved
    against ``path``) and ``x = importlib.import_module("m")`` / ``__import__("m")`` (the shipped split_harness
    imports its kernel module that way)."""
    package = list(PurePosixPath(path).parent.parts) if path else []
    out: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(n, ast.ImportFrom):
            base = _absolute(n, package)
            if base is None:
                continue
            for a in n.names:
                out[a.asname or a.name] = f"{base}.{a.name}" if base else a.name
        elif (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
              and isinstance(n.value, ast.Call) and dotted(n.value.func) in ("importlib.import_module", "__import__",
                                                                             "import_module")
              and n.value.args and isinstance(n.value.args[0], ast.Constant) and isinstance(n.value.args[0].value, str)):
            out[n.targets[0].id] = n.value.args[0].value
    return out


def _absolute(node: ast.ImportFrom, package: list[str]) -> str | None:
    """The absolute module an ImportFrom names (``from .kernel import X`` in pkg/h.py → ``pkg.kernel``)."""
    if not node.level:
        return node.module
    if node.level - 1 > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@dataclass
class _Scope:
    file: str
    name: str  # dotted path or MODULE
    node: ast.AST
    parent: "_Scope | None"
    bound: dict[str, list[ast.AST]] = field(default_factory=dict)  # name -> binding statements/nodes
    params: list[str] = field(default_factory=list)
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)


class _File:
    """One parsed file: scopes, parents, imports."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.tree = pysource.parse(text)
        self.parents: dict[int, ast.AST] = {}
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
        self.imports = _import_table(self.tree, path)
        self.scopes: dict[str, _Scope] = {}
        self.scope_of: dict[int, _Scope] = {}  # id(node) -> innermost scope
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self._collect(self.tree, None, MODULE)

    def _collect(self, node: ast.AST, parent: _Scope | None, name: str) -> None:
        scope = _Scope(self.path, name, node, parent)
        self.scopes[name] = scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None:
                    scope.params.append(a.arg)
                    scope.bound.setdefault(a.arg, []).append(a)
        body = node.body if isinstance(node.body, list) else [node.body]
        stack: list[ast.AST] = list(body)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # decorators and defaults run in the enclosing scope: visited there
            pass
        while stack:
            n = stack.pop()
            self.scope_of[id(n)] = scope
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scope.bound.setdefault(n.name, []).append(n)
                child = n.name if name == MODULE else f"{name}.{n.name}"
                self.functions[child] = n
                for d in n.decorator_list + n.args.defaults + [d for d in n.args.kw_defaults if d is not None]:
                    stack.append(d)
                for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs, n.args.vararg, n.args.kwarg]:
                    if a is not None and a.annotation is not None:
                        stack.append(a.annotation)
                if n.returns is not None:
                    stack.append(n.returns)
                self._collect(n, scope, child)
                continue
            if isinstance(n, ast.ClassDef):
                scope.bound.setdefault(n.name, []).append(n)
                stack.extend(n.decorator_list + n.bases + [k.value for k in n.keywords] + n.body)
                continue
            if isinstance(n, ast.Lambda):
                self._collect(n, scope, f"{name}.<lambda@{n.lineno}>")
                continue
            if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                # comprehension variables are their own scope; treat the whole comprehension as part of this one,
                # but do not let its targets count as bindings of this scope
                for c in ast.iter_child_nodes(n):
                    stack.append(c)
                continue
            if isinstance(n, ast.Global):
                scope.declared_global.update(n.names)
            elif isinstance(n, ast.Nonlocal):
                scope.declared_nonlocal.update(n.names)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                if not self._in_comprehension_target(n):
                    scope.bound.setdefault(n.id, []).append(n)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                for a in n.names:
                    scope.bound.setdefault(a.asname or a.name.split(".")[0], []).append(n)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                scope.bound.setdefault(n.name, []).append(n)
            stack.extend(ast.iter_child_nodes(n))

    def _in_comprehension_target(self, n: ast.AST) -> bool:
        p = self.parents.get(id(n))
        while p is not None:
            if isinstance(p, ast.comprehension):
                return True
            if isinstance(p, (ast.stmt,)):
                return False
            p = self.parents.get(id(p))
        return False

    def resolve(self, scope: _Scope, name: str) -> _Scope | None:
        """The scope that binds ``name`` as seen from ``scope`` (LEGB without builtins), None if unbound."""
        if name in scope.declared_global:
            return self.scopes[MODULE] if name in self.scopes[MODULE].bound else None
        s: _Scope | None = scope
        first = True
        while s is not None:
            if name in s.bound and not (first and name in s.declared_nonlocal):
                return s
            first = False
            s = s.parent
        return None

    def qname(self, func: ast.AST) -> str | None:
        """'set_vec_tile_shapes', 'frontend.jit', ... for pypto callables, None otherwise (import-aware)."""
        d = dotted(func)
        if not d:
            return None
        head, _, rest = d.partition(".")
        target = self.imports.get(head)
        if target is None:
            return d[len("pypto."):] if d.startswith("pypto.") else None
        full = f"{target}.{rest}" if rest else target
        if full == "pypto" or full.startswith("pypto."):
            return full[len("pypto."):]
        return None


# ------------------------------------------------------------------------------------------------ the analysis


class _Analysis:
    def __init__(self, files: dict[str, str]) -> None:
        self.files: dict[str, _File] = {}
        for path in sorted(files):
            try:
                self.files[path] = _File(path, files[path])
            except SyntaxError:
                continue  # a file that does not parse cannot hide a use the run could execute either
        self.by_module = {_module_path(p): p for p in self.files}
        self.bindings: dict[tuple[str, str, str], Binding] = {}
        self.literals: dict[tuple[str, str], dict[str, Any]] = {}
        self.kernel: set[tuple[str, str]] = set()
        self.jits: set[tuple[str, str]] = set()
        self.reductions: dict[str, list[Reduction]] = {}
        self.transposes: dict[str, list[Transpose]] = {}
        self.reach: dict[tuple[str, str], set[tuple[str, str]]] = {}  # jit → what it runs (find_kernels)
        self._memo: dict[tuple[tuple[str, str, str], bool], tuple[frozenset[str], tuple[str, ...]]] = {}
        self._active: set[tuple[tuple[str, str, str], bool]] = set()
        self._returning: set[tuple[str, str]] = set()  # functions whose return value is being followed
        self._calls: dict[tuple[str, str], list[tuple[_File, _Scope, ast.Call]]] | None = None

    # ---- candidates
    def collect_bindings(self) -> None:
        for f in self.files.values():
            for sname, scope in f.scopes.items():
                lits: dict[str, Any] = {}
                for name, sites in scope.bound.items():
                    if len(sites) != 1 or name in scope.params:
                        continue
                    site = sites[0]
                    value_node = self._assigned_value(f, site)
                    if value_node is None or not _is_literal(value_node):
                        continue
                    value = literal_value(value_node)
                    lits[name] = value
                    if isinstance(value, (str, bytes, bool)) or value is None:
                        continue  # names and flags are not tile or block sizes
                    self.bindings[(f.path, sname, name)] = Binding(
                        file=f.path, scope=sname, name=name, line=value_node.lineno, value=value,
                        local=sname != MODULE)
                self.literals[(f.path, sname)] = lits

    def _env(self, file: str, scope: str) -> dict[str, Any]:
        out = dict(self.literals.get((file, MODULE), {}))
        if scope != MODULE:
            parts = scope.split(".")
            for i in range(1, len(parts) + 1):
                out.update(self.literals.get((file, ".".join(parts[:i])), {}))
        return out

    def bind_single_call_sites(self) -> None:
        """Parameters of a function called from exactly one place with literal arguments take those values, for
        legality only (never knobs): upstream's examples build the jit in a factory, ``build(shape)``, called once
        with ``shape = (32, 32, 256)``. Without this the loop bound ``batch // tile_b`` was "unchecked" and a
        ``tile_b`` that leaves rows uncomputed was measured and kept as a gain (red team, issue #10). Tuple
        unpacking of such a parameter (``batch, seq, dim = shape``) binds its parts. Repeated so a chain of
        factories (main → test → build) resolves."""
        calls = self._call_sites()
        for _ in range(4):
            changed = False
            for (path, fname), sites in calls.items():
                if len(sites) != 1 or path not in self.files:
                    continue
                f_def, callee_scope = self.files[path].functions.get(fname), self.files[path].scopes.get(fname)
                if f_def is None or callee_scope is None:
                    continue
                caller_file, caller_scope, call = sites[0]
                env = self._env(caller_file.path, caller_scope.name)
                values: dict[str, Any] = {}
                positional = [a.arg for a in [*f_def.args.posonlyargs, *f_def.args.args]]
                if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                    continue
                for name, node in [*zip(positional, call.args), *((k.arg, k.value) for k in call.keywords)]:
                    if len(callee_scope.bound.get(name, [])) != 1:
                        continue  # reassigned inside the function: the argument is not what it computes with
                    if isinstance(node, ast.Name) and node.id in env:
                        values[name] = env[node.id]
                    elif _is_literal(node):
                        values[name] = literal_value(node)
                lits = self.literals.setdefault((path, fname), {})
                for name, value in values.items():
                    if lits.get(name, _MISSING) != value:
                        lits[name] = value
                        changed = True
                changed |= self._unpack_known(self.files[path], callee_scope, lits)
            if not changed:
                return

    @staticmethod
    def _unpack_known(f: _File, scope: _Scope, lits: dict[str, Any]) -> bool:
        """``a, b, c = name`` in ``scope`` where ``name`` is a known tuple or list of that length."""
        changed = False
        for stmt in getattr(scope.node, "body", []):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], (ast.Tuple, ast.List)) and isinstance(stmt.value, ast.Name)):
                continue
            value = lits.get(stmt.value.id, _MISSING)
            names = stmt.targets[0].elts
            if not isinstance(value, (tuple, list)) or len(value) != len(names):
                continue
            for target, v in zip(names, value):
                if isinstance(target, ast.Name) and len(scope.bound.get(target.id, [])) == 1 \
                        and lits.get(target.id, _MISSING) != v:
                    lits[target.id] = v
                    changed = True
        return changed

    @staticmethod
    def _assigned_value(f: _File, site: ast.AST) -> ast.AST | None:
        """The value node bound to the Name ``site`` by a plain ``name = value`` (or an unpacked literal tuple)."""
        if not isinstance(site, ast.Name):
            return None
        parent = f.parents.get(id(site))
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.targets[0] is site:
            return parent.value
        if isinstance(parent, ast.AnnAssign) and parent.target is site and parent.value is not None:
            return parent.value
        if isinstance(parent, (ast.Tuple, ast.List)):
            stmt = f.parents.get(id(parent))
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.targets[0] is parent
                    and isinstance(stmt.value, (ast.Tuple, ast.List))
                    and len(stmt.value.elts) == len(parent.elts)
                    and not any(isinstance(e, ast.Starred) for e in parent.elts)):
                return stmt.value.elts[parent.elts.index(site)]
        return None

    # ---- kernel scopes
    def find_kernels(self) -> None:
        """The jit-decorated functions, and everything each of them runs (nested defs, workspace functions it
        calls, transitively): kernel code."""

        for f in self.files.values():
            for sname, fn in f.functions.items():
                if any(f.qname(d.func if isinstance(d, ast.Call) else d) in JIT_NAMES for d in fn.decorator_list):
                    self.jits.add((f.path, sname))
        self.reach = {j: flows.reach(self, j) for j in sorted(self.jits)}
        self.kernel = set().union(*self.reach.values()) if self.reach else set()

    def callee(self, f: _File, scope: _Scope, func: ast.AST) -> tuple[str, str] | None:
        """(file, scope) of a workspace function called as ``func``, else None."""
        if isinstance(func, ast.Name):
            owner = f.resolve(scope, func.id)
            if owner is not None:
                child = func.id if owner.name == MODULE else f"{owner.name}.{func.id}"
                if child in f.functions:
                    return (f.path, child)
                # ``from mod import func``
                for site in owner.bound.get(func.id, []):
                    if isinstance(site, ast.ImportFrom) and site.module:
                        other = self.by_module.get(site.module)
                        for a in site.names:
                            if (a.asname or a.name) == func.id and other and a.name in self.files[other].functions:
                                return (other, a.name)
            return None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            mod = f.imports.get(func.value.id)
            other = self.by_module.get(mod or "")
            if other and func.attr in self.files[other].functions:
                return (other, func.attr)
        return None

    def in_kernel(self, f: _File, node: ast.AST) -> bool:
        scope = f.scope_of.get(id(node))
        return scope is not None and (f.path, scope.name) in self.kernel

    def kernel_calls(self, f: _File):
        """Every call inside a kernel scope of ``f``, with its pypto name (None for any other callee)."""
        for n in ast.walk(f.tree):
            if isinstance(n, ast.Call) and self.in_kernel(f, n):
                yield n, f.qname(n.func)

    # ---- reductions (for "never split the reduce axis")
    def find_reductions(self) -> None:
        for f in self.files.values():
            out: list[Reduction] = []
            for n, q in self.kernel_calls(f):
                short = q.rsplit(".", 1)[-1] if q else (n.func.attr if isinstance(n.func, ast.Attribute) else None)
                if short not in REDUCTIONS or (q is None and not isinstance(n.func, ast.Attribute)):
                    continue
                axis_node = n.args[1] if len(n.args) > 1 else next(
                    (k.value for k in n.keywords if k.arg in ("dim", "axis", "dims")), None)
                if axis_node is None:
                    continue
                try:
                    axes = literal_value(axis_node)
                except (ValueError, TypeError, SyntaxError):
                    continue
                axes = [axes] if isinstance(axes, int) else list(axes) if isinstance(axes, (list, tuple)) else []
                if all(isinstance(a, int) for a in axes):
                    out.append(Reduction(f.scope_of[id(n)].name, n.lineno, axes))
            self.reductions[f.path] = out

    # ---- transposes (a transposed tile is held whole in the unified buffer, its new tail padded)
    def find_transposes(self) -> None:
        for f in self.files.values():
            out: list[Transpose] = []
            for n, q in self.kernel_calls(f):
                if (q or "").rsplit(".", 1)[-1] != "transpose" or len(n.args) < 2:
                    continue
                try:
                    axes = [literal_value(a) for a in n.args[1:3]] if len(n.args) >= 3 else literal_value(n.args[1])
                except (ValueError, TypeError, SyntaxError):
                    continue
                axes = list(axes) if isinstance(axes, (list, tuple)) else []
                if len(axes) >= 2 and all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
                    out.append(Transpose(f.scope_of[id(n)].name, n.lineno, axes))
            self.transposes[f.path] = out

    # ---- uses
    def classify(self, key: tuple[str, str, str], written: bool = False
                 ) -> tuple[frozenset[Consumer], tuple[str, ...]]:
        """(tuning consumers, problem uses) of the name bound at ``key`` (file, scope, name), following it on.
        A consumer is (kind, file, line): what it is and where the run meets it. ``written``: the name holds a
        literal as written — bound to one, or a copy of one made without computing (``Y = X``, ``at = [lo, Y]``,
        passed as an argument): such a value in a view's or assemble's offsets is where data goes, however many
        names it passed through."""
        memo = (key, written or key in self.bindings)
        if memo in self._memo:
            return self._memo[memo]
        if memo in self._active:
            return frozenset(), ()  # a cycle adds nothing new
        self._active.add(memo)
        consumers: set[Consumer] = set()
        problems: list[str] = []
        for f, use in self._uses(key):
            c, p = self._use(f, use, literal=memo[1])
            consumers |= c
            problems.extend(p)
        self._active.discard(memo)
        result = (frozenset(consumers), tuple(problems))
        self._memo[memo] = result
        return result

    def _uses(self, key: tuple[str, str, str]):
        path, sname, name = key
        f = self.files[path]
        owner = f.scopes[sname]
        for n in ast.walk(f.tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id == name:
                scope = f.scope_of.get(id(n))
                if scope is not None and f.resolve(scope, name) is owner:
                    yield f, n
        if sname != MODULE:
            return
        module = _module_path(path)
        for other in self.files.values():
            if other.path == path:
                continue
            package = list(PurePosixPath(other.path).parent.parts)
            for n in ast.walk(other.tree):
                # kernels.NAME, pkg.kernels.NAME, alias.NAME (import ... as, importlib.import_module)
                if isinstance(n, ast.Attribute) and n.attr == name and self._names_module(other, n.value, module):
                    yield other, n
                # from kernels import NAME [as alias] / from .kernels import ... / from kernels import *, at any
                # depth (an import inside a function binds the name in that function)
                elif isinstance(n, ast.ImportFrom) and _absolute(n, package) == module:
                    for a in n.names:
                        if a.name in (name, "*"):
                            local = a.asname or name
                            for m in ast.walk(other.tree):
                                if isinstance(m, ast.Name) and isinstance(m.ctx, ast.Load) and m.id == local:
                                    scope = other.scope_of.get(id(m))
                                    owner_scope = other.resolve(scope, local) if scope is not None else None
                                    if scope is not None and (owner_scope is None or any(
                                            site is n for site in owner_scope.bound.get(local, []))):
                                        yield other, m

    @staticmethod
    def _names_module(f: _File, node: ast.AST, module: str) -> bool:
        d = dotted(node)
        if not d:
            return False
        head, _, rest = d.partition(".")
        target = f.imports.get(head)
        if target is None:
            return False
        return (f"{target}.{rest}" if rest else target) == module

    def _use(self, f: _File, node: ast.AST, literal: bool = True) -> tuple[set[Consumer], list[str]]:
        """Follow one use upwards to what consumes it. ``literal``: the use is of a knob candidate itself (a name
        bound to a literal, a source's element or field), not of a name computed from one."""
        where = f"{f.path}:{getattr(node, 'lineno', '?')}"
        if _in_raise(f, node) or _in_guard_test(f, node):
            # it only words an error the run stops with, or decides whether the run stops (``if batch % rows:
            # raise ValueError(…)``, ``assert batch % rows == 0``): a value a guard rejects stops the run, one it
            # accepts changes nothing, so neither can change what a run computes
            return set(), []
        child, parent = node, f.parents.get(id(node))
        element: tuple[ast.AST, ast.AST] | None = None  # (list, its element) the use last passed through
        computed = not literal  # the value was computed on the way (``i * BLOCK``), not passed as written
        while parent is not None:
            if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List, ast.Set, ast.Starred)):
                if isinstance(parent, (ast.Tuple, ast.List)):
                    element = (parent, child)
                computed = computed or isinstance(parent, (ast.BinOp, ast.UnaryOp))
                child, parent = parent, f.parents.get(id(parent))
                continue
            if isinstance(parent, ast.Dict):
                if any(v is child for v in parent.values):
                    child, parent = parent, f.parents.get(id(parent))
                    continue
                return set(), [f"{where}: used as a dict key"]
            if isinstance(parent, ast.Subscript):
                if parent.value is child:  # VEC_TILE[0]: the element flows on
                    child, parent = parent, f.parents.get(id(parent))
                    continue
                if self.in_kernel(f, parent):
                    return {("slice", f.path, parent.lineno)}, []
                return set(), [f"{where}: indexes data outside the kernel"]
            if isinstance(parent, ast.Slice):
                child, parent = parent, f.parents.get(id(parent))
                continue
            if isinstance(parent, ast.keyword):
                child, parent = parent, f.parents.get(id(parent))
                continue
            if isinstance(parent, ast.Attribute) and _tail_clamp(f, f.parents.get(id(parent)), node) \
                    and self.in_kernel(f, parent):
                # ``(n - i * B).min(B)``: the tail block's rows, the method form of pypto.min — flows on
                child = f.parents[id(parent)]
                parent = f.parents.get(id(child))
                continue
            if isinstance(parent, ast.Call) and _tail_clamp(f, parent, node) and self.in_kernel(f, parent):
                child, parent = parent, f.parents.get(id(parent))
                continue
            if isinstance(parent, ast.Call) and not computed and _offsets_arg(f, parent, child):
                # ``off = [0, 64]`` … ``pypto.assemble(y, off, out)``: which part of the tensor is read or written,
                # as written — not a tile (an offset a loop moves is computed: ``[i * BLOCK, 0]``)
                return set(), [f"{where}: a fixed offset of pypto.{_short_name(f, parent)} (which part of the tensor "
                               "is read or written, not a tile)"]
            if isinstance(parent, ast.Call):
                fixed = self._fixed_view_axis(f, parent, child, element)
                if fixed:
                    return set(), [f"{where}: {fixed}"]
                return self._call_use(f, parent, child, where, written=not computed)
            if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                if getattr(parent, "value", None) is not child:
                    return set(), [f"{where}: used in an assignment target"]
                if self._in_class_body(f, parent):
                    return set(), [f"{where}: stored as a class attribute (followed no further)"]
                return self._flow_into_targets(f, parent, where, written=not computed)
            if isinstance(parent, ast.NamedExpr):
                return set(), [f"{where}: bound by ':='"]
            if isinstance(parent, ast.For) and parent.iter is child:
                return set(), [f"{where}: iterated over"]
            if isinstance(parent, ast.JoinedStr) or isinstance(parent, ast.FormattedValue):
                child, parent = parent, f.parents.get(id(parent))
                continue
            if isinstance(parent, ast.Expr):
                return set(), []  # evaluated and dropped
            if isinstance(parent, ast.Return) and parent.value is child:
                return self._return_use(f, parent, where)
            return set(), [f"{where}: {type(parent).__name__.lower()} {ast.unparse(parent)[:60]!r}"]
        return set(), [f"{where}: unknown use"]

    def _fixed_view_axis(self, f: _File, call: ast.Call, arg: ast.AST,
                         element: tuple[ast.AST, ast.AST] | None) -> str:
        """Why a use inside ``pypto.view``'s shape (or valid_shape) is a problem size: the view is of a tensor the
        jit kernel was given, along an axis its offsets fix with a literal, so no loop moves it there and the extent
        is how much of the input the kernel computes (PyPTO's attention examples: ``head`` in ``[tile, head, q_len,
        dim]`` at ``[b_offset, 0, 0, 0]``). '' for any other use — a view of a block the kernel cut (a sub-view
        at 0 spans the block, and changes with it). The admission refuses such a change whatever form it takes
        (``effective._fixed_views``); this keeps the knob out of the tunable ones."""
        q = f.qname(call.func)
        if (q or "").rsplit(".", 1)[-1] != "view" or len(call.args) < 3 or element is None:
            return ""
        if not (arg is call.args[1] or (isinstance(arg, ast.keyword) and arg.arg == "valid_shape")):
            return ""
        listed, elem = element
        if listed is not (arg.value if isinstance(arg, ast.keyword) else arg):
            return ""
        scope = f.scope_of.get(id(call))
        fn = f.functions.get(scope.name) if scope is not None else None
        tensor = call.args[0]
        if fn is None or (f.path, scope.name) not in self.jits or not isinstance(tensor, ast.Name) or tensor.id not in {
                a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}:
            return ""
        offsets = call.args[2]
        if not isinstance(offsets, (ast.List, ast.Tuple)) or not isinstance(listed, (ast.List, ast.Tuple)) or len(
                offsets.elts) != len(listed.elts):
            return ""
        axis = next(i for i, e in enumerate(listed.elts) if e is elem)
        off = offsets.elts[axis]
        if isinstance(off, ast.Constant) and isinstance(off.value, int) and not isinstance(off.value, bool):
            return (f"the extent of the view of the kernel's input {tensor.id} at line {call.lineno} along axis "
                    f"{axis}, which no loop moves (offset {off.value}): how much of it the kernel computes")
        return ""

    def _return_use(self, f: _File, ret: ast.Return, where: str) -> tuple[set[Consumer], list[str]]:
        """A value a workspace function returns flows on at every call of that function: a helper that builds the
        tile from the config (``def pool_vec_tile(tiling): return (tiling["rows"], …)``, called by the kernel's
        builder) hands it to ``set_vec_tile_shapes(*tile)``. Until 2026-12-05 a return ended the flow as a problem.
        A function the workspace never calls returns to code the server cannot see: a problem."""
        scope = f.scope_of.get(id(ret))
        if scope is None or scope.name == MODULE or scope.name not in f.functions:
            return set(), [f"{where}: returned"]
        key = (f.path, scope.name)
        if key in self._returning:
            return set(), []  # a recursive call: its uses are being counted already
        sites = self._call_sites().get(key, [])
        if not sites:
            return set(), [f"{where}: returned from {scope.name}(), which nothing in the workspace calls"]
        self._returning.add(key)
        try:
            consumers: set[Consumer] = set()
            problems: list[str] = []
            for cf, _, call in sites:
                c, p = self._use(cf, call)
                consumers |= c
                problems.extend(p)
            return consumers, problems
        finally:
            self._returning.discard(key)

    def _call_sites(self) -> dict[tuple[str, str], list[tuple[_File, _Scope, ast.Call]]]:
        """Every call of a workspace function, by (file, function), with the caller's file and scope: computed once
        per analysis (which function a call names does not depend on what the analysis learns)."""
        if self._calls is None:
            self._calls = {}
            for f in self.files.values():
                for n in ast.walk(f.tree):
                    if isinstance(n, ast.Call):
                        scope = f.scope_of.get(id(n)) or f.scopes[MODULE]
                        target = self.callee(f, scope, n.func)
                        if target is not None:
                            self._calls.setdefault(target, []).append((f, scope, n))
        return self._calls

    @staticmethod
    def _in_class_body(f: _File, stmt: ast.AST) -> bool:
        p = f.parents.get(id(stmt))
        while p is not None:
            if isinstance(p, ast.ClassDef):
                return True
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
                return False
            p = f.parents.get(id(p))
        return False

    def _call_use(self, f: _File, call: ast.Call, child: ast.AST, where: str,
                  written: bool = False) -> tuple[set[Consumer], list[str]]:
        if call.func is child:
            return set(), [f"{where}: called"]
        kw = next((k for k in call.keywords if k is child), None)
        pos = next((i for i, a in enumerate(call.args) if a is child), None)
        q = f.qname(call.func)
        d = dotted(call.func)
        if q is not None:
            if q in PYPTO_SCALAR_PASSTHROUGH:
                # pypto.min(n - i * block, block): the result flows on and its own uses decide (a valid_shape is
                # tiling; a tensor clamped by it would be data, and is refused where it is used)
                return self._use(f, call)
            if q in JIT_NAMES:
                return {("jit_options", f.path, call.lineno)}, []
            kind = TUNING_CALLS.get(q) or TUNING_CALLS.get(q.rsplit(".", 1)[-1])
            if kind is not None:
                short = q.rsplit(".", 1)[-1]
                if short in DATA_FIRST_ARG and pos == 0:
                    return set(), [f"{where}: the data argument of pypto.{q}"]
                if kind == "loop" and kw is not None and kw.arg in ("unroll_list", "submit_before_loop"):
                    return {("unroll" if kw.arg == "unroll_list" else "loop_submit", f.path, call.lineno)}, []
                return {(kind, f.path, call.lineno)}, []
            return set(), [f"{where}: argument of pypto.{q} (shapes or data of the problem)"]
        if isinstance(call.func, ast.Attribute) and call.func.attr == "set_cache_policy" and self.in_kernel(f, call):
            return {("cache_policy", f.path, call.lineno)}, []
        if d in HARMLESS_CALLS or d.startswith(HARMLESS_PREFIXES):
            return set(), []
        if d == "range" and self.in_kernel(f, call):
            return {("loop", f.path, call.lineno)}, []
        if d in TRANSPARENT_BUILTINS:
            return self._use(f, call)
        scope = f.scope_of.get(id(call))
        target = self.callee(f, scope, call.func) if scope is not None else None
        if target is not None:
            fn = self.files[target[0]].functions[target[1]]
            names = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
            param = kw.arg if kw is not None else (names[pos] if pos is not None and pos < len(names) else None)
            if param is None:
                return set(), [f"{where}: passed to {d}() as *args/**kwargs"]
            c, p = self.classify((target[0], target[1], param), written)
            return set(c), list(p)
        return set(), [f"{where}: argument of {d or 'a call'}()"]

    def _flow_into_targets(self, f: _File, stmt: ast.AST, where: str,
                           written: bool = False) -> tuple[set[Consumer], list[str]]:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        consumers: set[Consumer] = set()
        problems: list[str] = []
        scope = f.scope_of.get(id(stmt))
        names: list[ast.Name] = []
        for t in targets:
            if isinstance(t, ast.Name):
                names.append(t)
            elif isinstance(t, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in t.elts):
                names.extend(t.elts)  # type: ignore[arg-type]
            else:
                problems.append(f"{where}: stored into {ast.unparse(t)[:40]!r}")
        for n in names:
            owner = f.resolve(scope, n.id) if scope is not None else None
            if owner is None:
                problems.append(f"{where}: stored into {n.id}")
                continue
            c, p = self.classify((f.path, owner.name, n.id), written)
            consumers |= c
            problems.extend(p)
        return consumers, problems


#: the offsets argument of the calls that place a block: (position, keyword)
OFFSET_ARGS = {"view": (2, "offsets"), "assemble": (1, "offsets")}


def _short_name(f: _File, call: ast.Call) -> str:
    return (f.qname(call.func) or dotted(call.func)).rsplit(".", 1)[-1]


def _offsets_arg(f: _File, call: ast.Call, child: ast.AST) -> bool:
    """``child`` is the offsets argument of a ``pypto.view`` / ``pypto.assemble`` call."""
    spec = OFFSET_ARGS.get(_short_name(f, call)) if f.qname(call.func) is not None else None
    if spec is None:
        return False
    pos, kw = spec
    return (len(call.args) > pos and call.args[pos] is child) or \
        any(k.arg == kw and k.value is child for k in call.keywords)


def _tail_clamp(f: _File, call: ast.AST | None, value: ast.AST) -> bool:
    """``call`` is ``X.min(Y)`` / ``X.max(Y)`` with ``value`` written on both sides (``(n - i * B).min(B)``, as PyPTO's
    GLM models write a tail block's rows on a symbolic scalar). With the value on one side only the method could be a
    tensor's reduction over an axis, which is the problem's; so only the tail idiom flows on."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr in PYPTO_SCALAR_PASSTHROUGH and len(call.args) == 1 and not call.keywords):
        return False
    code = ast.dump(value)
    return any(ast.dump(n) == code for n in ast.walk(call.func.value)) and \
        any(ast.dump(n) == code for n in ast.walk(call.args[0]))


def _in_raise(f: _File, node: ast.AST) -> bool:
    """``node`` is part of a ``raise`` statement (the exception and its message)."""
    p = f.parents.get(id(node))
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
        if isinstance(p, ast.Raise):
            return True
        if isinstance(p, ast.stmt):
            return False
        p = f.parents.get(id(p))
    return False


def _in_guard_test(f: _File, node: ast.AST) -> bool:
    """``node`` is part of the test of a guard: an ``assert``, or an ``if`` that only raises (:func:`_only_raises`).
    The test itself may only compute (no call, no walrus): what it evaluates must not do anything else."""
    child, p = node, f.parents.get(id(node))
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, (ast.Call, ast.NamedExpr, ast.Lambda, ast.comprehension)):
            return False
        child, p = p, f.parents.get(id(p))
    return isinstance(p, (ast.If, ast.Assert)) and p.test is child and _only_raises(p)


def _only_raises(stmt: ast.If | ast.Assert) -> bool:
    """An ``assert``, or an ``if`` whose body only raises and which has no ``else``: a guard, not a branch."""
    if isinstance(stmt, ast.Assert):
        return True
    return not stmt.orelse and all(isinstance(st, ast.Raise) for st in stmt.body)


@functools.lru_cache(maxsize=32)
def _analyze_cached(items: tuple[tuple[str, str], ...]) -> Program:
    a = _Analysis(dict(items))
    a.collect_bindings()
    a.bind_single_call_sites()
    a.find_kernels()
    a.find_reductions()
    a.find_transposes()
    for key, b in a.bindings.items():
        consumers, problems = a.classify(key)
        b.consumers = {c[0] for c in consumers}
        b.consumer_sites = set(consumers)
        b.problems = list(problems)

    return Program(bindings=a.bindings, kernel_scopes=a.kernel, reductions=a.reductions, literals=a.literals,
                   jit_scopes=a.jits, transposes=a.transposes, kernel_reach=a.reach,
                   entry_reach=flows.entry_points(a), sources=flows.find_sources(a))


def analyze(files: dict[str, str]) -> Program:
    """Roles of every literal binding in ``files`` (all Python files of the workspace: operator files and the
    harness alike; a use in any of them counts). Cached per exact content."""
    return _analyze_cached(tuple(sorted((p, t) for p, t in files.items() if p.endswith(".py"))))
