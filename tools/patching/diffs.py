"""Unified diffs: write them (a/ b/ paths, CRLF kept) and apply them strictly.

Strict means: every context and removed line must match the file exactly (the line ending aside, because an agent
types LF even for a CRLF file), hunks must apply in order without overlapping, and a diff that names a file
outside the allowed set, creates or deletes a file, or is empty is refused. Line numbers in ``@@`` headers may be
off (agents miscount); the hunk is placed at the matching position closest to the stated line, as ``patch`` does
with fuzz 0. Nothing is written here: the functions map text to text.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from ..errors import PatchError

HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_EOL = "\\ No newline at end of file"


def split_lines(text: str) -> list[str]:
    """Lines with their endings. Only '\\n' ends a line (str.splitlines also splits on \\x0c, \\u2028, ...)."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _diff_line(prefix: str, line: str) -> str:
    if line.endswith("\n"):
        return prefix + line
    return prefix + line + "\n" + NO_EOL + "\n"


def unified_diff(before: dict[str, str], after: dict[str, str], *, context: int = 3) -> str:
    """A unified diff of every file whose text differs, ``--- a/<path>`` / ``+++ b/<path>``, sorted by path.

    Files present on one side only are shown against /dev/null. CRLF line endings stay inside the diff lines, so
    applying the diff gives the exact bytes back.
    """
    out: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        a = split_lines(old or "")
        b = split_lines(new or "")
        out.append(f"--- {'a/' + path if old is not None else '/dev/null'}\n")
        out.append(f"+++ {'b/' + path if new is not None else '/dev/null'}\n")
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for group in matcher.get_grouped_opcodes(context):
            i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
            out.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@\n")
            for tag, a1, a2, b1, b2 in group:
                if tag == "equal":
                    out.extend(_diff_line(" ", ln) for ln in a[a1:a2])
                    continue
                out.extend(_diff_line("-", ln) for ln in a[a1:a2])
                out.extend(_diff_line("+", ln) for ln in b[b1:b2])
    return "".join(out)


def _range(start: int, stop: int) -> str:
    length = stop - start
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"


# ------------------------------------------------------------------------------------------------------- parse


@dataclass
class Hunk:
    number: int  # 1-based over the whole diff, for error messages
    header: str
    old_start: int
    lines: list[tuple[str, str]] = field(default_factory=list)  # (tag ' '/'-'/'+', text with ending)

    @property
    def old(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " -"]

    @property
    def new(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " +"]


@dataclass
class FilePatch:
    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)


def _strip_path(raw: str) -> str | None:
    path = raw.split("\t")[0].strip()
    if path == "/dev/null":
        return None
    return path


def parse_diff(diff: str) -> list[FilePatch]:
    lines = split_lines(diff)
    patches: list[FilePatch] = []
    current: FilePatch | None = None
    hunk: Hunk | None = None
    count = 0
    i = 0
    while i < len(lines):
        raw = lines[i]
        text = raw.rstrip("\n").rstrip("\r")
        if text.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = FilePatch(_strip_path(text[4:]), _strip_path(lines[i + 1].rstrip("\n").rstrip("\r")[4:]))
            patches.append(current)
            hunk = None
            i += 2
            continue
        m = HUNK_RE.match(text)
        if m:
            if current is None:
                raise PatchError("diff has a hunk before any '--- a/<file>' / '+++ b/<file>' header",
                                 hint="send a unified diff with file headers (git diff format)")
            count += 1
            hunk = Hunk(count, text, int(m.group(1)))
            current.hunks.append(hunk)
            i += 1
            continue
        if hunk is not None:
            if raw.startswith(("diff ", "index ", "new file", "deleted file", "similarity", "rename ")):
                hunk = None
                i += 1
                continue
            if text == NO_EOL:
                if hunk.lines:
                    tag, t = hunk.lines[-1]
                    hunk.lines[-1] = (tag, t[:-1] if t.endswith("\n") else t)
                i += 1
                continue
            if raw in ("\n", "\r\n"):  # an empty context line whose leading space an editor dropped
                hunk.lines.append((" ", raw))
            elif raw[0] in " -+":
                hunk.lines.append((raw[0], raw[1:]))
            else:
                hunk = None  # trailing prose after the diff
        i += 1
    if not patches or not any(p.hunks for p in patches):
        raise PatchError("the diff contains no hunks", hint="send a unified diff (--- a/file, +++ b/file, @@ ... @@)")
    return patches


# ------------------------------------------------------------------------------------------------------- apply


def _eol_free(line: str) -> str:
    return line.rstrip("\n").rstrip("\r")


