"""The server's search, live in SIM, against exhaustive grids and random search (issue #12).

    .venv/bin/python benchmarks/search_bench.py                                   # rmsnorm_grid matmul_act multi_stage
    .venv/bin/python benchmarks/search_bench.py upstream_softmax --trials 16 --batch 2
    .venv/bin/python benchmarks/search_bench.py --json out.json

A scripted agent drives the real server over MCP stdio and calls only what a user of the search calls:
``start_session`` → baseline (``run_precision_check``, ``enable_runtime_debug``, ``collect_swimlane``,
``analyze_bubbles``), then ``propose_candidates`` → ``run_candidates`` (the first ``--batch`` proposals, run in
parallel on the machine's cores) until ``--trials`` trials have run. When the server proposes nothing more in a stage
the agent marks the stage's untried items and calls ``advance_stage`` (the stage rules come first: a best that needs
knobs of two stages is reached only after the first stage's exit). Every trial is a full gated round recorded by
the server; the figures below are the server's own (``TrialsResult.trials[].operator_time_us`` and the kept time).

The grid (``benchmarks/grids/<op>.json``) was measured exhaustively in SIM by ``benchmarks/grids/measure_grid.py``
(deterministic: the same configuration gives the same figure on any machine); the baseline this benchmark measures
is printed beside the grid's shipped figure, so a pypto that simulates differently shows at once.

Printed per operator: grid size N, grid best, the kept speed-up after 4 / 8 / 12 trials, trials to reach 90 % and
99 % of the grid's speed-up (trials within a batch counted in the server's rank order), random search's expected
trials for the same ((N+1)/(K+1), K = grid configurations within the fraction), failed / data-less trials and whether
any of them was kept (must be 0). A configuration outside the grid counts with its measured time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ROOT / "benchmarks" / "grids"
OPERATORS = ROOT / "fixtures" / "operators"
DEFAULT_OPS = ["rmsnorm_grid", "matmul_act", "multi_stage"]
KINDS = {"rmsnorm_grid": "vector + reduction", "matmul_act": "cube + vector", "multi_stage": "knobs of two stages",
         "upstream_softmax": "upstream example style", "layer_norm_multi": "several kernels",
         "split_harness": "harness in another file"}


class Refused(Exception):
    pass


class Agent:
    def __init__(self, client: Any) -> None:
        self.client = client

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        res = await self.client.call_tool(tool, args)
        if res.is_error:
            raise Refused("".join(getattr(b, "text", "") for b in res.content))
        return res.structured_content or {}


async def _leave_stage(a: Agent, sid: str) -> bool:
    """Mark what is left of the stage and advance; False when the server ends tuning or refuses."""
    status = await a.call("get_status", session_id=sid)
    for item in status["checklist"]:
        if item["status"] == "untried":
            try:
                await a.call("mark_checklist", session_id=sid, catalog_id=item["catalog_id"], status="not-applicable",
                             reason=f"{item['catalog_id']}: the server proposed no further candidate for it; kept "
                             f"time {status['best_us']:.3f} µs over {status['kept_samples']} samples")
            except Refused:
                pass
    try:
        res = await a.call("advance_stage", session_id=sid, reason="no candidate left in this stage")
    except Refused as exc:
        print(f"    advance_stage refused: {str(exc).splitlines()[0][:140]}", flush=True)
        return False
    return res.get("state") not in ("S5_REPORT", "DONE") and res.get("stage") is not None


def scratch_workspace(name: str, prefix: str) -> tuple[Path, Path, Any]:
    """A scratch copy of a fixture operator (tmp folder, workspace) and the stdio parameters of a server on it."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import get_default_environment

    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-{name}-"))
    ws = tmp / "ws"
    shutil.copytree(OPERATORS / name, ws, ignore=shutil.ignore_patterns("__pycache__", "output", ".pypto-tune"))
    # the server gets the MCP client's default environment, which drops PYPTO_TUNE_KNOWLEDGE: pass it on, so
    # that a run with a knowledge store (campaign_bench.py's live arm) ranks with it
    store = os.environ.get("PYPTO_TUNE_KNOWLEDGE")
    env = {**get_default_environment(), "PYPTO_TUNE_KNOWLEDGE": store} if store else None
    params = StdioServerParameters(command=sys.executable, args=["-m", "pypto_tune.server.cli", "serve",
                                                                 "--workspace", str(ws), "--log-level", "WARNING"],
                                   cwd=str(ws), env=env)
    return tmp, ws, params


