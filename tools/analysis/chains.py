"""AIV dependency chains and sg_set_scope candidates (analyze_aiv_dep_chains.py, domain B.7), and the outer-loop
count used by t/iter (B.4), inferred from the operator's ``pypto.loop`` nesting.

Difference from the reference, on purpose (E.4.23): rows without successors are kept. The reference's CSV reader
drops every row with fewer than 11 columns, so a sink AIV task (the last op of a chain) vanishes and chains look
shorter than they are; ``reference_task_count`` reports what the reference would have counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pypto_tune.tools.analysis.models import AivChains, ChainGroup, ScopeCandidate
from pypto_tune.tools.analysis.topo import CORE_AIC, CORE_AIV, Topo, TopoLite, scan_topo
from pypto_tune.tools.analysis.topo_columns import (
    MAX_GROUPS_KEPT,
    MAX_LEVELS_KEPT,
    TopoColumns,
    chains_of,
    group_label,
    read_columns,
)
from pypto_tune.tools.code import pysource


def empty() -> AivChains:
    return AivChains()


def lite_of(topo: Topo) -> TopoLite:
    """The text-valued view ``aiv_chains`` works on, built from a parsed ``Topo``."""
    core_of, aiv, leaf_psg = {}, [], {}
    for i in range(len(topo)):
        key = f"{topo.seq[i]},{topo.task_id[i]}"
        core_of[key] = str(topo.core_type[i])
        if topo.leaf_hash[i]:
            leaf_psg.setdefault(topo.leaf_hash[i], set()).add(topo.psg_id[i])
        if topo.core_type[i] == CORE_AIV:
            aiv.append((key, str(topo.leaf_hash[i]), str(topo.opmagic[i]), str(topo.psg_id[i]), str(topo.seq[i]),
                        ",".join(str(t) for t in topo.successors[i])))
    return TopoLite(path=topo.path, layout=topo.layout, n_rows=len(topo),
                    rows_with_successors=sum(1 for s in topo.successors if s), core_of=core_of, aiv=aiv,
                    leaf_psg=leaf_psg)


def aiv_chains(topo: Topo | TopoLite) -> AivChains:
    """Group AIV→AIV chains (same seqNo) by their per-level (leafHash/opmagic) signature; see the module doc."""
    t = topo if isinstance(topo, TopoLite) else lite_of(topo)
    rows = t.aiv
    index = dict(zip([r[0] for r in rows], range(len(rows))))
    core_of = t.core_of
    aic = str(CORE_AIC)
    succ: list[list[int]] = []
    has_pred: set[int] = set()
    cube_succ_leaves: set[str] = set()
    none: list[int] = []  # shared, never mutated: most AIV rows have no AIV successor
    for _key, leaf, _op, _psg, seq, tail in rows:
        if not tail:
            succ.append(none)
            continue
        if "," not in tail:  # one successor: the common case (e.g. the HUB task after each AIV task)
            k = seq + "," + tail
            j = index.get(k)
            if j is not None:
                succ.append([j])
                has_pred.add(j)
            else:
                if core_of.get(k) == aic:
                    cube_succ_leaves.add(leaf)
                succ.append(none)
            continue
        out: list[int] = []
        if "," in tail:
            succ_keys = []
            for x in tail.split(","):
                if x:
                    succ_keys.append(seq + "," + x)
        else:
            succ_keys = [seq + "," + tail]
        for k in succ_keys:
            j = index.get(k)
            if j is not None:
                if j not in out:
                    out.append(j)
                    has_pred.add(j)
            elif core_of.get(k) == aic:
                cube_succ_leaves.add(leaf)
        succ.append(out)
    n_aiv = len(rows)
    starts = [i for i in range(n_aiv) if i not in has_pred]
    label = [f"{r[1]}/{r[2]}" for r in rows]
    leaf = [r[1] for r in rows]
    psg = [r[3] for r in rows]

    def walk(start: int, truncate: bool) -> list[list[int]]:
        levels: list[list[int]] = []
        visited = {start}
        frontier = [start]
        while frontier:
            levels.append(frontier)
            nxt = []
            for k in frontier:
                if truncate and leaf[k] in cube_succ_leaves:
                    continue
                for s in succ[k]:
                    if s not in visited:
                        visited.add(s)
                        nxt.append(s)
            frontier = nxt
        return levels

    def grouped(truncate: bool) -> tuple[list[ChainGroup], dict[tuple, list[list[int]]], dict[tuple, ChainGroup]]:
        counts: dict[tuple, int] = {}
        example: dict[tuple, list[list[int]]] = {}
        for i in starts:
            if not succ[i]:  # an isolated node (the common case in tiled kernels): skip the walk
                levels = [[i]]
                sig = ((label[i],),)
            else:
                levels = walk(i, truncate)
                sig = tuple(tuple(sorted(label[k] for k in lv)) if len(lv) > 1 else (label[lv[0]],) for lv in levels)
            if sig in counts:
                counts[sig] += 1
            else:
                counts[sig] = 1
                example[sig] = levels
        out = []
        by_sig: dict[tuple, ChainGroup] = {}
        for rank, (sig, count) in enumerate(sorted(counts.items(), key=lambda kv: -kv[1])):
            nodes = [k for lv in example[sig] for k in lv]
            out.append(ChainGroup(label=group_label(rank), count=count, levels=[list(lv) for lv in sig[:MAX_LEVELS_KEPT]],
                                  depth=len(sig),
                                  distinct_leaves=len({leaf[k] for k in nodes}),
                                  distinct_psg=len({psg[k] for k in nodes})))
            by_sig[sig] = out[-1]
        return out, example, by_sig

    trunc, examples, sig_of = grouped(True)
    # with no AIV leaf feeding a cube task, truncation changes nothing: reuse the result
    full = grouped(False)[0] if cube_succ_leaves else trunc
    cands = []
    for sig, levels in examples.items():
        g = sig_of[sig]
        if g.distinct_leaves >= 2 and g.distinct_psg >= 2:
            nodes = [k for lv in levels for k in lv]
            cands.append(ScopeCandidate(group=g.label, leaf_hashes=sorted({leaf[k] for k in nodes}),
                                        psg_ids=sorted({int(psg[k]) for k in nodes}), count=g.count))
    return AivChains(
        aiv_tasks=n_aiv, total_tasks=t.n_rows, reference_task_count=t.rows_with_successors,
        groups=full[:MAX_GROUPS_KEPT], truncated_groups=trunc[:MAX_GROUPS_KEPT],
        scope_candidates=sorted(cands, key=lambda c: c.group),
    )


def column_chains(t: TopoColumns) -> AivChains:
    """``aiv_chains`` on the numeric columns of ``topo_columns`` (same groups, counts, order and candidates)."""
    return AivChains.model_validate(chains_of(t, MAX_GROUPS_KEPT, MAX_LEVELS_KEPT))


# ---------------------------------------------------------------------------------------------- outer loops
_SKIP_DIRS = {".venv", "venv", "output", ".pypto-tune", "__pycache__", ".git", "node_modules", "site-packages"}


def _const_env(tree: ast.Module) -> dict[str, int]:
    env: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                v = _eval(node.value, env)
                if v is not None:
                    env[node.targets[0].id] = v
            elif len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple):
                for t, val in zip(node.targets[0].elts, node.value.elts):
                    v = _eval(val, env)
                    if isinstance(t, ast.Name) and v is not None:
                        env[t.id] = v
    return env


def _eval(node: ast.AST, env: dict[str, int]) -> int | None:
    """Integer arithmetic on literals and module constants only (never executes operator code)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        if a is None or b is None:
            return None
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b if b else None, ast.Mod: lambda: a % b if b else None}
        f = ops.get(type(node.op))
        return f() if f else None
    return None


