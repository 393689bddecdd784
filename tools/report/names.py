"""What the server's report files are called, and how a file is recognised as one of them.

``render_report`` writes ``{operator}_tuning_report[_{session_id}][_en].{md|html}`` next to the operator (R21; the
session's own name and the stable name of the latest). The code layer (``tools/code/codestate.py``) asks
:func:`is_report_file` so that the server's own output is never recorded as a workspace file and never counts as
drift. Both live here so that the name written and the name recognised cannot part ways. No heavy imports: the
code layer imports this module on every scan.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Protocol

FORMATS = ("md", "html")
# Session ids are made by tools/operations/setup.py: YYYYmmdd-HHMMSS-<6 hex>.
_SESSION = r"\d{8}-\d{6}-[0-9a-f]{6}"
# The operator name is a file stem; ".tmp" is what a render killed between write and rename leaves behind.
_REPORT = re.compile(rf"^[^/]+_tuning_report(?:_{_SESSION})?(?:_en|_zh)?\.(?:md|html)(?:\.tmp)?$")


class _Named(Protocol):
    operator: str
    session_id: str


def report_name(snap: _Named, fmt: str, lang: str, *, per_session: bool = False) -> str:
    """R21's stable name ``{operator}_tuning_report[_en].{fmt}``, or with ``per_session`` the session's own
    ``{operator}_tuning_report_{session_id}[_en].{fmt}`` that a later session on the same operator never overwrites."""
    suffix = "" if lang == "zh" else f"_{lang}"
    session = f"_{snap.session_id}" if per_session else ""
    return f"{snap.operator}_tuning_report{session}{suffix}.{fmt}"


def is_report_file(rel_path: str) -> bool:
    """Whether a workspace-relative path has the shape of a report ``render_report`` writes (any session's)."""
    return bool(_REPORT.match(PurePosixPath(rel_path).name))