async def run_operator(name: str, trials_budget: int, batch: int, parallel: int | None) -> dict[str, Any]:
    from mcp import Client

    grid = json.loads((GRIDS / f"{name}.json").read_text())
    summary = grid["summary"]
    tmp, ws, params = scratch_workspace(name, "search-bench")
    files = sorted({k["file"] for k in grid["knobs"]})
    cmd = [sys.executable, *grid["command"]]
    t0 = time.monotonic()
    trials: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []
    try:
        async with Client(params, mode="legacy") as client:
            a = Agent(client)
            sid = (await a.call("start_session", workspace=str(ws), operator_files=files, test_command=cmd,
                                run_mode="sim", goal_speedup=1000.0))["session_id"]
            assert (await a.call("run_precision_check", session_id=sid))["verdict"] == "passed"
            await a.call("enable_runtime_debug", session_id=sid)
            base = (await a.call("collect_swimlane", session_id=sid))["operator_time_us"]
            await a.call("analyze_bubbles", session_id=sid, lang="en")
            kept = base
            stages: list[str] = []
            while len(trials) < trials_budget:
                step = await next_batch(a, sid, stages, min(batch, trials_budget - len(trials)), max(batch, 4))
                if isinstance(step, str):
                    if step.startswith(PROPOSE_REFUSED):
                        print(f"    {step[:len(PROPOSE_REFUSED) + 140]}", flush=True)
                    break
                status, cands = step
                args: dict[str, Any] = {"session_id": sid, "candidates": [c["id"] for c in cands]}
                if parallel:
                    args["parallel"] = parallel
                res = await a.call("run_candidates", **args)
                batches.append({"n": len(res["trials"]), "parallel": res["parallel"], "wall_s": res["wall_s"],
                                "stage": status["stage"]})
                by_id = {t["candidate"]: t for t in res["trials"]}
                for c in cands:  # in the server's rank order, whatever order the trials finished in
                    t = by_id.get(c["id"], {})
                    trials.append({"stage": status["stage"], "knob": c["knob"].split(":")[-1], "value": c["value"],
                                   "catalog_id": c["catalog_id"], "time_us": t.get("operator_time_us"),
                                   "decision": t.get("decision"), "result_type": t.get("result_type")})
                kept = res["best_us"] if res.get("best_us") is not None else kept
                print(f"  {name}: batch {len(batches)} ({status['stage']}): "
                      + ", ".join(f"{t['knob']}={t['value']} {t['time_us'] if t['time_us'] is None else round(t['time_us'], 3)}"
                                  f" {t['decision']}" for t in trials[-len(cands):]) + f"; kept {kept:.3f} µs",
                      flush=True)
            await a.call("stop_session", session_id=sid, reason="benchmark budget spent")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"operator": name, "kind": KINDS.get(name, ""), "grid": summary, "baseline_us": base, "trials": trials,
            "batches": batches, "stages": stages, "wall_s": time.monotonic() - t0}


PROPOSE_REFUSED = "propose_candidates refused: "


async def next_batch(a: Agent, sid: str, stages: list[str], want: int, limit: int,
                     ranked: list[dict] | None = None) -> tuple[dict[str, Any], list[dict]] | str:
    """The scripted agent's next step: the stage's status and the first ``want`` of ``limit`` proposals by rank (all
    ``limit`` of them into ``ranked`` when given) —
    collecting and
    analysing first where a stage starts with that (R15/R16), leaving a stage with no proposal left — or, when
    the search cannot go on, why (the session finished, propose_candidates refused, a stage that cannot be left).
    ``stages`` gets every stage met, in order."""
    while True:
        status = await a.call("get_status", session_id=sid)
        if status["finished"]:
            return "the session finished"
        if not stages or stages[-1] != status["stage"]:
            stages.append(status["stage"])
        if status["stage"] and status["stage"] != "FRONTEND" and not _stage_ready(status):
            await a.call("collect_swimlane", session_id=sid)
            await a.call("analyze_bubbles", session_id=sid, lang="en")
            continue
        try:
            prop = await a.call("propose_candidates", session_id=sid, limit=limit)
        except Refused as exc:
            return PROPOSE_REFUSED + str(exc).splitlines()[0]
        cands = prop["candidates"][:want]
        if ranked is not None:
            ranked[:] = prop["candidates"]
        if cands:
            return status, cands
        if not await _leave_stage(a, sid):
            return "no candidate left and the stage could not be left"


