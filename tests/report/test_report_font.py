"""The CJK font a zh report embeds: a subset that draws every zh string the reports are built from, under its own
name, with its licence beside it; only zh reports carry it."""

from __future__ import annotations

import io
from importlib import resources

import pytest

from pypto_tune.tools.report.fonts import FAMILY, LICENCE_FILE, cjk_chars, font_bytes, font_face_css, zh_texts

ttlib = pytest.importorskip("fontTools.ttLib", reason="fontTools reads the subset (pip install -e .[test])")


def test_the_subset_draws_every_cjk_character_of_every_zh_string() -> None:
    cmap = ttlib.TTFont(io.BytesIO(font_bytes())).getBestCmap()
    missing = sorted({ch for text in zh_texts() for ch in cjk_chars(text) if ord(ch) not in cmap})
    assert missing == [], ("rebuild the subset: .venv/bin/python scripts/build_report_font.py", "".join(missing))


def test_the_subset_is_renamed_small_and_licensed() -> None:
    font = ttlib.TTFont(io.BytesIO(font_bytes()))
    assert font.flavor == "woff2" and font["name"].getDebugName(1) == FAMILY
    assert len(font_bytes()) < 160_000  # ~580 glyphs; the whole Noto Sans CJK SC is 16 MB
    licence = resources.files("pypto_tune.prompts").joinpath(*LICENCE_FILE).read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Noto Sans CJK SC" in licence


def test_the_font_face_serves_only_cjk_blocks_from_a_data_url() -> None:
    css = font_face_css()
    assert css.startswith("@font-face") and "url(data:font/woff2;base64," in css and "unicode-range: U+3000" in css
    assert "http" not in css.replace("http://www.adobe.com", "")


def test_zh_texts_cover_the_report_the_board_and_the_campaign_report() -> None:
    text = "".join(zh_texts())
    assert {"调", "优", "报", "告"} <= cjk_chars(text)  # report title
    assert "战役" in text  # campaign report
    assert "倍" in text  # the board's goal ("提升 12 倍"), written in board.py's code
