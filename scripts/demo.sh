#!/usr/bin/env bash
# The README's main job: set everything up, then run a complete tuning session on a bundled operator in SIM mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pypto-tune demo "$@"
