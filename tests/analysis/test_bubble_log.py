"""bubble_analysis.log: every line form of domain A.3 is read; anything else is an ArtifactError naming the line."""

from __future__ import annotations

import pytest

from pypto_tune.tools.analysis.bubble_log import core_type_of, parse_bubble_log_text, read_bubble_log
from pypto_tune.tools.errors import ArtifactError

SP17, SP21 = " " * 17, " " * 21

FULL = (
    "Top 10 tasks in waiting schedule\n"
    f"    Task:12891193352, label:3-0-8-7-0(), wait:{SP17}5.689444444444445\n"
    f"    Task:1048577, label:0-1-1-7-0(my, wait: colour), wait:{SP17}0.5\n"
    "\n\n"
    "[Fake Core_0] Execute task num:0, Fake Task: 48\n"
    "    Core Total Work Time: 0.0\n    Total Wait Time: 0\n    Wait Schedule Time: 0\n    Wait Predecessor Time: 0\n"
    "    Top 3 tasks in waiting schedule time\n"
    "[AIC_1] Execute task num:0\n"
    "    Core Total Work Time: 0.0\n    Total Wait Time: 0\n    Wait Schedule Time: 0\n    Wait Predecessor Time: 0\n"
    "[AIV_25] Execute task num:2\n"
    "    Core Total Work Time: 64.35722222222223\n    Total Wait Time: 10.5\n    Wait Schedule Time: 4.25\n"
    "    Wait Predecessor Time: 6.25\n"
    "    Top 3 tasks in waiting schedule time\n"
    f"    Task:1048578, label:0-1-2-7-0(), wait:{SP21}3.0\n"
    f"    Task:1048579, label:0-1-3-7-0(), wait:{SP21}1.25\n"
    "[HUB_80] Execute task num:1\n"
    "    Core Total Work Time: 40.3\n    Total Wait Time: 40.2\n    Wait Schedule Time: -0.5\n"
    "    Wait Predecessor Time: 40.7\n"
    "[AI-CPU_3] Execute task num:1\n"
    "    Core Total Work Time: 1\n    Total Wait Time: 0\n    Wait Schedule Time: 0\n    Wait Predecessor Time: 0\n"
)


def test_every_line_form_is_read():
    log = parse_bubble_log_text(FULL, "x.log")
    assert [t.key for t in log.top10] == [12891193352, 1048577]
    assert log.top10[0].wait_us == 5.689444444444445
    # the label is split at the LAST ", wait:" so a colour containing it survives
    assert log.top10[1].label == "0-1-1-7-0(my, wait: colour)"
    names = [c.name for c in log.cores]
    assert names == ["Fake Core_0", "AIC_1", "AIV_25", "HUB_80", "AI-CPU_3"]
    fake, idle, aiv, hub, cpu = log.cores
    assert (fake.n_real, fake.n_fake, fake.top3, fake.index) == (0, 48, [], 0)  # Top-3 header without lines
    assert (idle.n_real, idle.work_us, idle.top3) == (0, 0.0, [])  # idle core: no Top-3 header at all
    assert aiv.core_type == "AIV" and aiv.index == 25 and aiv.work_us == 64.35722222222223
    assert [t.wait_us for t in aiv.top3] == [3.0, 1.25]
    assert hub.core_type == "HUB" and hub.wait_schedule_us == -0.5
    assert cpu.core_type == "AI-CPU" and cpu.work_us == 1.0
    assert aiv.line == 17


def test_log_without_top10_and_short_top10():
    no_top = FULL[FULL.index("[Fake Core_0]"):]
    assert parse_bubble_log_text("\n\n" + no_top).top10 == []
    assert parse_bubble_log_text(no_top).cores[0].name == "Fake Core_0"


@pytest.mark.parametrize("name, kind", [("AIC_1", "AIC"), ("AIV_72", "AIV"), ("HUB_80", "HUB"),
                                        ("AI-CPU_5", "AI-CPU"), ("Fake Core_0", "Fake Core")])
def test_core_type_rule(name, kind):
    assert core_type_of(name) == kind


@pytest.mark.parametrize("text, where, words", [
    ("", "byte 0", "empty"),
    ("   \n", "byte 0", "empty"),
    (FULL[:-1], "line", "truncated"),
    (FULL.replace("    Wait Schedule Time: 4.25\n", ""), "line 20", "missing 'Wait Schedule Time:'"),
    (FULL.replace("64.35722222222223", "64.3x"), "line 18", "bad number"),
    (FULL.replace("[AIC_1] Execute task num:0", "[AIC_1] Executed 0"), "line 12", "unexpected line"),
    (FULL[:FULL.index("    Total Wait Time: 10.5")], "end of file", "ends early"),
    ("Top 10 tasks in waiting schedule\n\n\n", "line", "no core blocks"),
    ("Top 10 tasks in waiting schedule\n" + f"    Task:1, label:a, wait:{SP17}1\n" * 11 + "\n\n", "line 12",
     "more than 10"),
])
def test_malformed_logs_name_the_place(text, where, words):
    with pytest.raises(ArtifactError) as err:
        parse_bubble_log_text(text, "/r/bubble_analysis.log")
    msg = str(err.value)
    assert words in msg and where in msg and "/r/bubble_analysis.log" in msg
    assert err.value.expected


def test_missing_file(tmp_path):
    with pytest.raises(ArtifactError, match="missing"):
        read_bubble_log(tmp_path / "bubble_analysis.log")
    (tmp_path / "bubble_analysis.log").write_bytes(b"\xff\xfe")
    with pytest.raises(ArtifactError, match="UTF-8"):
        read_bubble_log(tmp_path / "bubble_analysis.log")
