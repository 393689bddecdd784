"""Which NPU chip a run may use: the card-retry rule (R5) in one place, derived from the ledger's runs.

The seed skill's rule: a run that fails on a chip is retried on another card (``TILE_FWK_DEVICE_ID``), not fixed.
Here that becomes three answers, all pure functions of the recorded ``runs`` and ``precision_records``:

* **which chips failed in this session** (:func:`chip_health`). A chip is left behind when a run on it hung until
  the timeout, when it failed a baseline precision run (the operator as shipped is presumed correct, so its first
  failure is the card's — R5), or when a run of some code failed there in a way that implicates the chip (hang,
  device/runtime error) and the *same bytes* then passed on another chip. A compile or precision failure of a
  candidate's own code implicates nobody: the code is new, the chip is not suspected. A later run that exits 0 on a
  chip clears it (a chip that works stays in use).
* **the chip of the next manual run** (``ChipHealth.current``): the pool's first chip, then the next healthy one
  after a chip that was left behind; a chip that works stays in use until it fails (issue #13).
* **the chips a pooled candidate trial may take** (``ChipHealth.for_trials``): the healthy ones while any is left,
  the whole pool otherwise (a session whose every chip failed still runs, as the manual path does).

A trial whose run failed in a way that :func:`implicates_chip` is run once more on another healthy chip
(``ChipHealth.retry_chips``, used by ``operations/search.py``) before it is recorded failed: on an NPU box a hung or
erroring card is common and says nothing about the candidate, and one retry tells the two apart — if the same bytes
fail again on a healthy chip, the code is at fault and neither chip is blamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pypto_tune.tools.running.verdict import COMMAND_PROBLEM

Reason = Literal["baseline-failed", "timed-out", "chip-failed"]

# result types (rules.classify_failure) that may be the chip's fault rather than the code's
CHIP_SUSPECT_RESULTS = frozenset({"timeout", "runtime-error"})


def implicates_chip(result_type: str | None) -> bool:
    """A failed run that may be the chip's doing (hang, device or runtime error), not the code's (compile or
    precision failure): worth one retry on another chip (R5)."""
    return result_type in CHIP_SUSPECT_RESULTS


@dataclass(frozen=True)
class ChipEvent:
    """A run that left its chip behind, and the chip of the next manual run after it."""

    run: Any
    device_id: str
    reason: Reason
    next_device: str


@dataclass(frozen=True)
class ChipHealth:
    pool: tuple[str, ...]
    current: str
    failed: dict[str, Reason] = field(default_factory=dict)  # chip -> why it was left behind (the latest reason)
    events: tuple[ChipEvent, ...] = ()

    @property
    def healthy(self) -> tuple[str, ...]:
        return tuple(c for c in self.pool if c not in self.failed)

    def for_trials(self, avoid: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
        """The chips a pooled run may take: the healthy ones not in ``avoid``; when none is left, the pool without
        ``avoid``, and the whole pool as a last resort (a run is never left without a chip)."""
        return (tuple(c for c in self.healthy if c not in avoid)
                or tuple(c for c in self.pool if c not in avoid) or self.pool)

    def retry_chips(self, failed_chip: str) -> tuple[str, ...]:
        """Healthy chips other than ``failed_chip`` (empty: nowhere to retry, the trial is recorded failed)."""
        return tuple(c for c in self.healthy if c != str(failed_chip))


def _implicated_runs(rows: dict[str, list[Any]]) -> dict[int, Reason]:
    precs = rows.get("precision_records", [])
    out: dict[int, Reason] = {}
    for i, p in enumerate(precs):
        if p["run_id"] is None or p["verdict"] == "passed" or p.get("result_type") == COMMAND_PROBLEM:
            continue  # no verdict line: the command's problem, no chip is suspected
        if p["round"] is None:
            out[int(p["run_id"])] = "baseline-failed"
        elif implicates_chip(p.get("result_type")) and p["device_id"] is not None and any(
                q["verdict"] == "passed" and q["code_hash"] == p["code_hash"] and q["device_id"] is not None
                and str(q["device_id"]) != str(p["device_id"]) for q in precs[i + 1:]):
            out[int(p["run_id"])] = "chip-failed"
    return out


def chip_health(rows: dict[str, list[Any]], pool: list[str] | tuple[str, ...]) -> ChipHealth:
    """Replay the session's runs (``rows``: at least ``runs`` and ``precision_records``) over the chip ``pool``."""
    pool = tuple(str(d) for d in pool)
    if not pool:
        return ChipHealth(pool=("0",), current="0")
    device = pool[0]
    failed: dict[str, Reason] = {}
    events: list[ChipEvent] = []
    implicated = _implicated_runs(rows)

    def next_after(chip: str) -> str:
        i = pool.index(chip) if chip in pool else -1
        ring = [pool[(i + k) % len(pool)] for k in range(1, len(pool) + 1)]
        return next((c for c in ring if c not in failed), ring[0])

    for r in rows.get("runs", []):
        used = str(r["device_id"]) if r["device_id"] is not None else device
        reason: Reason | None = "timed-out" if r["timed_out"] else implicated.get(int(r["id"]))
        if reason is not None:
            if used in pool:
                failed[used] = reason
            if used == device:  # a pooled trial's chip failing does not move the manual runs off a working chip
                device = next_after(used)
            events.append(ChipEvent(run=r, device_id=used, reason=reason, next_device=device))
        elif r["exit_code"] == 0 and used in pool:
            failed.pop(used, None)
            device = used
    return ChipHealth(pool=pool, current=device, failed=failed, events=tuple(events))
