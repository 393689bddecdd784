"""Every rule in one place: a refusal is built only under ``tools/rules/``, and each rule id by exactly one module.

A reader who wants to know which rules the server enforces, and where, opens ``tools/rules/``; these tests keep that
true. The rule ids are the catalogue's (``tools/rules/tuning_loop.py``, served as ``pypto-tune://rules``); the README's
rules table lists the same ids (``tests/test_contract.py::test_every_rule_id_is_in_the_readme_rules_table``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pypto_tune.tools.rules import tuning_loop

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = ROOT / "tools" / "rules"
CATALOGUE = {r.id for r in tuning_loop.RULES}

#: rule ids of the catalogue that no refusal enforces, and why
NOT_REFUSED = {
    "linked-pair": "an admission outcome: a linked pair is admitted as one change; any other two-knob change is "
                   "refused under one-change",
    "report-debug": "an action: render_report restores the debug options itself and records it",
    "same-work": "a judgement of a measurement: a run that calls other kernels is flagged and its time not compared",
}
#: rule ids refused but missing from the catalogue (and so from the README's rules table), and why
NOT_CATALOGUED = {
    "discarded-run": "record_round refuses to judge a round whose run the server discarded; the catalogue and the "
                     "README table do not list it yet",
}


def _sources(*folders: str, root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in folders for p in (root / folder).rglob("*.py"))


def refusals_built_outside_rules(root: Path = ROOT) -> list[str]:
    """``path:line`` of every ``GateRefusal(`` in tools/ and server/ outside tools/rules/ and the class itself."""
    found = []
    for path in _sources("tools", "server", root=root):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("tools/rules/"):
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "GateRefusal(" in line and not (rel == "tools/errors.py" and line.startswith("class GateRefusal(")):
                found.append(f"{rel}:{no}: {line.strip()}")
    return found


def _builder_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def refused_ids() -> dict[str, set[str]]:
    """Rule id → the modules under tools/rules/ that build a refusal with it.

    A refusal is built by ``GateRefusal(rule, …)``, by a subclass's ``super().__init__(rule, …)`` or by a gate row
    ``gate(rule, …)`` of ``gates.py``; the rule id is always the literal first argument, except inside ``gate``
    itself, which passes its own parameter on.
    """
    where: dict[str, set[str]] = {}
    for path in _sources("tools/rules"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parameter_passers = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "gate"
                             for n in ast.walk(f)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _builder_name(node) in ("GateRefusal", "gate", "__init__")):
                continue
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                where.setdefault(first.value, set()).add(path.name)
            else:
                assert id(node) in parameter_passers, (f"{path.name}:{node.lineno}: a refusal's rule id must be a "
                                                        "literal, so that a reader (and this test) can find it")
    return where


def test_a_refusal_is_built_only_under_tools_rules() -> None:
    assert refusals_built_outside_rules() == []


def test_the_scan_sees_a_refusal_built_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "tools" / "operations").mkdir(parents=True)
    (tmp_path / "tools" / "rules").mkdir()
    (tmp_path / "tools" / "operations" / "x.py").write_text('raise GateRefusal("drift", "no")\n')
    (tmp_path / "tools" / "rules" / "ok.py").write_text('return GateRefusal("drift", "no")\n')
    assert refusals_built_outside_rules(tmp_path) == ['tools/operations/x.py:1: raise GateRefusal("drift", "no")']


def test_each_rule_id_is_refused_by_exactly_one_module() -> None:
    where = refused_ids()
    twice = {rule: sorted(mods) for rule, mods in where.items() if len(mods) > 1}
    assert twice == {}, "a rule id is refused from more than one module: " + str(twice)
    missing = CATALOGUE - set(where) - set(NOT_REFUSED)
    assert missing == set(), "catalogued rule ids no module refuses (add the refusal, or to NOT_REFUSED with why)"
    assert set(where) - CATALOGUE == set(NOT_CATALOGUED), "refused rule ids missing from the catalogue"
    assert not set(NOT_REFUSED) & set(where), "a rule listed as not refused is refused: drop it from NOT_REFUSED"


def test_the_exceptions_are_rule_ids_of_the_catalogue() -> None:
    assert set(NOT_REFUSED) <= CATALOGUE
    assert not set(NOT_CATALOGUED) & CATALOGUE


#: what a decision may import: the refusal, the catalogue, the state it reads (and the runs it discarded), the reading
#: of a run's output (the precision verdict's lines), the locked parser (a knob value spelled as an expression), its
#: sibling rules (and the stdlib's pure helpers); a ledger, a file system, a process or a logger is the caller's business
ALLOWED_IMPORTS = re.compile(r"^(__future__|dataclasses|typing|time|statistics|re|ast|operator|collections\.abc|"
                             r"pydantic)(\..*)?$|"
                             r"^pypto_tune\.tools\.(errors|rules|session\.state|session\.discarded|code\.pysource|"
                             r"analysis|running\.verdict)(\..*)?$")
ACTING_CALLS = {"open", "print", "insert", "transaction", "write_text", "write_bytes", "unlink", "mkdir", "run",
                "Popen", "info", "warning", "debug", "error", "exception"}


def test_a_rule_decides_and_never_acts() -> None:
    """No ledger, file, process or log inside tools/rules/: the caller records and acts."""
    for path in _sources("tools/rules"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # a type named for the reader under ``if TYPE_CHECKING:`` is never imported at run time
        typing_only = {id(n) for b in ast.walk(tree) if isinstance(b, ast.If) and ast.unparse(b.test) == "TYPE_CHECKING"
                       for s in b.body for n in ast.walk(s)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = []
            for name in names:
                assert ALLOWED_IMPORTS.match(name), f"{path.name}:{node.lineno}: imports {name}"
            if isinstance(node, ast.Call):
                called = _builder_name(node)
                assert called not in ACTING_CALLS, f"{path.name}:{node.lineno}: calls {called}"


#: the longest a function deciding a rule may be, decorators and docstring included: one step of a decision reads on
#: one screen, and a rule set in one long body is a table or a list of named steps instead
RULE_FUNCTION_MAX_LINES = 60
#: the modules outside tools/rules/ whose functions decide a rule: the session's state derived from the ledger, and
#: the admission of a change
RULE_MODULES_ELSEWHERE = ("tools/session/state.py", "tools/code/admission.py")


def long_functions(paths: list[Path], root: Path = ROOT, limit: int = RULE_FUNCTION_MAX_LINES) -> list[str]:
    """``path:line: name is N lines`` for every function (nested ones too) in ``paths`` longer than ``limit``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > limit:
                    found.append(f"{path.relative_to(root).as_posix()}:{first}: {node.name} is {length} lines "
                                 f"(at most {limit})")
    return found


def test_no_function_deciding_a_rule_is_longer_than_sixty_lines() -> None:
    paths = [*_sources("tools/rules"), *(ROOT / p for p in RULE_MODULES_ELSEWHERE)]
    assert len(paths) > len(RULE_MODULES_ELSEWHERE)  # the rules folder itself was read
    assert long_functions(paths) == [], "split the decision into named steps, one small function each"


def test_the_length_check_sees_a_long_function_and_its_decorators(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("@staticmethod\ndef f():\n" + "    x = 1\n" * 59 + "\n\ndef g():\n    pass\n")
    assert long_functions([tmp_path / "x.py"], tmp_path) == ["x.py:1: f is 61 lines (at most 60)"]
    assert long_functions([tmp_path / "x.py"], tmp_path, limit=61) == []
