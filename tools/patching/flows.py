"""Where a tiling value comes from, and who shares it: the value-source and reach parts of the role analysis.

Upstream PyPTO examples rarely write a tile as a literal at the call. They build it in a helper shared by several
kernels (``tile_list = [32 for _ in range(len(x.shape))]; pypto.set_vec_tile_shapes(*tile_list)``) or carry it in
a config dataclass built in the test function (``Config(cube_tile_shape=(16, 32, 32))``, read in the kernel as
``config.cube_tile_shape[0]``). Such a call site is an expression; its value can be tuned at the call (pin the
arguments to literals) or at its **source**:

* a number literal that is the element of a list comprehension (every element it yields is that literal);
* a literal keyword argument of a call that constructs a class defined in the workspace (a dataclass field);
* a literal a class's ``__init__`` stores on its instance (``self.unroll_list = [1, 2, 4]``, read as
  ``tile_config.unroll_list``: PyPTO's arctic LSTM model keeps its unroll list and hidden tile so);
* a literal value of a dict bound once to a name and read only entry by entry with a constant key
  (``TILING = {"block": 2, "vec_tile": (2, 64)}``, read as ``TILING["block"]``), directly or after being passed
  whole to a function of the workspace (``build(shape, tiling)`` reading ``tiling["block"]``): each entry is its
  own source;
* an int literal element of a tuple or list bound once to a name beside run-time values (``view_shape = (32,
  h_num)``), read by constant index (``view_shape[0]``) or passed whole where a tile or view takes a shape: PyPTO's
  GLM gate and expert-selection models block their rows so. Each literal element is its own source (a display of
  literals only is a knob whole: a binding).

A source is a knob only if everything it reaches is tuning (the role analysis's rule for names): every use of the
comprehension's value, every load of an attribute with the field's name anywhere in the workspace (any object:
the analysis does not know types, so it is conservative), and every read of the dict entry, ends in a tiling
consumer. A dict used any other way that reaches anything (passed on, ``**``-unpacked, iterated, ``.get``, an entry
written) makes every entry a problem; printing it whole does not. Reflection that could read a field by other
means (``getattr``, ``vars``, ``dataclasses.asdict`` / ``astuple`` / ``fields`` / ``replace``, ``__dict__``)
anywhere in the workspace makes every field a problem use.

``reach`` answers "which kernels and tests run this scope" statically: the nested defs and workspace functions a
function calls, transitively.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field as dc_field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .roles import Consumer, _Analysis, _File

MODULE = "<module>"
# Names through which a field could be read without naming it (dotted forms as written).
REFLECTION = {"getattr", "vars", "asdict", "astuple", "fields", "dataclasses.asdict", "dataclasses.astuple",
              "dataclasses.fields", "dataclasses.replace", "__dict__", "attrgetter", "operator.attrgetter"}
SourceKind = Literal["comprehension", "field", "attribute", "entry", "element"]


@dataclass
class Source:
    """A literal a tiling value flows from, other than a name bound to it (those are :class:`roles.Binding`)."""

    kind: SourceKind
    file: str
    scope: str  # the function the literal is written in (dotted), or MODULE
    line: int
    col: int
    value: Any
    label: str  # "tile_list[*]" (comprehension bound to tile_list) / "MatmulConfig.cube_tile_shape"
    cls: str | None = None  # field sources: the class constructed; attribute sources: the class whose __init__ sets it
    # field sources: the keyword; attribute sources: its name; entry sources: the dict's key; element sources: the index
    field: Any = None
    owner: str | None = None  # entry and element sources: the name the dict or display is bound to
    aliases: set[str] = dc_field(default_factory=set)  # entry and element sources: every name it is read through
    # what a derived tile reads beside the source: entry sources, the other entries' literal values; field sources,
    # the construction's literal keywords; attribute sources, the other literals the __init__ stores
    siblings: dict[Any, Any] = dc_field(default_factory=dict)
    consumers: set[str] = dc_field(default_factory=set)
    consumer_sites: set[tuple[str, str, int]] = dc_field(default_factory=set)
    problems: list[str] = dc_field(default_factory=list)

    @property
    def is_knob(self) -> bool:
        return bool(self.consumers) and not self.problems


def dotted(node: ast.AST) -> str:
    """``a.b.c`` of a name or attribute chain ('' for anything else). Here, below ``roles``, so that the role analysis
    can import this module at its top without a circle."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _number_literal(node: ast.AST) -> Any:
    """The value of an int literal or a tuple/list of int literals, else None (flags, strings: not tiles)."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                            for v in value):
        return list(value)
    return None


def reach(a: "_Analysis", start: tuple[str, str]) -> set[tuple[str, str]]:
    """(file, scope) of everything ``start`` runs: its nested defs and the workspace functions it calls."""
    seen: set[tuple[str, str]] = set()
    todo = [start]
    while todo:
        key = todo.pop()
        if key in seen or key[0] not in a.files:
            continue
        seen.add(key)
        f = a.files[key[0]]
        for sname in f.scopes:
            if sname.startswith(key[1] + "."):
                todo.append((f.path, sname))
        fn = f.functions.get(key[1])
        if fn is None:
            continue
        for n in ast.walk(fn):
            if isinstance(n, ast.Call):
                target = a.callee(f, f.scope_of.get(id(n)) or f.scopes[key[1]], n.func)
                if target is not None:
                    todo.append(target)
    return seen


def entry_points(a: "_Analysis") -> dict[tuple[str, str], set[tuple[str, str]]]:
    """Module-level test functions (``test*``) and what each runs."""
    out: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for f in a.files.values():
        for sname in f.functions:
            if "." not in sname and sname.lower().startswith("test"):
                out[(f.path, sname)] = reach(a, (f.path, sname))
    return out


def _class_of(a: "_Analysis", f: "_File", call: ast.Call) -> tuple[str, str] | None:
    """(file, class name) of a workspace class the call constructs, else None."""
    scope = f.scope_of.get(id(call)) or f.scopes[MODULE]
    if isinstance(call.func, ast.Name):
        owner = f.resolve(scope, call.func.id)
        if owner is None:
            return None
        for site in owner.bound.get(call.func.id, []):
            if isinstance(site, ast.ClassDef):
                return (f.path, site.name)
            if isinstance(site, ast.ImportFrom) and site.module:
                other = a.by_module.get(site.module)
                for alias in site.names:
                    if (alias.asname or alias.name) == call.func.id and other and _defines_class(a, other, alias.name):
                        return (other, alias.name)
        return None
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        other = a.by_module.get(f.imports.get(call.func.value.id) or "")
        if other and _defines_class(a, other, call.func.attr):
            return (other, call.func.attr)
    return None


def _defines_class(a: "_Analysis", path: str, name: str) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in a.files[path].tree.body)


def _reflection(a: "_Analysis") -> list[str]:
    out = []
    for f in a.files.values():
        for n in ast.walk(f.tree):
            name = dotted(n) if isinstance(n, (ast.Name, ast.Attribute)) else ""
            if name in REFLECTION or (isinstance(n, ast.Attribute) and n.attr == "__dict__"):
                out.append(f"{f.path}:{n.lineno}: reads attributes by reflection ({name or '__dict__'})")
    return out


def find_sources(a: "_Analysis") -> list[Source]:
    """Every comprehension literal and constructor keyword literal that reaches at least one tiling consumer."""
    out: list[Source] = []
    reflection: list[str] | None = None
    field_uses: dict[str, tuple[set, list[str]]] = {}
    for f in a.files.values():
        for n in ast.walk(f.tree):
            scope = f.scope_of.get(id(n))
            sname = scope.name if scope is not None else MODULE
            if isinstance(n, (ast.ListComp, ast.GeneratorExp)):
                value = _number_literal(n.elt)
                if value is None or not isinstance(value, int):
                    continue
                consumers, problems = a._use(f, n)
                if not consumers:
                    continue
                parent = f.parents.get(id(n))
                target = (parent.targets[0].id if isinstance(parent, ast.Assign) and len(parent.targets) == 1
                          and isinstance(parent.targets[0], ast.Name) else None)
                out.append(Source("comprehension", f.path, sname, n.elt.lineno, n.elt.col_offset, value,
                                  f"{target}[*]" if target else "[…]", consumers={c[0] for c in consumers},
                                  consumer_sites=set(consumers), problems=list(problems)))
            elif isinstance(n, ast.Call) and n.keywords:
                cls = _class_of(a, f, n)
                if cls is None:
                    continue
                for kw in n.keywords:
                    value = _number_literal(kw.value) if kw.arg else None
                    if value is None:
                        continue
                    if kw.arg not in field_uses:
                        field_uses[kw.arg] = _field_uses(a, kw.arg)  # type: ignore[index]
                    consumers, problems = field_uses[kw.arg]  # type: ignore[index]
                    if not consumers:
                        continue
                    if reflection is None:
                        reflection = _reflection(a)
                    out.append(Source("field", f.path, sname, kw.value.lineno, kw.value.col_offset, value,
                                      f"{cls[1]}.{kw.arg}", cls=cls[1], field=kw.arg, siblings=_literal_keywords(n),
                                      consumers={c[0] for c in consumers}, consumer_sites=set(consumers),
                                      problems=list(problems) + reflection[:3]))
            elif isinstance(n, ast.Assign) and (owner := _init_attribute(f, n)) is not None:
                value = _number_literal(n.value)
                if value is None:
                    continue
                consumers, problems = _field_uses(a, owner[1], own=n.targets[0])
                if not consumers:
                    continue
                if reflection is None:
                    reflection = _reflection(a)
                out.append(Source("attribute", f.path, MODULE, n.value.lineno, n.value.col_offset, value,
                                  f"{owner[0]}.{owner[1]}", cls=owner[0], field=owner[1],
                                  siblings=_init_literals(f, n, owner[1]), consumers={c[0] for c in consumers},
                                  consumer_sites=set(consumers), problems=list(problems) + reflection[:3]))
    return out + _dict_entries(a) + _sequence_elements(a)


def _literal_keywords(call: ast.Call) -> dict[str | None, Any]:
    """Every keyword of ``call`` written as a literal, by name."""
    out: dict[str | None, Any] = {}
    for kw in call.keywords:
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError):
            continue
    return out


def _init_attribute(f: "_File", node: ast.Assign) -> tuple[str, str] | None:
    """(class, attribute) when ``node`` is ``self.NAME = …`` written directly in a class's ``__init__`` (not under a
    branch: then every instance holds that value until something stores another, which makes it a problem use)."""
    target = node.targets[0] if len(node.targets) == 1 else None
    fn = f.parents.get(id(node))
    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
            and isinstance(fn, ast.FunctionDef) and fn.name == "__init__" and fn.args.args
            and fn.args.args[0].arg == target.value.id):
        return None
    cls = f.parents.get(id(fn))
    return (cls.name, target.attr) if isinstance(cls, ast.ClassDef) else None


def _init_literals(f: "_File", node: ast.Assign, name: str) -> dict[str, Any]:
    """The other literals the same ``__init__`` stores on the instance (what a derived tile reads beside ``name``)."""
    out: dict[str, Any] = {}
    fn = f.parents.get(id(node))
    for stmt in getattr(fn, "body", []):
        owner = _init_attribute(f, stmt) if isinstance(stmt, ast.Assign) else None
        if owner is not None and owner[1] != name and (v := _number_literal(stmt.value)) is not None:
            out[owner[1]] = v
    return out


def _dict_entries(a: "_Analysis") -> list[Source]:
    """The entry sources of every dict bound once to a name, whose keys are all distinct string constants."""
    out: list[Source] = []
    for (path, sname, name) in a.bindings:
        f = a.files[path]
        sites = f.scopes[sname].bound.get(name, [])
        node = a._assigned_value(f, sites[0]) if len(sites) == 1 else None
        if not isinstance(node, ast.Dict) or None in node.keys:
            continue
        keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None for k in node.keys]
        if None in keys or len(set(keys)) != len(keys):
            continue
        uses, whole, aliases = _entry_uses(a, (path, sname, name), set(keys))  # type: ignore[arg-type]
        literals = {k: _number_literal(v) for k, v in zip(keys, node.values)}
        for key, value_node in zip(keys, node.values):
            value = literals[key]
            consumers, problems = uses[key]  # type: ignore[index]
            if value is None or not consumers:
                continue
            out.append(Source("entry", path, sname, value_node.lineno, value_node.col_offset, value,
                              f'{name}["{key}"]', field=key, owner=name, consumers={c[0] for c in consumers},
                              consumer_sites=set(consumers), problems=list(problems) + whole[:3],
                              aliases=aliases, siblings={k: v for k, v in literals.items()  # type: ignore[misc]
                                                         if k != key and v is not None}))
    return out


def _sequence_elements(a: "_Analysis") -> list[Source]:
    """The element sources of every tuple or list display bound once to a name that holds int literals beside
    run-time values (``view_shape = (32, h_num)``)."""
    out: list[Source] = []
    for f in a.files.values():
        for sname, scope in f.scopes.items():
            for name, sites in scope.bound.items():
                if len(sites) != 1 or name in scope.params:
                    continue
                node = a._assigned_value(f, sites[0])
                if not isinstance(node, (ast.Tuple, ast.List)) or any(isinstance(e, ast.Starred) for e in node.elts):
                    continue
                literals = {i: _number_literal(e) if isinstance(e, ast.Constant) else None
                            for i, e in enumerate(node.elts)}
                ints = [i for i, v in literals.items() if isinstance(v, int)]
                if not ints or len(ints) == len(node.elts):
                    continue
                uses, whole, aliases = _entry_uses(a, (f.path, sname, name), set(literals), sequence=True)
                for i in ints:
                    consumers, problems = uses[i]
                    if not consumers:
                        continue
                    e = node.elts[i]
                    out.append(Source("element", f.path, sname, e.lineno, e.col_offset, literals[i], f"{name}[{i}]",
                                      field=i, owner=name, consumers={c[0] for c in consumers},
                                      consumer_sites=set(consumers), problems=list(problems) + whole[:3],
                                      aliases=aliases, siblings={k: v for k, v in literals.items()
                                                                 if k != i and v is not None}))
    return out


#: how many workspace functions deep a dict passed whole is followed (test → builder → helper is 2)
PASS_DEPTH = 4


def _entry_uses(a: "_Analysis", key: tuple[str, str, str], keys: set[Any], depth: int = 0,
                seen: set[tuple[str, str, str]] | None = None, sequence: bool = False
                ) -> tuple[dict[Any, tuple[set, list[str]]], list[str], set[str]]:
    """How each entry of the dict bound at ``key`` is used, and the dict's whole uses that are problems.

    A constant-key read (``tiling["seq_chunk"]``) is that entry's use. The dict passed whole, as a plain argument,
    to a function of the workspace is followed into that parameter, whose uses count the same way (upstream
    examples build the tiling in the test and hand it to a kernel builder and a helper: issue #19's blind
    ``upstream_mean_pool``). Any other use that reaches anything (``**``, iteration, ``.get``, an entry written, an
    argument of a function outside the workspace or as ``*args``) makes every entry a problem. Returns the uses per
    key, the problems of whole uses, and every name the dict is read through (its own and the parameters').

    ``sequence``: the keys are a tuple's indices, and a whole use that ends only in tiling consumers (the display
    passed as a view's shape) is a use of every element; any other whole use is a problem, as for a dict."""
    seen = seen if seen is not None else set()
    seen.add(key)
    uses: dict[str, tuple[set, list[str]]] = {k: (set(), []) for k in keys}
    whole: list[str] = []
    aliases = {key[2]}
    for uf, use in a._uses(key):
        parent = uf.parents.get(id(use))
        if isinstance(parent, ast.Subscript) and parent.value is use and isinstance(parent.slice, ast.Constant) \
                and parent.slice.value in uses and isinstance(parent.ctx, ast.Load):
            c, p = a._use(uf, parent)
            uses[parent.slice.value][0].update(c)
            uses[parent.slice.value][1].extend(p)
            continue
        target = _passed_to(a, uf, use, parent)
        if target is not None and depth < PASS_DEPTH:
            if target in seen:
                continue  # a recursive call: the parameter's uses are being counted already
            sub, sub_whole, sub_aliases = _entry_uses(a, target, keys, depth + 1, seen, sequence)
            for k, (c, p) in sub.items():
                uses[k][0].update(c)
                uses[k][1].extend(p)
            whole.extend(sub_whole)
            aliases |= sub_aliases
            continue
        # any other use that reaches anything (tiling or not) cannot be told apart by entry
        c, p = a._use(uf, use)
        if sequence and c and not p:
            for k in keys:
                uses[k][0].update(c)
            continue
        if c or p:
            where = ast.unparse(parent)[:50] if parent is not None else key[2]
            whole.append(f"{uf.path}:{getattr(use, 'lineno', '?')}: {key[2]} is used whole or written ({where!r})")
    return uses, whole, aliases


def _passed_to(a: "_Analysis", f: "_File", use: ast.AST, parent: ast.AST | None) -> tuple[str, str, str] | None:
    """(file, function, parameter) when ``use`` is a plain argument of a call to a workspace function whose
    parameter it binds, and that parameter is never rebound there; else None."""
    kw = parent if isinstance(parent, ast.keyword) else None
    call = f.parents.get(id(parent)) if kw is not None else parent
    if not isinstance(call, ast.Call) or call.func is use:
        return None
    scope = f.scope_of.get(id(call))
    target = a.callee(f, scope, call.func) if scope is not None else None
    if target is None:
        return None
    fn = a.files[target[0]].functions[target[1]]
    if kw is not None:
        param = kw.arg
    else:
        pos = next((i for i, x in enumerate(call.args) if x is use), None)
        if pos is None or any(isinstance(x, ast.Starred) for x in call.args[:pos + 1]):
            return None
        names = [x.arg for x in [*fn.args.posonlyargs, *fn.args.args]]
        param = names[pos] if pos < len(names) else None
    callee_scope = a.files[target[0]].scopes.get(target[1])
    if param is None or callee_scope is None or len(callee_scope.bound.get(param, [])) != 1:
        return None  # *args / **kwargs, or the parameter is rebound inside: what it holds is not the dict
    return (target[0], target[1], param)


def _field_uses(a: "_Analysis", name: str, own: ast.AST | None = None) -> tuple[set["Consumer"], list[str]]:
    """Consumers and problem uses of every ``<anything>.name`` load in the workspace; any other store of it is a
    problem (``own``: the store that is the source itself)."""
    consumers: set = set()
    problems: list[str] = []
    for f in a.files.values():
        for n in ast.walk(f.tree):
            if isinstance(n, ast.Attribute) and n.attr == name and n is not own:
                if not isinstance(n.ctx, ast.Load):
                    problems.append(f"{f.path}:{n.lineno}: {name} is assigned as an attribute")
                    continue
                c, p = a._use(f, n)
                consumers |= c
                problems.extend(p)
    return consumers, problems
