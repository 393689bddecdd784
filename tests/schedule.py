"""The order the whole suite runs its files in: longest first.

``scripts/test.sh`` runs two xdist workers with ``--dist loadfile`` (a file's tests stay on one worker, so module
fixtures such as a Ray cluster are built once). xdist hands files out in collection order, by default re-sorted by
how many tests a file holds; the suite's costliest files hold one to seven tests, so they came last and one worker
ran a five-minute file while the other had nothing left. ``scripts/test.sh`` turns that re-sorting off and this
module sorts the files by the seconds they took in a measured run (``durations.json``), longest first — the
classic longest-processing-time rule, which keeps the tail short. A file missing from the table (a new one) is
assumed to be as costly as the median process file, so it is neither starved nor first.

Regenerate the table after a whole run with ``--junitxml``::

    .venv/bin/python -m tests.schedule JUNIT.xml
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("durations.json")
ROOT = Path(__file__).resolve().parents[1]


def expected_seconds() -> dict[str, float]:
    return json.loads(TABLE.read_text()) if TABLE.exists() else {}


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: files by expected seconds, longest first; a file's own tests keep their order.
    Deterministic (ties by path), as xdist needs every worker to collect the same order."""
    table = expected_seconds()
    guess = statistics.median(v for v in table.values() if v >= 5.0) if table else 0.0

    def key(pair: tuple[int, pytest.Item]) -> tuple[float, str, int]:
        i, item = pair
        f = _file_of(item)
        return (-table.get(f, guess), f, i)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def table_from_junit(junit: Path, root: Path = ROOT) -> dict[str, float]:
    """Seconds per test file (relative to ``root``) from a pytest JUnit report (each test case's time covers its
    set-up and tear-down)."""
    per_file: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # pytest writes "tests.campaign.test_x" (+ ".Class"): the file is the longest prefix that exists
        parts = classname.split(".")
        for n in range(len(parts), 0, -1):
            path = "/".join(parts[:n]) + ".py"
            if (root / path).exists():
                per_file[path] += float(case.get("time", 0.0))
                break
    return {f: round(s, 1) for f, s in sorted(per_file.items())}


if __name__ == "__main__":  # pragma: no cover - a maintenance command
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.schedule JUNIT.xml  (from a whole run: scripts/test.sh --junitxml=JUNIT.xml)")
    TABLE.write_text(json.dumps(table_from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {TABLE}")
