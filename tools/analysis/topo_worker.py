"""Read ``dyn_topo.txt`` on the second core while the main process decodes the trace.

At 500k tasks the task graph costs ~0.45 s CPU (numpy columns + AIV chains, ``topo_columns``) plus ~0.2 s of
interpreter start-up, against ~2.5 s for the trace, and shares nothing with the trace decode, so it runs in a child
process: ``python -m pypto_tune.tools.analysis._topo_main FILE`` prints one JSON object (the summary, or the
``ArtifactError`` it hit) on stdout. Its memory (~100 MB at 500k rows, interpreter included) overlaps the trace
decode and is counted by the benchmark. A plain subprocess, not multiprocessing: the
server calls this from worker threads, where forking the server itself is unsafe, and spawn/forkserver would
re-import the console-script ``__main__``.

Small files are read in-process (starting an interpreter costs more than the scan). If the child cannot start,
dies or prints nothing usable, the file is read in-process instead and the result is the same; ``PYPTO_TUNE_INLINE_TOPO=1``
forces that path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec

from pypto_tune.tools.analysis.topo_columns import MAX_GROUPS_KEPT, MAX_LEVELS_KEPT, chains_of, read_columns
from pypto_tune.tools.errors import ArtifactError

# The child imports only numpy, msgspec and topo_columns (~0.2 s, ~30 MB, measured); pydantic, the models and the
# text reader (chains, topo) are imported when needed: in the parent, or in the child for a file the columns do not
# cover.

# ~200k rows. The child pays ~0.2 s of start-up to save ~12 ms per MiB of dyn_topo.txt (measured at 500k rows):
# below this the saving is a few tens of ms, not worth a process.
MIN_OFFLOAD_BYTES = 16 << 20
INLINE_ENV = "PYPTO_TUNE_INLINE_TOPO"


def _encode(summary: dict) -> bytes:
    chains = summary["chains"]
    return msgspec.json.encode({
        "ok": True, "layout": summary["layout"],
        "chains": chains if isinstance(chains, dict) else chains.model_dump(mode="json"),
        "psg": [[leaf, sorted(ids)] for leaf, ids in summary["psg"].items()],
    })


def _decode(data: bytes) -> dict:
    doc = msgspec.json.decode(data)
    if not doc.get("ok"):
        raise ArtifactError(doc["summary"], path=doc["path"], where=doc["where"], expected=doc["expected"],
                            hint=doc["hint"])
    from pypto_tune.tools.analysis.models import AivChains

    return {"layout": doc["layout"], "chains": AivChains.model_validate(doc["chains"]),
            "psg": {int(leaf): set(ids) for leaf, ids in doc["psg"]}}


class TopoJob:
    """``topo_summary(path)``, started now and collected by ``result()``."""

    def __init__(self, path: Path, *, min_offload_bytes: int | None = None) -> None:
        self.path = Path(path)
        if min_offload_bytes is None:
            min_offload_bytes = MIN_OFFLOAD_BYTES
        self.offloaded = False
        self._proc: subprocess.Popen | None = None
        try:
            big = self.path.stat().st_size >= min_offload_bytes
        except OSError:
            big = False  # the in-process read reports the missing file properly
        if big and os.environ.get(INLINE_ENV) != "1":
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "pypto_tune.tools.analysis._topo_main", str(self.path)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                self.offloaded = True
            except OSError:
                self._proc = None

    def result(self) -> dict:
        if self._proc is not None:
            out, _ = self._proc.communicate()
            if self._proc.returncode == 0 and out:
                try:
                    return _decode(out)
                except (msgspec.DecodeError, KeyError, ValueError, TypeError):
                    pass  # a garbled answer: fall through to the in-process read
            self.offloaded = False
        from pypto_tune.tools.analysis.chains import topo_summary

        return topo_summary(self.path)

    def cancel(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def _summary(path: Path) -> dict:
    """``chains.topo_summary`` without building the models: the parent validates the plain fields."""
    cols = read_columns(path)
    if cols is not None:
        return {"layout": cols.layout, "chains": chains_of(cols, MAX_GROUPS_KEPT, MAX_LEVELS_KEPT),
                "psg": cols.leaf_psg}
    from pypto_tune.tools.analysis.chains import text_summary

    return text_summary(path)


def main(argv: list[str]) -> int:
    try:
        out = _encode(_summary(Path(argv[0])))
    except ArtifactError as exc:
        out = msgspec.json.encode({"ok": False, "summary": exc.summary, "path": exc.path, "where": exc.where,
                                   "expected": exc.expected, "hint": exc.hint})
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
