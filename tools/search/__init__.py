"""The candidate search of issue #12: concrete, legal, ranked one-knob changes for the current stage.

Pure library (no MCP, no session or ledger): the session's ``propose_candidates`` / ``run_candidates`` call it with
the kept sources, the stage, the latest analysis and the history of tried changes. See :mod:`.propose` for the
pipeline, :mod:`.learn` for the session model that ranks, :mod:`.rank` and :mod:`.history` for its prior's signals, ``priors.json`` for the priors and the
measurements behind them, and ``benchmarks/search_offline.py`` for the offline evaluation that earns the ranking its
place.
"""

from pypto_tune.tools.search.cache import AdmissionCache
from pypto_tune.tools.search.hashing import code_hash, semantic_hash
from pypto_tune.tools.search.models import (
    AlgorithmNote,
    Candidate,
    Proposal,
    TriedChange,
    norm_value,
)
from pypto_tune.tools.search.priors import Priors, load_priors
from pypto_tune.tools.search.propose import edited_sources, find, propose, remember_refusal, search

__all__ = [
    "AdmissionCache", "AlgorithmNote", "Candidate", "Priors", "Proposal", "TriedChange", "code_hash",
    "edited_sources", "find", "load_priors", "norm_value", "propose", "remember_refusal", "search",
    "semantic_hash",
]
