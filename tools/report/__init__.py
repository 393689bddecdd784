"""Status board and final reports (Markdown, self-contained HTML with inline SVG), zh and en, from a SessionSnapshot."""

from pypto_tune.tools.report.board import render_status_board
from pypto_tune.tools.report.metrics import achievement_rate
from pypto_tune.tools.report.render import render_report, report_name, write_report_files

__all__ = ["achievement_rate", "render_report", "render_status_board", "report_name", "write_report_files"]
