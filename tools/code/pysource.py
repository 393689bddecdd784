"""Parsing Python source into ``ast`` trees, one thread at a time.

CPython 3.11 keeps the depth counter of its AST constructor per interpreter, not per thread. Two threads inside
``ast.parse`` at once (a campaign runs several sessions' admissions and searches in worker threads) can switch in
the middle of building a tree — a garbage collection running a finaliser is enough — and the one that finishes
second raises ``SystemError: AST constructor recursion depth mismatch`` for a file that parses (CPython gh-106905;
it failed an operator of a six-operator campaign here). Every ``ast.parse`` of the server goes through
:func:`parse`, which holds one lock while the tree is built; parsing is fast, so the lock costs nothing measurable.
"""

from __future__ import annotations

import ast
import threading
from typing import Literal

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: Literal["exec", "eval"] = "exec") -> ast.AST:
    """``ast.parse`` under the process-wide lock; a leading byte-order mark is dropped (as the interpreter does)."""
    if isinstance(source, str) and source.startswith("\ufeff"):
        source = source[1:]
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
