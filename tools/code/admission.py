"""The one admission path for every change: structured edit, diff, drift adoption, algorithm-stage edit.

``admit(before, after, ...)`` decides whether ``after`` is exactly one declared, legal change of ``before``:

1. **Every differing syntax node is accounted for.** Both states are reduced to their syntax trees (comments and
   formatting do not count; docstrings do not count) with every knob's value slot masked: tile-call arguments,
   option-dict entries (an absent entry and a present one mask alike, so adding a knob is a knob change), loop
   options, pass options, and the names the role analysis found to be knobs (``tools/patching/roles.py``). If the
   masked trees still differ, something other than a knob changed — computation, shapes, dtypes, the test's
   inputs, a new statement — and the change is structural: refused, naming the lines, unless the session is in the
   ALGORITHM stage and the change is declared as one algorithm-level change.
2. **Exactly one knob changed** (by id, from the unmasked values); its new value is data (literals and arithmetic
   over names, never a call or anything with a side effect); the knob is tunable (``run_mode``, debug options and
   problem sizes are not). Two knobs only as a **linked pair** (rule ``linked-pair``, :func:`_admit_pair`): the
   kept state's run shows them linked — a loop's block and the tile clipped to the view it sets — so they are one
   tiling decision; each is held to all a change of it alone is held to, and legality is checked on both at once.
3. **Legality on the effective values** of every tiling call, loop and view after the change
   (``tools/patching/effective.py``), whatever way the change was written. With the run-time probe's record of the
   state the change starts from (``run``, issue #17), every tile call that ran is judged on the value it had in each
   kernel that ran it and on that kernel's shapes (``tools/patching/runmap.py``): a pinned literal, or what a changed
   tiling source gives there; a tile call that ran and whose new value the server cannot derive is refused. A
   change to a site the test never runs (dead) is refused. Values that never ran and cannot be evaluated pass as
   *unchecked* and are recorded so.

A refusal is a ``GateRefusal`` naming the rule and the offending lines; nothing has been written. A gate that looks
only at what it recognises lets everything else through — this one accounts for the whole input instead.
"""

from __future__ import annotations

import ast
import difflib
import re
from typing import Any, Literal

import libcst as cst
from pydantic import BaseModel, Field

from pypto_tune.tools.errors import GateRefusal, InputError, KnobValueError
from pypto_tune.tools.rules import change as refuse
from pypto_tune.tools.patching import functional_sources
from pypto_tune.tools.patching import effective, roles
from pypto_tune.tools.patching import runcheck
from pypto_tune.tools.patching import runmap as runmap_mod
from pypto_tune.tools.patching._cst import same
from pypto_tune.tools.patching.legality import uncatalogued
from pypto_tune.tools.patching.extract import OPTION_GROUPS, ParsedFile, Site, _dotted, sites_of
from pypto_tune.tools.snapshot import KnobChange
from pypto_tune.tools.code import pysource

PLACEHOLDER = "__knob__"
JIT_CALLEES = {"frontend.jit", "jit", "frontend.parser.entry.jit"}
LOOP_KWARGS = {"unroll_list", "submit_before_loop"}
BINDING_KINDS = frozenset({"tile_constant", "local_constant"})  # knobs that are a name bound once to a literal
# Node types a knob's new value may contain: data and arithmetic, nothing that runs code.
PURE_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.Tuple, ast.List, ast.Dict, ast.Set,
              ast.UnaryOp, ast.USub, ast.UAdd, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod,
              ast.Div, ast.Pow, ast.Attribute, ast.Starred, ast.Call)


class Admission(BaseModel):
    """How a change was accounted for (recorded in the ledger's ``admissions`` table)."""

    kind: Literal["knob", "structural", "pair"]
    change: KnobChange | None = Field(None, description="the one knob that changed (kind 'knob')")
    changes: list[KnobChange] = Field(default_factory=list, description="kind 'pair': both knobs of the linked pair "
                                      "(block first), admitted as one change point (rule linked-pair)")
    link: str = Field("", description="kind 'pair': how the kept state's run links the two knobs")
    knob_kind: str | None = None
    catalog_ids: list[str] = Field(default_factory=list, description="catalogue ids the changed knob serves")
    formatting_files: list[str] = Field(default_factory=list, description="files whose other differences are "
                                        "formatting or comments only (allowed, recorded)")
    checked: list[str] = Field(default_factory=list, description="effective values checked against domain C")
    unchecked: list[str] = Field(default_factory=list, description="values the server could not evaluate")
    structural_lines: list[str] = Field(default_factory=list, description="for a structural change: what differs")
    live: bool | None = Field(None, description="the run-time probe saw the changed site run (null: no record)")
    ran_with: list[Any] = Field(default_factory=list, description="the values the site had when it ran")
    shared_with: list[str] = Field(default_factory=list, description="other kernels and tests whose code reaches "
                                   "the changed site: the change changes them too")

    def describe(self) -> str:
        if self.kind == "structural":
            return "structural change: " + "; ".join(self.structural_lines[:3])
        if self.kind == "pair":
            return " + ".join(f"{c.knob_id}: {c.before!r} → {c.after!r}" for c in self.changes) + " (linked pair)"
        c = self.change
        assert c is not None
        return f"{c.knob_id}: {c.before!r} → {c.after!r}"


# ------------------------------------------------------------------------------------------------ masking


