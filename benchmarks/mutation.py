"""Mutation testing of the rule modules with cosmic-ray (issue #16): does a test fail when a decision changes?

    .venv/bin/python benchmarks/mutation.py                   # every module below, its decisions, its fast tests
    .venv/bin/python benchmarks/mutation.py --only stages     # one module (key of MODULES; repeatable)
    .venv/bin/python benchmarks/mutation.py --list            # the mutants that would run, nothing else
    .venv/bin/python benchmarks/mutation.py --compare 4       # per module 4 mutants also run the old way: cost, agreement
    bash scripts/mutation.sh                                  # tools/rules/ (--rules --reexec --fail-on-survivors)

What is mutated: cosmic-ray (pinned, ``pip install -e .[mutation]``; the script installs it when it is missing)
mutates one syntax node at a time — a comparison's boundary (``<`` ↔ ``<=``, ``==`` ↔ ``!=``, ``in`` ↔ ``not in``,
``is`` ↔ ``is not``), ``and`` ↔ ``or``, an added ``not``, ``True`` ↔ ``False``, a number ± 1, an arithmetic operator's
nearest neighbour (``+`` ↔ ``-``, ``*`` ↔ ``/``), a loop that never runs, a ``continue`` that breaks, an exception type
— inside the functions that make a gate's decision (``MODULES``). Each mutant is one cosmic-ray work item (its own
operators and occurrence numbering; the results are written to its work database).

How it is killed, affordably on 2 cores: per module a fork server (``mutation_fork.py``) imports the project and the
kill suite once. The unmutated suite runs once to time each test (and must pass with every function of the module
recompiled and swapped in), and once under coverage with a context per test, which says which tests run each line.
A mutant then costs a fork: its function's code object is swapped in and only the tests that reach its line run,
cheapest first, ``-x``, with a timeout of 4 × what they took unmutated (+ 5 s). A mutation outside any function body
(a module constant, a default value) runs the standard way: the mutated file on disk, a fresh ``pytest -x`` over the
whole suite. So does every mutant the fast way did not kill — no survivor is reported that a fresh interpreter and the
whole kill suite would kill.

Where: two private copies of the tree under a temp folder (cosmic-ray edits files in place for the standard way; the
checkout is never touched), each imported through a ``pypto_tune`` shim on ``PYTHONPATH``.

Prints per module the mutants, killed, survived and timeouts, then every survivor (file:line, operator, the line
before and after) — README "Mutation testing" lists them with why each is harmless or which test now kills it. Not
part of the default test command.

For ``tools/rules/`` (``--rules``; ``scripts/mutation.sh``) every definition and table row is mutated except the inside
of f-strings (a message is not a decision); ``--reexec`` runs a row's or a constant's mutant in the fork server by
running the mutated module text in place; a survivor that ``mutation_equivalent.toml`` records (with why no input can
tell it from the original) is reported as equivalent, and ``--fail-on-survivors`` exits 1 on any other.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FORK = Path(__file__).with_name("mutation_fork.py")
sys.path.insert(0, str(FORK.parent))
from mutation_fork import changed_units  # noqa: E402  (the fork server's own test of "a swap shows it")
COSMIC_RAY = "cosmic-ray==8.7.0"
COVERAGE = "coverage==7.17.5"


@dataclass(frozen=True)
class Target:
    path: str  # the module, relative to the repository
    functions: tuple[str, ...]  # definitions whose mutants run (cosmic-ray's innermost def or class name; "*": all)
    suite: tuple[str, ...]  # the fast tests that specify it
    decisions_only: bool = False  # leave out mutants inside an f-string: they change a message, not what is decided

    def mutates(self, where: str) -> bool:
        return "*" in self.functions or where in self.functions


# (tests/admission/test_redteam_findings.py runs stand-in operators in child processes whose interpreter fingerprint
# takes in the shim's folders: it fails in the copy without any mutation, so it is not part of the kill suite)
ADMISSION_SUITE = ("tests/rules/test_rule_decisions.py", "tests/admission/test_admission_decisions.py",
                   "tests/admission/test_admission_properties.py", "tests/patching/test_runmap.py")
RULES_SUITE = ("tests/rules/test_rules_and_state.py", "tests/rules/test_limit_stop.py",
               "tests/rules/test_regression_flags.py", "tests/rules/test_rule_decisions.py",
               "tests/rules/test_gate_decisions.py", "tests/rules/test_gate_refusals.py",
               "tests/session/test_derived_state.py", "tests/session/test_state_steps.py",
               "tests/prompts/test_prompt_texts.py",  # the prompts state the rules' numbers: a changed one disagrees
               "tests/rules/test_keep_the_best_of_a_batch.py", "tests/rules/test_stage_order.py",
               "tests/rules/test_measurement.py", "tests/rules/test_same_work_rule.py")
OPERATIONS_SUITE = ("tests/rules/test_rule_decisions.py", "tests/rules/test_gate_decisions.py")
# tools/rules/: the unit-tier tests (no process, no simulator) that specify the gate table and the refusal builders
RULES_PACKAGE_SUITE = ("tests/rules/test_gate_refusals.py", "tests/rules/test_rules_and_state.py",
                       "tests/rules/test_limit_stop.py", "tests/rules/test_gate_decisions.py",
                       "tests/rules/test_refusal_builders.py", "tests/test_rules_contract.py")
REFUSAL_BUILDERS_SUITE = ("tests/rules/test_refusal_builders.py", "tests/test_rules_contract.py")
RUNCHECK_SUITE = ("tests/patching/test_runmap.py", "tests/admission/test_admission_decisions.py",
                  "tests/patching/test_runcheck_decisions.py")
MODULES: dict[str, Target] = {  # in the order a run takes them
    "stages": Target("tools/operations/stages.py",
                     ("judge", "leave", "mark_checklist", "advance_stage"), OPERATIONS_SUITE),
    "r19": Target("tools/rules/retry.py", ("served_and_corrected", "already_tried", "_why_tried", "failed_code",
                                           "value_key", "norm", "_fold", "ev"), OPERATIONS_SUITE),
    "state": Target("tools/session/state.py",
                    ("derive_state", "judge_order", "kept_samples_of", "last_valid_measurement", "_levels",
                     "_expected_code", "_environment", "_baseline_failures", "_target_us", "_open_round",
                     "_kept_code", "_stage_counters", "_stage_entry_done", "_checklist", "_tree", "_test_command",
                     "_pending_question"), RULES_SUITE),
    "rules": Target("tools/rules/tuning_loop.py",
                    ("judge_measurement", "_rel_se_pct", "next_stage", "stage_exit_reason", "judge_batch", "after_stage",
                     "repeats_for",
                     "<module>"), RULES_SUITE),
    "admission": Target("tools/code/admission.py",
                        ("admit", "_changed_paths", "_check_parses", "_syntax_differences", "_not_a_knob_change",
                         "_admit_rewrite", "_admit_co_tuned", "_too_many_knobs", "_admit_one_knob", "_pure", "_check_bytes", "_legal", "_delta", "table", "_duplicate_keys",
                         "_differences", "_statements", "_shell", "_check_run", "_exprs", "_changed_names",
                         "_outside_kernels", "visit_FunctionDef", "_tuning_knob", "_data", "_own_domain"),
                        ADMISSION_SUITE),
    "runcheck": Target("tools/patching/runcheck.py",
                       ("overlay", "_kernel_dims", "loop_checks", "annotate_unchecked"), RUNCHECK_SUITE),
}
#: the kill suite of a tools/rules/ module, where it is not REFUSAL_BUILDERS_SUITE (a module added to the folder is
#: mutated from the start; its survivors say which tests to name here)
RULES_SUITES: dict[str, tuple[str, ...]] = {
    "gates": RULES_PACKAGE_SUITE,
    "tuning_loop": RULES_SUITE,
    "retry": OPERATIONS_SUITE + ("tests/rules/test_refusal_builders.py", "tests/rules/test_retry.py"),
    "precision": ("tests/rules/test_precision_steps.py", "tests/running/test_verdict.py",
                  "tests/running/test_runner_properties.py")}
#: every module of tools/rules/, as found on disk (scripts/mutation.sh): every definition and table row, no message
RULES_PACKAGE = tuple(f"rules/{p.stem}" for p in sorted((ROOT / "tools" / "rules").glob("*.py"))
                      if p.name != "__init__.py")
for _key in RULES_PACKAGE:
    _stem = _key.split("/", 1)[1]
    MODULES[_key] = Target(f"tools/rules/{_stem}.py", ("*",), RULES_SUITES.get(_stem, REFUSAL_BUILDERS_SUITE),
                           decisions_only=True)
MODULES["gates"] = MODULES["rules/gates"]  # the name earlier runs used
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.toml")

# Operators kept, by cosmic-ray's name: the mutations that move a decision. The rest of its catalogue (every
# operator into every other: `<` into `is not`, `+` into `^`…) multiplies the count tenfold with mutants the same
# tests kill or no decision can show.
_NEAR = {("Lt", "LtE"), ("LtE", "Lt"), ("Gt", "GtE"), ("GtE", "Gt"), ("Eq", "NotEq"), ("NotEq", "Eq"),
         ("In", "NotIn"), ("NotIn", "In"), ("Is", "IsNot"), ("IsNot", "Is"),
         ("Add", "Sub"), ("Sub", "Add"), ("Mul", "Div"), ("Div", "Mul"), ("FloorDiv", "Div"), ("Mod", "FloorDiv")}
_WHOLE = {"NumberReplacer", "AddNot", "ReplaceAndWithOr", "ReplaceOrWithAnd", "ZeroIterationForLoop",
          "ReplaceFalseWithTrue", "ReplaceTrueWithFalse", "ReplaceContinueWithBreak", "ReplaceBreakWithContinue",
          "ExceptionReplacer"}


def kept_operator(name: str) -> bool:
    op = name.split("/", 1)[-1]
    parts = op.split("_")
    if parts[0] in ("ReplaceComparisonOperator", "ReplaceBinaryOperator"):
        return len(parts) >= 3 and (parts[1], parts[2]) in _NEAR
    return parts[0] in _WHOLE


def ensure_tools() -> None:
    for module, pin in (("cosmic_ray", COSMIC_RAY), ("coverage", COVERAGE)):
        if importlib.util.find_spec(module) is None:
            print(f"installing {pin} into {sys.executable} …", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", pin], check=True)


def private_copy(dest: Path) -> Path:
    """The tree the mutants live in, and a shim that makes ``import pypto_tune.tools`` read it."""
    skip = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.pyc", "output", "demo-run", ".pypto-tune",
                                  "node_modules", "*.egg-info", ".hypothesis", ".pytest_cache")
    for part in ("tools", "server", "prompts", "tests", "fixtures"):  # pypto_tune/ only in the shim below
        shutil.copytree(ROOT / part, dest / part, ignore=skip, symlinks=True)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    shim = dest / ".shim" / "pypto_tune"
    shim.mkdir(parents=True)
    shutil.copy2(ROOT / "pypto_tune" / "__init__.py", shim / "__init__.py")
    for sub in ("tools", "server", "prompts"):
        (shim / sub).symlink_to(dest / sub)
    return dest / ".shim"


@dataclass
class Copy:
    root: Path
    env: dict[str, str]


def make_copy(dest: Path) -> Copy:
    shim = private_copy(dest)
    return Copy(dest, dict(os.environ, PYTHONPATH=str(shim), PYTHONDONTWRITEBYTECODE="1"))


# ------------------------------------------------------------------------------------------------ the mutants


def message_spans(text: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the f-strings of ``text`` are, as (line, character column) pairs: the text of a message or hint."""
    lines = text.splitlines()

    def chars(line: int, byte_col: int) -> int:  # ast counts UTF-8 bytes, cosmic-ray characters
        return len(lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    return [((n.lineno, chars(n.lineno, n.col_offset)), (n.end_lineno, chars(n.end_lineno, n.end_col_offset)))
            for n in ast.walk(ast.parse(text)) if isinstance(n, ast.JoinedStr) and n.end_lineno is not None]


def in_message(spans: list[tuple[tuple[int, int], tuple[int, int]]], start: tuple[int, int],
               end: tuple[int, int]) -> bool:
    return any(a <= tuple(start) and tuple(end) <= b for a, b in spans)


def init_db(copy: Copy, t: Target, db: Path) -> list[Any]:
    """cosmic-ray's ``init`` for the kept operators only (occurrences are numbered per operator, so the work items are
    the ones its full ``init`` makes for them), then the target's functions only."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.ast.ast_query import ASTQuery
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import MutationSpec, WorkItem

    path = copy.root / t.path
    tree = get_ast_from_path(path)
    nodes = list(ast_nodes(tree))
    messages = message_spans(path.read_text(encoding="utf-8")) if t.decisions_only else []
    items = []
    for name in sorted(n for n in cosmic_ray.plugins.operator_names() if kept_operator(n)):
        op = cosmic_ray.plugins.get_operator(name)()
        positions = ((node, s, e) for node in nodes for s, e in op.mutation_positions(node))
        for occurrence, (node, s, e) in enumerate(positions):
            where = ASTQuery(node).get_definition_name() or "<module>"
            if not t.mutates(where) or in_message(messages, s, e):
                continue
            items.append(WorkItem.single(job_id=uuid.uuid4().hex, mutation=MutationSpec(
                module_path=str(path), operator_name=name, occurrence=occurrence, start_pos=s, end_pos=e,
                definition_name=where)))
    items.sort(key=lambda w: (w.mutations[0].start_pos, w.mutations[0].operator_name))
    with use_db(str(db), WorkDB.Mode.create) as work_db:
        work_db.clear()
        work_db.add_work_items(items)
    return items


def mutated_source(spec: Any, original: str) -> str | None:
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    return mutate_code(original, cosmic_ray.plugins.get_operator(spec.operator_name)(), spec.occurrence)


def _key(operator: str, function: str | None, code: str, mutant: str) -> tuple[str, str, str, str]:
    return operator, function or "<module>", code, mutant


def _item_key(w: Any, original: str) -> tuple[str, str, str, str]:
    m = w.mutations[0]
    line = m.start_pos[0]
    new = (mutated_source(m, original) or "").splitlines()
    return _key(m.operator_name, m.definition_name, original.splitlines()[line - 1].strip(),
                new[line - 1].strip() if line <= len(new) else "")


def statement_lines(tree: ast.Module, line: int, end: int) -> set[int]:
    """The lines whose execution shows that the code at ``line``..``end`` ran: the innermost statement (or ``except``
    clause) holding it — all its lines for a simple statement, its header for a compound one — and the node's own."""
    best: ast.AST | None = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.stmt, ast.excepthandler)) and node.lineno <= line <= (node.end_lineno or line):
            if best is None or (node.lineno, -(node.end_lineno or 0)) >= (best.lineno, -(best.end_lineno or 0)):
                best = node
    out = set(range(line, end + 1))
    if best is not None:
        inner = [c.lineno for f in ("body", "orelse", "finalbody", "handlers") for c in getattr(best, f, [])
                 if isinstance(c, ast.AST)]
        last = min(inner) - 1 if inner else (best.end_lineno or best.lineno)
        out |= set(range(best.lineno, max(last, best.lineno) + 1))
    return out


