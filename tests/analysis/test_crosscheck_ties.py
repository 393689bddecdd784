"""The log/trace cross-check tolerates the last-bit rounding of tied waits (issue #12: a legal trial was lost).

``data/sim_matmul_act_tie``: fixtures/operators/matmul_act with M_BLOCK 16 and cube tiles m [64, 64], k [64, 256],
n [256, 256] (those two lines changed, nothing else), pypto 0.2.0 SIM. Its Top-10 holds waits the writer prints as
5.633888888888889 (two tasks) and 5.6338888888888885; the recomputation gets 5.63388888888889 for one of them, so a
rank-by-rank comparison of task ids swapped two tasks and declared the run invalid. A rewritten log must still fail.
"""

from __future__ import annotations

import pytest

from .analysis_helpers import run_dirs
from pypto_tune.tools.analysis import analyze_runs
from pypto_tune.tools.analysis.crosscheck import compare
from pypto_tune.tools.analysis.models import LogTask


def test_tied_waits_in_another_order_still_agree():
    a = analyze_runs(run_dirs("sim_matmul_act_tie"), run_mode="sim")
    assert a.invalid_reasons == []
    assert a.crosscheck.agrees and a.crosscheck.top10_equal
    assert a.operator_time_us == pytest.approx(19.86111111111111, rel=1e-12)


def test_a_top10_with_another_wait_or_another_task_still_disagrees():
    a = analyze_runs(run_dirs("sim_matmul_act_tie"), run_mode="sim")
    from pypto_tune.tools.analysis.bubble_log import read_bubble_log
    from pypto_tune.tools.analysis.crosscheck import recompute_log
    from pypto_tune.tools.analysis.trace import read_trace

    d = run_dirs("sim_matmul_act_tie")[0] / "CostModelSimulationOutput"
    log = read_bubble_log(d / "bubble_analysis.log")
    rec, _ = recompute_log(read_trace(d / "merged_swimlane.json.gz"))
    assert compare(log, rec).top10_equal
    first = log.top10[0]
    # the first task's wait rewritten by 0.01 µs
    louder = log.model_copy(update={"top10": [LogTask(key=first.key, label=first.label, wait_us=first.wait_us + 0.01),
                                              *log.top10[1:]]})
    assert not compare(louder, rec).top10_equal
    # another task put in the first place with the same wait
    other = log.model_copy(update={"top10": [LogTask(key=first.key + 1, label="x", wait_us=first.wait_us),
                                             *log.top10[1:]]})
    assert not compare(other, rec).top10_equal
    # two tasks of different waits swapped (5.745 and 5.6339): the waits no longer match rank by rank
    swapped = log.model_copy(update={"top10": [log.top10[1], log.top10[0], *log.top10[2:]]})
    assert not compare(swapped, rec).top10_equal
    assert a.crosscheck.agrees
