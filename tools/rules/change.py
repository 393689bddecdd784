"""What one change may be: the refusals of a change that is not one legal knob change of the current stage.

The rules ``one-change``, ``legality``, ``live-site``, ``catalog-stage``, ``algorithm``, ``correction-limit`` and
``no-retry``. The admission (``tools/code/admission.py``) finds what a change is; these say how it is refused. Only
``tools/errors`` is imported: the admission sits below the session layer and must be able to call them.
"""

from __future__ import annotations

from pypto_tune.tools.errors import GateRefusal

#: what an agent can do after its change was refused by the admission
ADMISSION_NEXT = ["apply_tuning_patch", "list_knobs", "get_status"]


def one_change(message: str, hint: str, allowed: list[str] | None = None) -> GateRefusal:
    """The edit is not exactly one knob change (or a linked pair) of the operator's own files."""
    return GateRefusal("one-change", message, allowed=allowed or ADMISSION_NEXT, hint=hint)


def legality(message: str, hint: str, allowed: list[str] | None = None) -> GateRefusal:
    """A value breaks its knob's or a tiling site's legality rule."""
    return GateRefusal("legality", message, allowed=allowed or ADMISSION_NEXT, hint=hint)


def live_site(message: str, hint: str, allowed: list[str] | None = None) -> GateRefusal:
    """The knob is dead for the test: changing it changes nothing measured."""
    return GateRefusal("live-site", message, allowed=allowed or ADMISSION_NEXT, hint=hint)


def catalog_stage(message: str, hint: str = "", allowed: list[str] | None = None) -> GateRefusal:
    """The change (or checklist item) does not belong to a catalogue item of the current stage (R10)."""
    return GateRefusal("catalog-stage", message, allowed=allowed or ADMISSION_NEXT, hint=hint)


def algorithm(message: str, hint: str = "", allowed: list[str] | None = None) -> GateRefusal:
    """Algorithm-level changes only in the ALGORITHM stage, and only there (R23)."""
    return GateRefusal("algorithm", message, allowed=allowed or ADMISSION_NEXT, hint=hint)


def correction_limit(message: str, hint: str, allowed: list[str]) -> GateRefusal:
    """A round gets one correction, of its own knob (R11)."""
    return GateRefusal("correction-limit", message, allowed=allowed, hint=hint)


def correction_of_other_knob(own: frozenset[str], ids: str) -> GateRefusal:
    return correction_limit(f"a correction must adjust the round's own knob {' + '.join(sorted(own))}, not {ids}",
                            "correct the same knob, or roll the round back",
                            ["apply_tuning_patch", "record_round", "revert_patch"])


def serves_no_item(ids: str) -> GateRefusal:
    return catalog_stage(f"knob {ids} serves no catalogue item: only a knob of a catalogue item of the current stage "
                         "is tuned (R10)", "list_knobs shows each knob's catalogue ids",
                         ["apply_tuning_patch", "list_knobs"])


def serves_other_item(ids: str, served: list[str], catalog_id: str) -> GateRefusal:
    return catalog_stage(f"knob {ids} serves {', '.join(served)}, not {catalog_id}",
                         "cite the catalogue id the change belongs to (list_knobs shows each knob's ids)",
                         ["apply_tuning_patch", "list_knobs"])


def adopted_edit_outside_stage(catalog_ids: list[str], stage: str) -> GateRefusal:
    return catalog_stage(f"the edited knob serves {', '.join(catalog_ids) or 'no catalogue item'}, none of stage "
                         f"{stage}", "revert_patch, then change a knob of the current stage",
                         ["revert_patch", "get_status"])


def already_tried(why: str) -> GateRefusal:
    """R19: a change judged and not kept is never tried again."""
    return GateRefusal("no-retry", why, allowed=["apply_tuning_patch", "propose_candidates", "list_knobs",
                                                 "get_status"],
                       hint="a change judged and not kept is never tried again (R19: failed, no gain, slower, or a "
                       "gain another candidate of its batch beat or tied); try another value or knob — "
                       "propose_candidates lists untried legal ones")


def illegal_value(message: str, hint: str) -> GateRefusal:
    """A knob value the planner refused (``KnobValueError``) before any admission."""
    return legality(message, hint or "choose a value inside the legal range (list_knobs)",
                    ["apply_tuning_patch", "list_knobs", "propose_candidates"])
