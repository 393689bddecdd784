#!/usr/bin/env bash
# Create .venv and install pypto-tune with the simulator, the packages operators' own tests import (pytest) and the
# run sandbox. Every install step lives here so that a clean clone (CI) needs nothing else. matplotlib is
# deliberately not installed (domain A.2b: 15 s per SIM run).
#
# Idempotent and safe to re-run: when .venv already holds what is asked for (scripts/setup_state.py compares a
# stamp of pyproject.toml, the extras and these scripts), it changes no file and says so in one line — sessions and
# campaigns running from this checkout fingerprint the interpreter's files and would discard their next measurement
# after any rewrite. When it must change .venv while processes run from it, it names them and stops; --force goes on.
#   bash scripts/setup.sh            # EXTRA=test,ray bash scripts/setup.sh adds extras
#   bash scripts/setup.sh --force    # change .venv even though sessions run from it (they must start anew)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (the one option is --force; extras come from EXTRA=a,b)" >&2; exit 2 ;;
  esac
done
EXTRAS="sim,operator-tests${EXTRA:+,$EXTRA}"
# the run sandbox (bubblewrap): both the demo and the test command need it; installs nothing when present
bash scripts/install_bubblewrap.sh
if reason="$("$PY" scripts/setup_state.py check .venv "$EXTRAS")"; then
  echo "setup: .venv is up to date (extras ${EXTRAS}); nothing changed"
  exit 0
fi
users="$("$PY" scripts/setup_state.py users .venv)"
if [ -n "$users" ]; then
  echo "setup: .venv must change ($reason), but these processes run from it:" >&2
  printf '%s\n' "$users" | sed 's/^/  /' >&2
  if [ "$FORCE" != 1 ]; then
    echo "setup: changing it now would make every session among them discard its next run (\"the interpreter's files" \
         "changed\"). Stop them (stop_session, or pypto-tune campaign MANIFEST --stop) and run this again, or run" \
         "bash scripts/setup.sh --force and start those sessions anew." >&2
    exit 1
  fi
  echo "setup: --force: changing .venv anyway" >&2
fi
echo "setup: installing into .venv ($reason)"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# torch==2.13.0 is the CPU build on this machine's disk; naming it explicitly keeps pip from pulling a CUDA build.
# setuptools says "Editable installation. Please be careful with folders in your working directory with the same
# name as your package" on every editable build that maps folders (ours maps server/ and tools/ under pypto_tune):
# information, not a problem, and ten lines that look like a failure on a first run. Only that message is silenced.
PYTHONWARNINGS="ignore:Editable installation" \
  .venv/bin/python -m pip install --quiet -e ".[${EXTRAS}]"
.venv/bin/python -B -c "import pypto_tune.server.app, pypto" 2>/dev/null || { echo "setup failed: pypto-tune or pypto not importable" >&2; exit 1; }
"$PY" scripts/setup_state.py stamp .venv "$EXTRAS"
