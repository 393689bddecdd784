"""The ranking's priors: the knowledge store — hand-written rules (its seed) and measured observations.

A prior is what other kernels taught: it orders the first trials of a session that has measured nothing yet, and it
is always shown as a prior — never as evidence about the operator being tuned. Two parts, read through one path
(:func:`load_priors`):

* the **seed** — ``priors.json`` (package data): rules with a weight and the measurements behind them, written by
  hand from the project's grids. ``holdout`` drops the rules whose only support is one operator, so an offline
  replay on that operator does not grade the search with its own answers;
* the **observations** of the configured knowledge store (``tools/knowledge/``: every ledger it was given, distilled
  to one-knob moves with their situation and measured gain), used by :meth:`Priors.experience`. A store is used only
  when configured — ``configure_knowledge(path)`` (``serve --knowledge``, ``campaign --knowledge``) or
  ``PYPTO_TUNE_KNOWLEDGE`` — so without one the ranking is the seed's alone, reproducibly.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr
from pypto_tune.tools.knowledge.store import seed


class PriorEvidence(BaseModel):
    operator: str
    source: str
    measured: str


class PriorRule(BaseModel):
    id: str
    applies_to: str = "any"
    claim: str
    weight: float
    evidence: list[PriorEvidence] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict, description="rule parameters (cap_bytes, target, values...)")

    def cite(self) -> dict[str, Any]:
        """How a candidate's evidence shows this rule: clearly a prior, with where its numbers come from."""
        return {"rule": self.id, "kind": "prior (other kernels' measurements, not this operator's)",
                "claim": self.claim, "supported_by": [f"{e.operator}: {e.measured} ({e.source})"
                                                      for e in self.evidence]}


@dataclass
class Experience:
    """One term the knowledge store adds to a candidate's score (the ranker wraps it as a ``knowledge`` term)."""

    name: str
    score: float
    text: str
    evidence: dict[str, Any]


class Priors(BaseModel):
    version: str = ""
    vector_cores: int = 48
    cube_cores: int = 24
    rules: dict[str, PriorRule] = Field(default_factory=dict)
    knowledge: list[Any] = Field(default_factory=list, exclude=True,
                                 description="observations of the knowledge store (tools/knowledge/store.Observation)")
    knowledge_source: str = Field("", description="where the observations came from")
    _calibrations: dict[str, Any] = PrivateAttr(default_factory=dict)

    def experience(self, knob: Any, value: Any, base: list[dict[str, Any]], after: list[dict[str, Any]] | None,
                   stage: str, model_score: float, reached: dict[str, Any] | None = None,
                   with_model: bool = True) -> list[Experience]:
        """What the store's observations say about changing ``knob`` (a patching ``Knob``) to ``value``: at most
        one term, moving the score from ``model_score`` (the model's and the seed rules' prediction) toward the
        measured outcome of similar changes (tools/knowledge/match.py). ``base`` / ``after``: the shape model's
        features of every kernel before and with the change (``after`` None for options); ``reached``: the
        kernel the knob reaches; ``stage``: frontend / swimlane / incore; ``with_model``: the model family ranks
        too (the term corrects it), else the store ranks alone. Empty without observations."""
        if not self.knowledge:
            return []
        from pypto_tune.tools.knowledge import match, situation

        cls = situation.change_class(knob.kind, knob.name, knob.context.get("consumers"))
        pred = self._predict(cls, base, after, stage, reached, knob.value, value)
        cal = self._calibration(cls) if with_model and cls != "other" else match.Calibration()
        score = match.experience_score(pred, model_score, with_model=with_model, scale=cal.scale)
        if pred is None:
            if not score:
                return []
            text, evidence = match.describe_calibration(cal, cls, model_score)
            evidence["store"] = self.knowledge_source
            return [Experience("calibration", score, text, evidence)]
        text, evidence = match.describe(pred, model_score, score, with_model=with_model, cal=cal)
        evidence["store"] = self.knowledge_source
        return [Experience("similar-changes", score, text, evidence)]

    def measured_score(self, change_class: str, base: list[dict[str, Any]], after: list[dict[str, Any]] | None,
                       stage: str) -> float:
        """What the store alone predicts for a change the shape model shows as ``base`` → ``after`` (features of
        every kernel), as one score: the confidence-weighted mean gain of similar changes, failures pulling toward
        ``FAIL_SCORE``; 0 where nothing similar was measured. The linked-pair planning (``search/linked.py``) scores
        joint points with it when the store ranks without the model: a point no single knob reaches has no
        candidate of its own to ask the store about."""
        if not self.knowledge or after is None or change_class == "other":
            return 0.0
        from pypto_tune.tools.knowledge import match

        return match.experience_score(self._predict(change_class, base, after, stage), 0.0, with_model=False)

    def _predict(self, change_class: str, base: list[dict[str, Any]], after: list[dict[str, Any]] | None,
                 stage: str, reached: dict[str, Any] | None = None, before_value: Any = None,
                 after_value: Any = None) -> Any:
        """The store's prediction (``match.Prediction`` or None) for a change of ``change_class`` the shape model
        shows as ``base`` → ``after``: the one path from features to similar observations, for a candidate and for
        a linked pair's step alike."""
        from pypto_tune.tools.knowledge import match, situation

        fb, fa = situation.changed_kernel(base, after, reached)
        sit = situation.describe(change_class, fb, fa, before_value, after_value)
        return match.predict(self.knowledge, change_class=change_class, kernel_kind=situation.kernel_kind(fb),
                             group=stage, situation=sit)

    def _calibration(self, change_class: str) -> Any:
        """The store's calibration of the model for one class of change, computed once per priors object."""
        from pypto_tune.tools.knowledge import match

        if change_class not in self._calibrations:
            self._calibrations[change_class] = match.calibrate(self.knowledge, change_class)
        return self._calibrations[change_class]

    def weight(self, rule_id: str) -> float:
        """The rule's weight, 0 when the rule is absent (held out): its term simply drops out of the score."""
        r = self.rules.get(rule_id)
        return r.weight if r is not None else 0.0

    def param(self, rule_id: str, key: str, default: Any = None) -> Any:
        r = self.rules.get(rule_id)
        return r.extra.get(key, default) if r is not None else default

    def has(self, rule_id: str) -> bool:
        return rule_id in self.rules


