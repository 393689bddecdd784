"""The ranking's priors (``priors.json``, package data): rules with a weight and the measurements behind them.

A prior is what other kernels taught: it orders the first trials of a session that has measured nothing yet, and it
is always shown as a prior — never as evidence about the operator being tuned. ``holdout`` drops the rules whose only
support is one operator, so an offline replay on that operator does not grade the search with its own answers.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, Field
from pypto_tune.tools.errors import ArtifactError


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


class Priors(BaseModel):
    version: str = ""
    vector_cores: int = 48
    cube_cores: int = 24
    rules: dict[str, PriorRule] = Field(default_factory=dict)

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


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    try:
        text = resources.files("pypto_tune.tools.search").joinpath("priors.json").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ArtifactError(f"the search priors are not installed ({exc})",
                            path="pypto_tune/tools/search/priors.json",
                            hint="reinstall pypto-tune; priors.json is package data") from None
    return json.loads(text)


def load_priors(*, holdout: str | None = None) -> Priors:
    """The shipped priors (cached read; a fresh model each call, so callers may not disturb each other)."""
    return parse_priors(_raw(), holdout=holdout)
