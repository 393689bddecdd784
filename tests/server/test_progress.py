"""The arithmetic of progress notifications (server/progress.py), without a client: values only go up, a total
appears once the count is known, a second series adds to what was done, and the message says where the call is."""

from __future__ import annotations

from pypto_tune.server.progress import STEP_SCALE_S, ProgressState


def test_values_rise_within_a_step_and_land_on_whole_numbers_at_its_end() -> None:
    st = ProgressState("collect_swimlane", started=0.0, step_started=0.0)
    st.update(phase="repeat 1/3", step=0, steps=3, now=0.0)
    p1, t1 = st.value(now=STEP_SCALE_S)  # half way through the expected time of a step: 0.99 * 1/2
    assert (p1, t1) == (0.495, 3.0)
    p2, _ = st.value(now=3 * STEP_SCALE_S)
    assert p1 < p2 < 1.0
    st.update(phase="repeat 2/3", step=1, steps=3, now=40.0)
    p3, t3 = st.value(now=40.0)
    assert p3 == 1.0 and t3 == 3.0
    # the second step is expected to last as long as the first did (40 s): 20 s in is a third of the way
    assert st.value(now=60.0)[0] == round(1 + 0.99 * 20 / 60, 3)


def test_the_same_value_twice_is_nudged_up_never_repeated() -> None:
    st = ProgressState("run_precision_check", started=0.0, step_started=0.0)
    a, _ = st.value(now=5.0)
    b, _ = st.value(now=5.0)
    assert b == round(a + 0.001, 3)


def test_a_second_series_keeps_what_was_done_and_grows_the_total() -> None:
    st = ProgressState("collect_swimlane", started=0.0, step_started=0.0)
    st.update(step=2, steps=3, phase="repeat 3/3", now=0.0)
    st.update(step=0, steps=2, phase="kept-state reference 1/2", now=30.0)
    p, total = st.value(now=30.0)
    assert (p, total) == (3.0, 5.0)


def test_no_total_before_the_count_is_known_and_none_past_it() -> None:
    st = ProgressState("run_precision_check", started=0.0, step_started=0.0)
    st.update(phase="environment checklist (first call of the session)", now=0.0)
    assert st.value(now=1.0)[1] is None
    st.update(step=3, steps=3, now=2.0)  # a repeat retried on another chip runs past the count
    assert st.value(now=3.0)[1] is None


def test_the_message_names_the_tool_the_phase_the_seconds_and_the_last_output_line() -> None:
    st = ProgressState("run_candidates", started=0.0)
    st.update(line="compiling\n[SIM] kernel 3/8 done\n", phase="1/4 trials done", step=1, steps=4, now=0.0)
    assert st.message(now=12.4) == "run_candidates: 1/4 trials done · 12 s · [SIM] kernel 3/8 done"
    st.update(line="   ", now=13.0)  # a blank line keeps the last real one
    assert st.message(now=13.0).endswith("[SIM] kernel 3/8 done")


def test_the_known_matplotlib_tracebacks_of_a_sim_run_are_never_shown_as_progress() -> None:
    """pypto's drawing helpers fail to import matplotlib on every SIM run (kept out on purpose, A.2b); the run is
    fine, so the line a person reads must not be that traceback (the demo printed it as progress)."""
    st = ProgressState("run_precision_check", started=0.0)
    st.update(line="Start time: 2026-12-03 19:33:55", phase="precision run (baseline)", step=0, steps=1, now=0.0)
    for noise in ("Traceback (most recent call last):\n  File \"/v/site-packages/pypto/lib/scripts/"
                  "draw_pipe_swim_lane.py\", line 17, in <module>",
                  "    import matplotlib", "ModuleNotFoundError: No module named 'matplotlib'",
                  "ModuleNotFoundError: No module named 'pandas'"):
        st.update(line=noise, now=1.0)
    assert st.message(now=2.0) == "run_precision_check: precision run (baseline) · 2 s · Start time: 2026-12-03 19:33:55"
    st.update(line="ModuleNotFoundError: No module named 'torch_npu'", now=3.0)  # a real problem is shown
    assert st.message(now=3.0).endswith("No module named 'torch_npu'")
