#!/usr/bin/env bash
# Mutation testing of tools/rules/: does a unit test fail when a gate decision changes?
#
#   bash scripts/mutation.sh                      # every module of tools/rules/; exit 1 on a live survivor
#   bash scripts/mutation.sh --json out.json      # also write every mutant's outcome (any benchmarks/mutation.py flag)
#
# cosmic-ray (pinned in the `mutation` extra; benchmarks/mutation.py installs it into .venv when missing) changes one
# decision at a time — a comparison's boundary, ==/!=, in/not in, is/is not, and/or, an added `not`, True/False, a
# number ± 1, +/-, a loop that never runs — in every function and table row of tools/rules/, never inside an f-string
# (a message's text is not a decision). The kill suite is the unit tier that specifies the rules
# (benchmarks/mutation.py: RULES_PACKAGE_SUITE, REFUSAL_BUILDERS_SUITE): no process, no simulator. A mutant no test
# kills fails the run unless benchmarks/mutation_equivalent.toml records it as equivalent, with the reason no input
# can tell it from the original. Runs under nice: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "mutation.sh: no $PY; run 'EXTRA=test bash scripts/setup.sh' first (or set PYTHON)" >&2
  exit 2
fi
exec nice -n 10 "$PY" benchmarks/mutation.py --rules --reexec --fail-on-survivors "$@"
