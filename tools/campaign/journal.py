"""The campaign's own record: where it lives, what it was started with, and an append-only journal of events.

The sessions' ledgers stay the truth about tuning (what ran, what was kept); the journal says what the *campaign*
did around them: which operator it started and when, which batch it ran, a run lost with its Ray node and run
again elsewhere, an operator that failed and why, a driver that started or resumed, a stop. One JSON object per
line, written with ``O_APPEND`` and fsync'd, so a killed driver leaves at most one torn last line, which the reader
skips (and says so).

Layout of a campaign folder (``--out``; default ``<manifest folder or --copy-to>/.pypto-tune-campaign/<name>/``)::

    campaign.json      the resolved spec, its digest and the campaign id (written once)
    journal.jsonl      events
    driver.json        pid and start of the driver now running (removed when it ends)
    stop               a stop request (``stop_campaign`` / ``pypto-tune campaign --stop``)
    board.json/.html   the live board (tools/campaign/board.py)
    campaign_report[_en].md/.html   the final report (tools/campaign/report.py)
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pypto_tune.tools.campaign.manifest import CampaignSpec
from pypto_tune.tools.errors import InputError

SPEC_FILE = "campaign.json"
JOURNAL_FILE = "journal.jsonl"
DRIVER_FILE = "driver.json"
STOP_FILE = "stop"
CAMPAIGN_DIR = ".pypto-tune-campaign"


def default_out(spec: CampaignSpec) -> Path:
    """``<home>/.pypto-tune-campaign/<name>/``: home is the manifest's folder, or the folder operators are copied to
    (never inside a folder of operators that is only read)."""
    origin = Path(spec.origin)
    base = Path(spec.home) if spec.home else origin if origin.is_dir() else origin.parent
    return base / CAMPAIGN_DIR / spec.name


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def atomic_write(path: Path, text: str) -> None:
    """Write a whole file so that a reader (the board page, campaign_status) never sees half of it."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class CampaignDir:
    """One campaign's folder."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()

    # -- the spec ------------------------------------------------------------------------------------------------
    @property
    def spec_file(self) -> Path:
        return self.path / SPEC_FILE

    def exists(self) -> bool:
        return self.spec_file.is_file()

    def create(self, spec: CampaignSpec) -> str:
        """Write the spec once; returns the campaign id."""
        self.path.mkdir(parents=True, exist_ok=True)
        cid = f"{spec.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        atomic_write(self.spec_file, json.dumps({"id": cid, "created_at": now_iso(), "digest": spec.digest(),
                                                  "spec": spec.model_dump(mode="json")}, indent=1))
        return cid

    def record(self) -> dict[str, Any]:
        try:
            return json.loads(self.spec_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.path} is not a campaign folder ({SPEC_FILE}: {exc})",
                             hint="pass the folder start_campaign / pypto-tune campaign printed") from None

    @property
    def campaign_id(self) -> str:
        return str(self.record()["id"])

    def spec(self) -> CampaignSpec:
        return CampaignSpec.model_validate(self.record()["spec"])

    # -- the journal ---------------------------------------------------------------------------------------------
    @property
    def journal_file(self) -> Path:
        return self.path / JOURNAL_FILE

    def log(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"at": now_iso(), "t": round(time.time(), 3), "event": event, **fields}
        line = (json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        fd = os.open(self.journal_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return entry

    def events(self) -> list[dict[str, Any]]:
        """Every whole event; a torn last line (a driver killed mid-write) is left out."""
        try:
            raw = self.journal_file.read_bytes()
        except FileNotFoundError:
            return []
        out = []
        for line in raw.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    # -- the running driver and stop requests ------------------------------------------------------------------
    @property
    def driver_file(self) -> Path:
        return self.path / DRIVER_FILE

    def claim_driver(self) -> None:
        atomic_write(self.driver_file, json.dumps({"pid": os.getpid(), "since": now_iso()}))

    def release_driver(self) -> None:
        try:
            if json.loads(self.driver_file.read_text()).get("pid") == os.getpid():
                self.driver_file.unlink()
        except (OSError, ValueError):
            pass

    def driver_pid(self) -> int | None:
        """The pid of the driver running this campaign now, or None (none recorded, or it is gone)."""
        try:
            pid = int(json.loads(self.driver_file.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def driver_holder(self) -> str | None:
        """Who drives this campaign now ("pid 123 (since 2026-…)"), or None."""
        pid = self.driver_pid()
        if pid is None:
            return None
        try:
            since = json.loads(self.driver_file.read_text()).get("since", "?")
        except (OSError, ValueError):
            since = "?"
        return f"pid {pid} (since {since})"

    @property
    def stop_file(self) -> Path:
        return self.path / STOP_FILE

    def request_stop(self, reason: str, *, force: bool = False) -> None:
        atomic_write(self.stop_file, json.dumps({"at": now_iso(), "reason": reason, "force": force}))

    def stop_request(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.stop_file.read_text())
        except (OSError, ValueError):
            return None

    def clear_stop(self) -> None:
        self.stop_file.unlink(missing_ok=True)
