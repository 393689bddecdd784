"""Typed inputs and results of the candidate search (issue #12).

Everything is JSON-able (``model_dump(mode="json")``): the lead's ``propose_candidates`` hands the result to the
agent as is, and ``run_candidates`` accepts a candidate back (or its id). Int-keyed dict values
(``{-2: 1, -1: 2}``) become string-keyed in JSON; :func:`norm_value` turns numeric string keys back into ints, the
same way the patching validators do (domain C S-5: pypto 0.2.0 rejects string keys).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

StageGroup = Literal["frontend", "swimlane", "incore"]
#: not-chosen: a gain over the kept state that another trial of the same batch beat (it was not kept)
Outcome = Literal["kept", "not-chosen", "regression", "no-gain", "failed"]
CATALOG_PREFIX = {"frontend": "F-", "swimlane": "S-", "incore": "I-"}


def norm_value(value: Any) -> Any:
    """A knob value in one canonical Python form: tuples → lists, numeric string dict keys → ints.

    Values come from three places (the source via ``extract_knobs``, the ledger via JSON, an agent's call); without
    this, ``{"-1": 2}`` from the ledger and ``{-1: 2}`` from the source would look like two different values and a
    change that already failed could be proposed again.
    """
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        return [norm_value(v) for v in value]
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = k
            if isinstance(k, str):
                try:
                    key = int(k.strip())
                except ValueError:
                    key = k
            out[key] = norm_value(v)
        return out
    return value


class TriedChange(BaseModel):
    """One change the session already tried (a round, or one trial of ``run_candidates``).

    The search never proposes the same knob and value again from the same kept state, nor code whose semantic hash
    was tried and not kept (rule ``no-retry``, R19), and it reads the direction and size of every measured effect.
    """

    knob_id: str = Field(description="full knob id (extract_knobs) of the one knob the change touched")
    value: Any = Field(description="the knob's value after the change")
    before_value: Any = Field(None, description="the knob's value before the change (None: the knob was absent)")
    from_kept_hash: str = Field("", description="code hash of the kept state the change was tried from "
                                "(hash_sources(functional_sources(kept)), the hash the ledger records)")
    outcome: Outcome
    failure_type: str | None = Field(None, description="for outcome 'failed': compile-failure, runtime-error, "
                                     "precision-failure, timeout")
    before_us: float | None = Field(None, description="operator time of the kept state it was compared with")
    after_us: float | None = Field(None, description="operator time measured for the change (None when it failed)")
    semantic_hash: str | None = Field(None, description="semantic hash of the code after the change (syntax trees of "
                                      "the functional sources; see tools/search/hashing.py)")
    round: int | None = None
    stage: str | None = Field(None, description="stage name the change was tried in (FRONTEND, SWIMLANE_1, ...)")
    catalog_id: str | None = None
    pair_with: "PairPart | None" = Field(None, description="a linked pair's round (rule linked-pair): the pair's "
                                         "second knob; knob_id/value are its first (the block). The one-knob "
                                         "ranking reads only changes without it")

    @field_validator("value", "before_value", mode="before")
    @classmethod
    def _norm(cls, v: Any) -> Any:
        return norm_value(v)

    @property
    def delta_pct(self) -> float | None:
        if self.before_us and self.after_us is not None:
            return (self.after_us - self.before_us) / self.before_us * 100.0
        return None


class PairPart(BaseModel):
    """The second knob of a linked pair (rule ``linked-pair``): the tile the pair's block caps."""

    knob: str = Field(description="full knob id")
    value: Any = Field(description="its new value")
    before: Any = Field(None, description="its value in the kept state")
    knob_name: str = ""

    @field_validator("value", "before", mode="before")
    @classmethod
    def _norm(cls, v: Any) -> Any:
        return norm_value(v)


class Candidate(BaseModel):
    """One proposed change: one knob away from the kept state, admitted by the server's own admission path — or,
    kind ``pair``, two knobs the kept state's run links, admitted as one change point (rule ``linked-pair``)."""

    id: str = Field(description="stable id: the same knob, value and kept state always give the same id; "
                    "run_candidates accepts it in place of the whole object")
    knob: str = Field(description="full knob id (pass it as apply_tuning_patch's knob)")
    value: Any = Field(description="the new value (JSON: int dict keys arrive as strings and are read back as ints)")
    catalog_id: str = Field(description="catalogue id of the current stage that this change serves (cite it)")
    why: str = Field(description="why this candidate is ranked where it is: the signals in order of weight")
    evidence: dict[str, Any] = Field(default_factory=dict, description="the numbers behind 'why': 'analysis' (from "
                                     "this operator's latest analysis), 'history' (this session's measurements), "
                                     "'model' (static shape reasoning on this operator's sources), 'prior' (labelled "
                                     "priors: other kernels' measurements, never evidence about this operator)")
    knob_name: str = ""
    before: Any = Field(None, description="the knob's current (kept) value")
    rank: int = Field(0, description="1 = try first")
    score: float = Field(0.0, description="ranking score (predicted log2 speed-up units; only the order matters)")
    stage: StageGroup = "frontend"
    diff: str = Field("", description="unified diff of the edit against the kept state")
    admitted: bool = Field(True, description="False: past propose_candidates' answer budget it was checked by the "
                           "legality functions only; run_candidates admits it before running it")
    kind: Literal["knob", "pair"] = Field("knob", description="'pair': knob/value are a linked pair's block and "
                                          "pair_with its tile, changed together in one round (rule linked-pair)")
    pair_with: PairPart | None = Field(None, description="kind 'pair': the second knob and its value")

    @field_validator("value", "before", mode="before")
    @classmethod
    def _norm(cls, v: Any) -> Any:
        return norm_value(v)


class AlgorithmNote(BaseModel):
    """A suggestion of the analysis that no knob of this operator can carry out: it needs a structural change,
    which only the ALGORITHM stage accepts (R23). Reported beside the candidates, never as one."""

    catalog_id: str
    title: str = ""
    reason: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)


