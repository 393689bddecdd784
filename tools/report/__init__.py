"""Status board and final reports (Markdown, self-contained HTML with inline SVG), zh and en, from a SessionSnapshot.

Exports load lazily: ``tools/code/codestate.py`` imports :mod:`.names` on every workspace scan and must not pay for
jinja2 and the renderers.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "render_status_board": "board", "achievement_rate": "metrics", "render_report": "render",
    "write_report_files": "render", "report_name": "names", "is_report_file": "names",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
