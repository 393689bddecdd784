"""Build prompts/fonts/report-cjk.woff2: Noto Sans CJK SC (SIL OFL 1.1) cut to the characters of the reports' zh
strings (tools/report/fonts.py::zh_texts) plus the CJK punctuation and fullwidth forms a zh sentence may use.

Run after adding a zh string with a new character (tests/report/test_report_font.py names the missing ones):

    .venv/bin/pip install 'fonttools[woff]'    # a developer's tool; the package and the demo do not need it
    .venv/bin/python scripts/build_report_font.py [--source /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc]

The source is Debian's fonts-noto-cjk (``apt-get install fonts-noto-cjk``). The family is renamed (a subset must not
pass for the whole font); the OFL text is copied beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTCollection, TTFont

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pypto_tune.tools.report.fonts import FAMILY, cjk_chars, zh_texts  # noqa: E402

DEFAULT_SOURCE = "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"
WANT = "Noto Sans CJK SC"
# CJK punctuation and the fullwidth forms of ASCII: small glyphs any zh sentence may use even if no string does yet.
ALWAYS = [chr(c) for c in range(0x3000, 0x3020)] + [chr(c) for c in range(0xFF01, 0xFF5F)]


def load(source: str) -> TTFont:
    if source.endswith(".ttc"):
        for font in TTCollection(source).fonts:
            if font["name"].getDebugName(1) == WANT:
                return font
        raise SystemExit(f"{source} holds no {WANT}")
    return TTFont(source)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default=DEFAULT_SOURCE, help="Noto Sans CJK SC (.ttc collection or .otf)")
    p.add_argument("--out", default=str(ROOT / "prompts" / "fonts" / "report-cjk.woff2"))
    args = p.parse_args()
    chars = sorted(set().union(*map(cjk_chars, zh_texts())) | set(ALWAYS))
    font = load(args.source)
    opts = subset.Options()
    opts.flavor = "woff2"
    opts.layout_features = ["kern", "vert", "locl"]  # no Japanese/Korean forms; locl keeps the SC shapes
    opts.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]  # copyright, names, version, licence text and URL
    opts.notdef_outline = True
    opts.hinting = False
    opts.desubroutinize = True  # compresses better under WOFF2's brotli
    sub = subset.Subsetter(opts)
    sub.populate(text="".join(chars))
    sub.subset(font)
    names = font["name"]
    for rec in names.names:
        if rec.nameID in (1, 4, 16):
            rec.string = FAMILY
        elif rec.nameID == 6:
            rec.string = FAMILY.replace(" ", "")
        elif rec.nameID == 3:
            rec.string = f"{FAMILY}; subset of Noto Sans CJK SC"
    font.flavor = "woff2"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(out)
    print(f"{out}: {out.stat().st_size} bytes, {len(chars)} characters")


if __name__ == "__main__":
    main()
