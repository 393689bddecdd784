"""Mutation testing of the rule modules with cosmic-ray (issue #16): does a test fail when a decision changes?

    .venv/bin/python benchmarks/mutation.py                 # every module below, its decisions, its fast tests
    .venv/bin/python benchmarks/mutation.py --only stages   # one module (key of MODULES)
    .venv/bin/python benchmarks/mutation.py --list          # the mutants that would run, nothing else

What runs: cosmic-ray (pinned, ``pip install .[mutation]``; the script installs it into this interpreter when it is
missing) mutates one syntax node at a time — a comparison's boundary (``<`` ↔ ``<=``, ``==`` ↔ ``!=``, ``in`` ↔
``not in``, ``is`` ↔ ``is not``), ``and`` ↔ ``or``, an added ``not``, ``True`` ↔ ``False``, a number ± 1, an
arithmetic operator's nearest neighbour (``+`` ↔ ``-``, ``*`` ↔ ``/``), a loop that never runs, a ``continue`` that
breaks, an exception type — inside the functions that make a gate's decision (``MODULES``: admission, gates, rules,
state with the kept time, stages, the R19 check). After each mutation it runs that module's kill suite: the fast
tests (no simulator) that specify the module, ``pytest -x``. A mutant the suite does not fail on *survives*.

Where: in a private copy of the tree under a temp folder (cosmic-ray edits files in place; the checkout is never
left mutated, and the suite imports the copy through a ``pypto_tune`` shim on ``PYTHONPATH``).

Prints per module the mutants, killed, survived and timeouts, then every survivor (file:line, operator, the line)
— README "Mutation testing" lists them with why each is harmless or which test now kills it. Not part of the default
test command: a full run takes ~1 h on 2 cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COSMIC_RAY = "cosmic-ray==8.7.0"


@dataclass(frozen=True)
class Target:
    path: str  # the module, relative to the repository
    functions: tuple[str, ...]  # definitions whose mutants run ("<module>" = module-level constants)
    suite: tuple[str, ...]  # the fast tests that specify it


# cheapest first: with -x a killed mutant stops at the first failing test
# (tests/admission/test_redteam_findings.py runs stand-in operators in child processes whose interpreter fingerprint
# takes in the shim's folders: it fails in the copy without any mutation, so it is not part of the kill suite)
ADMISSION_SUITE = ("tests/tools/test_rule_decisions.py", "tests/admission/test_admission_properties.py")
RULES_SUITE = ("tests/tools/test_rules_and_state.py", "tests/tools/test_limit_stop.py",
               "tests/tools/test_regression_flags.py", "tests/tools/test_rule_decisions.py")
OPERATIONS_SUITE = ("tests/tools/test_rule_decisions.py",)  # the only fast tests that drive the operations
MODULES: dict[str, Target] = {  # in the order a run takes them
    "stages": Target("tools/operations/stages.py",
                     ("_judge_stage", "_leave_stage", "mark_checklist", "advance_stage"), OPERATIONS_SUITE),
    "r19": Target("tools/operations/base.py", ("_tried", "_failed_code", "_value_key", "norm", "_fold", "ev"),
                  OPERATIONS_SUITE),
    "state": Target("tools/session/state.py",
                    ("derive_state", "judge_order", "kept_samples_of", "last_valid_measurement"), RULES_SUITE),
    "rules": Target("tools/session/rules.py",
                    ("judge_measurement", "_rel_se_pct", "next_stage", "stage_exit_reason", "<module>"), RULES_SUITE),
    "gates": Target("tools/session/gates.py",
                    ("check", "round_phase", "has_pass", "last_precision", "time_limit_exceeded", "global_stop_reason"),
                    RULES_SUITE),
    "admission": Target("tools/code/admission.py",
                        ("admit", "_pure", "_check_bytes", "_legal", "_delta", "_duplicate_keys", "_differences",
                         "_statements", "_shell"), ADMISSION_SUITE),
}

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


def ensure_cosmic_ray() -> None:
    if importlib.util.find_spec("cosmic_ray") is None:
        print(f"installing {COSMIC_RAY} into {sys.executable} …", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", COSMIC_RAY], check=True)


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


def suite_command(t: Target) -> str:
    return f"{sys.executable} -m pytest -x -q -p no:cacheprovider -m 'not sim' {' '.join(t.suite)}"


def baseline(copy: Path, t: Target, env: dict[str, str]) -> None:
    """The kill suite must pass on the unmutated copy (else every mutant would look killed), importing the copy."""
    probe = subprocess.run([sys.executable, "-c", "import pypto_tune.tools, sys; print(pypto_tune.tools.__file__)"],
                           cwd=copy, env=env, capture_output=True, text=True, check=True)
    if not probe.stdout.strip().startswith(str(copy)):
        raise SystemExit(f"the copy is not what the tests import: {probe.stdout.strip()}")
    run = subprocess.run(suite_command(t), shell=True, cwd=copy, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"the kill suite of {t.path} fails without any mutation:\n{run.stdout[-2000:]}")


def config(copy: Path, t: Target, timeout: float) -> Path:
    cmd = suite_command(t)
    cfg = copy / f"cr-{Path(t.path).stem}.toml"
    cfg.write_text(f"""[cosmic-ray]
