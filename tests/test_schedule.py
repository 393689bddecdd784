"""The suite hands its files to the workers longest first (tests/schedule.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import schedule


def _items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_go_longest_first_and_a_files_tests_keep_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "expected_seconds",
                        lambda: {"tests/a.py": 1.0, "tests/b.py": 300.0, "tests/c.py": 40.0, "tests/d.py": 20.0})
    items = _items("tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t2", "tests/b.py::t1", "tests/new.py::t",
                   "tests/c.py::t")
    schedule.longest_first(items)  # type: ignore[arg-type]
    # an unknown file is guessed at the median of the files over 5 s (40, 300 and 20 s: 40 s), tied with c by path
    assert [i.nodeid for i in items] == ["tests/b.py::t2", "tests/b.py::t1", "tests/c.py::t", "tests/new.py::t",
                                         "tests/a.py::t1", "tests/a.py::t2"]


def test_the_table_sums_each_files_test_cases_from_a_junit_report(tmp_path: Path) -> None:
    (tmp_path / "tests" / "x").mkdir(parents=True)
    (tmp_path / "tests" / "x" / "test_y.py").write_text("")
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite><testcase classname="tests.x.test_y" name="a" time="1.25"/>'
                     '<testcase classname="tests.x.test_y.TestK" name="b" time="2.5"/></testsuite></testsuites>')
    assert schedule.table_from_junit(junit, root=tmp_path) == {"tests/x/test_y.py": 3.8}


def test_the_committed_table_is_seconds_per_test_file() -> None:
    table = json.loads(schedule.TABLE.read_text())
    assert table and all(k.startswith("tests/") and k.endswith(".py") and v >= 0 for k, v in table.items())
