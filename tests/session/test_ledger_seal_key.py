"""The ledger's seal key: created once, whole, by whichever server starts first; never read half-written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pypto_tune.tools.errors import LedgerError

pytestmark = pytest.mark.process

_RACE = r"""
import os, sys, multiprocessing as mp
os.environ["PYPTO_TUNE_SEAL_KEY"] = sys.argv[1]
from pypto_tune.tools.session.ledger_seal import load_key
def one(_):
    return load_key().hex()
if __name__ == "__main__":
    with mp.get_context("fork").Pool(8) as pool:
        print("\n".join(sorted(set(pool.map(one, range(48))))))
"""


def test_servers_starting_together_agree_on_one_whole_key(tmp_path: Path) -> None:
    key = tmp_path / "cfg" / "ledger-seal.key"
    out = subprocess.run([sys.executable, "-c", _RACE, str(key)], capture_output=True, text=True, timeout=120,
                         check=True).stdout.split()
    assert len(out) == 1 and bytes.fromhex(out[0]) == key.read_bytes() and len(out[0]) == 64
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in key.parent.iterdir()) == ["ledger-seal.key"]  # no temporary file left


def test_a_truncated_key_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pypto_tune.tools.session.ledger_seal import load_key

    key = tmp_path / "short.key"
    key.write_bytes(b"abc")
    monkeypatch.setenv("PYPTO_TUNE_SEAL_KEY", str(key))
    with pytest.raises(LedgerError, match="too short"):
        load_key()
    assert os.path.getsize(key) == 3  # never overwritten
