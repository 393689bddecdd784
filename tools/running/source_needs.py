"""What a test's own files need from the interpreter, read from their text before anything runs: the modules they
import at module level, and the pypto option keys they set.

The environment check (``environment.py``) asks the recorded interpreter about both before the session fingerprints
it, because both failures otherwise surface late and obscurely: a missing ``pytest`` (PyPTO's own tests import it)
fails the baseline, and installing it afterwards voids the session's runs (the interpreter's files changed); an option
key the installed pypto does not know (``runtime_options={"max_workspace_kb": …}``) fails inside the run as
``IndexError: map::at`` from ``SetScope``, naming neither the key nor the file.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from pypto_tune.tools.code import pysource

#: keyword arguments that carry a dict of pypto options (the jit decorator, ``pypto.set_options``), and the prefix
#: pypto's own options tree (``pypto.config.get_options_tree()``) lists their keys under
OPTION_KINDS = {"runtime_options": "runtime", "pass_options": "pass", "debug_options": "debug",
                "host_options": "host", "codegen_options": "codegen", "verify_options": "verify",
                "operation_options": "operation"}


@dataclass(frozen=True)
class OptionKey:
    kind: str  # runtime_options, pass_options, …
    key: str
    where: str  # file:line

    @property
    def tree_name(self) -> str:
        return f"{OPTION_KINDS[self.kind]}.{self.key}"


def files_of_test(workspace: Path, test_command: list[str], operator_files: list[str]) -> list[str]:
    """The workspace's Python files the test runs directly: the operator files and every ``*.py`` argument of the
    command (``file.py::test_fn`` selectors included), relative to the workspace, each once."""
    out: list[str] = []
    for arg in [*operator_files, *test_command[1:]]:
        rel = arg.split("::", 1)[0]
        if not rel.endswith(".py"):
            continue
        path = (workspace / rel).resolve()
        try:
            rel = path.relative_to(workspace.resolve()).as_posix()
        except ValueError:
            continue
        if path.is_file() and rel not in out:
            out.append(rel)
    return out


def _parse(workspace: Path, rel: str) -> ast.Module | None:
    try:
        return pysource.parse((workspace / rel).read_bytes(), filename=rel)  # type: ignore[return-value]
    except (OSError, SyntaxError, ValueError):
        return None  # the byte-compile check names it


def module_imports(workspace: Path, files: list[str]) -> dict[str, str]:
    """Top-level names of the modules the files import **unconditionally** (statements of the module body itself),
    each with the first ``file:line`` importing it. Imports inside a function, an ``if`` or a ``try`` are left out:
    ``import torch_npu`` in the NPU branch of a test is not needed in SIM. Relative imports, ``__future__`` and the
    workspace's own modules (``helper.py`` or ``helper/`` beside the file) are left out too."""
    found: dict[str, str] = {}
    for rel in files:
        tree = _parse(workspace, rel)
        if tree is None:
            continue
        here = (workspace / rel).parent
        for node in tree.body:
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".", 1)[0]
                if top == "__future__" or top in sys.builtin_module_names:
                    continue
                if (here / f"{top}.py").is_file() or (here / top).is_dir() or (workspace / f"{top}.py").is_file():
                    continue
                found.setdefault(top, f"{rel}:{node.lineno}")
    return found


def option_keys(workspace: Path, files: list[str]) -> list[OptionKey]:
    """Every literal key of a pypto option dict the files pass by keyword — ``runtime_options={"k": v}`` or
    ``runtime_options=dict(k=v)`` in the jit decorator, ``pypto.set_options(…)`` or anywhere else."""
    keys: list[OptionKey] = []
    for rel in files:
        tree = _parse(workspace, rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg not in OPTION_KINDS:
                    continue
                value = kw.value
                if isinstance(value, ast.Dict):
                    names = [k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
                    names = [k.arg for k in value.keywords if k.arg]
                else:
                    continue
                keys += [OptionKey(kw.arg, name, f"{rel}:{kw.value.lineno}") for name in names]
    return keys


__all__ = ["OPTION_KINDS", "OptionKey", "module_imports", "option_keys", "files_of_test"]
