"""The hashes a session binds things to, defined once (the session layer and the search both use them).

* ``code_hash``: SHA-256 of the functional sources (runtime-debug additions stripped): what a precision verdict and a
  measurement bind to, since the debug switch changes neither numerics nor timing (domain C).
* ``semantic_hash``: SHA-256 of the syntax trees of the functional sources: what the code *means*, so whitespace,
  comments and the debug switch cannot make a change that already failed look new (issue #10, attack 7).
"""

from __future__ import annotations

import ast
import hashlib

from .edit import functional_sources
from .files import hash_sources
from pypto_tune.tools.code import pysource


def code_hash(sources: dict[str, str]) -> str:
    return hash_sources(functional_sources(sources))


def semantic_hash(sources: dict[str, str]) -> str:
    h = hashlib.sha256()
    for path, text in sorted(functional_sources(sources).items()):
        body = text.removeprefix("\ufeff")
        try:
            dumped = ast.dump(pysource.parse(body))
        except SyntaxError:
            dumped = body
        h.update(f"{path}\0{dumped}\0".encode())
    return h.hexdigest()