def tests_by_line(contexts: dict[str, list[str]], tests: list[str]) -> dict[int, set[str]]:
    """Line → the tests that reach it: the test whose body ran it, or — for a line run while a fixture was set up or
    torn down, which a module- or session-scoped fixture shares — every test of that test's file."""
    by_file: dict[str, set[str]] = {}
    for n in tests:
        by_file.setdefault(n.split("::", 1)[0], set()).add(n)
    out: dict[int, set[str]] = {}
    for line, ctxs in contexts.items():
        got = out.setdefault(int(line), set())
        for c in ctxs:
            node, _, phase = c.rpartition("|")
            got |= {node} if phase == "call" else by_file.get(node.split("::", 1)[0], {node})
    return out


# ------------------------------------------------------------------------------------------------ running them


class Server:
    """One fork server (mutation_fork.py) in a copy, for one target module and its kill suite."""

    def __init__(self, copy: Copy, t: Target, log: Path, reexec: bool = False) -> None:
        env = dict(copy.env, MUTATION_REEXEC="1" if reexec else "0")
        self.proc = subprocess.Popen([sys.executable, str(FORK), t.path, str(log), *t.suite], cwd=copy.root,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if not hello.get("ready"):
            raise SystemExit(f"the kill suite of {t.path} does not collect in the copy (see {log})")

    def ask(self, **req: Any) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def run_fresh(copy: Copy, t: Target, spec: Any, tests: list[str], timeout: float) -> dict[str, Any]:
    """The standard way: cosmic-ray writes the mutant into the copy's file, a fresh ``pytest -x`` runs ``tests``."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import use_mutation

    op = cosmic_ray.plugins.get_operator(spec.operator_name)()
    t0 = time.monotonic()
    with use_mutation(copy.root / t.path, op, spec.occurrence) as (_, mutated):
        if mutated is None:
            return {"outcome": "no-mutation", "wall": 0.0}
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m",
                                 "not sim", *tests], cwd=copy.root, env=copy.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"outcome": "timeout", "wall": round(time.monotonic() - t0, 3)}
    outcome = {0: "survived", 1: "killed"}.get(proc.returncode, "error")
    failed = next((ln.split(" ", 1)[1].split(" - ")[0] for ln in out.splitlines() if ln.startswith("FAILED ")), None)
    return {"outcome": outcome, "failed": failed, "wall": round(time.monotonic() - t0, 3),
            "tail": "" if outcome != "error" else out[-1500:]}


def run_module(key: str, t: Target, fast: Copy, fresh: Copy, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    t0 = time.monotonic()
    name = key.replace("/", "-")  # the files of this module's run (a rules/ key holds a slash)
    db = work / f"cr-{name}.sqlite"
    items = init_db(fast, t, db)
    original = (fast.root / t.path).read_text(encoding="utf-8")
    if args.survivors_of:  # the same mutants, found by what they change (line numbers may have moved since)
        earlier = json.loads(args.survivors_of.read_text())
        want = {_key(s["operator_name"], s["function"], s["code"], s["mutant"]) for r in earlier["modules"]
                if r["module"] == t.path for s in r["survived"]}
        items = [w for w in items if _item_key(w, original) in want]
    print(f"{key}: {len(items)} mutants in {', '.join(t.functions)} of {t.path}; kill suite: {' '.join(t.suite)}",
          flush=True)
    lines = original.splitlines()
    if not items:
        return {"module": t.path, "mutants": 0, "killed": 0, "survived": [], "timeouts": [], "errors": [],
                "fresh_runs": 0, "fast_runs": 0, "compare": [], "seconds": round(time.monotonic() - t0, 1)}
    if args.list:
        for w in items:
            m = w.mutations[0]
            print(f"  {t.path}:{m.start_pos[0]} {m.definition_name} {m.operator_name}")
        return {}
    server = Server(fast, t, work / f"{name}.log", reexec=args.reexec)
    base = server.ask(op="baseline")
    if base.get("rc") != 0:
        raise SystemExit(f"the kill suite of {t.path} fails without any mutation (or with the unmutated code swapped "
                         f"in): {base}; see {work / (name + '.log')}")
    seconds: dict[str, float] = base["seconds"]
    cover = server.ask(op="map")
    order = sorted(seconds, key=lambda n: (seconds[n], n))  # cheapest first: -x stops at the first failure
    reached = tests_by_line(cover.get("lines", {}), order)
    fresh_timeout = max(60.0, 3 * sum(seconds.values()) + 30)
    print(f"{key}: suite {len(seconds)} tests, {sum(seconds.values()):.1f} s unmutated; "
          f"{len(reached)} lines of {t.path} reached", flush=True)
    tree = ast.parse(original)
    out: dict[str, Any] = {"module": t.path, "mutants": len(items), "killed": 0, "survived": [], "timeouts": [],
                           "errors": [], "fresh_runs": 0, "fast_runs": 0, "compare": []}
    compare_at = set(range(0, len(items), max(1, len(items) // args.compare))) if args.compare else set()
    results = []
    fast: list[tuple[int, Any, dict[str, Any], int]] = []
    for i, w in enumerate(items):  # the fast way first: the picture of the whole module comes early
        spec = w.mutations[0]
        source = mutated_source(spec, original)
        if source is None:
            results.append((w, WorkResult(worker_outcome=WorkerOutcome.NO_TEST)))
            continue
        want = set().union(*(reached.get(n, set()) for n in statement_lines(tree, spec.start_pos[0],
                                                                              spec.end_pos[0])))
        tests = [n for n in order if n in want]
        r: dict[str, Any] = {"outcome": "unreached", "wall": 0.0}
        module_level = changed_units(original, source) is None  # a def line, a table row, a constant
        if module_level and args.reexec:  # the module's text runs again in place in the fork
            tests = tests or order  # a constant is read at import, inside no test: every test may show it
            r = server.ask(op="mutant", source=source, tests=tests, reexec=True,
                           timeout=4 * sum(seconds[n] for n in tests) + 5)
            out["fast_runs"] += 1
        elif module_level:  # only a fresh import shows it
            r = {"outcome": "reimport", "wall": 0.0}
        elif tests:
            r = server.ask(op="mutant", source=source, tests=tests, timeout=4 * sum(seconds[n] for n in tests) + 5)
            out["fast_runs"] += 1
        r["new_text"] = source.splitlines()[spec.start_pos[0] - 1].strip()
        print(f"  [{i + 1}/{len(items)}] {r['outcome']:9} fast  {r['wall']:6.1f} s {t.path}:{spec.start_pos[0]} "
              f"{spec.operator_name.split('/')[-1]} ({spec.definition_name}; {len(tests)} tests)", flush=True)
        fast.append((i, w, r, len(tests)))
    server.close()
    again = {"survived", "reimport", "error", "timeout"} | ({"unreached"} if args.confirm_unreached else set())
    for i, w, r, n_tests in fast:
        spec = w.mutations[0]
        line = spec.start_pos[0]
        way = "fast"
        if r["outcome"] in ("reimport", "error", "timeout") or (r["outcome"] in again and not args.no_confirm):
            # the standard way: whole suite, fresh interpreter — the verdict for everything the fast way did not kill
            r = {**run_fresh(fresh, t, spec, order, fresh_timeout), "fast": r["outcome"], "fast_wall": r["wall"],
                 "new_text": r["new_text"]}
            way = "fresh"
            out["fresh_runs"] += 1
            print(f"  [{i + 1}/{len(items)}] {r['outcome']:9} fresh {r['wall']:6.1f} s {t.path}:{line} "
                  f"{spec.operator_name.split('/')[-1]} ({spec.definition_name}; fast: {r['fast']})", flush=True)
        if i in compare_at:  # the way this script ran before: whole suite in file order, fresh pytest per mutant
            old = run_fresh(fresh, t, spec, list(t.suite), fresh_timeout)
            out["compare"].append({"line": line, "operator": spec.operator_name, "old": old["outcome"],
                                   "old_wall": old["wall"], "new": r["outcome"],
                                   "new_wall": r["wall"] + r.get("fast_wall", 0.0)})
        entry = {"line": line, "operator": spec.operator_name.split("/", 1)[-1], "function": spec.definition_name,
                 "operator_name": spec.operator_name, "occurrence": spec.occurrence, "end": list(spec.end_pos),
                 "code": lines[line - 1].strip() if 0 < line <= len(lines) else "", "mutant": r["new_text"],
                 "way": way, "tests": n_tests}
        if r["outcome"] == "killed":
            out["killed"] += 1
            test_outcome = TestOutcome.KILLED
        elif r["outcome"] == "timeout":
            out["timeouts"].append(entry)
            test_outcome = TestOutcome.KILLED
        elif r["outcome"] in ("survived", "unreached"):
            out["survived"].append({**entry, "unreached": r["outcome"] == "unreached" or r.get("fast") == "unreached"})
            test_outcome = TestOutcome.SURVIVED
        else:
            out["errors"].append({**entry, "detail": r.get("error") or r.get("tail") or r["outcome"]})
            test_outcome = TestOutcome.INCOMPETENT
        results.append((w, WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=test_outcome,
                                      output=json.dumps(r)[:4000])))
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        for w, res in results:
            work_db.set_result(w.job_id, res)
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def load_equivalent(path: Path | None) -> dict[tuple[str, str, str, str, str], str]:
    """The mutants recorded as equivalent (no input can tell them from the original), each with its reason.

    A TOML file of ``[[equivalent]]`` tables: ``module``, ``function``, ``operator`` (cosmic-ray's full name),
    ``code`` and ``mutant`` (the line before and after, stripped, as a run prints them) and ``why``. Matched by what
    the mutant changes, not by line number, so an entry survives edits elsewhere in the module."""
    if path is None or not path.exists():
        return {}
    import tomllib

    out = {}
    for e in tomllib.loads(path.read_text(encoding="utf-8")).get("equivalent", []):
        if not str(e.get("why", "")).strip():
            raise SystemExit(f"{path}: an equivalent mutant without a reason ({e.get('module')}:{e.get('code')})")
        out[(e["module"], e["operator"], e["function"], e["code"], e["mutant"])] = e["why"]
    return out


def split_equivalent(r: dict[str, Any], equivalent: dict[tuple[str, str, str, str, str], str],
                     used: set[tuple[str, str, str, str, str]]) -> None:
    """Move the survivors the allowlist names from ``survived`` to ``equivalent`` (with the reason)."""
    live, same = [], []
    for s in r["survived"]:
        key = (r["module"], s["operator_name"], s["function"], s["code"], s["mutant"])
        if key in equivalent:
            used.add(key)
            same.append({**s, "why": equivalent[key]})
        else:
            live.append(s)
    r["survived"], r["equivalent"] = live, same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(MODULES), help="module key (repeatable)")
    ap.add_argument("--functions", help="comma-separated: only these of the module's functions (a targeted run)")
    ap.add_argument("--list", action="store_true", help="list the mutants that would run and stop")
    ap.add_argument("--compare", type=int, default=0, metavar="N",
                    help="also run N mutants per module the old way (fresh pytest, whole suite): cost and agreement")
    ap.add_argument("--confirm-unreached", action="store_true",
                    help="run the mutants no kill-suite test reaches (by coverage) the standard way too")
    ap.add_argument("--no-confirm", action="store_true",
                    help="report the fast way's survivors without running them again the standard way")
    ap.add_argument("--json", type=Path, help="write the results here too (after each module)")
    ap.add_argument("--keep", type=Path, help="copy cosmic-ray's work databases and the suite logs here")
    ap.add_argument("--survivors-of", type=Path, metavar="JSON",
                    help="run only the mutants an earlier --json lists as survivors (after tests were added)")
    ap.add_argument("--rules", action="store_true", help="every module of tools/rules/ (unless --only names some)")
    ap.add_argument("--reexec", action="store_true",
                    help="run a mutant outside any function body (a table row, a constant) in the fork server too, "
                    "by running the module's mutated text in place; its survivors are confirmed the standard way")
    ap.add_argument("--equivalent", type=Path, default=EQUIVALENT, metavar="TOML",
                    help=f"survivors recorded as equivalent, each with a reason (default {EQUIVALENT.name})")
    ap.add_argument("--fail-on-survivors", action="store_true",
                    help="exit 1 when a survivor is not recorded as equivalent, or a mutant ended in an error")
    args = ap.parse_args()
    ensure_tools()
    keys = args.only or list(RULES_PACKAGE if args.rules else MODULES)
    equivalent = load_equivalent(args.equivalent)
    used: set[tuple[str, str, str, str, str]] = set()
    report = []
    started = time.strftime("%Y-%m-%d %H:%M")
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pypto-tune-mutation-") as tmp:
        work = Path(tmp)
        fast, fresh = make_copy(work / "fast"), make_copy(work / "fresh")
        for key in keys:
            t = MODULES[key]
            if args.functions:
                t = Target(t.path, tuple(f for f in t.functions if f in args.functions.split(",")), t.suite)
            r = run_module(key, t, fast, fresh, work, args)
            if not r:
                continue
            split_equivalent(r, equivalent, used)
            report.append(r)
            print(f"{key}: {r['mutants']} mutants, {r['killed']} killed, {len(r['survived'])} survived, "
                  f"{len(r['equivalent'])} equivalent, {len(r['timeouts'])} timed out, {len(r['errors'])} errors; "
                  f"{r['fast_runs']} fast runs, {r['fresh_runs']} fresh runs; {r['seconds']} s", flush=True)
            for s in r["equivalent"]:
                print(f"  equivalent {t.path}:{s['line']} ({s['function']}) {s['operator']}: {s['why']}", flush=True)
            for s in r["survived"]:
                why = " [no test reaches it]" if s["unreached"] else ""
                print(f"  SURVIVED{why} {t.path}:{s['line']} ({s['function']}) {s['operator']}: {s['code']}  →  "
                      f"{s['mutant']}", flush=True)
            for s in r["timeouts"]:
                print(f"  TIMEOUT {t.path}:{s['line']} ({s['function']}) {s['operator']}: {s['code']}", flush=True)
            for s in r["errors"]:
                print(f"  ERROR {t.path}:{s['line']} ({s['function']}) {s['operator']}: {s['detail'][-300:]}",
                      flush=True)
            if args.json:  # after each module: a long run that is stopped keeps what it measured
                args.json.write_text(json.dumps({"started": started, "modules": report}, indent=2))
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                name = key.replace("/", "-")
                for f in (work / f"cr-{name}.sqlite", work / f"{name}.log"):
                    if f.exists():
                        shutil.copy2(f, args.keep / f.name)
    if not report:
        return 0
    total = sum(r["mutants"] for r in report)
    for key in sorted(set(equivalent) - used):
        if any(r["module"] == key[0] for r in report) and not args.functions and not args.survivors_of:
            print(f"note: {args.equivalent.name} names a mutant this run did not find surviving: {key[0]} "
                  f"({key[2]}) {key[1]}: {key[3]}  →  {key[4]}")
    print(f"total: {total} mutants, {sum(r['killed'] for r in report)} killed, "
          f"{sum(len(r['survived']) for r in report)} survived, "
          f"{sum(len(r['equivalent']) for r in report)} equivalent, {sum(len(r['timeouts']) for r in report)} timed out, "
          f"{sum(len(r['errors']) for r in report)} errors; {time.monotonic() - t_all:.0f} s wall "
          f"({(time.monotonic() - t_all) / max(total, 1):.1f} s per mutant)")
    pairs = [c for r in report for c in r["compare"]]
    if pairs:
        old, new = statistics.mean(c["old_wall"] for c in pairs), statistics.mean(c["new_wall"] for c in pairs)
        agree = sum(1 for c in pairs if (c["old"] == "survived") == (c["new"] == "survived"))
        print(f"compare: {len(pairs)} mutants run both ways: old {old:.1f} s per mutant, new {new:.1f} s "
              f"({old / new if new else float('inf'):.1f}× faster); same verdict for {agree}/{len(pairs)}")
    if args.fail_on_survivors and any(r["survived"] or r["errors"] for r in report):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
