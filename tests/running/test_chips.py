"""The card-retry rule (R5) as ``tools/running/chips.py`` derives it from the ledger's runs and precision records.

Rows are written the way the operations write them: a ``runs`` row per run (its chip, exit code, timeout) and a
``precision_records`` row per verified run (its round — None for the baseline —, verdict, result type, code hash).
"""

from __future__ import annotations

from typing import Any

from pypto_tune.tools.running.chips import chip_health, implicates_chip

POOL = ["0", "1", "2", "3"]


class Rows:
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.precision_records: list[dict[str, Any]] = []

    def run(self, chip: str, *, exit_code: int | None = 0, timed_out: bool = False, round_no: int | None = None,
            verdict: str | None = None, result_type: str | None = None, code: str = "c0") -> int:
        rid = len(self.runs) + 1
        self.runs.append({"id": rid, "at": f"t{rid}", "purpose": "precision", "round": round_no, "device_id": chip,
                          "exit_code": exit_code, "timed_out": timed_out})
        if verdict is not None:
            self.precision_records.append({"id": len(self.precision_records) + 1, "run_id": rid, "round": round_no,
                                           "verdict": verdict, "result_type": result_type, "device_id": chip,
                                           "code_hash": code})
        return rid

    @property
    def rows(self) -> dict[str, list[dict[str, Any]]]:
        return {"runs": self.runs, "precision_records": self.precision_records}


def test_only_a_hang_or_a_device_error_implicates_the_chip() -> None:
    assert implicates_chip("timeout") and implicates_chip("runtime-error")
    assert not implicates_chip("compile-failure") and not implicates_chip("precision-failure")
    assert not implicates_chip(None)


def test_a_failed_baseline_leaves_its_chip_behind_and_trials_get_the_healthy_ones() -> None:
    r = Rows()
    r.run("0", exit_code=1, verdict="error", result_type="runtime-error")
    r.run("1", verdict="passed")
    h = chip_health(r.rows, POOL)
    assert h.current == "1" and h.failed == {"0": "baseline-failed"}
    assert h.for_trials() == ("1", "2", "3")
    assert h.retry_chips("2") == ("1", "3")
    assert [(e.device_id, e.reason, e.next_device) for e in h.events] == [("0", "baseline-failed", "1")]


def test_a_pooled_hang_leaves_that_chip_behind_but_the_working_chip_stays_current() -> None:
    r = Rows()
    r.run("0", verdict="passed")
    r.run("2", exit_code=None, timed_out=True, round_no=1, verdict="timeout", result_type="timeout", code="c1")
    h = chip_health(r.rows, POOL)
    assert h.current == "0" and h.failed == {"2": "timed-out"}
    assert h.for_trials() == ("0", "1", "3") and h.for_trials(avoid=("0",)) == ("1", "3")


def test_a_trial_error_blames_the_chip_only_if_the_same_code_then_passes_elsewhere() -> None:
    r = Rows()
    r.run("0", verdict="passed")
    r.run("2", exit_code=1, round_no=1, verdict="error", result_type="runtime-error", code="c1")
    assert chip_health(r.rows, POOL).failed == {}  # not yet known: chip or code?
    r.run("3", round_no=1, verdict="passed", code="c1")
    assert chip_health(r.rows, POOL).failed == {"2": "chip-failed"}

    # the same bytes failing on a second chip: the code is at fault, no chip is blamed
    r2 = Rows()
    r2.run("0", verdict="passed")
    r2.run("2", exit_code=1, round_no=1, verdict="error", result_type="runtime-error", code="c1")
    r2.run("3", exit_code=1, round_no=1, verdict="error", result_type="runtime-error", code="c1")
    assert chip_health(r2.rows, POOL).failed == {}

    # a precision failure of a candidate's code blames no chip, even if something else passes later
    r3 = Rows()
    r3.run("0", verdict="passed")
    r3.run("2", exit_code=1, round_no=1, verdict="failed", result_type="precision-failure", code="c1")
    r3.run("3", round_no=1, verdict="passed", code="c1")
    assert chip_health(r3.rows, POOL).failed == {}


def test_when_every_chip_failed_runs_still_get_a_chip_and_one_that_works_again_is_cleared() -> None:
    r = Rows()
    for chip in ("0", "1", "2"):
        r.run(chip, exit_code=1, verdict="error", result_type="runtime-error")
    h = chip_health(r.rows, ["0", "1", "2"])
    assert set(h.failed) == {"0", "1", "2"} and h.current == "0"  # around the ring, as before
    assert h.for_trials() == ("0", "1", "2") and h.retry_chips("0") == ()
    r.run("0", verdict="passed")  # a person confirmed a retry; chip 0 works now
    h = chip_health(r.rows, ["0", "1", "2"])
    assert h.current == "0" and set(h.failed) == {"1", "2"} and h.for_trials() == ("0",)
