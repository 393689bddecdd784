"""Campaign benchmark (issue #19): wall time against the ideal, and what the knowledge store is worth.

    .venv/bin/python benchmarks/campaign_bench.py                            # both parts, local pool, 2 slots
    .venv/bin/python benchmarks/campaign_bench.py --ray                      # the wall-time part on Ray as well
    .venv/bin/python benchmarks/campaign_bench.py --part knowledge --ledgers DIR   # LOO from existing workspaces

**Wall time** (``--part wall``). A real campaign (``pypto-tune campaign``, SIM) over the operators that have a
measured grid (``benchmarks/grids/``), ``--trials`` trials each, on ``--slots`` k workers: the local pool, and with
``--ray`` a Ray cluster of k CPUs on loopback (``ray start --head`` inside a network namespace this script creates;
needs root). The ideal wall time is the sum of the sessions' run times (every run each ledger records: baselines,
stage-entry collections, trials) over k: what k workers kept busy all the time would need. Printed: wall, the sum,
the ideal and wall / ideal (goal ≤ 1.15). The sessions' own bookkeeping (analysis, admission, ledger) runs on the
driver's cores, which are the runs' cores here: it is part of the ratio, not hidden from it.

**Knowledge** (``--part knowledge``). Leave one operator out, for every grid: the store is distilled from the
*other* operators' ledgers (those the wall-time part just wrote, or ``--ledgers DIR``: a folder of workspaces); the
left-out operator's grid is then replayed offline under the server's rules (``benchmarks/search_offline.py``'s
replay: one knob per trial from the kept state, keep on strict gain, stage exits) ranked twice — by the seed priors
alone (``model``: the hand-written rules, held out as that benchmark does), by seed and store
(``model+knowledge``), and by the store alone in place of the hand-written model (``knowledge-only``: what the other
operators' ledgers teach by themselves). Printed per operator: trials to 90 % and 99 % of the grid's speed-up, failed trials, the
speed-up after the budget; goal: fewer trials on most operators, and never a failed trial kept (a replay keeps only
strict gains, so a failure can never be kept: the count of failed trials is what the store can lower).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ROOT / "benchmarks" / "grids"
OPERATORS = ROOT / "fixtures" / "operators"
sys.path.insert(0, str(ROOT / "benchmarks"))


def grid_operators() -> list[str]:
    return sorted(p.stem for p in GRIDS.glob("*.json") if (OPERATORS / p.stem / "grid.json").is_file())


def manifest(root: Path, names: list[str], trials: int, goal: float) -> Path:
    """One [[operator]] per grid operator, with the grid's own test command."""
    lines = ['name = "bench"', "batch = 2", "", "[defaults]", 'run_mode = "sim"', f"goal_speedup = {goal}",
             f"trials = {trials}", "wall_h = 6", ""]
    for name in names:
        if (OPERATORS / name / "grid.json").is_file():
            spec = json.loads((OPERATORS / name / "grid.json").read_text())
            files = sorted({k["file"] for k in spec["knobs"]})
            cmd = ["python", *spec["command"]]
        else:  # the single-file fixtures: <name>.py --run-mode sim
            files, cmd = [f"{name}.py"], ["python", f"{name}.py", "--run-mode", "sim"]
        lines += ["[[operator]]", f'name = "{name}"', f'workspace = "ws/{name}"', f'source = "{OPERATORS / name}"',
                  "operator_files = " + json.dumps(files), "test_command = " + json.dumps(cmd), ""]
    root.mkdir(parents=True, exist_ok=True)
    path = root / "campaign.toml"
    path.write_text("\n".join(lines))
    return path


# ---------------------------------------------------------------------------------------------- wall time


