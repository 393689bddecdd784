"""Knob-aware patching: see every tuning knob of a PyPTO operator, change exactly one, undo it byte for byte.

Pure text → text functions over ``sources`` (relative path -> exact file text) plus a thin file layer
(:mod:`.files`). See domain.md C for the knobs and their legal values, D.2 R9 (one change per round), R22.

Session-layer entry points: ``extract_knobs`` (list_knobs), ``plan_knob_edit`` / ``plan_diff_edit`` +
``write_sources`` (apply_tuning_patch; the one-change gate reads ``EditPlan.changes``), ``set_runtime_debug``
(enable_runtime_debug), ``make_snapshot`` / ``restore_snapshot`` (revert_patch), ``hash_files`` /
``verify_unchanged`` (drift), ``functional_sources`` + ``hash_sources`` (the hash a precision verdict is bound to).

Exports load lazily: ``tools/code/codestate.py`` imports :mod:`.nofollow` (and with it this package) in every process
that materialises a run, among them the Ray worker's per-run helper (``executors/worker_run.py``), which must not pay
for libcst and the knob model on each run (measured: ~0.65 s of its ~0.9 s start-up).
"""

from __future__ import annotations

from pypto_tune.tools.lazy_exports import module_getattr

_EXPORTS = {
    **dict.fromkeys(("apply_diff", "parse_diff", "unified_diff"), "diffs"),
    **dict.fromkeys(("functional_sources", "knob_delta", "plan_diff_edit", "plan_knob_edit", "set_runtime_debug",
                     "violations"), "edit"),
    "extract_knobs": "extract",
    **dict.fromkeys(("hash_files", "hash_sources", "make_snapshot", "read_sources", "restore_snapshot",
                     "take_snapshot", "verify_unchanged", "write_sources"), "files"),
    **dict.fromkeys(("check_knob_value", "validate"), "legality"),
    **dict.fromkeys(("EXPR_KEY", "EditPlan", "Knob", "Snapshot"), "models"),
}
__all__ = sorted(_EXPORTS)

__getattr__ = module_getattr(__name__, _EXPORTS)