class _Masker(cst.CSTTransformer):
    """Replaces every knob value slot of one file with a placeholder (or removes it, for option entries)."""

    def __init__(self, pf: ParsedFile, sites: list[Site]) -> None:
        super().__init__()
        self.imports = pf.imports
        self.replace = {id(s.node) for s in sites if s.node is not None and (
            s.extra.get("binding") or s.extra.get("source") or s.knob.kind in ("pass_option", "sg_set_scope", "cache_policy",
                                                      "combine_axis", "valid_shape"))}
        for s in sites:
            for _, node in s.extra.get("members", []):
                if node is not None:
                    self.replace.add(id(node))
        # option containers of every jit (dict literals, dict() calls, module dicts passed as option groups)
        self.containers = {id(c) for j in pf.jits for c in j.groups.values()}

    def _qname(self, func: cst.BaseExpression) -> str | None:
        dotted = _dotted(func)
        if not dotted:
            return None
        head, _, rest = dotted.partition(".")
        target = self.imports.get(head)
        if target is None:
            return dotted[len("pypto."):] if dotted.startswith("pypto.") else None
        full = f"{target}.{rest}" if rest else target
        return full[len("pypto."):] if full.startswith("pypto.") else (None if full != "pypto" else "")

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        if id(original_node) in self.replace and isinstance(original_node, cst.BaseExpression):
            return cst.Name(PLACEHOLDER)
        if id(original_node) in self.containers:
            if isinstance(updated_node, cst.Dict):
                return updated_node.with_changes(elements=[
                    e for e in updated_node.elements
                    if not (isinstance(e, cst.DictElement) and isinstance(e.key, (cst.SimpleString,
                                                                                  cst.ConcatenatedString)))])
            if isinstance(updated_node, cst.Call):
                return updated_node.with_changes(args=[a for a in updated_node.args if a.keyword is None])
        if isinstance(updated_node, cst.Call):
            return self._call(updated_node)
        if isinstance(updated_node, cst.Decorator) and isinstance(updated_node.decorator, cst.Call):
            call = updated_node.decorator
            if self._qname(call.func) in JIT_CALLEES and not call.args:
                return updated_node.with_changes(decorator=call.func)  # @jit() is @jit
        return updated_node

    def _call(self, call: cst.Call) -> cst.Call:
        q = self._qname(call.func)
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        if q == "set_vec_tile_shapes":
            # the knob's value is the whole argument list (or, for *args / keywords, the call as code, which the
            # purity check refuses), so all of it is the slot
            return call.with_changes(args=[cst.Arg(cst.Name(PLACEHOLDER))])
        if q == "set_cube_tile_shapes":
            # only m / k / n / enable_split_k are the knob; any other argument stays and must not change
            # (red team: *args / **kwargs / extra keywords rode along with a legal cube tile change)
            args = []
            for i, a in enumerate(call.args):
                slot = (a.keyword is None and not a.star and i < 4) or (
                    a.keyword is not None and a.keyword.value in ("m", "k", "n", "enable_split_k"))
                args.append(a.with_changes(value=cst.Name(PLACEHOLDER)) if slot else a)
            return call.with_changes(args=args)
        if q in ("loop", "loop_unroll"):
            return call.with_changes(args=[a for a in call.args
                                           if not (a.keyword is not None and a.keyword.value in LOOP_KWARGS)])
        if q in JIT_CALLEES:
            def empty(v: cst.BaseExpression) -> bool:
                return (isinstance(v, cst.Dict) and not v.elements) or (
                    isinstance(v, cst.Call) and _dotted(v.func) == "dict" and not v.args)
            return call.with_changes(args=[a for a in call.args if not (
                a.keyword is not None and a.keyword.value in OPTION_GROUPS and empty(a.value))])
        if method == "set_cache_policy" and len(call.args) > 1:
            args = list(call.args)
            args[1] = args[1].with_changes(value=cst.Name(PLACEHOLDER))
            return call.with_changes(args=args)
        return call


class _BlankKernels(ast.NodeTransformer):
    """Empties the bodies of kernel functions (jits, their nested defs, helpers they call): what is left is the
    test — harness, inputs, tolerances, verdict — which no change may touch."""

    def __init__(self, kernels: set[str]) -> None:
        self.kernels = kernels
        self.stack: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        name = ".".join([*self.stack, node.name])
        if name in self.kernels:
            node.body = [ast.Pass()]
            return node
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def _outside_kernels(changed: list[str], parsed_b: dict[str, ParsedFile], parsed_a: dict[str, ParsedFile],
                     sites_b: list[Site], sites_a: list[Site], fb: dict[str, str], fa: dict[str, str],
                     context: dict[str, str] | None) -> list[str]:
    """Where a structural change touches code outside the kernels (red team: in the ALGORITHM stage the harness
    half of a single-file operator — tolerance, verdict line, seed — was admitted as an algorithm change)."""
    prog_b = roles.analyze({**(context or {}), **fb})
    prog_a = roles.analyze({**(context or {}), **fa})
    out = []
    for path in changed:
        kernels = {sc for (f, sc) in prog_b.kernel_scopes | prog_a.kernel_scopes if f == path}
        tb = _BlankKernels(kernels).visit(_masked_tree(parsed_b[path], sites_b))
        ta = _BlankKernels(kernels).visit(_masked_tree(parsed_a[path], sites_a))
        if ast.dump(tb) != ast.dump(ta):
            diffs: list[str] = []
            _differences(tb, ta, _BlankKernels(kernels).visit(_plain_tree(fa[path])), fa[path], diffs)
            out.extend(f"{path}: {d}" for d in (diffs or ["outside the kernels"]))
    return out


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _masked_tree(pf: ParsedFile, sites: list[Site]) -> ast.Module:
    """The file's syntax tree with every knob value slot masked: a fresh tree each call (callers transform it in
    place). The masked source is derived once per set of masked nodes of this parse — the kept state's is asked
    again for every candidate a search admits. The nodes are keyed by identity: they are alive as long as the parse
    is, so an identity in the key names the same node for as long as the entry exists."""
    masker = _Masker(pf, [s for s in sites if s.file == pf.path])
    key = ("masked", frozenset(masker.replace))
    code = pf.derived.get(key)
    if code is None:
        code = pf.derived[key] = pf.module.visit(masker).code
    return _strip_docstrings(pysource.parse(code))  # type: ignore[return-value]


