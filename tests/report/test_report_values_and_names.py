"""What the report prints for a value, a finish reason and its own file names, and what the code layer makes of
those file names (issue #18)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pypto_tune.tools.code.codestate import FileEntry, diff_trees, scan_tree
from pypto_tune.tools.report.i18n import finish_reason_text, phrase_text, strings
from pypto_tune.tools.report.names import is_report_file, report_name
from pypto_tune.tools.report.values import plain_text, source_text

SID = "20261203-101112-a1b2c3"


@pytest.mark.parametrize(("value", "text"), [
    ({"$expr": "RUN_MODE"}, "RUN_MODE"),  # code is shown as code, not as a dict
    ([1, {"$expr": "TILE_B"}, 256], "[1, TILE_B, 256]"),
    ({"-1": 2, "-2": 1}, "{-2: 1, -1: 2}"),  # JSON's string keys are the source's int keys, in one order
    ({-2: 1, -1: 4}, "{-2: 1, -1: 4}"),
    ({"DEFAULT": [2, 4], "7": 8}, "{7: 8, 'DEFAULT': [2, 4]}"),
    (128, "128"), (True, "True"), ("NONE_CACHEABLE", "'NONE_CACHEABLE'"),
])
def test_a_knob_value_is_shown_as_the_source_writes_it(value: object, text: str) -> None:
    assert source_text(value) == text


def test_an_absent_knob_is_the_default_not_none() -> None:
    assert source_text(None, strings("en")["knob_default"]) == "(default)"
    assert source_text(None, strings("zh")["knob_default"]) == "（默认）"


def test_a_recorded_command_reads_as_a_command_line_and_patterns_as_settings() -> None:
    assert plain_text(["python3", "softmax.py", "--run-mode", "sim"]) == "python3 softmax.py --run-mode sim"
    assert plain_text(["python3", "my op.py"]) == "python3 'my op.py'"
    assert plain_text({"pass_pattern": "OK", "fail_pattern": None}) == "pass_pattern = OK; fail_pattern = None"
    assert plain_text(None) == "—"


@pytest.mark.parametrize(("reason", "zh"), [
    ("target reached (2.726 µs ≤ 3.034 µs)", "已达到目标（2.726 µs ≤ 3.034 µs）"),
    ("time limit of 12.0 h reached", "已达到 12.0 小时的时间上限"),
    ("user stop: user: demo plan exhausted", "用户停止：“user: demo plan exhausted”"),  # typed text kept as typed
    ("algorithm stage done (no gain)", "算法阶段结束（no gain）"),
    ("theoretical limit: utilisation 85.2 % of the platform's cores of the types the kernel uses and 91.0 % of its "
     "active cores (> 80 %), bubble 4.1 % < 10 %",
     "已达理论极限：平台上该 kernel 所用类型全部核的利用率 85.2%，活跃核利用率 91.0%（> 80%），气泡率 4.1% < 10%"),
])
def test_the_servers_finish_reasons_read_in_chinese(reason: str, zh: str) -> None:
    assert finish_reason_text(strings("zh"), reason) == zh
    assert "user stop" not in finish_reason_text(strings("en"), reason)


def test_an_unknown_finish_reason_and_phrase_are_shown_as_recorded() -> None:
    assert finish_reason_text(strings("zh"), "something new") == "something new"
    assert finish_reason_text(strings("zh"), None) == "—"
    assert phrase_text(strings("zh"), "corrected before the baseline precision passed") == "在基准精度通过之前修正"
    assert phrase_text(strings("zh"), "typed by someone") == "typed by someone"


def test_every_name_the_report_writes_is_recognised_and_near_misses_are_not() -> None:
    snap = SimpleNamespace(operator="softmax_op", session_id=SID)
    names = [report_name(snap, fmt, lang, per_session=own) for fmt in ("md", "html") for lang in ("zh", "en")
             for own in (False, True)]
    assert len(set(names)) == 8
    for name in names:
        assert is_report_file(name) and is_report_file(f"kernels/{name}") and is_report_file(name + ".tmp")
    for near in ("softmax_tuning_report.py", "softmax_tuning_report_v2.md", "softmax_tuning_report_en.txt",
                 "softmax_tuning_report_fr.md", f"softmax_tuning_report_{SID}x.md", "tuning_report.md",
                 "softmax_tuning_report.md/data.bin", "softmax.py", "data_tuning_report.csv"):
        assert not is_report_file(near), near


def test_a_scan_leaves_the_servers_reports_out_and_a_diff_ignores_them(tmp_path: Path) -> None:
    (tmp_path / "softmax.py").write_text("x = 1\n")
    (tmp_path / "softmax_tuning_report.md").write_text("old report\n")
    (tmp_path / f"softmax_tuning_report_{SID}_en.html").write_text("<html></html>\n")
    (tmp_path / "softmax_tuning_report_v2.md").write_text("a person's notes\n")
    tree = scan_tree(tmp_path)
    assert sorted(tree) == ["softmax.py", "softmax_tuning_report_v2.md"]
    # a tree recorded before reports were left out still lists one: rewriting it is no drift, a near miss is
    old = {**tree, "softmax_tuning_report.md": FileEntry(path="softmax_tuning_report.md", sha256="0" * 64, size=1)}
    assert diff_trees(old, scan_tree(tmp_path)).empty
    (tmp_path / "softmax_tuning_report_v2.md").write_text("changed\n")
    assert diff_trees(old, scan_tree(tmp_path)).changed == ["softmax_tuning_report_v2.md"]
