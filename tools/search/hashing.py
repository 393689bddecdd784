"""The two hashes the search compares with the session's history, defined once in ``tools/patching/hashes.py``
(``code_hash``: a kept state as the ledger records it; ``semantic_hash``: what the code means) and shared with the
session layer.
"""

from pypto_tune.tools.patching.hashes import code_hash, semantic_hash

__all__ = ["code_hash", "semantic_hash"]
