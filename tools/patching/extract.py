"""Find every knob of domain.md C in PyPTO operator sources.

One pass per file with libcst. Calls are recognised by their *qualified* name (libcst resolves
``import pypto as pt``, ``from pypto import frontend``, ``from pypto.frontend import jit``), so aliases work;
method calls (``w.set_cache_policy``, ``x.view(..., valid_shape=...)``) are recognised by the method name.

Each knob is backed by a :class:`Site` that remembers the node holding the value and how to add the knob when it is
absent; :mod:`.edit` uses the sites, :func:`extract_knobs` only returns the public :class:`Knob` part.

Ids never contain line numbers, so a value edit or an edit elsewhere in the file keeps them: a call site is
``<file>:<function>.<callee>#<n>`` (n-th such call in that function, 1-based), a loop with a literal ``name=`` is
``loop[<name>]``, an option dict entry is ``<file>:<function>.<group>.<key>`` (or ``<file>:<VAR>.<key>`` when the
dict is a module-level variable), a constant is ``<file>:<NAME>``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..errors import InputError
from . import legality, roles
from ._cst import is_dict_call, is_expr, literal, nodes_under
from .models import DTYPE_BYTES, EXPR_KEY, Knob  # noqa: F401  (DTYPE_BYTES re-exported for old imports)

OPTION_GROUPS = (
    "runtime_options", "pass_options", "debug_options", "host_options", "codegen_options", "verify_options",
)
# Option keys the tuning loop adds when they are absent (domain C S-5..S-10); listed as absent knobs of every jit.
ADDABLE_OPTIONS = {
    "pass_options": ("vec_nbuffer_setting", "cube_l1_reuse_setting", "cube_nbuffer_setting"),
    "runtime_options": ("stitch_function_max_num", "device_sched_mode"),
}
LOOP_KWARGS = ("unroll_list", "submit_before_loop")
VIEW_CALLEES = ("view", "reshape")
UPPER = re.compile(r"^[A-Z][A-Z0-9_]*$")
# Names that say "tiling/blocking" on their face (F-11 lists BLOCK_SIZE, S_TILE, ...).
TILING_NAME = re.compile(r"(TILE|BLOCK|BLK|CHUNK|SPLIT|UNROLL|STEP|GROUP|NBUF|(^|_)BS($|_)|(^|_)T[A-Z]?($|_))")


# Catalogue rows served by a name, by the tuning consumer it feeds (domain C).
CONSUMER_CATALOG = {
    "loop": ("F-3", "F-1", "F-7", "F-2"), "unroll": ("F-8", "F-2"), "loop_submit": ("I-8",), "slice": ("F-1", "F-3", "F-7"), "view": ("F-1", "F-3", "F-7", "I-9"),
    "vec_tile": ("F-10", "S-12", "S-3"), "cube_tile": ("F-9", "S-2", "S-11", "S-3", "I-7"),
    "pass_options": ("S-4", "S-5", "S-6", "S-7", "S-8"), "jit_options": ("S-5", "S-6", "S-7", "S-8", "S-9", "S-10"),
    "operation_options": ("F-15",), "cache_policy": ("I-2",),
}


@dataclass
class Site:
    """A knob plus what the editor needs: the node holding the value, or how to create it."""

    knob: Knob
    file: str
    node: cst.CSTNode | None  # the value expression (or the Call for call-site knobs)
    # For absent knobs: returns {id(node): replacement-fn} for a given rendered value node.
    adder: Callable[[Any], dict[int, Callable[[cst.CSTNode], cst.CSTNode]]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedFile:
    path: str
    text: str
    module: cst.Module
    sites: list[Site]
    jits: list["JitSite"]
    constants: dict[str, int]
    bom: str = ""
    assigns: dict[tuple[str, str], list[cst.BaseExpression]] = field(default_factory=dict)
    divisor_bounds: dict[str, int] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)  # id(value node) -> line
    # (line, column) -> node of every comprehension element and call keyword value: where a tiling source
    # (tools/patching/flows.py) can sit
    source_nodes: dict[tuple[int, int], cst.BaseExpression] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified module path (_import_table)
    # what the admission derives from this (immutable) tree, once: its masked source per set of masked nodes
    derived: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class JitSite:
    """One ``@...jit`` decorator: where options live, so the runtime-debug toggle can add to them."""

    function: str
    ordinal: int
    decorator: cst.Decorator
    call: cst.Call | None  # None for a bare ``@pypto.frontend.jit``
    groups: dict[str, cst.BaseExpression]  # option group -> its dict/dict() node (resolved through variables)
    group_args: dict[str, cst.Arg]  # option group -> the keyword argument in the decorator call
    group_var: dict[str, str]  # option group -> module variable name when the dict is a variable
    opaque: bool = False  # the call splats ``**options``: which groups it sets is unknown, so nothing is added


def parse(path: str, text: str) -> cst.Module:
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise InputError(
            f"{path} is not valid Python: {exc.message} at line {exc.raw_line}",
            hint="fix the syntax error (or revert the last patch) before listing or editing knobs",
        ) from exc


def parse_file(path: str, text: str) -> ParsedFile:
    """Parsed file with its sites. Cached: libcst trees are immutable, and a session re-reads the same text on
    every tool call (extract, delta before/after, debug toggle). Callers must not mutate the returned Knobs;
    :func:`extract_knobs` hands out copies."""
    return _parse_file_cached(path, text)


@functools.lru_cache(maxsize=128)
def _parse_file_cached(path: str, text: str) -> ParsedFile:
    # libcst drops a UTF-8 byte-order mark from Module.code; keep it aside so every edit writes it back.
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    module = parse(path, text[len(bom):])
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    visitor = _Collector(path, module)
    wrapper.visit(visitor)  # finish() runs in leave_Module, while metadata is still available
    positions = {id(v): wrapper.resolve(PositionProvider)[v].start.line
                 for values in visitor.assigns.values() for v in values} if visitor.assigns else {}
    return ParsedFile(path, text, module, visitor.sites, visitor.jits, visitor.constants, bom,
                      assigns=visitor.assigns, divisor_bounds=visitor.divisor_bounds, positions=positions,
                      source_nodes=visitor.source_nodes, imports=visitor.imports)


def extract_knobs(sources: dict[str, str], context: dict[str, str] | None = None) -> list[Knob]:
    """Every knob in ``sources`` (relative path -> exact text), in file order then source order.

    ``context`` holds the workspace's other Python files (the harness, helpers): they are never edited, but a name
    they use for the problem (``torch.randn(kernels.ROWS, ...)``) is not a knob (see :mod:`.roles`).
    Absent-but-addable knobs (``present=False``, ``value=None``) are included for the jit option keys of domain C
    S-5…S-10 and for ``unroll_list`` / ``submit_before_loop`` of every loop, so that an agent can set them by id.
    Raises InputError when a file does not parse.
    """
    _, sites = sites_of(sources, context)
    return [site.knob.model_copy(deep=True) for site in sites]


def sites_of(sources: dict[str, str], context: dict[str, str] | None = None,
             ) -> tuple[dict[str, ParsedFile], list[Site]]:
    """Parsed operator files and every knob site: call sites and option entries, plus the names (module constants,
    locals of the kernel or its caller) that the role analysis finds are knobs."""
    parsed = {path: parse_file(path, sources[path]) for path in sorted(sources)}
    program = roles.analyze({**(context or {}), **sources})
    out: list[Site] = []
    for path, pf in parsed.items():
        out.extend(sorted(pf.sites + binding_sites(pf, program) + source_sites(pf, program),
                          key=lambda s: (s.knob.line, s.knob.id)))
    return parsed, out


def source_sites(pf: ParsedFile, program: roles.Program) -> list[Site]:
    """Knob sites (kind ``tile_source``) for the literals a tiling value flows from (tools/patching/flows.py): a
    number inside a list comprehension, a literal keyword of a workspace class built in the test, a literal value
    of a tiling dict read entry by entry. Tunable only when
    all they reach is tiling; the admission gate then derives what they give at each tiling call that ran."""
    out: list[Site] = []
    seen: dict[str, int] = {}
    for src in program.sources:
        if src.file != pf.path:
            continue
        node = pf.source_nodes.get((src.line, src.col))
        if node is None:  # a non-ASCII line: ast counts bytes, libcst characters — match by line and value
            node = next((n for (line, _), n in pf.source_nodes.items()
                         if line == src.line and literal(n, pf.module) == src.value), None)
        if node is None:
            continue
        base = (f"{src.cls}({src.field})" if src.kind == "field" else src.label)
        sid = f"{pf.path}:{src.scope + '.' if src.scope != roles.MODULE else ''}{base}"
        seen[sid] = seen.get(sid, 0) + 1
        if seen[sid] > 1:
            sid += f"#{seen[sid]}"
        spec = legality.spec_for("tile_source", src.label)
        ids = [cid for c in sorted(src.consumers) for cid in CONSUMER_CATALOG.get(c, ())]
        context: dict[str, Any] = {"consumers": sorted(src.consumers), "source": src.kind, "at": [src.line, src.col],
                                   "feeds": sorted({f"{f}:{line}" for _, f, line in src.consumer_sites})}
        if src.problems:
            context["problem_uses"] = src.problems[:5]
        knob = Knob(id=sid, kind="tile_source", name=src.label, file=pf.path, line=src.line, value=src.value,
                    catalog_ids=list(dict.fromkeys(ids)), legal=spec.legal, target=f"{pf.path}:{src.line}",
                    function=None if src.scope == roles.MODULE else src.scope,
                    tunable=src.is_knob and spec.tunable, context=context)
        out.append(Site(knob=knob, file=pf.path, node=node, extra={"key": src.label, "source": True}))
    return out


def binding_sites(pf: ParsedFile, program: roles.Program) -> list[Site]:
    """Knob sites for the names bound once to a literal in ``pf`` (kinds ``tile_constant`` / ``local_constant``).

    A name whose every use ends in a tuning consumer is tunable; a module constant that also reaches the problem is
    listed as ``shape_constant`` (not tunable) with the uses that make it one, so an agent sees why.
    """
    out: list[Site] = []
    # a module dict passed as a jit option group is already listed entry by entry (``<file>:<VAR>.<key>``)
    group_vars = {v for j in pf.jits for v in j.group_var.values()}
    # a tiling dict read entry by entry is listed entry by entry (source_sites, ``<file>:<VAR>["<key>"]``): the
    # whole dict as a knob too would make every entry's change move two knobs
    by_entry = {(s.file, s.scope, s.owner) for s in program.sources if s.kind == "entry"}
    for (path, scope, name), b in program.bindings.items():
        if path != pf.path or (scope == roles.MODULE and name in group_vars) or (path, scope, name) in by_entry:
            continue
        nodes = pf.assigns.get((scope, name), [])
        if len(nodes) != 1:
            continue
        node = nodes[0]
        if not b.consumers and not (scope == roles.MODULE and UPPER.match(name) and b.problems):
            continue  # unused, or never near tiling: not worth listing
        local = scope != roles.MODULE
        if b.is_knob:
            kind = "local_constant" if local else "tile_constant"
        elif local:
            kind = "local_constant"
        else:
            kind = "shape_constant"
        context: dict[str, Any] = {"consumers": sorted(b.consumers)}
        if b.problems:
            context["problem_uses"] = b.problems[:5]
        if not local and name in pf.divisor_bounds:
            context["max_value"] = pf.divisor_bounds[name]
        spec = legality.spec_for(kind, name)
        # the catalogue rows a name serves follow from what it feeds (a block size is F-3, a tile tuple F-10)
        ids = [cid for c in sorted(b.consumers) for cid in CONSUMER_CATALOG.get(c, ())]
        knob = Knob(
            id=f"{pf.path}:{name}" if not local else f"{pf.path}:{scope}.{name}", kind=kind, name=name,
            file=pf.path, line=pf.positions.get(id(node), b.line), value=literal(node, pf.module),
            catalog_ids=list(dict.fromkeys(["F-11", *ids])), legal=spec.legal, target=f"{pf.path}:{b.line}",
            function=None if not local else scope, tunable=b.is_knob and spec.tunable, context=context,
        )
        out.append(Site(knob=knob, file=pf.path, node=node, extra={"key": name, "binding": True}))
    return out


# ---------------------------------------------------------------------------------------------------- helpers


def eval_int(node: cst.CSTNode | None, consts: dict[str, int]) -> int | None:
    """Integer value of a small arithmetic expression over literals and module constants, else None."""
    if node is None:
        return None
    if isinstance(node, cst.Integer):
        return int(node.value.replace("_", ""), 0)
    if isinstance(node, cst.Name):
        return consts.get(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = eval_int(node.expression, consts)
        return None if v is None else -v
    if isinstance(node, cst.BinaryOperation):
        a, b = eval_int(node.left, consts), eval_int(node.right, consts)
        if a is None or b is None:
            return None
        op = node.operator
        if isinstance(op, cst.Add):
            return a + b
        if isinstance(op, cst.Subtract):
            return a - b
        if isinstance(op, cst.Multiply):
            return a * b
        if isinstance(op, cst.FloorDivide) and b != 0:
            return a // b
        if isinstance(op, cst.Modulo) and b != 0:
            return a % b
    return None


def _names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in nodes_under(node) if isinstance(n, cst.Name)}


class _Collector(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, path: str, module: cst.Module) -> None:
        super().__init__()
        self.path = path
        self.module = module
        self.sites: list[Site] = []
        self.jits: list[JitSite] = []
        self.func_stack: list[str] = []
        self.counters: dict[tuple[str, str], int] = {}
        self.seen_ids: set[str] = set()
        self.constants: dict[str, int] = {}  # UPPER_CASE int literals: the knobs
        self.known: dict[str, int] = {}  # also derived ints (NBLK = M // BLOCK_M), for trip counts and dims only
        self.const_nodes: dict[str, cst.BaseExpression] = {}
        self.const_assign: dict[str, cst.CSTNode] = {}
        self.module_dicts: dict[str, cst.BaseExpression] = {}
        # (scope, family) -> members of a per-function grouped knob (see _emit_grouped)
        self.grouped: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        self.func_tensors: dict[str, list[tuple[list[int | None], str | None]]] = {}
        self.func_casts: dict[str, list[str]] = {}  # function -> the dtypes its pypto.cast calls produce
        self.kernel_funcs: set[str] = set()
        self.name_uses: dict[str, set[str]] = {}  # constant name -> {"kernel", "signature", "other"}
        # (scope, name) -> value nodes of every plain assignment; a name assigned once to a literal is a candidate
        self.assigns: dict[tuple[str, str], list[cst.BaseExpression]] = {}
        self.source_nodes: dict[tuple[int, int], cst.BaseExpression] = {}
        self.divisor_bounds: dict[str, int] = {}
        self.imports = _import_table(module)
        self._collect_module_level()

    # -------------------------------------------------------------------------------- module-level bindings

    def _collect_module_level(self) -> None:
        for stmt in self.module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target, value = small.targets[0].target, small.value
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    target, value = small.target, small.value
                else:
                    continue
                if isinstance(target, cst.Name):
                    self._bind(target.value, value, small)
                elif isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
                    if len(target.elements) == len(value.elements):
                        for t_el, v_el in zip(target.elements, value.elements):
                            if isinstance(t_el.value, cst.Name):
                                self._bind(t_el.value.value, v_el.value, small)

    def _bind(self, name: str, value: cst.BaseExpression, stmt: cst.CSTNode) -> None:
        if isinstance(value, cst.Dict) or is_dict_call(value):
            self.module_dicts[name] = value
            return
        if UPPER.match(name):
            v = literal(value, self.module)
            if isinstance(v, int) and not isinstance(v, bool):
                self.constants[name] = v
                self.known[name] = v
                self.const_nodes[name] = value
                self.const_assign[name] = stmt
                return
        derived = eval_int(value, self.known)
        if derived is not None:
            self.known[name] = derived
        else:
            self.known.pop(name, None)  # rebound to something unknown

    # ------------------------------------------------------------------------------------------ utilities

    def line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def qname(self, func: cst.BaseExpression) -> str | None:
        """'frontend.jit', 'set_vec_tile_shapes', ... for pypto names; None for anything else.

        Resolved through the file's import table (``import pypto as pt``, ``from pypto import frontend``,
        ``from pypto.frontend import jit``). libcst's QualifiedNameProvider does the same with full scoping but
        costs about two thirds of the parse time; local rebinding of an imported name is the only case it would
        get better, and operator files do not do that.
        """
        dotted = _dotted(func)
        if not dotted:
            return None
        head, _, rest = dotted.partition(".")
        target = self.imports.get(head)
        if target is None:
            # A file that uses pypto without importing it (snippets) still counts.
            return dotted[len("pypto."):] if dotted.startswith("pypto.") else None
        full = f"{target}.{rest}" if rest else target
        if full == "pypto" or full.startswith("pypto."):
            return full[len("pypto."):]
        return None

    def scope(self) -> str:
        return self.func_stack[-1] if self.func_stack else "<module>"

    def next_ordinal(self, key: str) -> int:
        k = (self.scope(), key)
        self.counters[k] = self.counters.get(k, 0) + 1
        return self.counters[k]

    def add(self, site: Site) -> None:
        if site.knob.id in self.seen_ids:  # a module-level option dict shared by several jits is one knob
            return
        self.seen_ids.add(site.knob.id)
        self.sites.append(site)

    def knob(self, *, id: str, kind: str, name: str, line: int, value: Any, node: cst.CSTNode | None,
             present: bool = True, adder=None, function: str | None = None, context: dict | None = None,
             key: str | None = None, group: str | None = None, extra: dict | None = None) -> None:
        spec = legality.spec_for(kind, key or name, group)
        context = dict(context or {})
        k = Knob(
            id=id, kind=kind, name=name, file=self.path, line=line, value=value, present=present,
            catalog_ids=list(spec.catalog_ids), legal=spec.legal, target=f"{self.path}:{line}",
            function=function if function is not None else (self.func_stack[-1] if self.func_stack else None),
            tunable=spec.tunable, context=context,
        )
        self.add(Site(knob=k, file=self.path, node=node, adder=adder, extra=dict(extra or {}, key=key, group=group)))

    # ------------------------------------------------------------------------------------------- visiting

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        name = node.name.value if not self.func_stack else f"{self.func_stack[-1]}.{node.name.value}"
        self.func_stack.append(name)
        self.func_tensors[name] = self._tensor_params(node)
        self.func_casts[name] = self._cast_dtypes(node)
        for ordinal, dec in enumerate(node.decorators, 1):
            target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
            q = self.qname(target)
            if q in ("frontend.jit", "jit", "frontend.parser.entry.jit"):
                self.kernel_funcs.add(name)
                self._jit(name, ordinal, dec)
        # Constant uses: annotations of the parameters are "signature", the body is "kernel"/"other".
        for param in _all_params(node.params):
            if param.annotation is not None:
                for n in _names_in(param.annotation):
                    self.name_uses.setdefault(n, set()).add("signature")

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        name = self.func_stack[-1]
        body_names = _names_in(original_node.body)
        kernel_like = name in self.kernel_funcs or any(
            isinstance(n, cst.Call) and self.qname(n.func) is not None for n in _calls_in(original_node.body)
        )
        for n in body_names:
            self.name_uses.setdefault(n, set()).add("kernel" if kernel_like else "other")
        self._emit_grouped()
        self.func_stack.pop()

    def _source_node(self, node: cst.BaseExpression) -> None:
        pos = self.get_metadata(PositionProvider, node).start
        self.source_nodes[(pos.line, pos.column)] = node

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._source_node(node.elt)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._source_node(node.elt)

    def visit_Tuple(self, node: cst.Tuple) -> None:
        self._elements(node)

    def visit_List(self, node: cst.List) -> None:
        self._elements(node)

    def _elements(self, node: cst.Tuple | cst.List) -> None:
        for el in node.elements:  # an int beside run-time values (flows.py: element sources)
            if isinstance(el, cst.Element) and isinstance(el.value, cst.Integer):
                # never in place of a display registered whole: libcst starts a parenthesised tuple at its first
                # element, where ast starts it at the parenthesis
                pos = self.get_metadata(PositionProvider, el.value).start
                self.source_nodes.setdefault((pos.line, pos.column), el.value)

    def visit_Dict(self, node: cst.Dict) -> None:
        for el in node.elements:  # a tiling dict's entries (flows.py: entry sources)
            if isinstance(el, cst.DictElement):
                self._source_node(el.value)

    def visit_Call(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None:
                self._source_node(arg.value)
        q = self.qname(node.func)
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        if q == "set_vec_tile_shapes":
            self._vec_tile(node)
        elif q == "set_cube_tile_shapes":
            self._cube_tile(node)
        elif q in ("loop", "loop_unroll"):
            self._loop(node, q)
        elif q == "set_pass_options":
            self._pass_options(node)
        elif q in ("experimental.set_operation_options", "set_operation_options"):
            self._operation_options(node)
        elif method == "set_cache_policy":
            self._cache_policy(node)
        callee = q.rsplit(".", 1)[-1] if q else method
        if callee in VIEW_CALLEES and (q is not None or method is not None):
            self._valid_shape(node, callee)

    def leave_Module(self, original_node: cst.Module) -> None:
        self.finish()

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1:
            return
        target, value = node.targets[0].target, node.value
        if isinstance(target, cst.Attribute):  # ``self.h_tile = 4096`` in an __init__ (flows.py: attribute sources)
            self._source_node(value)
        if isinstance(target, cst.Name):
            self.assigns.setdefault((self.scope(), target.value), []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) \
                and len(target.elements) == len(value.elements):
            for t_el, v_el in zip(target.elements, value.elements):
                if isinstance(t_el.value, cst.Name):
                    self.assigns.setdefault((self.scope(), t_el.value.value), []).append(v_el.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name) and node.value is not None:
            self.assigns.setdefault((self.scope(), node.target.value), []).append(node.value)

    def finish(self) -> None:
        """Module-level work that needs the whole file. Constants and locals become knobs later, in
        :func:`binding_sites`, because whether a name is a knob depends on every file that uses it."""
        self._emit_grouped()
        self.divisor_bounds = self._divisor_bounds()
        self.sites.sort(key=lambda s: (s.knob.line, s.knob.id))

    def _divisor_bounds(self) -> dict[str, int]:
        """C -> X for every ``X // C`` with X known: a block constant may not exceed the axis it blocks (F-1)."""
        out: dict[str, int] = {}

        for n in nodes_under(self.module):
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.FloorDivide) and isinstance(n.right, cst.Name):
                c = n.right.value
                if c in self.constants and c not in _names_in(n.left):
                    x = eval_int(n.left, self.known)
                    if x is not None and x >= 1:
                        out[c] = min(out.get(c, x), x)
        return out

    # ------------------------------------------------------------------------------------------- the kinds

    def _tensor_params(self, node: cst.FunctionDef) -> list[tuple[list[int | None], str | None]]:
        out = []
        for param in _all_params(node.params):
            ann = param.annotation.annotation if param.annotation is not None else None
            if isinstance(ann, cst.Call) and _dotted(ann.func).endswith("Tensor") and ann.args:
                dims_node = ann.args[0].value
                dims: list[int | None] = []
                if isinstance(dims_node, (cst.List, cst.Tuple)):
                    dims = [eval_int(el.value, self.known) for el in dims_node.elements]
                dtype = None
                if len(ann.args) > 1:
                    dtype = _dotted(ann.args[1].value).rsplit(".", 1)[-1] or None
                out.append((dims, dtype))
        return out

    def _cast_dtypes(self, node: cst.FunctionDef) -> list[str]:
        """The dtypes written as the target of a ``pypto.cast(x, pypto.DT_…)`` in the function (nested ones too)."""
        out: set[str] = set()
        for call in _calls_in(node.body):
            if self.qname(call.func) != "cast":
                continue
            arg = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "dtype"), None)
            if arg is None:
                pos = [a for a in call.args if a.keyword is None]
                arg = pos[1].value if len(pos) > 1 else None
            name = _dotted(arg).rsplit(".", 1)[-1] if arg is not None else ""
            if name in DTYPE_BYTES:
                out.add(name)
        return sorted(out)

    def _func_context(self) -> dict[str, Any]:
        tensors = self.func_tensors.get(self.scope(), [])
        # Outer functions too: a nested helper tiles the tensors of the kernel around it.
        if not tensors and self.func_stack:
            tensors = self.func_tensors.get(self.func_stack[0], [])
        dtypes = sorted({d for _, d in tensors if d})
        ctx: dict[str, Any] = {}
        if tensors:
            ctx["tensor_shapes"] = [dims for dims, _ in tensors]
        if dtypes:
            ctx["dtypes"] = dtypes
        # what the kernel casts to reaches its vector ops too: the unified buffer holds a tile at that size
        casts = sorted({d for f in self.func_stack[:1] + [self.scope()] for d in self.func_casts.get(f, [])})
        if casts:
            ctx["cast_dtypes"] = casts
        return ctx

    def _jit(self, func: str, ordinal: int, dec: cst.Decorator) -> None:
        call = dec.decorator if isinstance(dec.decorator, cst.Call) else None
        jit = JitSite(func, ordinal, dec, call, {}, {}, {})
        self.jits.append(jit)
        scope_name = func if ordinal == 1 else f"{func}@{ordinal}"
        args = list(call.args) if call is not None else []
        jit.opaque = any(arg.star == "**" for arg in args)
        for arg in args:
            if arg.keyword is None or arg.keyword.value not in OPTION_GROUPS:
                continue
            group = arg.keyword.value
            jit.group_args[group] = arg
            container: cst.BaseExpression | None = arg.value
            owner = f"{scope_name}.{group}"
            if isinstance(container, cst.Name) and container.value in self.module_dicts:
                jit.group_var[group] = container.value
                owner = container.value
                container = self.module_dicts[container.value]
            if isinstance(container, cst.Dict) or (container is not None and is_dict_call(container)):
                jit.groups[group] = container
                self._option_entries(owner, group, container, func)
            else:
                self.knob(
                    id=f"{self.path}:{owner}", kind="debug_option" if group == "debug_options" else "jit_option",
                    name=group, line=self.line(arg.value), value=literal(arg.value, self.module), node=arg.value,
                    function=func, key="*", group=group,
                )
        # Absent but addable keys (S-5..S-10) so an agent can set them by id. Not next to a ``**options`` splat:
        # adding pass_options= there could duplicate a keyword the splat already passes (TypeError at import).
        for group, keys in ({} if jit.opaque else ADDABLE_OPTIONS).items():
            container = jit.groups.get(group)
            if group in jit.group_args and container is None:
                continue  # options built some way we cannot edit safely
            owner = jit.group_var.get(group, f"{scope_name}.{group}")
            present = set(_keys_of(container, self.module)) if container is not None else set()
            for key in keys:
                if key in present:
                    continue
                self.knob(
                    id=f"{self.path}:{owner}.{key}", kind="jit_option", name=key, line=self.line(dec), value=None,
                    node=None, present=False, function=func, key=key, group=group,
                    extra={"jit": jit},
                )

    def _option_entries(self, owner: str, group: str, container: cst.BaseExpression, func: str) -> None:
        kind = "debug_option" if group == "debug_options" else "jit_option"
        if isinstance(container, cst.Dict):
            for el in container.elements:
                if not isinstance(el, cst.DictElement):
                    continue
                key = literal(el.key, self.module)
                if not isinstance(key, str):
                    continue
                self.knob(
                    id=f"{self.path}:{owner}.{key}", kind=kind, name=key, line=self.line(el.value),
                    value=literal(el.value, self.module), node=el.value, function=func, key=key, group=group,
                )
        else:
            assert isinstance(container, cst.Call)
            for arg in container.args:
                key = arg.keyword.value  # type: ignore[union-attr]
                self.knob(
                    id=f"{self.path}:{owner}.{key}", kind=kind, name=key, line=self.line(arg.value),
                    value=literal(arg.value, self.module), node=arg.value, function=func, key=key, group=group,
                )

    def _vec_tile(self, node: cst.Call) -> None:
        n = self.next_ordinal("set_vec_tile_shapes")
        args = list(node.args)
        if len(args) == 1 and isinstance(args[0].value, (cst.List, cst.Tuple)):
            value = literal(args[0].value, self.module)  # list form, also *[...]
            form = "list"
        elif args and all(a.keyword is None and not a.star for a in args):
            value = [literal(a.value, self.module) for a in args]
            form = "args"
        else:
            value = literal(node, self.module)
            form = "expr"
        ctx = self._func_context()
        self.knob(
            id=f"{self.path}:{self.scope()}.set_vec_tile_shapes#{n}", kind="vec_tile", name="set_vec_tile_shapes",
            line=self.line(node), value=value, node=node, context=ctx, extra={"form": form},
        )

    def _cube_tile(self, node: cst.Call) -> None:
        n = self.next_ordinal("set_cube_tile_shapes")
        slots: dict[str, cst.Arg] = {}
        names = ("m", "k", "n", "enable_split_k")
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for name, arg in zip(names, positional):
            slots[name] = arg
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in names:
                slots[arg.keyword.value] = arg
        value: dict[str, Any] = {name: literal(arg.value, self.module) for name, arg in slots.items()}
        ctx = self._func_context()
        self.knob(
            id=f"{self.path}:{self.scope()}.set_cube_tile_shapes#{n}", kind="cube_tile", name="set_cube_tile_shapes",
            line=self.line(node), value=value, node=node, context=ctx, extra={"slots": slots},
        )

    def _loop(self, node: cst.Call, callee: str) -> None:
        n = self.next_ordinal(callee)
        label = None
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "name":
                v = literal(arg.value, self.module)
                if isinstance(v, str):
                    label = v
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        start, stop, step = (None, None, None)
        if len(positional) == 1:
            start, stop, step = 0, eval_int(positional[0], self.known), 1
        elif len(positional) in (2, 3):
            start = eval_int(positional[0], self.known)
            stop = eval_int(positional[1], self.known)
            step = eval_int(positional[2], self.known) if len(positional) == 3 else 1
        ctx: dict[str, Any] = {"loop": callee}
        if None not in (start, stop, step) and step:
            ctx["trip_count"] = max(0, -(-(stop - start) // step))  # type: ignore[operator]
        if label is not None:
            ctx["loop_name"] = label
            site = f"{callee}[{label}]"
            if any(s.knob.id.startswith(f"{self.path}:{self.scope()}.{site}.") for s in self.sites):
                site = f"{site}#{n}"
        else:
            site = f"{callee}#{n}"
        base = f"{self.path}:{self.scope()}.{site}"
        kwargs = {a.keyword.value: a for a in node.args if a.keyword is not None}
        for key in LOOP_KWARGS:
            arg = kwargs.get(key)
            if arg is not None:
                self.knob(id=f"{base}.{key}", kind="loop_option", name=key, line=self.line(arg.value),
                          value=literal(arg.value, self.module), node=arg.value, context=ctx, key=key)
            else:
                self.knob(id=f"{base}.{key}", kind="loop_option", name=key, line=self.line(node), value=None,
                          node=None, present=False, context=ctx, key=key, extra={"call": node})

    def _pass_options(self, node: cst.Call) -> None:
        n = self.next_ordinal("set_pass_options")
        for arg in node.args:
            if arg.keyword is None:
                continue
            key = arg.keyword.value
            if key == "sg_set_scope":
                self.grouped.setdefault((self.scope(), "sg_set_scope"), []).append(
                    (None, arg.value, literal(arg.value, self.module), self.line(arg.value)))
                continue
            self.knob(id=f"{self.path}:{self.scope()}.set_pass_options#{n}.{key}", kind="pass_option", name=key,
                      line=self.line(arg.value), value=literal(arg.value, self.module), node=arg.value, key=key,
                      group="pass_options")

    def _operation_options(self, node: cst.Call) -> None:
        n = self.next_ordinal("set_operation_options")
        for arg in node.args:
            if arg.keyword is None:
                continue
            key = arg.keyword.value
            self.knob(id=f"{self.path}:{self.scope()}.set_operation_options#{n}.{key}", kind="combine_axis",
                      name=key, line=self.line(arg.value), value=literal(arg.value, self.module), node=arg.value,
                      key=key)

    def _cache_policy(self, node: cst.Call) -> None:
        assert isinstance(node.func, cst.Attribute)
        obj = self.module.code_for_node(node.func.value).strip()
        n = self.next_ordinal(f"set_cache_policy[{obj}]")
        args = list(node.args)
        policy = literal(args[0].value, self.module) if args else None
        value_node = args[1].value if len(args) > 1 else None
        value = literal(value_node, self.module) if value_node is not None else None
        label = obj if n == 1 else f"{obj}#{n}"
        self.grouped.setdefault((self.scope(), "cache_policy"), []).append(
            (label, value_node, value, self.line(node), policy[EXPR_KEY] if is_expr(policy) else policy))

    def _emit_grouped(self) -> None:
        """One knob per function for the call families that one catalogue row changes together.

        S-4 opens and closes a merge scope (``sg_set_scope=1`` … ``sg_set_scope=-1``) and I-2 marks all large
        weights of a fused kernel at once (domain E.3.9): counted per call, either would always look like two or
        more changes under R9. The value is the list of scope ids / the {tensor: flag} map in source order.
        Adding or removing calls changes the list's length, which the editor leaves to a diff.
        """
        scope = self.scope()
        members = self.grouped.pop((scope, "sg_set_scope"), [])
        if members:
            self.knob(id=f"{self.path}:{scope}.sg_set_scope", kind="sg_set_scope", name="sg_set_scope",
                      line=members[0][3], value=[m[2] for m in members], node=None,
                      context={"lines": [m[3] for m in members]}, key="sg_set_scope",
                      extra={"members": [(i, m[1]) for i, m in enumerate(members)]})
        members = self.grouped.pop((scope, "cache_policy"), [])
        if members:
            self.knob(id=f"{self.path}:{scope}.set_cache_policy", kind="cache_policy", name="set_cache_policy",
                      line=members[0][3], value={m[0]: m[2] for m in members}, node=None,
                      context={"lines": {m[0]: m[3] for m in members}, "policies": {m[0]: m[4] for m in members}},
                      extra={"members": [(m[0], m[1]) for m in members]})

    def _valid_shape(self, node: cst.Call, callee: str) -> None:
        n = self.next_ordinal(callee)
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "valid_shape":
                self.knob(id=f"{self.path}:{self.scope()}.{callee}#{n}.valid_shape", kind="valid_shape",
                          name="valid_shape", line=self.line(arg.value), value=literal(arg.value, self.module),
                          node=arg.value, context={"callee": callee})


def _import_table(module: cst.Module) -> dict[str, str]:
    """Local name -> qualified module path, for every import in the file (top level or nested)."""
    table: dict[str, str] = {}
    for n in nodes_under(module):  # statement order: a later import of a name rebinds it
        if isinstance(n, cst.Import):
            for alias in n.names:
                full = _dotted(alias.name)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    table[alias.asname.name.value] = full
                else:
                    head = full.split(".")[0]
                    table[head] = head
        elif isinstance(n, cst.ImportFrom) and not n.relative and n.module is not None:
            base = _dotted(n.module)
            if not isinstance(n.names, cst.ImportStar):
                for alias in n.names:
                    name = _dotted(alias.name)
                    local = alias.asname.name.value if alias.asname is not None and isinstance(
                        alias.asname.name, cst.Name) else name
                    table[local] = f"{base}.{name}"
    return table


def _keys_of(container: cst.BaseExpression, module: cst.Module) -> list[str]:
    if isinstance(container, cst.Dict):
        return [k for el in container.elements if isinstance(el, cst.DictElement)
                for k in [literal(el.key, module)] if isinstance(k, str)]
    if isinstance(container, cst.Call):
        return [a.keyword.value for a in container.args if a.keyword is not None]
    return []


def _dotted(node: cst.CSTNode) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    return ""


def _all_params(params: cst.Parameters) -> list[cst.Param]:
    out = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    if isinstance(params.star_arg, cst.Param):
        out.append(params.star_arg)
    if params.star_kwarg is not None:
        out.append(params.star_kwarg)
    return out


def _calls_in(node: cst.CSTNode):
    return (n for n in nodes_under(node) if isinstance(n, cst.Call))


def _contains(tree: cst.CSTNode, target: cst.CSTNode) -> bool:
    return any(n is target for n in nodes_under(tree))