def _plain_tree(text: str) -> ast.Module:
    return _strip_docstrings(pysource.parse(text))  # type: ignore[return-value]


def _statements(node: ast.AST) -> list[ast.AST]:
    """The statements directly inside ``node``, in order; a ``try``'s ``except`` handlers count as statements (each
    with its own body), so an edit inside one is found and named like any other line."""
    return (list(getattr(node, "body", [])) + list(getattr(node, "handlers", []))
            + list(getattr(node, "orelse", [])) + list(getattr(node, "finalbody", [])))


def _differences(ma: ast.AST, mb: ast.AST, pb: ast.AST, text_b: str, out: list[str], depth: int = 0,
                 pa: ast.AST | None = None) -> int:
    """Lines of ``b`` (unmasked: ``pb``) whose statements differ from ``a`` once knobs are masked. Masking keeps
    the statement structure, so statement i of the masked tree is statement i of the plain one. With ``pa`` (``a``
    unmasked), a statement whose plain forms are equal is no difference: it differs masked only because a name is a
    knob on one side and not on the other (pinning a cube tile call to literals leaves ``cube_tiling = 64`` unused,
    so no longer a knob: PyPTO's kernel_input attention). Returns how many such statements were passed over."""
    sa, sb, sp = _statements(ma), _statements(mb), _statements(pb)
    sq = _statements(pa) if pa is not None else None
    lines = text_b.splitlines()
    dump_a = [ast.dump(s) for s in sa]
    dump_b = [ast.dump(s) for s in sb]
    passed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, dump_a, dump_b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1 and depth < 8:
            for x, y in zip(range(i1, i2), range(j1, j2)):
                if sq is not None and ast.dump(sq[x]) == ast.dump(sp[y]):
                    passed += 1
                elif type(sa[x]) is type(sb[y]) and _statements(sa[x]) and (
                        ast.dump(_shell(sa[x])) == ast.dump(_shell(sb[y]))):
                    passed += _differences(sa[x], sb[y], sp[y], text_b, out, depth + 1,
                                           sq[x] if sq is not None else None)
                else:
                    out.append(_line(sp[y], lines, "changed"))
            continue
        for y in range(j1, j2):
            out.append(_line(sp[y], lines, "added" if tag == "insert" else "changed"))
        if tag == "delete":
            anchor = sp[j1] if j1 < len(sp) else (sp[-1] if sp else None)
            where = f"near line {anchor.lineno}" if anchor is not None else "at the end"
            out.append(f"{i2 - i1} statement(s) removed {where}: {ast.unparse(sa[i1])[:80]!r}")
    return passed


def _shell(stmt: ast.stmt) -> ast.stmt:
    """The statement without its bodies (for compound statements), to tell 'header changed' from 'body changed'."""
    import copy

    s = copy.copy(stmt)
    for f in ("body", "orelse", "finalbody", "handlers"):
        if hasattr(s, f):
            setattr(s, f, [])
    return s


def _line(stmt: ast.stmt, lines: list[str], how: str) -> str:
    text = lines[stmt.lineno - 1].strip() if 0 < stmt.lineno <= len(lines) else ast.unparse(stmt)[:80]
    return f"line {stmt.lineno} {how}: {text[:100]}"


# ------------------------------------------------------------------------------------------------ the gate


def _pure(code: str) -> bool:
    """A knob value may be data and arithmetic; a call is allowed only to read a pypto enum-like attribute path."""
    try:
        tree = pysource.parse(code.strip(), mode="eval")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, PURE_NODES):
            return False
        if isinstance(node, ast.Call):
            # min()/max() of literals are still data; nothing else is
            if not (isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and not node.keywords):
                return False
    return True


def _exprs(value: Any) -> list[str]:
    from pypto_tune.tools.patching._cst import is_expr
    from pypto_tune.tools.patching.models import EXPR_KEY

    if is_expr(value):
        return [value[EXPR_KEY]]
    if isinstance(value, list):
        return [c for v in value for c in _exprs(v)]
    if isinstance(value, dict):
        return [c for v in value.values() for c in _exprs(v)]
    return []


