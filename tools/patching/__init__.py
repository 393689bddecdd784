"""Knob-aware patching: see every tuning knob of a PyPTO operator, change exactly one, undo it byte for byte.

Pure text → text functions over ``sources`` (relative path -> exact file text) plus a thin file layer
(:mod:`.files`). See domain.md C for the knobs and their legal values, D.2 R9 (one change per round), R22.

Session-layer entry points: ``extract_knobs`` (list_knobs), ``plan_knob_edit`` / ``plan_diff_edit`` +
``write_sources`` (apply_tuning_patch; the one-change gate reads ``EditPlan.changes``), ``set_runtime_debug``
(enable_runtime_debug), ``make_snapshot`` / ``restore_snapshot`` (revert_patch), ``hash_files`` /
``verify_unchanged`` (drift), ``functional_sources`` + ``hash_sources`` (the hash a precision verdict is bound to).
"""

from __future__ import annotations

from .diffs import apply_diff, parse_diff, unified_diff
from .edit import (
    functional_sources, knob_delta, plan_diff_edit, plan_knob_edit, set_runtime_debug, violations,
)
from .extract import extract_knobs
from .files import (
    hash_files, hash_sources, make_snapshot, read_sources, restore_snapshot, take_snapshot, verify_unchanged,
    write_sources,
)
from .legality import check_knob_value, validate
from .models import EXPR_KEY, EditPlan, Knob, Snapshot

__all__ = [
    "EXPR_KEY", "EditPlan", "Knob", "Snapshot",
    "apply_diff", "check_knob_value", "extract_knobs", "functional_sources", "hash_files", "hash_sources",
    "knob_delta", "make_snapshot", "parse_diff", "plan_diff_edit", "plan_knob_edit", "read_sources", "restore_snapshot", "set_runtime_debug",
    "take_snapshot", "unified_diff", "validate", "verify_unchanged", "violations", "write_sources",
]
