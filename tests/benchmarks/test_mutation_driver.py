"""The parts of the mutation run (benchmarks/mutation.py, scripts/mutation.sh) that decide what counts: which mutants
are made (decisions, not message text), which survivors are recorded as equivalent, and how a table row's mutant is
run in place. Pure: the run itself starts processes and is not part of the test command.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


mutation = _load("mutation")
fork = _load("mutation_fork")

SOURCE = '''def refuse(n: int, limit: int) -> str:
    if n > limit:
        return f"{n} is over {limit - 1 + 1} (µs ≤ {limit:.3f})"
    return ""
'''


def test_a_mutation_inside_a_message_is_left_out_and_one_in_the_decision_is_not() -> None:
    spans = mutation.message_spans(SOURCE)
    # cosmic-ray positions: (line, character column); the f-string on line 3 holds "limit - 1 + 1"
    inside = (3, SOURCE.splitlines()[2].index("- 1")), (3, SOURCE.splitlines()[2].index("- 1") + 1)
    assert mutation.in_message(spans, *inside)
    condition = (2, SOURCE.splitlines()[1].index(">")), (2, SOURCE.splitlines()[1].index(">") + 1)
    assert not mutation.in_message(spans, *condition)
    # columns count characters, not UTF-8 bytes: "µ≤" is five bytes in two characters, and the comparison right after
    # the f-string is a decision (counted in bytes, the f-string would seem to reach over it)
    tight = 'pair = (f"µ≤",n>1)\n'
    col = tight.index(">")
    assert not mutation.in_message(mutation.message_spans(tight), (1, col), (1, col + 1))
    assert mutation.in_message(mutation.message_spans(tight), (1, tight.index("µ")), (1, tight.index("µ") + 1))


def test_every_rule_module_is_in_the_rules_run_and_only_decisions_are_mutated() -> None:
    modules = {mutation.MODULES[k].path for k in mutation.RULES_PACKAGE}
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tools" / "rules").glob("*.py")
               if p.name != "__init__.py"}
    assert modules == on_disk
    assert mutation.MODULES["rules/gates"].suite == mutation.RULES_PACKAGE_SUITE  # the gate table's own tests
    assert all(mutation.MODULES[k].decisions_only and mutation.MODULES[k].mutates("any_function")
               for k in mutation.RULES_PACKAGE)
    suites = {f for k in mutation.RULES_PACKAGE for f in mutation.MODULES[k].suite}
    assert all((ROOT / f).is_file() for f in suites)


def test_a_survivor_recorded_as_equivalent_is_reported_apart_and_only_with_a_reason(tmp_path: Path) -> None:
    listed = tmp_path / "eq.toml"
    listed.write_text('[[equivalent]]\nmodule = "tools/rules/m.py"\nfunction = "f"\noperator = "core/AddNot"\n'
                      'code = "if a:"\nmutant = "if not a:"\nwhy = "a is always true here"\n', encoding="utf-8")
    equivalent = mutation.load_equivalent(listed)
    same = {"operator_name": "core/AddNot", "function": "f", "code": "if a:", "mutant": "if not a:"}
    live = {**same, "function": "g"}  # the same change in another function is not covered
    run = {"module": "tools/rules/m.py", "survived": [same, live]}
    used: set[tuple[str, str, str, str, str]] = set()
    mutation.split_equivalent(run, equivalent, used)
    assert run["survived"] == [live]
    assert [s["why"] for s in run["equivalent"]] == ["a is always true here"]
    assert len(used) == 1
    listed.write_text(listed.read_text(encoding="utf-8").replace('"a is always true here"', '" "'), encoding="utf-8")
    with pytest.raises(SystemExit, match="without a reason"):
        mutation.load_equivalent(listed)


def test_each_recorded_equivalent_mutant_still_names_a_line_of_its_module() -> None:
    equivalent = mutation.load_equivalent(mutation.EQUIVALENT)
    assert equivalent, "the allowlist is read"
    for module, _operator, _function, code, _mutant in equivalent:
        lines = {ln.strip() for ln in (ROOT / module).read_text(encoding="utf-8").splitlines()}
        assert code in lines, f"{mutation.EQUIVALENT.name}: {module} no longer has the line {code!r}"


def test_a_table_rows_mutant_runs_in_place_and_every_function_of_the_module_reads_it() -> None:
    module = types.ModuleType("rows")
    module.__file__ = "<rows>"
    original = "ROWS = (lambda n: n > 3,)\n\ndef refused(n):\n    return any(row(n) for row in ROWS)\n"
    exec(compile(original, "<rows>", "exec"), module.__dict__)
    held = module.refused  # a caller that imported the function by name before the mutation
    assert not held(3)
    fork.reexec(module, original.replace("n > 3", "n >= 3"))
    assert held(3) and module.refused(3)
    assert fork.changed_units(original, original.replace("n > 3", "n >= 3")) is None  # not a function body's change
