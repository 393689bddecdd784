"""Where leaving a stage leads (tools/rules/tuning_loop.py ``after_stage``, R23): the next configuration stage, then
ALGORITHM only when the configuration stages converged by measurement, then the report. Pure: no process; over MCP
stdio in tests/admission/test_algorithm_stage_over_stdio.py."""

from __future__ import annotations

from pypto_tune.tools.rules.tuning_loop import ALGORITHM_STAGE, STAGES, after_stage


def test_each_configuration_stage_leads_to_the_next_with_the_analysis_first() -> None:
    for here, there in zip(STAGES, STAGES[1:]):
        for converged in (True, False):  # an early exit by the checklist moves on all the same
            step = after_stage(here.name, "3 rounds without gain", converged=converged)
            assert step.to == there.name
            assert step.why == f"{here.name} left: 3 rounds without gain"
            assert step.next_step.endswith(f"now {there.name}: collect_swimlane + analyze_bubbles first (R15)")


def test_the_last_configuration_stage_opens_algorithm_only_when_converged_by_measurement() -> None:
    last = STAGES[-1].name
    converged = after_stage(last, "no gain", converged=True)
    assert converged.to == ALGORITHM_STAGE.name
    assert converged.why == f"{last} left: no gain; configuration stages converged (R23)"
    assert "algorithm=true" in converged.next_step
    early = after_stage(last, "checklist complete", converged=False)
    assert early.to is None  # the session finishes: marks alone never walk it into ALGORITHM
    assert "did not converge by measurement, so no algorithm stage (R23)" in early.why
    assert early.next_step.startswith("last configuration stage left early: reporting only")


def test_algorithm_leads_to_the_report() -> None:
    for converged in (True, False):
        step = after_stage(ALGORITHM_STAGE.name, "done", converged=converged)
        assert (step.to, step.why, step.next_step) == (None, "algorithm stage done (done)",
                                                       "all stages done: reporting only")
