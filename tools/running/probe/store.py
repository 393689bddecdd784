"""Probe records in the ledger's ``probes`` table (migration 5): one row per probed run.

The module list is the bulk of a record (~1 600 files with torch) and barely changes between rounds, so a row
stores it only when the session has not stored the same list before; :func:`from_rows` puts it back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from .models import ProbeRecord


def modules_hash(record: ProbeRecord) -> str:
    return hashlib.sha256("\n".join(record.modules).encode()).hexdigest()[:32]


def to_row(record: ProbeRecord, known_hashes: Iterable[str]) -> dict[str, Any]:
    """Columns ``status``, ``record``, ``modules_hash``, ``modules`` for a new ``probes`` row."""
    mh = modules_hash(record)
    body = record.model_dump(mode="json", exclude={"modules"})
    return {"status": record.status, "record": body, "modules_hash": mh,
            "modules": None if mh in set(known_hashes) else list(record.modules)}


def from_rows(row: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> ProbeRecord:
    """The record of ``row``, its module list taken from the first row of ``rows`` that stored it."""
    modules = row.get("modules")
    if modules is None:
        modules = next((r["modules"] for r in rows if r["modules_hash"] == row["modules_hash"]
                        and r.get("modules") is not None), [])
    return ProbeRecord.model_validate({**row["record"], "modules": list(modules or [])})