def occupancy(root: Path, slots: int) -> dict[str, Any]:
    """How busy the k slots were, from every ledger's runs (start, duration) in ``root/ws/*``: the span from the
    first run's start to the last one's end, the seconds with n runs executing, and the slot-seconds inside the span
    in which no run executed, per run (what the executor and the sessions' bookkeeping cost between runs; the time
    before the first run and after the last one is the campaign's start and end)."""
    import sqlite3

    spans = []
    for db in sorted(root.glob("ws/*/.pypto-tune/ledger.sqlite3")):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            spans += [(s, s + d) for s, d in con.execute("SELECT started_epoch, duration_s FROM runs")]
        finally:
            con.close()
    if not spans:
        return {}
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    at: dict[int, float] = {}
    running, last = 0, edges[0][0]
    for t, step in edges:
        at[running] = at.get(running, 0.0) + t - last
        running, last = running + step, t
    span = max(e for _, e in spans) - min(s for s, _ in spans)
    idle = slots * span - sum(e - s for s, e in spans)
    return {"runs": len(spans), "span_s": round(span, 1), "seconds_with_n_running": {n: round(v, 1) for n, v in
            sorted(at.items())}, "idle_slot_s": round(idle, 1), "idle_slot_s_per_run": round(idle / len(spans), 2)}