def admit(before: dict[str, str], after: dict[str, str], *, context: dict[str, str] | None = None,
          algorithm: bool = False, allow_structural: bool = False, run: dict[str, Any] | None = None) -> Admission:
    """Account for every difference between ``before`` and ``after`` (operator files, full text each).

    ``context``: the workspace's other Python files (never edited; they decide which names reach the problem).
    ``algorithm`` + ``allow_structural``: the session is in the ALGORITHM stage and the agent declared this change
    as one algorithm-level change (R23). ``run``: the run-time probe's record of a run of ``before``
    (``ProbeRecord.model_dump()``), or None. Raises ``GateRefusal`` (rules ``one-change``, ``live-site``,
    ``legality``) or ``InputError`` (nothing changed, a file does not parse).
    """
    changed = _changed_paths(before, after)
    fb, fa = functional_sources(before), functional_sources(after)
    _check_parses(changed, fa)
    parsed_b, sites_b = sites_of(fb, context)
    parsed_a, sites_a = sites_of(fa, context)
    _pair_sources(parsed_b, sites_b, fb, parsed_a, sites_a, fa)
    structural, structural_files, formatting = _syntax_differences(changed, parsed_b, sites_b, fb, parsed_a,
                                                                   sites_a, fa)
    delta = _delta(sites_b, sites_a, fb, fa)
    declared = algorithm and allow_structural  # one declared algorithm-level change (R23)
    if structural_files:
        if not declared:
            raise _not_a_knob_change(structural, delta)
        outside = _outside_kernels(changed, parsed_b, parsed_a, sites_b, sites_a, fb, fa, context)
        if outside:
            raise refuse.algorithm("an algorithm-level change rewrites the kernel, never the test: "
                          + "; ".join(outside[:3]), "change only code inside the jit kernels (and the helpers they "
                          "call); the harness, its inputs, tolerances and verdict stay as recorded")
        return _admit_rewrite(delta, fb, fa, context, sites_b, sites_a, formatting, structural)
    if not delta:
        raise InputError("the change differs only in formatting or comments: nothing to verify or measure",
                         hint="change a knob's value (list_knobs)")
    if len(delta) > 1 and declared:
        return _admit_co_tuned(delta, fb, fa, context, sites_b, sites_a, run, formatting)
    why_not_pair = ""
    if len(delta) == 2:
        link, why_not_pair = _pair_link(fb, context, run, delta, sites_b)
        if link is not None:
            return _admit_pair(delta, link, fb, fa, context, sites_b, sites_a, run, formatting)
    if len(delta) > 1:
        raise _too_many_knobs(delta, why_not_pair)
    return _admit_one_knob(delta[0], fb, fa, context, sites_b, sites_a, run, formatting)


def _changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The operator files the change edits, refused unless it edits (never adds or removes) some, in clean bytes."""
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    if not changed:
        raise InputError("the change changes nothing", hint="choose a different value; list_knobs shows the "
                         "current ones")
    if set(after) != set(before):
        raise refuse.one_change(f"the change adds or removes operator files ({', '.join(changed)})",
                      "change the existing operator files only")
    for path in changed:
        _check_bytes(path, before.get(path, ""), after[path])
    return changed


def _check_parses(changed: list[str], fa: dict[str, str]) -> None:
    """Every edited file is still valid Python."""
    for path in changed:
        try:
            _plain_tree(fa[path])
        except SyntaxError as exc:
            raise refuse.one_change(f"{path} is not valid Python after the change: {exc.msg} at line "
                          f"{exc.lineno}", "fix the syntax; a change must leave the file valid Python") from None


def _syntax_differences(changed: list[str], parsed_b: dict[str, ParsedFile], sites_b: list[Site],
                        fb: dict[str, str], parsed_a: dict[str, ParsedFile], sites_a: list[Site],
                        fa: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(what differs outside the knobs, for the message; the files whose masked syntax trees differ, the decision;
    the files that differ only in formatting or comments)."""
    structural: list[str] = []
    structural_files: list[str] = []
    formatting: list[str] = []
    for path in changed:
        ma, mb = _masked_tree(parsed_b[path], sites_b), _masked_tree(parsed_a[path], sites_a)
        if ast.dump(ma) != ast.dump(mb):
            diffs: list[str] = []
            passed = _differences(ma, mb, _plain_tree(fa[path]), fa[path], diffs, pa=_plain_tree(fb[path]))
            if diffs or not passed:
                structural_files.append(path)
                structural.extend(f"{path}: {d}" for d in (diffs or ["a difference outside any knob"]))
        elif ast.dump(_plain_tree(fb[path])) == ast.dump(_plain_tree(fa[path])):
            formatting.append(path)
    return structural, structural_files, formatting


def _not_a_knob_change(structural: list[str], delta: list[KnobChange]) -> GateRefusal:
    """The refusal of a structural change outside a declared algorithm-level change."""
    return refuse.one_change("the change is not a knob change: " + "; ".join(structural[:4])
            + (f" (+{len(structural) - 4} more)" if len(structural) > 4 else "")
            + (f" — besides the knob change {delta[0].knob_id}" if len(delta) == 1 else ""),
            "change exactly one knob and nothing else (list_knobs shows them); computation, shapes, dtypes and the "
            "test's inputs are structural: algorithm-level changes come only in the ALGORITHM stage (R23)")


def _admit_rewrite(delta: list[KnobChange], fb: dict[str, str], fa: dict[str, str], context: dict[str, str] | None,
                   sites_b: list[Site], sites_a: list[Site], formatting: list[str],
                   structural: list[str]) -> Admission:
    """A declared algorithm-level rewrite of the kernels: legal on every site it reaches."""
    own = []
    for c in delta:  # the rewrite may move tuning knobs, never a problem size, run_mode or a debug option
        knob = _tuning_knob(c, sites_a, sites_b)
        if knob.kind in SHAPE_FREE_KINDS:
            # an option's domain (domain C) does not depend on the kernel's shapes, so a rewrite changes
            # nothing about it; tiles and blocks are judged on the rewritten kernel by _legal below
            _data(knob, c)
            own.append(_own_domain(knob, c.after, sites_b))
    report = _legal(fb, fa, context, sites_b, sites_a, structural=True)
    return Admission(kind="structural", formatting_files=formatting,
                     checked=[o for o in own if o] + report.checked,
                     unchecked=report.unchecked, structural_lines=structural,
                     change=delta[0] if len(delta) == 1 else None)


