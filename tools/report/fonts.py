"""The CJK font embedded in zh reports: a subset of Noto Sans CJK SC (SIL OFL 1.1) to the characters the reports'
zh strings can use, so a zh report is legible on a machine without any CJK font.

The subset is package data (``prompts/fonts/report-cjk.woff2``), rebuilt by ``scripts/build_report_font.py`` when a
zh string gains a character; ``tests/report/test_report_font.py`` fails until it is. The ``@font-face`` covers only
the CJK blocks (``unicode-range``), so Latin text keeps the page's own fonts and the browser never downloads or
decodes the subset for an en report.
"""

from __future__ import annotations

import base64
import re
from functools import lru_cache
from importlib import resources

FAMILY = "PyPTO Report CJK"  # renamed: a subset is a modified version and must not pass for the whole font
FONT_FILE = ("fonts", "report-cjk.woff2")
LICENCE_FILE = ("fonts", "OFL.txt")
# Blocks the @font-face serves: CJK punctuation, CJK ideographs, fullwidth forms (what zh text needs that Latin
# fonts lack). The subset holds the zh strings' characters of these blocks and nothing else.
UNICODE_RANGE = "U+3000-303F, U+3400-4DBF, U+4E00-9FFF, U+F900-FAFF, U+FF00-FFEF"
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def cjk_chars(text: str) -> set[str]:
    """The characters of ``text`` the embedded font is asked to draw."""
    return set(_CJK.findall(text))


def zh_texts() -> list[str]:
    """Every zh string a report, a board or a campaign report is built from (the subset's source)."""
    from pypto_tune.tools.campaign.report import STRINGS
    from pypto_tune.tools.report import board
    from pypto_tune.tools.report.i18n import strings

    src = resources.files("pypto_tune.tools.report").joinpath("board.py").read_text(encoding="utf-8")
    literals = [m for m in re.findall(r'"([^"\n]*)"', src) if cjk_chars(m)]  # zh words written in the board's code
    del board
    return list(strings("zh").values()) + list(STRINGS["zh"].values()) + literals


def font_bytes() -> bytes:
    return resources.files("pypto_tune.prompts").joinpath(*FONT_FILE).read_bytes()


@lru_cache(maxsize=1)
def font_face_css() -> str:
    """``@font-face`` rule with the subset inline (a data: URL; the report loads nothing from anywhere)."""
    data = base64.b64encode(font_bytes()).decode("ascii")
    return (f'@font-face {{ font-family: "{FAMILY}"; font-style: normal; font-weight: 100 900; font-display: block; '
            f'src: url(data:font/woff2;base64,{data}) format("woff2"); unicode-range: {UNICODE_RANGE}; }}')