def _is_loop_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("loop", "loop_unroll") and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "pypto")


def outer_loops_of_source(text: str) -> int | None:
    """Product of trip counts of all pypto.loops that contain another pypto.loop; None if one is unknown."""
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return None
    env = _const_env(tree)
    product = 1
    found = False

    def visit(node: ast.AST) -> bool:
        """Whether ``node`` is or contains a pypto.loop; multiplies outer trip counts into ``product``."""
        nonlocal product, found
        if isinstance(node, ast.For) and _is_loop_call(node.iter):
            found = True
            inner = [visit(c) for c in node.body + node.orelse]  # no short-circuit: every nested loop counts
            if any(inner):
                call = node.iter
                n = _eval(call.args[0], env) if call.args else None
                if n is None:
                    raise ValueError
                product *= n
            return True
        return any([visit(c) for c in ast.iter_child_nodes(node)])

    try:
        visit(tree)
    except ValueError:
        return None
    return product if found else None


def infer_outer_loops(source_root: Path | None) -> int | None:
    """Scan the operator sources under ``source_root`` (a file or folder, two levels deep); None if unknown or the
    files disagree."""
    if source_root is None:
        return None
    root = Path(source_root)
    files: list[Path] = []
    if root.is_file():
        files = [root]
    elif root.is_dir():
        for p in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
            if not any(part in _SKIP_DIRS for part in p.relative_to(root).parts):
                files.append(p)
    values = set()
    for p in files[:200]:
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "pypto.loop" not in text:
            continue
        v = outer_loops_of_source(text)
        if v is None:
            return None
        values.add(v)
    return values.pop() if len(values) == 1 else None


# ---------------------------------------------------------------------------------------------- summary
def topo_summary(path: Path) -> dict:
    """psgIds per leafHash and the AIV chains of one dyn_topo.txt.

    Read into numpy columns (``topo_columns``); a file those do not cover (non-canonical numbers, malformed rows)
    goes through the text reader, which gives the same answer and words the errors.
    """
    cols = read_columns(Path(path))
    if cols is not None:
        return {"psg": cols.leaf_psg, "chains": column_chains(cols), "layout": cols.layout}
    return text_summary(path)


def text_summary(path: Path) -> dict:
    """``topo_summary`` with the text reader only (any file; its errors name the line)."""
    lite = scan_topo(Path(path))
    return {"psg": lite.leaf_psg, "chains": aiv_chains(lite), "layout": lite.layout}
