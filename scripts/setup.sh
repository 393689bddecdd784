#!/usr/bin/env bash
# Create .venv and install pypto-tune with the simulator. Idempotent; every install step lives here so that a
# clean clone (CI) needs nothing else. matplotlib is deliberately not installed (domain A.2b: 15 s per SIM run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# torch==2.13.0 is the CPU build on this machine's disk; naming it explicitly keeps pip from pulling a CUDA build.
# setuptools says "Editable installation. Please be careful with folders in your working directory with the same
# name as your package" on every editable build that maps folders (ours maps server/ and tools/ under pypto_tune):
# information, not a problem, and ten lines that look like a failure on a first run. Only that message is silenced.
PYTHONWARNINGS="ignore:Editable installation" \
  .venv/bin/python -m pip install --quiet -e ".[sim${EXTRA:+,$EXTRA}]"
# the run sandbox (bubblewrap): both the demo and the test command need it
bash scripts/install_bubblewrap.sh
.venv/bin/python -c "import pypto_tune.server.app, pypto" 2>/dev/null || { echo "setup failed: pypto-tune or pypto not importable" >&2; exit 1; }