_KNOWN = {"id", "applies_to", "claim", "weight", "evidence", "quantity"}


def parse_priors(data: dict[str, Any], *, holdout: str | None = None) -> Priors:
    """Priors from their JSON form. ``holdout``: drop rules supported only by that operator's measurements."""
    rules: dict[str, PriorRule] = {}
    for raw in data.get("rules", []):
        ev = [PriorEvidence(**e) for e in raw.get("evidence", [])]
        if holdout is not None:
            ev = [e for e in ev if e.operator != holdout]
            if not ev:
                continue
        rules[raw["id"]] = PriorRule(id=raw["id"], applies_to=raw.get("applies_to", "any"), claim=raw["claim"],
                                     weight=float(raw["weight"]), evidence=ev,
                                     extra={k: v for k, v in raw.items() if k not in _KNOWN})
    platform = data.get("platform", {})
    return Priors(version=str(data.get("version", "")), vector_cores=int(platform.get("vector_cores", 48)),
                  cube_cores=int(platform.get("cube_cores", 24)), rules=rules)


def seed_data() -> dict[str, Any]:
    """The seed rules as shipped (``priors.json``): the knowledge store's seed, read there."""
    return seed()


_store_lock = threading.Lock()
_store: tuple[str, list[Any]] | None = None  # (path, observations) of the configured store
_configured = False


def configure_knowledge(path: Path | str | None) -> int:
    """Use the knowledge store at ``path`` for every later :func:`load_priors` of this process (None: none). The
    file is read now, once: a campaign ranks every session with the same snapshot. Returns how many observations it
    holds. A malformed file raises InputError (it names the file and the way out)."""
    global _store, _configured
    with _store_lock:
        _configured = True
        if path is None:
            _store = None
            return 0
        from pypto_tune.tools.knowledge.store import read

        kf = read(Path(path))
        _store = (str(path), list(kf.observations))
        return len(kf.observations)


def _observations() -> tuple[str, list[Any]]:
    """The configured store's observations; on first use, ``PYPTO_TUNE_KNOWLEDGE`` configures it."""
    if not _configured:
        configure_knowledge(os.environ.get("PYPTO_TUNE_KNOWLEDGE") or None)
    return _store if _store is not None else ("", [])


def load_priors(*, holdout: str | None = None, knowledge: Any = None) -> Priors:
    """The priors: the seed rules (cached read; a fresh model each call, so callers may not disturb each other) and
    the observations of the configured knowledge store. ``knowledge``: a ``KnowledgeFile`` to use instead of the
    configured store (the offline benchmark's leave-one-out); ``holdout`` also drops that operator's observations."""
    priors = parse_priors(seed(), holdout=holdout)
    if knowledge is not None:
        source, obs = "given", list(knowledge.observations)
    else:
        source, obs = _observations()
    if holdout is not None:
        obs = [o for o in obs if o.operator != holdout]
    priors.knowledge, priors.knowledge_source = obs, source
    return priors
