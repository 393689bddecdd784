"""merged_swimlane.json: only the Machine View counts; label bit layouts are told apart by data; broken files are
ArtifactErrors with a byte offset; the sliced reader equals the one-shot reader."""

from __future__ import annotations

import gzip
import json

import pytest

from pypto_tune.tools.analysis.trace import detect_label_layout, formal_name, parse_trace_bytes, read_trace
from pypto_tune.tools.errors import ArtifactError

from .analysis_helpers import run_dirs


def _x(tid, ts, dur, seq, task, leaf=7, name=None, pid=1):
    return {"args": {"event-hint": f"Task:[x], rootHash:11, callOpMagic:1, leafHash:{leaf}, TaskId:{task}",
                     "taskId": task, "seqNo": seq}, "cat": "event", "id": 0,
            "name": name or f"{seq}-{task >> 20}-{task & 0xFFFFF}-7-0()", "ph": "X", "pid": pid, "tid": tid,
            "ts": ts, "dur": dur}


def _doc(events, indent=4):
    return json.dumps({"traceEvents": events}, indent=indent).encode()


AICPU_VIEW = [
    {"args": {"name": "AICPU View", "type": "aicpu"}, "name": "process_name", "ph": "M", "pid": 0},
    {"args": {"name": "SCHED0-AIC-1"}, "name": "thread_name", "ph": "M", "pid": 0, "tid": 5},
    {"cat": "SCHED0-AIC", "name": "DEV_TASK_BUILD(0)", "ph": "X", "pid": 0, "tid": 5, "ts": 0.0, "dur": 9.0,
     "freq": 50},
]
MACHINE = [
    {"args": {"name": "Machine View"}, "name": "process_name", "ph": "M", "pid": 1},
    {"args": {"name": "AIV_25"}, "name": "thread_name", "ph": "M", "pid": 1, "tid": 1050},
    _x(1050, 1.0, 2.0, 0, (1 << 20) | 2),
    {"cat": "machine-view-last-dep", "id": 9, "name": "machine-view-last-dep", "ph": "s", "pid": 1, "tid": 1050,
     "ts": 2.9999},
    {"bp": "e", "cat": "machine-view-last-dep", "id": 9, "name": "machine-view-last-dep", "ph": "f", "pid": 1,
     "tid": 1050, "ts": 3.5},
    _x(1050, 3.5, 1.0, 0, (1 << 20) | 3),
    {"name": "ReadyCount_AIV", "pid": 1, "tid": 1, "ph": "C", "ts": 0.5, "args": {"size": 8}},
]


def test_aicpu_view_is_dropped():
    tr = parse_trace_bytes(_doc(AICPU_VIEW + MACHINE))
    assert len(tr) == 2 and tr.other_pid_events == 3
    assert tr.lane_names == {1050: "AIV_25"}  # SCHED0-AIC-1 would have been counted as a cube lane
    assert list(tr.leaf) == [7, 7] and list(tr.key) == [(1 << 20) | 2, (1 << 20) | 3]
    assert tr.flow_s == {9: (1050, 2.9999)} and tr.flow_f == {9: (1050, 3.5)}


def test_label_layouts():
    key = (3 << 32) | (1 << 20) | 2  # taskId 1048578 of seq 3
    assert formal_name(key, "0.2.0") == "3-1-2"
    assert formal_name(key, "ref") == "3-16-2"  # what the newer writer would print for the same 0.2.0 task
    old = parse_trace_bytes(_doc(MACHINE))
    assert detect_label_layout(old) == "0.2.0"
    newer = [dict(e) for e in MACHINE]
    for e in newer:
        if e.get("ph") == "X":
            k = e["args"]["taskId"]
            e["name"] = f"0-{(k >> 16) & 0x3FF}-{k & 0xFFFF}-7-0()"
    assert detect_label_layout(parse_trace_bytes(_doc(newer))) == "ref"


@pytest.mark.parametrize("blob, words", [
    (b"", "empty"),
    (b'{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1050, "ts": 1.0', "truncated"),
    (b'{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1050, "ts": "late"}]}', "malformed"),
    (b'{"events": []}', "malformed"),
    (b'{"traceEvents": []}', "no Machine View"),
])
def test_broken_documents(blob, words):
    with pytest.raises(ArtifactError, match=words) as err:
        parse_trace_bytes(blob, "/r/merged_swimlane.json")
    assert "/r/merged_swimlane.json" in str(err.value)


def test_truncated_pretty_file_reports_the_byte(tmp_path):
    p = tmp_path / "merged_swimlane.json"
    full = _doc(MACHINE * 50)
    p.write_bytes(full[: len(full) // 2])
    with pytest.raises(ArtifactError, match="truncated") as err:
        read_trace(p, slice_bytes=256)
    assert "byte" in str(err.value)
    p.write_bytes(full.replace(b'"ts": 3.5', b'"ts": 3.5,,', 1))
    with pytest.raises(ArtifactError, match="malformed") as err:
        read_trace(p, slice_bytes=256)
    assert "byte" in str(err.value)


def test_sliced_and_gzip_readers_equal_the_one_shot_reader(tmp_path):
    src = run_dirs("sim_softmax")[0] / "CostModelSimulationOutput" / "merged_swimlane.json.gz"
    data = gzip.decompress(src.read_bytes())
    whole = parse_trace_bytes(data)
    plain = tmp_path / "merged_swimlane.json"
    plain.write_bytes(data)
    for tr in (read_trace(plain, slice_bytes=4096), read_trace(src), read_trace(plain)):
        assert len(tr) == len(whole) == 320
        assert list(tr.start) == list(whole.start) and list(tr.key) == list(whole.key)
        assert tr.flow_s == whole.flow_s and tr.lane_names == whole.lane_names and tr.labels == whole.labels
    assert len(whole.flow_s) == 512 and len(whole.lane_names) == 74


def test_missing_trace(tmp_path):
    with pytest.raises(ArtifactError, match="missing"):
        read_trace(tmp_path / "merged_swimlane.json")


def test_unknown_phases_fall_back_to_the_catch_all_shape():
    events = MACHINE + [{"name": "mark", "ph": "i", "pid": 1, "tid": 1050, "ts": 2.0, "s": "t"}]
    tr = parse_trace_bytes(_doc(events))
    assert len(tr) == 2 and tr.flow_s == {9: (1050, 2.9999)} and tr.lane_names == {1050: "AIV_25"}


def test_flows_pair_by_id_when_not_emitted_in_order():
    from pypto_tune.tools.analysis.crosscheck import predecessors

    extra = [dict(MACHINE[3], id=10), dict(MACHINE[4], id=10, ts=3.5)]
    shuffled = MACHINE[:3] + [extra[1], MACHINE[4], MACHINE[3], extra[0]] + MACHINE[5:]
    tr = parse_trace_bytes(_doc(shuffled))
    assert list(tr.s_id) != list(tr.f_id)
    assert predecessors(tr) == [[], [0, 0]]
