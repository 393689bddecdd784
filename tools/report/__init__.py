"""Status board and final reports (Markdown, self-contained HTML with inline SVG), zh and en, from a SessionSnapshot.

Exports load lazily: ``tools/code/codestate.py`` imports :mod:`.names` on every workspace scan and must not pay for
jinja2 and the renderers.
"""

from __future__ import annotations

from pypto_tune.tools.lazy_exports import module_getattr

_EXPORTS = {
    "render_status_board": "board", "achievement_rate": "metrics", "render_report": "render",
    "write_report_files": "render", "report_name": "names", "is_report_file": "names",
}
__all__ = sorted(_EXPORTS)

__getattr__ = module_getattr(__name__, _EXPORTS)