def _file_eol(lines: list[str]) -> str:
    crlf = sum(1 for ln in lines if ln.endswith("\r\n"))
    lf = sum(1 for ln in lines if ln.endswith("\n")) - crlf
    return "\r\n" if crlf > lf else "\n"


def _matches_at(file_lines: list[str], old: list[str], pos: int) -> bool:
    if pos < 0 or pos + len(old) > len(file_lines):
        return False
    return all(_eol_free(file_lines[pos + k]) == _eol_free(old[k]) for k in range(len(old)))


def _first_mismatch(file_lines: list[str], old: list[str], pos: int) -> str:
    for k, want in enumerate(old):
        if pos + k >= len(file_lines):
            return f"line {pos + k + 1}: file ends, diff expects {_eol_free(want)!r}"
        if _eol_free(file_lines[pos + k]) != _eol_free(want):
            return f"line {pos + k + 1}: file has {_eol_free(file_lines[pos + k])!r}, diff expects {_eol_free(want)!r}"
    return ""


def apply_file_patch(path: str, text: str, patch: FilePatch, *, verbatim: bool = False) -> str:
    """Apply one file's hunks. ``verbatim``: the diff carries its own line endings (it contains CRLF), so added
    lines are kept byte for byte; otherwise (a hand-written LF diff) added lines take the file's line ending."""
    file_lines = split_lines(text)
    eol = _file_eol(file_lines)
    out: list[str] = []
    cursor = 0
    for hunk in patch.hunks:
        old = hunk.old
        stated = max(hunk.old_start - 1, 0) if old else hunk.old_start
        candidates = [p for p in range(cursor, len(file_lines) - len(old) + 1) if _matches_at(file_lines, old, p)]
        if not old:  # pure insertion: trust the stated position
            candidates = [min(max(stated, cursor), len(file_lines))]
        if not candidates:
            where = _first_mismatch(file_lines, old, stated) if stated >= cursor else "overlaps the previous hunk"
            raise PatchError(
                f"hunk {hunk.number} ({hunk.header}) of {path} does not match the file: {where}",
                hint="call list_knobs or read the file again and rebuild the diff from its current text, "
                     "or use knob + value instead of a diff",
            )
        pos = min(candidates, key=lambda p: (abs(p - stated), p))
        out.extend(file_lines[cursor:pos])
        matched = file_lines[pos:pos + len(old)]
        k = 0
        for tag, t in hunk.lines:
            if tag == " ":
                out.append(matched[k])  # the file's own bytes (its line ending) for context
                k += 1
            elif tag == "-":
                k += 1
            else:
                # Added lines take the file's line ending unless the diff carries one explicitly.
                if verbatim or not t.endswith("\n"):
                    out.append(t)
                else:
                    out.append(t[:-1] + eol)
        cursor = pos + len(old)
    out.extend(file_lines[cursor:])
    return "".join(out)


def _normalise(path: str | None, allowed: set[str], prefix: str) -> str | None:
    """Map a diff path to a source key: exact match first (a file may really be called 'a/x.py'), then without
    the git prefix (a/ for the old side, b/ for the new side) or a leading './'."""
    if path is None:
        return None
    if path in allowed:
        return path
    for p in (prefix, "./"):
        if path.startswith(p):
            return path[len(p):]
    return path


def apply_diff(sources: dict[str, str], diff: str) -> dict[str, str]:
    """Apply ``diff`` to ``sources`` (path -> text); return the new sources. Raises PatchError, touching nothing."""
    allowed = set(sources)
    result = dict(sources)
    seen: set[str] = set()
    for patch in parse_diff(diff):
        old = _normalise(patch.old_path, allowed, "a/")
        new = _normalise(patch.new_path, allowed, "b/")
        if old is None or new is None:
            raise PatchError(
                f"the diff creates or deletes a file ({patch.old_path or '/dev/null'} → {patch.new_path or '/dev/null'})",
                hint="a tuning patch may only modify the session's operator files: " + ", ".join(sorted(allowed)),
            )
        if old != new:
            raise PatchError(f"the diff renames {old} to {new}", hint="modify files in place")
        if old not in allowed:
            raise PatchError(
                f"the diff touches {old}, which is not one of the session's operator files",
                hint="allowed files: " + ", ".join(sorted(allowed)),
            )
        if old in seen:
            raise PatchError(f"the diff patches {old} twice", hint="merge the hunks into one file section")
        seen.add(old)
        result[old] = apply_file_patch(old, result[old], patch, verbatim="\r\n" in diff)
    return result