class Proposal(BaseModel):
    """What :func:`tools.search.search` found for the current stage."""

    stage: StageGroup
    kept_hash: str
    candidates: list[Candidate] = Field(default_factory=list)
    needs_algorithm_stage: list[AlgorithmNote] = Field(default_factory=list)
    exhausted: bool = Field(False, description="True when no legal, untried candidate is left for this stage "
                            "(within the knobs asked for)")
    why_none: str = Field("", description="when one knob was asked for and got no candidate: why (no value to "
                          "generate and which knob carries it, not this stage, every value measured, refused)")
    considered: int = Field(0, description="candidate values generated for the stage's knobs")
    excluded: dict[str, int] = Field(default_factory=dict, description="how many were dropped and why: 'tried' "
                                     "(same knob+value from this kept state), 'failed-code' (same code failed or "
                                     "did not pay off), 'failed-larger' (at or past a value that did not compile from "
                                     "this kept state), 'illegal' (refused by the server's admission), 'no-change', "
                                     "'known' (its effective configuration was measured: see known_outcomes), "
                                     "'no-effect-here' (its knob measured no effect twice from this kept state), "
                                     "'twin' (not dropped: runs the same configuration as a better-ranked candidate, "
                                     "so it is listed after every distinct one)")
    refusals: list[str] = Field(default_factory=list, description="first few admission refusals, for the record")
    notes: list[str] = Field(default_factory=list)
    ranking_flat: bool = Field(False, description="the first candidates score the same (within FLAT_SCORE): nothing "
                               "measured or modelled tells them apart, so their order is the catalogue's, not a "
                               "prediction")
    dead_sites: list[str] = Field(default_factory=list, description="knob ids whose sites the test never ran: never "
                                  "proposed")
    known_outcomes: list[dict[str, Any]] = Field(default_factory=list, description="candidates not proposed because "
                                                 "this session already measured their effective configuration (a tile "
                                                 "clamped to the tensor or view it tiles runs as the clamped tile): "
                                                 "knob, value, same_as_round, operator_time_us, same_as")


TriedChange.model_rebuild()
