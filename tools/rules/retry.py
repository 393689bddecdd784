"""R19, never the same change twice, and R10/R11, what a change may serve and correct: decisions on a change the
admission has understood (``tools/code/admission.py``) against the session's ledger, as the derived state holds it.

A change is "the same" by its code's meaning (``semantic_hash``: formatting and comments aside), by its knob and
value from the same kept state (``value_key``: one spelling however the value arrived), or, for a linked pair, by both
knobs and values together. Pure: the caller records the refusal.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pypto_tune.tools.code import pysource
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.rules import change as change_rules
from pypto_tune.tools.session.discarded import discarded_run_ids, voided_rounds
from pypto_tune.tools.session.state import SessionState

if TYPE_CHECKING:
    from pypto_tune.tools.code.admission import Admission
    from pypto_tune.tools.rules.tuning_loop import StageDef

#: patch kinds that carry a round's change (a trial's code is in its "trial" patch; "trial-apply" writes the same bytes
#: to the workspace for the winner and is not a second change)
CHANGE_PATCHES = ("tuning", "correction", "manual-adopt", "trial")


def served_and_corrected(adm: Admission, stage: StageDef | None, catalog_id: str,
                         same_knobs: frozenset[str] | None) -> GateRefusal | None:
    """R11: a correction moves only its round's own knob(s) (``same_knobs``: both of a linked pair's round). R10: in a
    configuration stage the change serves a catalogue item, and the one it cites when it cites one (a linked pair
    cites an item one of its knobs serves)."""
    moved = [adm.change] if adm.kind == "knob" and adm.change is not None else (
        list(adm.changes) if adm.kind == "pair" else [])
    if not moved:
        return None
    ids = " + ".join(c.knob_id for c in moved)
    if same_knobs is not None and not {c.knob_id for c in moved} <= same_knobs:
        return change_rules.correction_of_other_knob(same_knobs, ids)
    served = list(adm.catalog_ids)
    configuring = stage is not None and stage.group != "algorithm"
    if configuring and not served:
        return change_rules.serves_no_item(ids)
    if catalog_id and configuring and catalog_id not in served:
        return change_rules.serves_other_item(ids, served, catalog_id)
    return None


def already_tried(st: SessionState, after_semantic_hash: str, adm: Admission,
                  semantic_hash_of: Callable[[Any], str]) -> GateRefusal | None:
    """The refusal of a change already tried (R19), keyed on the code state:

    * the same code (by meaning) failed — a failed precision check or an invalid measurement of that code, in any
      round, whatever became of the round (rolled back, abandoned after a correction, cut off) and whatever
      rounds lay between (a failed change retried after one "correction" round that was reverted before
      verification is still the same failed code);
    * the same code was judged and not kept (no gain, regression, failed);
    * the same knob and value was tried from the same kept state and not kept;
    * a linked pair (rule linked-pair): the same two knobs and values tried together from the same kept state
      and not kept, or either half at its value failed on its own from this kept state (a pair does not retry a
      value that did not compile or verify; a half that ran without gain alone is what a pair is for).

    ``semantic_hash_of``: a recorded patch row → the semantic hash of its code (the caller caches it)."""
    why = _why_tried(st, after_semantic_hash, adm, semantic_hash_of)
    return change_rules.already_tried(why) if why else None


def _why_tried(st: SessionState, new_sem: str, adm: Admission, semantic_hash_of: Callable[[Any], str]) -> str:
    failed = failed_code(st)
    key = (adm.change.knob_id, value_key(adm.change.after)) if adm.change else None
    pair = {(c.knob_id, value_key(c.after)) for c in adm.changes} if adm.kind == "pair" else set()
    rounds = {int(r["number"]): r for r in st.rounds}
    voided = voided_rounds(st.rows)  # decided on discarded runs: nothing was learnt of their code
    for p in st.rows["patches"]:
        if p["round"] is None or p["kind"] not in CHANGE_PATCHES or int(p["round"]) in voided:
            continue
        n = int(p["round"])
        r, d = rounds.get(n), st.decisions.get(n)
        what = f"round {n}" + (f" ({r['change']})" if r is not None else "")
        if p["after_hash"] in failed and semantic_hash_of(p) == new_sem:
            return f"this exact code failed in {what}: {failed[p['after_hash']]}"
        if r is None or d is None or d["decision"] == "kept" or d["result_type"] == "abandoned":
            continue
        if semantic_hash_of(p) == new_sem:
            return f"this exact change was tried in {what} and ended {d['decision']} ({d['result_type']})"
        if key and r["before_hash"] == st.kept_hash and any(
                (c["knob_id"], value_key(c["after"])) == key for c in p["knob_changes"]):
            return (f"{key[0]} = {adm.change.after!r} was tried from this same kept state in round {n} and "
                    f"ended {d['decision']} ({d['result_type']})")
        if pair and r["before_hash"] == st.kept_hash:
            tried = {(c["knob_id"], value_key(c["after"])) for c in p["knob_changes"]}
            if tried == pair:
                return (f"this linked pair was tried from this same kept state in round {n} and ended "
                        f"{d['decision']} ({d['result_type']})")
            if len(tried) == 1 and tried <= pair and d["decision"] == "failed":
                return (f"{next(iter(tried))[0]} at this value failed on its own from this same kept state in "
                        f"round {n} ({d['result_type']}); a pair does not retry it")
    return ""



def failed_code(st: SessionState) -> dict[str, str]:
    """Code hash → how it failed, for every change that failed in a round: a failed precision check of its code,
    or an invalid measurement of it (R19 keys on the code, not on how its round was closed)."""
    out: dict[str, str] = {}
    # a run the server discarded (its copy or the interpreter's files changed) says nothing about its code
    discarded = discarded_run_ids(st.rows)
    for r in st.rows["precision_records"]:
        if r["round"] is not None and int(r["round"]) > 0 and r["verdict"] != "passed":
            if r["run_id"] is not None and int(r["run_id"]) in discarded:
                continue
            out.setdefault(r["code_hash"], f"precision {r['verdict']} ({r['result_type'] or 'failure'})")
    for m in st.rows["measurements"]:
        if m["round"] is not None and int(m["round"]) > 0 and not m["valid"]:
            if any(int(i) in discarded for i in m["run_ids"] or []):
                continue
            out.setdefault(m["code_hash"], "invalid measurement (" + "; ".join(m["invalid_reasons"])[:120] + ")")
    return out


_FOLDABLE = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
             ast.Mod: operator.mod, ast.LShift: operator.lshift}


def _fold(expr: str) -> Any:
    """The value of an expression made of number literals and + - * // % << (what a knob may be spelled as), or
    its canonical text (``ast.unparse``) when it names anything else."""
    try:
        tree = pysource.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return {"$expr": expr.strip()}

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant) and type(n.value) in (int, float):
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.UAdd, ast.USub)):
            x = ev(n.operand)
            return x if isinstance(n.op, ast.UAdd) else -x
        if isinstance(n, ast.BinOp) and type(n.op) in _FOLDABLE:
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.LShift) and (not isinstance(b, int) or b > 64):
                raise ValueError("shift too large")
            return _FOLDABLE[type(n.op)](a, b)
        if isinstance(n, (ast.Tuple, ast.List)):
            return [ev(x) for x in n.elts]
        raise ValueError("not a number expression")

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, TypeError, OverflowError):
        return {"$expr": ast.unparse(tree)}


def value_key(value: Any) -> str:
    """One spelling of a knob value, however it arrived: the ledger's JSON (string dict keys, lists) and the source
    (int keys, tuples) must compare equal, or a failed change could be retried as "new"."""
    def norm(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        if isinstance(v, dict) and set(v) == {"$expr"}:
            folded = _fold(str(v["$expr"]))  # +2, 2 * 4, (8) are the value 2 and 8, not new values
            if isinstance(folded, dict):  # names something (X.value * 512): its canonical text is the value
                return ("$expr", folded["$expr"])
            return norm(folded)
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                try:
                    k = int(k) if isinstance(k, str) else k
                except ValueError:
                    pass
                out[repr(k)] = norm(x)
            return sorted(out.items())
        return v

    return repr(norm(value))