def _admit_co_tuned(delta: list[KnobChange], fb: dict[str, str], fa: dict[str, str], context: dict[str, str] | None,
                    sites_b: list[Site], sites_a: list[Site], run: dict[str, Any] | None,
                    formatting: list[str]) -> Admission:
    """A declared algorithm-level change that moves several knobs and nothing else."""
    # R23: a declared algorithm-level change may move several knobs together (co-tuned knobs, S-8); it is
    # still one declared change, legal on every site it reaches. Nothing but knobs changed, so each knob is held
    # to what a change of it alone is held to: a tuning knob, a value that is data, inside its own domain.
    # And each is checked against the run, as alone: none of them dead for this test, no tiling source without a
    # record to derive from.
    own = []
    runmap = _run_map(fb, context, sites_b, run)
    for c in delta:
        knob = _tuning_knob(c, sites_a, sites_b)
        _data(knob, c)
        own.append(_own_domain(knob, c.after, sites_b))
        site = next((s for s in sites_b if s.knob.id == c.knob_id), None)
        _check_run(knob, site, runmap, runmap.of(site) if site is not None else None, c)
    report = _legal(fb, fa, context, sites_b, sites_a, structural=True)
    return Admission(kind="structural", formatting_files=formatting,
                     checked=[o for o in own if o] + report.checked,
                     unchecked=report.unchecked,
                     structural_lines=[f"{c.knob_id}: {c.before!r} → {c.after!r}" for c in delta])


def _too_many_knobs(delta: list[KnobChange], why_not_pair: str) -> GateRefusal:
    """The refusal of a change of several knobs that is neither a linked pair nor a declared algorithm change."""
    return refuse.one_change(f"the change touches {len(delta)} knobs at once: "
                  + ", ".join(f"{c.knob_id} (line {c.line})" for c in delta)
                  + (f"; not a linked pair: {why_not_pair}" if why_not_pair else ""),
                  "split it: one knob per round, each verified and measured on its own"
                  + ("; two knobs go together only as a pair the kept state's run links (rule linked-pair: "
                     "propose_candidates offers such pairs)" if why_not_pair else ""))


def _admit_one_knob(change: KnobChange, fb: dict[str, str], fa: dict[str, str], context: dict[str, str] | None,
                    sites_b: list[Site], sites_a: list[Site], run: dict[str, Any] | None,
                    formatting: list[str]) -> Admission:
    """One knob changed: a tuning knob, its value data, live for the test, legal on the values that ran."""
    knob = _tuning_knob(change, sites_a, sites_b)
    _data(knob, change)
    site_b = next((s for s in sites_b if s.knob.id == change.knob_id), None)
    runmap = _run_map(fb, context, sites_b, run)
    info = runmap.of(site_b) if site_b is not None else None
    _check_run(knob, site_b, runmap, info, change)
    report = _legal(fb, fa, context, sites_b, sites_a, knob=knob, new_value=change.after, runmap=runmap,
                    change=change, changed_site=site_b)
    return Admission(kind="knob", change=change, knob_kind=knob.kind, catalog_ids=list(knob.catalog_ids),
                     formatting_files=formatting, checked=report.checked, unchecked=report.unchecked,
                     live=info.live if info else None, ran_with=list(info.effective) if info else [],
                     shared_with=list(info.shared_with) if info else [])


#: Knob kinds whose legal domain is declared per option key, whatever the kernel computes: held to it beside a
#: kernel rewrite too. (A tile's or a block's legality depends on the shapes the rewrite may change.)
SHAPE_FREE_KINDS = frozenset({"jit_option", "pass_option"})


def _tuning_knob(change: KnobChange, sites_a: list[Site], sites_b: list[Site]) -> Any:
    """The changed knob, refused unless it is a tuning knob (``run_mode``, debug options and problem sizes are not)."""
    knob = next((s.knob for s in sites_a if s.knob.id == change.knob_id), None) or next(
        (s.knob for s in sites_b if s.knob.id == change.knob_id), None)
    assert knob is not None
    if not knob.tunable:
        why = "; ".join(knob.context.get("problem_uses", [])) or knob.legal
        if uncatalogued(knob.legal):  # R10 + domain C: only catalogued options with a declared domain
            raise refuse.catalog_stage(f"{knob.id} = {change.after!r}: {why}",
                          "tune a knob list_knobs shows as tunable; each serves a catalogue item of a stage")
        raise refuse.one_change(f"{knob.id} is not a tuning knob ({why})",
                      "tune a knob from list_knobs; problem sizes, run_mode and debug options are fixed")
    return knob


def _pair_link(fb: dict[str, str], context: dict[str, str] | None, run: dict[str, Any] | None,
               delta: list[KnobChange], sites_b: list[Site]) -> tuple[Any, str]:
    """The link the run of the state a change starts from shows between its two changed knobs (rule
    ``linked-pair``): ``(link, "")``, or ``(None, why not)``. The link is the server's reading of the run-time
    probe's record (``tools/search/linked.run_links``: doubling the block changes the view the tile tiles, in a
    kernel that ran); nothing the agent says enters it."""
    if not run or run.get("status") != "reported":
        return None, ("there is no run-time probe record of the state the change starts from, and only its run can "
                      "link two knobs (run_precision_check on the kept state records one)")
    # The links are the search's kernel picture of the run (tools/search sits above this module; the import is
    # deferred so that loading the admission does not load the search).
    from pypto_tune.tools.search.linked import run_links

    ids = {c.knob_id for c in delta}
    links = run_links(fb, context, run)
    for link in links:
        if {link.block.id, link.tile.id} == ids:
            tile = next(c for c in delta if c.knob_id == link.tile.id)
            if not moves_capped_dims(link, _ran_value(fb, context, sites_b, run, tile), tile.after):
                return None, (f"{tile.knob_id} changes only what {link.block.name} does not cap ({link.describe()}): "
                              "the block and that change are two decisions, one round each")
            return link, ""
    shown = "; ".join(sorted({f"{lk.block.id} with {lk.tile.id}" for lk in links})[:3])
    return None, ("the kept state's run links no such two knobs" + (f" (it links {shown})" if shown
                                                                    else " (it links none)"))


