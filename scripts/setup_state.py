"""What scripts/setup.sh needs to decide before it touches .venv: is the environment already what was asked for, and
who runs from it right now.

Run with the base interpreter (never the venv's own, which would count itself as a user and could write bytecode
caches into the venv it inspects). Standard library only: it runs before anything is installed.

    python3 scripts/setup_state.py check VENV EXTRAS     # exit 0 and print nothing when VENV is up to date, else
                                                         # exit 1 and print why it must change (one line)
    python3 scripts/setup_state.py users VENV            # the processes running from VENV, one line each
    python3 scripts/setup_state.py stamp VENV EXTRAS     # record that VENV now holds EXTRAS for these inputs

Why a stamp: `pip install -e .` rewrites the package's dist-info and editable finder on every call even when nothing
changed, and a running session fingerprints the interpreter's files — so a second set-up made every session running
from the checkout discard its next measurement ("the interpreter's files changed since the session scanned them").
An editable install reads the sources from the checkout, so only the inputs of the install itself decide whether
it must run again: pyproject.toml's install tables (build system, project — dependencies, extras, scripts — and
setuptools' package list), the set-up scripts and the interpreter. Its other tables (pytest's options, the import
contract) configure the checks, not the install: editing them must not rewrite .venv under running sessions.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: what the install is made of; a change of any of them makes set-up run pip again
INPUTS = ("pyproject.toml", "scripts/setup.sh", "scripts/install_bubblewrap.sh")
#: pyproject.toml's tables that the install reads (``tool`` only for setuptools)
INSTALL_TABLES = ("build-system", "project")
STAMP_NAME = ".pypto-tune-setup"
LOCK_SUFFIX = "/.pypto-tune/server.lock"


def install_part(pyproject: bytes) -> bytes:
    """What of pyproject.toml the install depends on, canonically; the whole file where it cannot be parsed here (no
    ``tomllib`` before Python 3.11, or a syntax error pip will name)."""
    try:
        import tomllib
        data = tomllib.loads(pyproject.decode())
    except (ImportError, ValueError):
        return pyproject
    part = {k: data[k] for k in INSTALL_TABLES if k in data}
    part["tool.setuptools"] = data.get("tool", {}).get("setuptools")
    return json.dumps(part, sort_keys=True).encode()


def inputs_digest(venv: Path) -> str:
    h = hashlib.sha256()
    for rel in INPUTS:
        body = (ROOT / rel).read_bytes()
        if rel == "pyproject.toml":
            body = install_part(body)
        h.update(rel.encode() + b"\0" + body + b"\0")
    cfg = venv / "pyvenv.cfg"
    h.update(cfg.read_bytes() if cfg.is_file() else b"")  # the base interpreter the venv was made from
    return h.hexdigest()


def _extras(text: str) -> set[str]:
    return {e.strip() for e in text.split(",") if e.strip()}


def read_stamp(venv: Path) -> tuple[str, set[str]]:
    try:
        lines = (venv / STAMP_NAME).read_text().splitlines()
    except OSError:
        return "", set()
    fields = dict(line.split(" ", 1) for line in lines if " " in line)
    return fields.get("inputs", ""), _extras(fields.get("extras", ""))


def why_change(venv: Path, wanted: set[str]) -> str:
    """Empty when ``venv`` already holds ``wanted`` for the current inputs; else the reason it must change."""
    if not (venv / "bin" / "python").exists():
        return f"{venv} does not exist yet"
    digest, have = read_stamp(venv)
    if not digest:
        return f"no stamp of an earlier set-up in {venv}"
    if digest != inputs_digest(venv):
        return "pyproject.toml or the set-up scripts changed since the last set-up"
    missing = sorted(wanted - have)
    if missing:
        return f"extras not installed yet: {', '.join(missing)}"
    return ""


def _under(path: str, folder: Path) -> bool:
    p = os.path.abspath(path)
    return p == str(folder) or p.startswith(str(folder) + os.sep)


def _ppid(pid: str) -> str:
    try:
        stat = (Path("/proc") / pid / "stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[1]  # the command name in parentheses may hold spaces


def users(venv: Path) -> list[str]:
    """Every process whose program is one of ``venv``'s (the server, a campaign, a test run…), each with the
    workspace whose session lock it or a child holds; a child of a listed process (a test run, a supervisor) is
    counted under its parent. Processes of other users that /proc does not show are missed."""
    venv = Path(os.path.abspath(venv))
    found: dict[str, tuple[str, list[str]]] = {}
    for entry in sorted(Path("/proc").iterdir(), key=lambda p: (len(p.name), p.name)):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv if a]
        if not argv or not any(_under(os.path.join(cwd, a), venv) for a in argv[:2]):
            continue
        locks = []
        try:
            for fd in (entry / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.endswith(LOCK_SUFFIX):
                    locks.append(target[: -len(LOCK_SUFFIX)])
        except OSError:
            pass
        shown = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(argv)).replace("\n", " ")
        found[entry.name] = (shown if len(shown) <= 110 else shown[:107] + "...", locks)
    tops: dict[str, list[str]] = {}
    for pid in found:
        # the outermost listed ancestor, through unlisted ones too (a sandboxed run's parent is bwrap)
        top, cur = pid, _ppid(pid)
        while cur and cur not in {"0", "1"}:
            if cur in found:
                top = cur
            cur = _ppid(cur)
        tops.setdefault(top, []).append(pid)
    out = []
    for top, members in tops.items():
        locks = sorted({w for m in members for w in found[m][1]})
        more = f" (+{len(members) - 1} child processes)" if len(members) > 1 else ""
        held = f" — holds the session of {', '.join(locks)}" if locks else ""
        out.append(f"pid {top}: {found[top][0]}{more}{held}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in {"check", "users", "stamp"}:
        print(__doc__, file=sys.stderr)
        return 2
    venv = Path(os.path.abspath(argv[1]))
    if argv[0] == "users":
        print("\n".join(users(venv)))
        return 0
    wanted = _extras(argv[2] if len(argv) > 2 else "")
    if argv[0] == "check":
        reason = why_change(venv, wanted)
        if reason:
            print(reason)
        return 1 if reason else 0
    digest, have = read_stamp(venv)
    # extras accumulate: pip never removes one a later, narrower install does not name
    keep = have if digest == inputs_digest(venv) else set()
    (venv / STAMP_NAME).write_text(f"inputs {inputs_digest(venv)}\nextras {','.join(sorted(keep | wanted))}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
