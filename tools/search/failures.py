"""Never again at a larger extent: a value that failed to compile bounds what the search proposes on its site.

A tile, block or buffer count that did not compile from a kept state (``failure_type == "compile-failure"``) fails
the same way at every value that is at least as large on every component: the unified buffer, L0/L1 and the pass
limits only fill further (measured on upstream kernels: of 26 trials, 6 did not compile, each a value at or past
one that had already failed). So, from the same kept state, such values are not proposed; once another change was
kept the state is different and the bound no longer holds (the operator's other knobs decide what fits).

Pure functions of the session's history (:class:`TriedChange`): the search's never-again filter and any ranking
can ask the same question.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pypto_tune.tools.search.history import components
from pypto_tune.tools.search.models import TriedChange

COMPILE_FAILURE = "compile-failure"


def extent(value: Any, *, unroll: bool = False) -> tuple[float, ...] | None:
    """The sizes a value sets, in a fixed order (None: no order). An unroll list's extent is its largest factor:
    the body it compiles grows with it, whatever the smaller factors are."""
    if unroll and isinstance(value, (list, tuple)) and value and all(isinstance(x, int) and not isinstance(x, bool)
                                                                     for x in value):
        return (float(max(value)),)
    return components(value)


def at_or_past(value: Any, failed: Any, *, unroll: bool = False) -> bool:
    """Is ``value`` at least as large as ``failed`` on every component (the same shape of value)?"""
    a, b = extent(value, unroll=unroll), extent(failed, unroll=unroll)
    return a is not None and b is not None and len(a) == len(b) and all(x >= y for x, y in zip(a, b))


def compile_failures(history: Iterable[TriedChange], kept_hash: str, knob_id: str) -> list[TriedChange]:
    """This knob's changes that did not compile from the kept state ``kept_hash``."""
    return [t for t in history if t.knob_id == knob_id and t.from_kept_hash == kept_hash
            and t.outcome == "failed" and t.failure_type == COMPILE_FAILURE]


def grew(t: TriedChange, *, unroll: bool = False) -> bool:
    """Did the failed change only grow the knob (at least as large on every component, larger on one)? Only then
    is its size the cause to bound by; a failure of a smaller or reshaped value (a buffer count of 0, a tile narrower
    on one axis) says nothing about larger ones."""
    a, b = extent(t.before_value, unroll=unroll), extent(t.value, unroll=unroll)
    return a is not None and b is not None and len(a) == len(b) and all(y >= x for x, y in zip(a, b)) and a != b


def grew_past_a_run(t: TriedChange, history: Iterable[TriedChange], *, unroll: bool = False) -> bool:
    """Did the failed change set a value past one of the same knob that ran from the same kept state? Where the knob
    was absent before (an option the kernel did not set: no before-value to grow from), a smaller value that ran
    says the same as growth does — the size broke it (PyPTO's arctic LSTM: ``vec_nbuffer_setting`` {-1: 2} ran,
    {-1: 8} and then {-1: 16} did not compile)."""
    mine = extent(t.value, unroll=unroll)
    return any(u.knob_id == t.knob_id and u.from_kept_hash == t.from_kept_hash and u.outcome != "failed"
               and u.after_us is not None and at_or_past(t.value, u.value, unroll=unroll)
               and extent(u.value, unroll=unroll) != mine for u in history)


def bounded_by_failure(history: Iterable[TriedChange], kept_hash: str, knob_id: str, value: Any, *,
                       unroll: bool = False) -> TriedChange | None:
    """The compile failure, from this same kept state and on this same knob, of a change that grew the knob (or set
    it past a value that ran, :func:`grew_past_a_run`), which ``value`` is at or past (so it would not compile
    either); None when there is none."""
    hist = list(history)
    return next((t for t in compile_failures(hist, kept_hash, knob_id)
                 if (grew(t, unroll=unroll) or grew_past_a_run(t, hist, unroll=unroll))
                 and at_or_past(value, t.value, unroll=unroll)), None)


__all__ = ["COMPILE_FAILURE", "at_or_past", "bounded_by_failure", "compile_failures", "extent", "grew",
           "grew_past_a_run"]
