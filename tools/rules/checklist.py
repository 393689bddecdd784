"""When a stage may be left early: every checklist item tried, or marked not-applicable with a specific reason.

Rule ``stage-exit``.
"""

from __future__ import annotations

from pypto_tune.tools.errors import GateRefusal

_NEXT = ["apply_tuning_patch", "propose_candidates", "mark_checklist", "get_status"]


def not_applicable_refused(catalog_id: str, problem: str) -> GateRefusal:
    return GateRefusal("stage-exit", f"{catalog_id} cannot be marked not-applicable: {problem}", allowed=_NEXT,
                       hint="try the item (a round citing it marks it), or give a specific reason")


def items_untried(stage: str, untried: list[str]) -> GateRefusal:
    return GateRefusal("stage-exit", f"{stage} cannot be left early: checklist items untried: {', '.join(untried)}",
                       allowed=_NEXT,
                       hint="try them, or mark_checklist(catalog_id, 'not-applicable', a specific reason) for each")