def _ran_value(fb: dict[str, str], context: dict[str, str] | None, sites_b: list[Site], run: dict[str, Any],
               tile: KnobChange) -> Any:
    """The tile's value before the change: as written, or — written as code (``*config.vec_tile_shape``) — the one
    value it ran with (None when it ran with several or none)."""
    if not _exprs(tile.before):
        return tile.before
    site = next((s for s in sites_b if s.knob.id == tile.knob_id), None)
    info = _run_map(fb, context, sites_b, run).of(site) if site is not None else None
    ran = {repr(_plain(v)): v for v in (info.effective if info else [])}
    return next(iter(ran.values())) if len(ran) == 1 else None


def _plain(v: Any) -> Any:
    """Tuples as lists, all the way down: a value read from the source and one read from JSON compare alike."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def moves_capped_dims(link: Any, before: Any, after: Any) -> bool:
    """Whether the tile's change moves the dims the block caps (``link.dims`` of a vector tile; M of a cube tile):
    only then are the block and the tile one decision — the extent the view and the tile share. A tile whose capped
    dims stay as they were is tuned apart from the block (red team: the batch block lowered and a free dim of the
    tile doubled, in one round). A value the server cannot index (code) does not show it, and is refused."""
    before, after = _plain(before), _plain(after)
    if link.kind == "cube":
        if isinstance(before, dict) and isinstance(after, dict):
            return before.get("m") != after.get("m")
        if isinstance(before, list) and isinstance(after, list) and before and after:
            return before[0] != after[0]
        return False
    if not (isinstance(before, list) and isinstance(after, list) and len(before) == len(after)):
        return False
    return any(i < len(before) and before[i] != after[i] for i in link.dims)


def _admit_pair(delta: list[KnobChange], link: Any, fb: dict[str, str], fa: dict[str, str],
                context: dict[str, str] | None, sites_b: list[Site], sites_a: list[Site],
                run: dict[str, Any] | None, formatting: list[str]) -> Admission:
    """Rule ``linked-pair``: two knobs the kept state's run links, admitted as one change point.

    Each knob is held to everything a change of it alone is held to — a tuning knob (never a problem size,
    ``run_mode`` or a debug option), a value that is data, inside its own domain, live in this test, a tiling source
    only with a run to derive from — and the legality of the effective values is judged with both changed at once,
    at every tile call and loop either reaches (a tile call both feed is refused: its value is derived from one
    changed source at a time). The session's own rules (catalogue id, no-retry) follow in the operations layer."""
    order = sorted(delta, key=lambda c: c.knob_id != link.block.id)  # the block first, as the change reads
    runmap = _run_map(fb, context, sites_b, run)
    own, named, sites, infos, knobs = [], [], [], [], []
    for c in order:
        knob = _tuning_knob(c, sites_a, sites_b)
        _data(knob, c)
        site = next((s for s in sites_b if s.knob.id == c.knob_id), None)
        info = runmap.of(site) if site is not None else None
        _check_run(knob, site, runmap, info, c)
        own.append(_own_domain(knob, c.after, sites_b))
        if _exprs(c.after):
            named.append(f"{knob.id} = {c.after!r}: names something the server cannot evaluate; its domain "
                         f"({knob.legal[:90]}) was not checked")
        knobs.append(knob)
        sites.append(site)
        infos.append(info)
    report = _legal(fb, fa, context, sites_b, sites_a, runmap=runmap, change=order[0], changed_site=sites[0],
                    more=((order[1], sites[1]),))
    catalog_ids = list(dict.fromkeys(cid for k in knobs for cid in k.catalog_ids))
    return Admission(kind="pair", changes=order, knob_kind="+".join(k.kind for k in knobs), catalog_ids=catalog_ids,
                     formatting_files=formatting, checked=[o for o in own if o] + report.checked,
                     unchecked=named + [u for u in report.unchecked
                                        if not any(u.startswith(n.split(" = ", 1)[0]) for n in named)],
                     live=(all(i.live for i in infos) if all(i is not None and i.live is not None for i in infos)
                           else None),
                     ran_with=[list(i.effective) if i else [] for i in infos],
                     shared_with=list(dict.fromkeys(x for i in infos if i for x in i.shared_with)),
                     link=link.describe())


def _data(knob: Any, change: KnobChange) -> None:
    """Refuse a new value that is code, not data (see ``_pure``)."""
    impure = [c for c in _exprs(change.after) if not _pure(c)]
    if impure:
        raise refuse.one_change(f"the new value of {knob.id} is code, not data: {impure[0]!r} (line "
                      f"{change.line})", "write the value as a literal (numbers, lists, dicts)")


def _own_domain(knob: Any, new_value: Any, sites_b: list[Site]) -> str:
    """The knob's own rule (type, range) on its new value: what was checked, or '' when nothing could be (no value,
    or one that names something the server cannot evaluate). Refuses a value outside the domain."""
    if new_value is None or _exprs(new_value):
        return ""
    from pypto_tune.tools.patching.legality import check_knob_value

    try:
        check_knob_value(knob.model_copy(update={"value": next(
            (s.knob.value for s in sites_b if s.knob.id == knob.id), knob.value)}), new_value)
    except KnobValueError as exc:
        raise refuse.legality(f"{knob.id} = {new_value!r} is not legal: {exc.message}",
                      "choose a value inside the legal range (list_knobs shows it)") from None
    except InputError as exc:
        raise refuse.one_change(f"{knob.id}: {exc.message}", exc.hint or "tune another knob") from None
    # the rule's start, cut on a word: a reader (the report shows this line) must not meet "at most 96 KB per t"
    legal = knob.legal if len(knob.legal) <= 90 else knob.legal[:89].rsplit(" ", 1)[0].rstrip(",;") + " …"
    return f"{knob.id} = {new_value!r} within its domain ({legal})"


