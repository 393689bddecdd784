"""``machine_runtime_operator_trace*.json`` reader (A.5): the AICPU-side AICore end-to-end time, both file forms."""

from __future__ import annotations

import json

import pytest

from pypto_tune.tools.analysis.aicpu_trace import find_aicpu_traces, parse_aicpu_trace, read_aicpu_trace
from pypto_tune.tools.errors import ArtifactError

FREQ = 50


def raw_block(core_type: str, idx: int, phases: list[tuple[str, int]]) -> dict:
    return {"blockIdx": idx, "coreType": core_type, "freq": FREQ, "tasks": [{"name": n, "end": e} for n, e in phases]}


def two_stitch_record(rnd: str = "_0") -> list[dict]:
    """Stitch 0: AIC-1 waits from 1000, AIV-25 ends last at 2000 → 1000 ticks = 20 µs.
    Stitch 1: 2500 → 3000 = 10 µs. AIV-26's stitch-1 pair is not increasing and is skipped (as the reference)."""
    w, x = f"DEV_TASK_WAIT_RCV_FIRST_CALLOP_TASK{rnd}", f"DEV_TASK_ALL_CALLOP_TASK_EXEC{rnd}"
    return [
        raw_block("AICPU-CTRL", 0, [(f"BEGIN{rnd}", 100), (f"DEV_TASK_BUILD{rnd}(0)", 900), (f"EXIT{rnd}", 4000)]),
        raw_block("SCHED0-AIC", 1, [(f"BEGIN{rnd}", 500), (f"{w}(0)", 1000), (f"{x}(0)", 1800), (f"{w}(1)", 2600),
                                    (f"{x}(1)", 2900), (f"WAIT_EXIT_NOTIFY{rnd}", 3100)]),
        raw_block("SCHED1-AIV", 25, [(f"BEGIN{rnd}", 500), (f"{w}(0)", 1200), (f"{x}(0)", 2000), (f"{w}(1)", 2500),
                                     (f"{x}(1)", 3000), (f"WAIT_EXIT_NOTIFY{rnd}", 3300)]),
        raw_block("SCHED1-AIV", 26, [(f"{w}(0)", 1100), (f"{x}(0)", 1900), (f"{w}(1)", 2800), (f"{x}(1)", 2700)]),
    ]


def to_perfetto(record: list[dict]) -> dict:
    """The shape gen_perfetto writes: thread per block, X event start = previous end, ts/dur in µs."""
    events = [{"args": {"name": "AICPU View", "type": "aicpu"}, "cat": "__metadata", "name": "process_name",
               "ph": "M", "pid": 0}]
    for tid, block in enumerate(record):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                       "args": {"name": f"{block['coreType']}-{block['blockIdx']}"}})
        prev = None
        for t in sorted(block["tasks"], key=lambda t: t["end"]):
            start = t["end"] - 1 if prev is None else prev
            events.append({"name": t["name"], "cat": block["coreType"], "ph": "X", "ts": start / FREQ,
                           "dur": (t["end"] - start) / FREQ, "pid": 0, "tid": tid, "freq": FREQ})
            prev = t["end"]
    events.append({"name": "0-0-1-7-0()", "ph": "X", "pid": 1, "tid": 1002, "ts": 0.0, "dur": 1.0})  # Machine View
    return {"traceEvents": events}


@pytest.mark.parametrize("form", ["raw", "perfetto"])
def test_end_to_end_sums_the_stitches_and_skips_non_increasing_pairs(form) -> None:
    record = two_stitch_record()
    t = parse_aicpu_trace(record if form == "raw" else to_perfetto(record), "t.json")
    assert t.form == form and t.threads == 4 and t.aicore_threads == 3
    (rnd,) = t.rounds
    assert rnd.round == 0
    assert [(s.stitch, s.e2e_us, s.core_threads) for s in rnd.stitches] == [(0, 20.0, 3), (1, 10.0, 2)]
    assert rnd.e2e_us == t.e2e_us == pytest.approx(30.0)
    assert rnd.aicore_total_run_us == pytest.approx((3300 - 500) / FREQ)


def test_rounds_are_kept_apart_and_names_without_a_round_work() -> None:
    both = two_stitch_record("_0") + [dict(b, blockIdx=b["blockIdx"] + 100) for b in two_stitch_record("_1")]
    t = parse_aicpu_trace(both)
    assert [(r.round, r.e2e_us) for r in t.rounds] == [(0, 30.0), (1, 30.0)] and t.e2e_us == 60.0
    bare = parse_aicpu_trace(two_stitch_record(""))
    assert [r.round for r in bare.rounds] == [None] and bare.e2e_us == 30.0


def test_a_per_stitch_phase_without_a_stitch_counts_as_stitch_zero() -> None:
    older = [raw_block("SCHED0-AIC", 1, [("DEV_TASK_WAIT_RCV_FIRST_CALLOP_TASK", 50),
                                         ("DEV_TASK_ALL_CALLOP_TASK_EXEC", 300)])]
    assert parse_aicpu_trace(older).e2e_us == 5.0


def test_files_are_found_with_or_without_the_round_suffix(tmp_path) -> None:
    for name in ("machine_runtime_operator_trace_1.json", "machine_runtime_operator_trace.json",
                 "machine_runtime_operator_trace_0.json", "machine_trace_perf_data_0.json"):
        (tmp_path / name).write_text(json.dumps(to_perfetto(two_stitch_record())))
    assert [p.name for p in find_aicpu_traces(tmp_path)] == [
        "machine_runtime_operator_trace.json", "machine_runtime_operator_trace_0.json",
        "machine_runtime_operator_trace_1.json"]
    assert read_aicpu_trace(tmp_path / "machine_runtime_operator_trace_1.json").e2e_us == 30.0


@pytest.mark.parametrize(("data", "message"), [
    ("[1, 2", "not valid JSON"),
    ("", "is empty"),
    ('"text"', "top level is a str"),
    ('{"events": []}', "no traceEvents list"),
    ('{"traceEvents": []}', "no AICPU phase events"),
    ('{"traceEvents": [{"ph": "X", "pid": 0, "tid": 3, "name": "BEGIN", "ts": 1, "dur": 1}]}', "has no thread_name"),
    ('{"traceEvents": [{"ph": "M", "pid": 0, "tid": 3, "name": "thread_name", "args": {"name": "SCHED0-AIC-1"}},'
     '{"ph": "X", "pid": 0, "tid": 3, "name": "BEGIN", "ts": "1", "dur": 1}]}', "ts is not a finite number"),
    ('[{"blockIdx": 1, "coreType": "SCHED0-AIC", "freq": 0, "tasks": []}]', "freq must be positive"),
    ('[{"blockIdx": "1", "coreType": "SCHED0-AIC", "freq": 50, "tasks": []}]', "integer blockIdx"),
    ('[{"blockIdx": 0, "coreType": "AICPU-CTRL", "freq": 50, "tasks": [{"name": "BEGIN", "end": 5}]}]',
     "no AI-core thread has an increasing"),
])
def test_bad_input_is_an_artifact_error_naming_the_place(tmp_path, data, message) -> None:
    path = tmp_path / "machine_runtime_operator_trace_0.json"
    path.write_text(data)
    with pytest.raises(ArtifactError, match=message) as err:
        read_aicpu_trace(path)
    assert str(path) in str(err.value) and "DUMP_DEVICE_PERF" in str(err.value)