def _stage_ready(status: dict[str, Any]) -> bool:
    return "collect_swimlane" not in status.get("next_actions", [])[:1] and \
        "analyze_bubbles" not in status.get("next_actions", [])[:1]


def score(run: dict[str, Any]) -> dict[str, Any]:
    """Kept speed-up after k trials and trials to reach a fraction of the grid's speed-up."""
    g = run["grid"]
    shipped = float(run["baseline_us"])
    grid_speedup = float(g["shipped_us"]) / float(g["best_us"])
    best = shipped
    curve: list[float] = []  # best speed-up after trial i (a trial's own time counts once it is a kept gain)
    for t in run["trials"]:
        if t["decision"] == "kept" and t["time_us"] is not None:
            best = min(best, float(t["time_us"]))
        curve.append(shipped / best)

    def after(k: int) -> float:
        return curve[min(k, len(curve)) - 1] if curve else 1.0

    def reach(frac: float) -> int | None:
        need = frac * grid_speedup  # "90 % of the grid's speed-up", as the grid summaries count it
        return next((i + 1 for i, s in enumerate(curve) if s >= need - 1e-9), None)

    n = int(g["grid_size"])
    bad_kept = [t for t in run["trials"] if t["decision"] == "kept" and (t["time_us"] is None)]
    failed = [t for t in run["trials"] if t["time_us"] is None]
    return {"N": n, "grid_best_us": float(g["best_us"]), "grid_speedup": grid_speedup,
            "after": {k: after(k) for k in (4, 8, 12)}, "reach90": reach(0.9), "reach99": reach(0.99),
            "random90": (n + 1) / (int(g["within_90pct"]) + 1), "random99": (n + 1) / (int(g["within_99pct"]) + 1),
            "failed": len(failed), "bad_kept": len(bad_kept), "trials": len(run["trials"]),
            "final_us": shipped / curve[-1] if curve else shipped}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("operators", nargs="*", default=DEFAULT_OPS)
    ap.add_argument("--trials", type=int, default=16, help="trial budget per operator (default 16)")
    ap.add_argument("--batch", type=int, default=2, help="candidates per run_candidates call (default 2)")
    ap.add_argument("--parallel", type=int, default=None, help="workers (default: the server's choice)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    runs = []
    for name in args.operators:
        print(f"{name}: searching ({args.trials} trials, batches of {args.batch})", flush=True)
        runs.append(asyncio.run(run_operator(name, args.trials, args.batch, args.parallel)))
    print()
    print("| operator | kind | N | shipped µs (grid) | grid best µs (×) | search ×@4 | ×@8 | ×@12 | search final µs | "
          "trials to 90 % | random 90 % | trials to 99 % | random 99 % | failed / kept-bad | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        s = score(run)
        print(f"| {run['operator']} | {run['kind']} | {s['N']} | {run['baseline_us']:.3f} ({run['grid']['shipped_us']:.3f}) | {s['grid_best_us']:.3f} "
              f"({s['grid_speedup']:.2f}×) | {s['after'][4]:.2f} | {s['after'][8]:.2f} | {s['after'][12]:.2f} | "
              f"{s['final_us']:.3f} | {s['reach90'] or '>' + str(s['trials'])} | {s['random90']:.2f} | "
              f"{s['reach99'] or '>' + str(s['trials'])} | {s['random99']:.2f} | {s['failed']} / {s['bad_kept']} | "
              f"{run['wall_s']:.0f} |")
    print()
    print("| operator | batches | trials per batch | workers | batch wall s (each) |")
    print("|---|---:|---:|---:|---|")
    for run in runs:
        b = run["batches"]
        print(f"| {run['operator']} | {len(b)} | {', '.join(str(x['n']) for x in b)} | "
              f"{', '.join(sorted({str(x['parallel']) for x in b}))} | {', '.join(format(x['wall_s'], '.1f') for x in b)} |")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "scores": [score(r) for r in runs]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