def run_campaign(root: Path, names: list[str], args: argparse.Namespace, *, ray_address: str | None) -> dict:
    m = manifest(root, names, args.trials, args.goal)
    cmd = [sys.executable, "-m", "pypto_tune.server.cli", "campaign", str(m), "--quiet"]
    cmd += ["--executor", "ray", "--ray-address", ray_address] if ray_address else ["--slots", str(args.slots)]
    if args.concurrency:
        cmd += ["--concurrency", str(args.concurrency)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=str(root), capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"campaign failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    from pypto_tune.tools.campaign.facts import latest_session

    sessions = {n: latest_session(root / "ws" / n) for n in names}
    run_s = sum(f.run_s for f in sessions.values() if f)
    runs = {}
    for n, f in sessions.items():
        runs[n] = {"run_s": f.run_s if f else None, "trials": f.trials if f else None,
                   "speedup": round(f.speedup, 3) if f and f.speedup else None,
                   "finish": f.finish_reason if f else None}
    return {"wall_s": round(wall, 1), "run_s": round(run_s, 1), "slots": args.slots,
            "ideal_s": round(run_s / args.slots, 1), "ratio": round(wall / (run_s / args.slots), 3) if run_s else None,
            "sessions": runs, "stdout": r.stdout[-600:], "occupancy": occupancy(root, args.slots)}


RAY_WRAPPER = """
import ctypes, os, signal, subprocess, sys, json, time
# the bench killed → this wrapper ends too, and its finally stops the cluster (it went on running the whole campaign)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() == 1:
    sys.exit(143)
sys.path.insert(0, {executors!r})
from ray_scenarios import enter_loopback_namespace
enter_loopback_namespace()
ray = os.path.join(os.path.dirname(sys.executable), "ray")
# a lean head (README "Campaigns"): no dashboard, no autoscaler monitor, no log monitor (the executor keeps worker logs on
# the workers anyway); what is left are the GCS, the raylet and its two agents. Workers at nice 0, not Ray's 15: the
# local pool's runs compete with the rest of the machine at the benchmark's own priority, and so must Ray's
subprocess.run([ray, "start", "--head", "--port", "6399", "--num-cpus", sys.argv[1], "--include-dashboard", "false",
                "--no-monitor", "--include-log-monitor", "false", "--node-ip-address", "127.0.0.1",
                "--disable-usage-stats"], check=True, capture_output=True, env={{**os.environ, "RAY_worker_niceness": "0"}})
try:
    r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
    sys.stdout.write(r.stdout); sys.stderr.write(r.stderr)
finally:
    # stop this cluster by its processes (they name our TMPDIR), never `ray stop` (it stops every Ray of the machine):
    # SIGTERM, a few seconds, then SIGKILL what is left (the GCS server can outlive a SIGTERM). The dashboard and
    # runtime-env agents rename themselves (ray::DashboardAgent): their environment still names our TMPDIR.
    tmp = os.environ["TMPDIR"].encode()
    def ours():
        out = []
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != os.getpid():
                for part in ("cmdline", "environ"):
                    try:
                        if tmp in open(f"/proc/{{p}}/{{part}}", "rb").read():
                            out.append(int(p))
                            break
                    except OSError:
                        pass
        return out
    for sig in (15, 9):
        for p in ours():
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.time() + 10
        while ours() and time.time() < deadline:
            time.sleep(0.3)
"""


def wall_part(args: argparse.Namespace, work: Path, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"load_before": [round(x, 2) for x in os.getloadavg()]}
    print(f"\n## Wall time: {len(names)} operators, {args.trials} trials each, batch 2, {args.slots} workers "
          f"(load average before: {os.getloadavg()[0]:.1f})")
    if "local" in args.executors:
        out["local"] = run_campaign(work / "local", names, args, ray_address=None)
    if "ray" in args.executors:
        base = Path(tempfile.mkdtemp(prefix="pcb", dir="/tmp"))
        (base / "tmp").mkdir()
        m = manifest(base / "ray", names, args.trials, args.goal)
        wrapper = RAY_WRAPPER.format(executors=str(ROOT / "tests" / "executors"))
        cmd = [sys.executable, "-c", wrapper, str(args.slots), sys.executable, "-m", "pypto_tune.server.cli",
               "campaign", str(m), "--quiet", "--executor", "ray", "--ray-address", "127.0.0.1:6399"]
        env = {**os.environ, "TMPDIR": str(base / "tmp")}
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=str(base / "ray"), capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        journal = base / "ray" / ".pypto-tune-campaign" / "bench" / "journal.jsonl"
        if r.returncode not in (0, 1) or not journal.is_file():
            raise SystemExit(f"the Ray campaign failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        from pypto_tune.tools.campaign.facts import latest_session

        run_s = sum((latest_session(base / "ray" / "ws" / n) or _none()).run_s for n in names)
        events = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
        started = next(e for e in events if e["event"] == "driver-started")["t"]
        ended = next(e for e in events if e["event"] == "campaign-ended")["t"]
        out["ray"] = {"wall_s": round(wall, 1), "campaign_s": round(ended - started, 1), "run_s": round(run_s, 1),
                      "ideal_s": round(run_s / args.slots, 1), "ratio": round(wall / (run_s / args.slots), 3),
                      "ratio_campaign": round((ended - started) / (run_s / args.slots), 3), "rc": r.returncode,
                      "folder": str(base) if args.keep is not None else None,
                      "occupancy": occupancy(base / "ray", args.slots)}
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print("| executor | workers | wall s | Σ session run s | ideal s (Σ / k) | wall / ideal |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in out.items():
        if name == "load_before":
            continue
        extra = (f" (driver to end {row['campaign_s']} s: {row['ratio_campaign']}×; the rest is the cluster's "
                 "start and stop)") if name == "ray" else ""
        print(f"| {name} | {args.slots} | {row['wall_s']} | {row['run_s']} | {row['ideal_s']} | "
              f"**{row['ratio']}**{extra} |")
    for name, row in out.items():
        occ = row.get("occupancy") if isinstance(row, dict) else None
        if occ:
            print(f"   {name}: {occ['runs']} runs over {occ['span_s']} s; seconds with 0 / 1 / 2… runs executing: "
                  f"{' / '.join(str(v) for v in occ['seconds_with_n_running'].values())}; idle slot-seconds between "
                  f"the first run and the last: {occ['idle_slot_s']} ({occ['idle_slot_s_per_run']} per run)")
    print(f"   load average after: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1 / 5 / 15 min)")
    if "local" in out:
        loc = out["local"]["sessions"]
        print("   sessions: " + "; ".join(f"{n} {s['speedup']}× in {s['trials']} trials" for n, s in loc.items()))
    return out


def _none() -> Any:
    class Z:
        run_s = 0.0
    return Z()


# ---------------------------------------------------------------------------------------------- knowledge


#: the replay's rankings: seed only (the hand-written model, its one-operator rules held out), seed + store, store
#: alone in place of the model, and neither
ARMS = ("model", "model+knowledge", "knowledge-only", "neither")


def knowledge_part(args: argparse.Namespace, ledgers: Path, names: list[str]) -> dict[str, Any]:
    import search_offline as so
    from pypto_tune.tools.knowledge.distill import distill_workspace
    from pypto_tune.tools.knowledge.store import KnowledgeFile, write
    from pypto_tune.tools.search import priors as priors_mod

    so.VARIANTS["model+knowledge"] = ("model", frozenset({"model", "history", "analysis", "knowledge"}))
    so.VARIANTS["knowledge-only"] = ("model", frozenset({"history", "analysis", "knowledge"}))
    # neither the hand-written model nor the store: the baseline "store alone" must beat to have taught anything,
    # free of the seed's weights (which were chosen looking at the tuned-on grids)
    so.VARIANTS["neither"] = ("model", frozenset({"history", "analysis"}))
    spaces = sorted(p for p in ledgers.iterdir() if (p / ".pypto-tune" / "ledger.sqlite3").is_file())
    # one store per workspace (named after its operator in the manifest): a session names its operator after its
    # first file (softmax_op for upstream_softmax), so leaving one out goes by workspace, never by that name
    by_ws = {ws.name: distill_workspace(ws) for ws in spaces}
    full = KnowledgeFile()
    for kf in by_ws.values():
        full.merge(kf)

    def without(name: str) -> KnowledgeFile:
        kf = KnowledgeFile()
        for ws, part in by_ws.items():
            if ws != name:
                kf.merge(part)
        return kf
    per_op = {ws: len(kf.observations) for ws, kf in by_ws.items()}
    print(f"\n## Knowledge, leave one operator out: {len(full.observations)} observations from {len(spaces)} "
          f"workspaces in {ledgers} ({', '.join(f'{k} {v}' for k, v in sorted(per_op.items()))})")
    print("| left out | N | grid × | floor: trials → 90 % / 99 % | first answer on the grid | "
          "store: observations (operators) | "
          "seed only: trials → 90 % / 99 % | seed + store | store alone | neither | failed trials (seed / +store / "
          "alone / neither) | × after budget (seed / +store / alone / neither) |")
    print("|---|---:|---:|---|---:|---|---|---|---|---|---|---|")
    mg = so._load_measure_grid()
    cache = so.offline_cache(Path(args.cache))
    vec_cache = cache.entries.setdefault("__grid_vectors__", {})
    # every ranking starts from the kept state's probe record, as in a session (search_offline.Probes); without it
    # the upstream-style grids get no candidate at all
    probes = so.Probes(Path(args.probes_cache), mg, enabled=not args.no_probe)
    tmp = Path(tempfile.mkdtemp(prefix="pcb-k"))
    rows: dict[str, Any] = {}
    for name in names:
        grid = so.Grid(name, mg, vec_cache)
        # the store from every OTHER operator's ledger (load_priors(holdout=name) drops that operator's too)
        store = tmp / f"without-{name}.json"
        others = without(name)
        write(store, others)
        priors_mod.configure_knowledge(store)
        try:
            res = {}
            for rk in ARMS:
                run = so.replay(grid, rk, batch=args.batch, budget=args.budget, holdout=True, cache=cache,
                                probes=probes)
                s = so.summarise(grid, [run], args.batch)
                kept_failed = sum(1 for t in run["trials"] if t["outcome"] == "kept" and t["time_us"] is None)
                res[rk] = {"trials_90": s["trials_90"], "trials_99": s["trials_99"],
                           "failed": sum(1 for t in run["trials"] if t["outcome"] == "failed"),
                           "kept_failed": kept_failed, "final": round(s["final_speedup"], 3),
                           "trials": len(run["trials"])}
        finally:
            priors_mod.configure_knowledge(None)
        cache.save()
        ops = sorted(w for w in by_ws if w != name and by_ws[w].observations)
        arms = [res[k] for k in ARMS]

        def t(x: dict) -> str:
            return f"{x['trials_90'] or 'never'} / {x['trials_99'] or 'never'}"
        label = f"{name} (held out)" if so.held_out(name) else name
        floors = {"trials_90": grid.floor(90), "trials_99": grid.floor(99)}
        floor = " / ".join("never" if f is None else str(f) for f in floors.values())
        on, proposed = grid.on_grid_share(cache, probes.get(grid, grid.sources))
        print(f"| {label} | {grid.n} | {grid.speedup:.2f} | {floor} | {on} of {proposed} | "
              f"{len(others.observations)} ({len(ops)}) | "
              + " | ".join(t(x) for x in arms) + " | " + " / ".join(str(x["failed"]) for x in arms) + " | "
              + " / ".join(str(x["final"]) for x in arms) + " |")
        res["floor"] = floors
        res["on_grid"] = {"on": on, "proposed": proposed}
        rows[name] = res
    for with_, without_, what in (("model+knowledge", "model", "seed + store against seed only"),
                                  ("knowledge-only", "neither", "store alone against neither"),
                                  ("model+knowledge", "neither", "seed + store against no store at all")):
        for subset, title in ((list(rows), "every grid"), ([n for n in rows if so.held_out(n)], "held-out grids")):
            if not subset:
                continue
            a = [(rows[n][with_]["trials_90"] or 99, rows[n][without_]["trials_90"] or 99) for n in subset]
            print(f"   {what}, {title}: trials to 90 % fewer on {sum(1 for x, y in a if x < y)}, equal on "
                  f"{sum(1 for x, y in a if x == y)}, more on {sum(1 for x, y in a if x > y)} of {len(a)}")
    # where the seed already needs no more trials than the floor, no prior can need fewer: only the other grids
    # can show "fewer with the store than without it"
    at_floor = [n for n in rows if rows[n]["floor"]["trials_90"] is not None
                and rows[n]["model"]["trials_90"] == rows[n]["floor"]["trials_90"]]
    above = [n for n in rows if rows[n]["floor"]["trials_90"] is not None and n not in at_floor]
    print(f"   the seed alone reaches 90 % in the floor's number of trials on {len(at_floor)} of {len(rows)} grids; "
          f"above it on {len(above)} ({', '.join(above) or 'none'}); no walk reaches 90 % on "
          f"{sum(1 for n in rows if rows[n]['floor']['trials_90'] is None)}")
    kept_failed = sum(r[k]["kept_failed"] for r in rows.values() for k in ARMS)
    print(f"   failed trials kept, any arm: {kept_failed}; simulator runs for probe records: {probes.runs}")
    shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="wall,knowledge", help="wall, knowledge or both (default)")
    ap.add_argument("--slots", type=int, default=2, help="workers k (local pool slots / Ray CPUs)")
    ap.add_argument("--trials", type=int, default=12, help="trials per operator in the campaign")
    ap.add_argument("--goal", type=float, default=1000.0, help="goal speed-up (high: the budget ends the sessions)")
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--ray", action="store_true", help="also run the campaign on a Ray cluster of k CPUs (root)")
    ap.add_argument("--executors", default=None, help="wall part: comma-separated executors to run, local and/or ray "
                    "(default: local, and ray with --ray); --executors ray measures the Ray cluster alone")
    ap.add_argument("--operators", default="", help="comma-separated (default: every operator with a grid)")
    ap.add_argument("--also", default="softmax,rmsnorm,matmul", help="operators without a grid that the campaign "
                    "tunes too (their ledgers feed the store; no leave-one-out for them)")
    ap.add_argument("--ledgers", type=Path, default=None, help="knowledge part: a folder of workspaces to distill "
                    "(default: the ones the wall part wrote)")
    ap.add_argument("--batch", type=int, default=1, help="knowledge part: replay batch size")
    ap.add_argument("--budget", type=int, default=40, help="knowledge part: trials per replay")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "pypto-tune-search-offline-cache.json"))
    ap.add_argument("--probes-cache", default=str(Path(tempfile.gettempdir()) / "pypto-tune-search-offline-probes.json"))
    ap.add_argument("--no-probe", action="store_true", help="knowledge part: rank without the kept states' probe "
                    "records (the static reading only; the upstream-style grids then get no candidate)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the campaign workspaces here")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.executors = set((args.executors or ("local,ray" if args.ray else "local")).split(","))
    if not args.executors <= {"local", "ray"}:
        ap.error(f"--executors: unknown {sorted(args.executors - {'local', 'ray'})} (local, ray)")
    names = [x for x in args.operators.split(",") if x] or grid_operators()
    names += [x for x in args.also.split(",") if x and x not in names]
    parts = {"wall", "knowledge"} if args.part == "both" else set(args.part.split(","))
    if not parts <= {"wall", "knowledge"}:
        ap.error(f"--part takes wall, knowledge or both, got {args.part!r}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="pypto-tune-campaign-bench-"))
    report: dict[str, Any] = {"operators": names, "date": time.strftime("%Y-%m-%d %H:%M"),
                              "command": " ".join(sys.argv)}
    print(f"campaign_bench {report['date']}: {' '.join(sys.argv[1:]) or '(defaults)'}; work {work}")
    if "wall" in parts:
        report["wall"] = wall_part(args, work, names)
    if "knowledge" in parts:
        ledgers = args.ledgers or work / "local" / "ws"
        report["knowledge"] = knowledge_part(args, ledgers, [n for n in names if (GRIDS / f"{n}.json").is_file()])
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    if args.keep is None and args.ledgers is None and "wall" in parts:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