def _pair_sources(parsed_b: dict[str, ParsedFile], sites_b: list[Site], fb: dict[str, str],
                  parsed_a: dict[str, ParsedFile], sites_a: list[Site], fa: dict[str, str]) -> None:
    """A tiling source in one state and not in the other is still the same slot: pinning the tile call leaves the
    comprehension (or the config field) feeding nothing, so the after state no longer lists it. Its counterpart is
    added, valued as written there, so that masking and the knob delta treat both states alike (without it the pin
    read as a structural change of the untouched comprehension)."""
    from pypto_tune.tools.patching._cst import literal
    from pypto_tune.tools.patching.runmap import _line_map

    def add(src: list[Site], text_from: dict[str, str], parsed_to: dict[str, ParsedFile], to: list[Site],
            text_to: dict[str, str]) -> None:
        have = {s.knob.id for s in to}
        for s in [s for s in src if s.extra.get("source") and s.knob.id not in have]:
            pf = parsed_to.get(s.file)
            if pf is None:
                continue
            line, col = s.knob.context.get("at") or [s.knob.line, -1]
            if text_from[s.file] != text_to[s.file]:
                line = _line_map(text_from[s.file], text_to[s.file]).get(line) or _rewritten_line(
                    text_from[s.file], text_to[s.file], line)
            node = pf.source_nodes.get((line, col)) if line else None
            if node is None and line:
                node = next((n for (ln, _), n in pf.source_nodes.items()
                             if ln == line and literal(n, pf.module) == s.knob.value), None)
            if node is None:
                continue
            knob = s.knob.model_copy(update={"value": literal(node, pf.module), "line": line})
            to.append(Site(knob=knob, file=s.file, node=node, extra=dict(s.extra)))

    add(list(sites_b), fb, parsed_a, sites_a, fa)
    add(list(sites_a), fa, parsed_b, sites_b, fb)


def _rewritten_line(old: str, new: str, line: int) -> int | None:
    """The line of ``new`` that rewrote line ``line`` of ``old`` in place (one of as many lines replaced by as many),
    or None. A linked pair may change the source's own line: pinning a tile call leaves its config field feeding
    nothing while the block's field on that same line changes (``LayerNormConfig(block_rows=…, vec_tile_shape=…)``)."""
    import difflib

    a, b = old.splitlines(), new.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "replace" and i2 - i1 == j2 - j1 and i1 < line <= i2:
            return j1 + (line - i1)
    return None


def _run_map(fb: dict[str, str], context: dict[str, str] | None, sites_b: list[Site],
             run: dict[str, Any] | None) -> runmap_mod.RunMap:
    files = {**(context or {}), **fb}
    return runmap_mod.RunMap(files, sites_b, roles.analyze(files), run)


def _check_run(knob: Any, site: Site | None, runmap: runmap_mod.RunMap, info: Any, change: KnobChange) -> None:
    """The run-time probe's part of the gate: never a dead site; a tiling source only with a record to derive from."""
    if info is not None and info.live is False:
        raise refuse.live_site(f"{knob.id} is dead for this test: {info.why} (the run-time probe of the state "
                      "this change starts from); changing it changes nothing the test measures",
                      "tune a live knob: list_knobs lists them (dead ones apart), propose_candidates proposes only "
                      "live ones")
    if knob.kind == "tile_source" and not runmap.reported:
        raise refuse.legality(f"{knob.id} is the source of a tile value; what it gives at each tile call is "
                      f"derived from the run-time probe's record of the state the change starts from, and there is "
                      f"none ({runmap.status}{': ' + runmap.reason if runmap.reason else ''})",
                      "run_precision_check on the kept state records one; or pin the tile call itself to literals")


_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_UTF8 = {"utf-8", "utf8", "utf_8", "u8"}


def _check_bytes(path: str, before: str, after: str) -> None:
    """What Python executes is what the server compares: refuse what would make the two differ.

    * an encoding declaration other than UTF-8 — the server reads the text as UTF-8, where a comment is a comment,
      but ``# coding: unicode_escape`` makes Python decode ``\n`` inside that comment as a new line of code;
    * a dict literal that names the same key twice — the second entry silently wins at run time, and both were one
      knob to the extractor (red team: code rode in the duplicate's value);
    * a ``runtime_debug_mode`` that is not a plain integer 0–3 — the debug switch is stripped before comparison, so its
      value must be data, not code.
    """
    for text, when in ((after, "after"),):
        for line in text.lstrip("\ufeff").splitlines()[:2]:
            m = _COOKIE.match(line)
            if m and m.group(1).lower() not in _UTF8:
                raise refuse.one_change(f"{path} declares the source encoding {m.group(1)!r}: Python would read "
                              "the file differently from the UTF-8 text the server compares", "keep operator files "
                              "UTF-8 without another coding declaration")
    try:
        tree_a = pysource.parse(after.lstrip("\ufeff"))
    except SyntaxError:
        return  # reported by the caller
    try:
        dup_before = _duplicate_keys(pysource.parse(before.lstrip("\ufeff"))) if before else set()
    except SyntaxError:
        dup_before = set()
    new_dups = _duplicate_keys(tree_a) - dup_before
    if new_dups:
        line, key = sorted(new_dups)[0]
        raise refuse.one_change(f"{path}: line {line} gives the dict key {key!r} twice (the second wins at run "
                      "time)", "write each key once")
    for node in ast.walk(tree_a):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "runtime_debug_mode" and not (
                        isinstance(v, ast.Constant) and type(v.value) is int and 0 <= v.value <= 3):
                    raise refuse.one_change(f"{path}: line {v.lineno} sets runtime_debug_mode to "
                                  f"{ast.unparse(v)[:60]!r}; it must be an integer 0–3",
                                  "leave debug_options to enable_runtime_debug")
        elif isinstance(node, ast.keyword) and node.arg == "runtime_debug_mode" and not (
                isinstance(node.value, ast.Constant) and type(node.value.value) is int
                and 0 <= node.value.value <= 3):  # dict(runtime_debug_mode=7) is no more legal than {…: 7}
            raise refuse.one_change(f"{path}: runtime_debug_mode must be an integer 0–3",
                          "leave debug_options to enable_runtime_debug")


