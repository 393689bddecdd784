"""``pypto-tune knowledge export FILE | import FILE... | show``: the store as one file a team can share.

* ``export FILE`` — write the store (``--store``, default ``$PYPTO_TUNE_KNOWLEDGE`` or
  ``~/.config/pypto-tune/knowledge.json``) to FILE, seed rules included;
* ``import PATH...`` — merge into the store: knowledge files (from ``export``), ledgers (``ledger.sqlite3``),
  workspaces (their ledger is distilled) or campaign folders (every operator's workspace); the same observation
  imported twice is kept once; a path that cannot be read is reported (stderr) and skipped, the others imported
  (exit 1; exit 2 when nothing could be);
* ``show`` — what the store holds: observations by operator, change class and outcome.

A server or campaign uses a store only when told: ``serve --knowledge FILE``, ``campaign --knowledge FILE`` or
``PYPTO_TUNE_KNOWLEDGE``.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import orjson

from pypto_tune.tools.errors import InputError, PyptoTuneError
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


def _sources(path: Path) -> list[Path]:
    """What one path given to ``import`` stands for: a knowledge file or ledger itself; a workspace (its ledger); a
    campaign's folder (``campaign.json``: every operator's workspace); a folder holding campaign folders (the one
    ``campaign --copy-to DIR`` makes: ``DIR/.pypto-tune-campaign/<name>/``) or workspaces one level down."""
    from pypto_tune.tools.campaign.journal import CAMPAIGN_DIR, SPEC_FILE

    if not path.exists():
        raise InputError(f"{path} does not exist", hint="pass knowledge files, ledgers, workspaces or campaign folders")
    if path.is_file() or (path / ".pypto-tune" / "ledger.sqlite3").is_file():
        return [path]
    campaigns = [path] if (path / SPEC_FILE).is_file() else sorted(p.parent for p in (path / CAMPAIGN_DIR).glob(
        f"*/{SPEC_FILE}"))
    found: list[Path] = []
    for folder in campaigns:
        spec = orjson.loads((folder / SPEC_FILE).read_bytes()).get("spec", {})
        found += [Path(op["workspace"]) for op in spec.get("operators", []) if op.get("workspace")]
    found += sorted(p.parent.parent for p in path.glob("*/.pypto-tune/ledger.sqlite3"))
    if not found:
        raise InputError(f"{path} holds no ledger, workspace or campaign",
                         hint="pass a workspace (it holds .pypto-tune/ledger.sqlite3), a campaign's folder, a ledger "
                         "or a knowledge file")
    return list(dict.fromkeys(found))


def import_paths(store: Path, paths: list[Path]) -> tuple[list[str], list[str]]:
    """Merge knowledge files, ledgers, workspaces or campaign folders into ``store``, importing what it can. Returns
    one line per source imported (what it added) and then the store's total, and one line per source skipped (why,
    and what to do)."""
    from pypto_tune.tools.knowledge.distill import distill_workspace

    kf = read(store)
    lines: list[str] = []
    skipped: list[str] = []
    for given in paths:
        try:
            sources = _sources(given)
        except (PyptoTuneError, OSError, ValueError) as exc:
            skipped.append(f"{given}: skipped — {_why(exc)}")
            continue
        for p in sources:
            shown = str(p) if p == given else f"{given} → {p}"
            try:
                other = read(p) if p.is_file() and _is_knowledge_file(p) else distill_workspace(p)
            except (PyptoTuneError, OSError, ValueError) as exc:
                skipped.append(f"{shown}: skipped — {_why(exc)}")
                continue
            added, sessions = kf.merge(other)
            lines.append(f"{shown}: {added} observation(s) from {sessions} session(s) added "
                         f"({len(other.observations) - added} already there)")
    write(store, kf)
    lines.append(f"store {store}: {len(kf.observations)} observation(s) from {len(kf.sources)} session(s)"
                 + (f"; {len(skipped)} source(s) skipped" if skipped else ""))
    return lines, skipped


def _why(exc: BaseException) -> str:
    hint = getattr(exc, "hint", "")
    return f"{getattr(exc, 'message', None) or exc}" + (f". Next: {hint}" if hint else "")


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
        lines, skipped = import_paths(target, files)
        print("\n".join(lines))
        if skipped:
            print("\n".join(skipped), file=sys.stderr)
        # 2: nothing could be imported (as any usage error); 1: some sources were skipped, the rest imported
        return 0 if not skipped else 2 if len(lines) == 1 else 1
    if action == "show":
        print(show(target))
        return 0
    raise InputError(f"unknown action {action!r}", hint="export, import or show")


__all__ = ["import_paths", "knowledge_command", "show"]