module-path = "{t.path}"
timeout = {timeout}
excluded-modules = []
test-command = "{cmd}"

[cosmic-ray.distributor]
name = "local"
""")
    return cfg


def select(db: Path, t: Target) -> tuple[int, list[dict]]:
    """Skip every mutant outside the target's functions or operators; return (kept count, kept mutants)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    kept: list[dict] = []
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        for item in list(work_db.pending_work_items):
            m = item.mutations[0]
            name = m.definition_name or "<module>"
            if name in t.functions and kept_operator(m.operator_name):
                kept.append({"job": item.job_id, "line": m.start_pos[0], "operator": m.operator_name,
                             "function": name})
            else:
                work_db.set_result(item.job_id, WorkResult(output="outside the rule decisions",
                                                           worker_outcome=WorkerOutcome.SKIPPED))
    return len(kept), kept


def results(db: Path, t: Target, copy: Path) -> dict:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    lines = (copy / t.path).read_text().splitlines()
    out = {"module": t.path, "mutants": 0, "killed": 0, "survived": [], "timeouts": 0, "incompetent": 0}
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        for item, result in work_db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            out["mutants"] += 1
            m = item.mutations[0]
            if result.test_outcome == TestOutcome.KILLED:
                out["killed"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                line = m.start_pos[0]
                out["survived"].append({"line": line, "operator": m.operator_name.split("/", 1)[-1],
                                        "function": m.definition_name or "<module>",
                                        "code": lines[line - 1].strip() if 0 < line <= len(lines) else ""})
            elif result.worker_outcome == WorkerOutcome.ABNORMAL:
                out["timeouts"] += 1
            else:
                out["incompetent"] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(MODULES), help="module key (repeatable)")
    ap.add_argument("--functions", help="comma-separated: only these of the module's functions (a targeted run)")
    ap.add_argument("--list", action="store_true", help="list the mutants that would run and stop")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()
    ensure_cosmic_ray()
    keys = args.only or list(MODULES)
    report = []
    with tempfile.TemporaryDirectory(prefix="pypto-tune-mutation-") as tmp:
        copy = Path(tmp) / "tree"
        shim = private_copy(copy)
        env = dict(os.environ, PYTHONPATH=str(shim), PYTHONDONTWRITEBYTECODE="1")
        for key in keys:
            t = MODULES[key]
            if args.functions:
                wanted = tuple(f for f in t.functions if f in args.functions.split(","))
                t = Target(t.path, wanted, t.suite)
            cfg, db = config(copy, t, args.timeout), copy / f"cr-{key}.sqlite"
            subprocess.run([sys.executable, "-m", "cosmic_ray.cli", "init", str(cfg), str(db)], cwd=copy, env=env,
                           check=True, stdout=subprocess.DEVNULL)
            n, mutants = select(db, t)
            print(f"{key}: {n} mutants in {', '.join(t.functions)} of {t.path}; kill suite: {' '.join(t.suite)}",
                  flush=True)
            if args.list:
                for m in mutants:
                    print(f"  {t.path}:{m['line']} {m['function']} {m['operator']}")
                continue
            t0 = time.monotonic()
            baseline(copy, t, env)
            subprocess.run([sys.executable, "-m", "cosmic_ray.cli", "exec", str(cfg), str(db)], cwd=copy, env=env,
                           check=True)
            r = results(db, t, copy)
            r["seconds"] = round(time.monotonic() - t0, 1)
            report.append(r)
            print(f"{key}: {r['mutants']} mutants, {r['killed']} killed, {len(r['survived'])} survived, "
                  f"{r['timeouts']} timed out, {r['incompetent']} incompetent, {r['seconds']} s", flush=True)
            for s in r["survived"]:
                print(f"  SURVIVED {t.path}:{s['line']} ({s['function']}) {s['operator']}: {s['code']}", flush=True)
            if args.json:  # after each module: a long run that is stopped keeps what it measured
                args.json.write_text(json.dumps(report, indent=2))
    total = sum(r["mutants"] for r in report)
    alive = sum(len(r["survived"]) for r in report)
    if report:
        print(f"total: {total} mutants, {alive} survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