def _duplicate_keys(tree: ast.AST) -> set[tuple[int, str]]:
    out: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            seen: set[Any] = set()
            for k in node.keys:
                if isinstance(k, ast.Constant):
                    if k.value in seen:
                        out.add((k.lineno, str(k.value)))
                    seen.add(k.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            names = [kw.arg for kw in node.keywords if kw.arg]
            for name in {n for n in names if names.count(n) > 1}:
                out.add((node.lineno, name))
    return out


def _changed_names(sites_b: list[Site], sites_a: list[Site]) -> set[str]:
    """Names (module constants, locals) whose bound value differs between the two states."""
    return {c.knob_id.rsplit(":", 1)[-1].rsplit(".", 1)[-1] for c in _delta(sites_b, sites_a)
            if any(s.extra.get("binding") and s.knob.id == c.knob_id for s in sites_a + sites_b)}


def _delta(sites_b: list[Site], sites_a: list[Site], fb: dict[str, str] | None = None,
           fa: dict[str, str] | None = None) -> list[KnobChange]:
    """The knobs whose value differs. A knob on one side only whose line reads the same on both (``fb``, ``fa``) did
    not change: the change made it a knob or left it none (pinning a cube tile call to literals leaves the local
    that fed it unused)."""
    def table(sites: list[Site]) -> dict[str, Any]:
        return {s.knob.id: s.knob for s in sites if s.knob.present
                and not (s.knob.kind == "debug_option" and s.knob.name == "runtime_debug_mode")}

    def same_line(k: Any) -> bool:
        if fb is None or fa is None or k.file not in fb or k.file not in fa or not k.line:
            return False
        before, after = fb[k.file].splitlines(), fa[k.file].splitlines()
        return k.line <= min(len(before), len(after)) and before[k.line - 1] == after[k.line - 1]

    a, b = table(sites_b), table(sites_a)
    out = []
    for kid in sorted(set(a) | set(b)):
        ka, kb = a.get(kid), b.get(kid)
        if ka is not None and kb is not None and same(ka.value, kb.value):
            continue
        if (ka is None) != (kb is None) and same_line(ka or kb) and (ka or kb).kind in BINDING_KINDS:
            continue
        ref = kb or ka
        out.append(KnobChange(knob_id=kid, file=ref.file, line=ref.line, before=ka.value if ka else None,
                              after=kb.value if kb else None))
    return out


def _legal(fb: dict[str, str], fa: dict[str, str], context: dict[str, str] | None, sites_b: list[Site],
           sites_a: list[Site], *, knob: Any = None, new_value: Any = None, structural: bool = False,
           runmap: runmap_mod.RunMap | None = None, change: KnobChange | None = None,
           changed_site: Site | None = None, more: tuple[tuple[KnobChange, Site | None], ...] = ()
           ) -> effective.LegalityReport:
    """Domain C on the changed knob's own rule and on every consumer whose effective value changed — on the
    values that ran where the run-time probe recorded them (``runmap``). ``more``: the other half of a linked pair
    (its change and site), judged together with ``change`` on the joint effective values."""
    own = _own_domain(knob, new_value, sites_b) if knob is not None else ""
    named = (f"{knob.id} = {new_value!r}: names something the server cannot evaluate; its domain "
             f"({knob.legal[:90]}) was not checked") if knob is not None and _exprs(new_value) else ""
    prog_b = roles.analyze({**(context or {}), **fb})
    prog_a = roles.analyze({**(context or {}), **fa})
    try:
        values_b, values_a = effective.site_values(sites_b, prog_b), effective.site_values(sites_a, prog_a)
        if runmap is not None:
            values_b, values_a = runcheck.overlay({**(context or {}), **fb}, prog_b, runmap, sites_b, sites_a,
                                                  values_b, values_a, change, changed_site, list(more))
        report = effective.check_after(values_b, values_a,
                                       effective.loop_values(fb, prog_b), effective.loop_values(fa, prog_a), prog_a,
                                       structural=structural, changed_names=_changed_names(sites_b, sites_a))
        # the loops whose axis only the run knows (a factory parameter, a config field), after the static check
        for c, site in ((change, changed_site), *more) if runmap is not None else ():
            for found in (runcheck.loop_checks({**(context or {}), **fb}, prog_b, runmap, c, site),
                          runcheck.valid_checks(fb, runmap, c, site),
                          runcheck.block_valid_checks(fb, prog_b, runmap, c, site)):
                report.checked.extend(found[0])
                report.unchecked.extend(found[1])
        if runmap is not None:
            report.unchecked = runcheck.annotate_unchecked(runmap, report.unchecked, report.checked)
    except KnobValueError as exc:
        raise refuse.legality(f"the change makes a tiling site illegal: {exc.message}",
                      exc.hint or "choose another value") from None
    if own:  # the knob's own domain (type, range) was checked: recorded like every site check
        report.checked.insert(0, own)
    if named:  # admitted, unchecked, recorded with the value it names (domain C)
        report.unchecked = [named] + [u for u in report.unchecked if not u.startswith(knob.id)]
    return report
