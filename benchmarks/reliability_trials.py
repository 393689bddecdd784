"""Crash-safety trials: SIGKILL a real stdio server at random points of a SIM session, N times, and print a table.

    .venv/bin/python benchmarks/reliability_trials.py [-n 100] [--seed 0] [--keep DIR]

Each trial: fresh workspace with the softmax fixture, a scripted session (precision, debug, collect, analyze, patch,
precision, collect, record, stop, report); the server's process group is killed inside a random step after a random
delay; then PRAGMA integrity_check, no round_decisions without rounds, operator file whole and known to the ledger,
and a new server resumes (start_session → resumed=true) and finishes (revert_patch if needed, stop, report).
The harness lives in tests/reliability/crash_harness.py (the CI test runs one random trial of it, plus a kill during
the baseline's simulator run; CRASH_SEEDS adds trials).
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.crash_harness import Trial, run_trial  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--trials", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="trial i uses seed SEED+i (reproduce one with -n 1)")
    p.add_argument("--keep", type=Path, default=None, help="keep the trial workspaces here")
    args = p.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="pypto-crash-"))
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    trials = []
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):  # finish the current trial, then print the table so far
        signal.signal(sig, lambda n, _f: stop.append(n))
    for i in range(args.trials):
        if stop:
            print(f"stopped by signal after {len(trials)} trials", file=sys.stderr)
            break
        try:
            t = run_trial(args.seed + i, base)
        except Exception as exc:  # noqa: BLE001 - a harness error is a failed trial, not the end of the run
            t = Trial(seed=args.seed + i, kill_step="?", problems=[f"harness: {type(exc).__name__}: {exc}"[:300]])
        trials.append(t)
        status = "ok" if t.ok else "FAIL " + "; ".join(t.problems)[:200]
        print(f"[{i + 1:3d}/{args.trials}] seed {t.seed:6d} kill in {t.kill_step:24s} +{t.kill_delay_s:5.2f}s "
              f"orphans {t.orphans} {','.join(t.notes) or '-':16s} recovery {t.recovery_s:5.2f}s {status}", file=sys.stderr, flush=True)
        if not args.keep and t.ok:
            import shutil
            shutil.rmtree(base / f"trial-{t.seed}", ignore_errors=True)
    failures = [t for t in trials if not t.ok]
    worst = max((t.recovery_s for t in trials), default=0.0)
    by_step = collections.Counter(t.kill_step.split("#")[0] for t in trials)
    cut_off = sum(1 for t in trials if "cut-off-write" in t.notes)
    undone = sum(1 for t in trials if "write-undone" in t.notes)
    print("| trials | failures | worst recovery time | orphaned test process after kill | write cut off by the kill "
          "(undone on resume) | wall time |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {len(trials)} | {len(failures)} | {worst:.2f} s | {sum(1 for t in trials if t.orphans)} | "
          f"{cut_off} ({undone}) | {time.monotonic() - t0:.0f} s |")
    print("\nkill points: " + ", ".join(f"{k} {v}" for k, v in sorted(by_step.items())))
    for t in failures:
        print(f"FAIL seed {t.seed} ({t.kill_step} +{t.kill_delay_s}s): {t.problems}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
