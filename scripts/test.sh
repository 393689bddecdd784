#!/usr/bin/env bash
# The README's test command: set everything up (simulator, test tools, headless Chromium) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRA=test bash scripts/setup.sh
bash scripts/install_chromium.sh
# pytest exits 5 when it collected nothing: that must fail loudly, never pass as "no test ran".
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
