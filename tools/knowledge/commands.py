"""``pypto-tune knowledge export FILE | import FILE... | show``: the store as one file a team can share.

* ``export FILE`` — write the store (``--store``, default ``$PYPTO_TUNE_KNOWLEDGE`` or
  ``~/.config/pypto-tune/knowledge.json``) to FILE, seed rules included;
* ``import FILE...`` — merge into the store: knowledge files (from ``export``), ledgers (``ledger.sqlite3``) or
  workspaces (their ledger is distilled); the same observation imported twice is kept once;
* ``show`` — what the store holds: observations by operator, change class and outcome.

A server or campaign uses a store only when told: ``serve --knowledge FILE``, ``campaign --knowledge FILE`` or
``PYPTO_TUNE_KNOWLEDGE``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.knowledge.store import FORMAT, default_store, read, write


def _is_knowledge_file(path: Path) -> bool:
    if path.suffix.lower() != ".json":
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return FORMAT in head or '"observations"' in head


def import_paths(store: Path, paths: list[Path]) -> list[str]:
    """Merge knowledge files, ledgers or workspaces into ``store``; one line per input saying what it added."""
    from pypto_tune.tools.knowledge.distill import distill_workspace

    kf = read(store)
    lines = []
    for p in paths:
        if not p.exists():
            raise InputError(f"{p} does not exist", hint="pass knowledge files, ledger files or workspaces")
        other = read(p) if p.is_file() and _is_knowledge_file(p) else distill_workspace(p)
        added, sources = kf.merge(other)
        lines.append(f"{p}: {added} observation(s) from {sources} session(s) added "
                     f"({len(other.observations) - added} already there)")
    write(store, kf)
    lines.append(f"store {store}: {len(kf.observations)} observation(s) from {len(kf.sources)} session(s)")
    return lines


def show(store: Path) -> str:
    kf = read(store)
    by_op = Counter(o.operator for o in kf.observations)
    by_class = Counter((o.change_class, o.outcome) for o in kf.observations)
    lines = [f"store {store}: {len(kf.observations)} observation(s) from {len(kf.sources)} session(s); seed "
             f"{kf.seed_version} ({len(kf.seed.get('rules', []))} rules)"]
    lines += [f"  {op}: {n}" for op, n in sorted(by_op.items())]
    lines += [f"  {cls} {outcome}: {n}" for (cls, outcome), n in sorted(by_class.items())]
    return "\n".join(lines)


def knowledge_command(action: str, files: list[Path], *, store: Path | None = None) -> int:
    target = (store or default_store()).expanduser()
    if action == "export":
        if len(files) != 1:
            raise InputError("export takes one file: the file to write", hint="pypto-tune knowledge export team.json")
        kf = read(target)
        write(files[0], kf)
        print(f"exported {len(kf.observations)} observation(s) from {len(kf.sources)} session(s) to {files[0]}")
        return 0
    if action == "import":
        if not files:
            raise InputError("import needs at least one knowledge file, ledger or workspace",
                             hint="pypto-tune knowledge import team.json")
        for line in import_paths(target, files):
            print(line)
        return 0
    if action == "show":
        print(show(target))
        return 0
    raise InputError(f"unknown action {action!r}", hint="export, import or show")


__all__ = ["import_paths", "knowledge_command", "show"]
