"""Record the run-time probe's record of a fixture operator's test, as the server would (the test data of
tests/search/test_search_reads_the_run.py).

    .venv/bin/python tests/search/data/record_probes.py upstream_layernorm layernorm_op.py::test_layer_norm
    .venv/bin/python tests/search/data/record_probes.py upstream_activation activation_ops.py::test_swiglu

Runs the test once in SIM in a scratch copy with the server's probe hook (``tools/running/probe``) and writes
``<operator>.probe.json`` here: the record as the ledger keeps it (``ProbeRecord.model_dump``), less the run's
module list and ``sys.path`` (machine-specific, and not read by the knob map or the search), plus the digests of
the fixture's files (``fixture_sha256``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pypto_tune.tools.running.probe import probe_env, read_records
from pypto_tune.tools.running.runner import build_child_env

HERE = Path(__file__).resolve().parent
OPS = HERE.parents[2] / "fixtures" / "operators"


def main() -> int:
    op, selector = sys.argv[1], sys.argv[2]
    work = Path(tempfile.mkdtemp(prefix="probe-record-"))
    try:
        ws = work / op
        shutil.copytree(OPS / op, ws, ignore=shutil.ignore_patterns("output", "__pycache__", ".pypto-tune"))
        (work / "rec").mkdir()
        script = selector.split("::", 1)[0]
        env = probe_env(build_child_env(run_mode="sim"), work / "rec")
        proc = subprocess.run([sys.executable, script, selector, "--run_mode", "sim"], cwd=ws, env=env,
                              capture_output=True, text=True, timeout=600)
        if proc.returncode:
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            return 1
        record = read_records(work / "rec", [str(ws)]).model_dump(mode="json")
        record["modules"], record["sys_path"] = [], []
        # what the server adds when it stores a record is the text that ran; here its digest, so a test can see that
        # the fixture is still the one the record is of (the line numbers refer to it)
        record["fixture_sha256"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ws.glob("*.py"))}
        (HERE / f"{op}.probe.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"written {HERE / f'{op}.probe.json'} ({record['status']})")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
