"""``pypto-tune demo``: a scripted agent runs a complete SIM tuning session over stdio, exactly as a client would.

It starts ``pypto-tune serve`` as a child process, speaks MCP to it with the official client, and follows the
server's rules: it shows refusals on purpose (no goal; measuring before precision; two knobs in one diff; a knob
change with a change of the computation riding along; a tile the unified buffer cannot hold), then a baseline, a
kept gain, a regression the server rolls back, and batches of the server's own candidates run as parallel gated
rounds (``propose_candidates`` → ``run_candidates``) until the goal is reached, and renders the report. Every
number printed comes from the server's structured results.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "operators"
MARKER = ".pypto-tune-demo"


class DemoError(RuntimeError):
    pass


def _prepare(workspace: Path, operator: str) -> Path:
    src = FIXTURES / operator / f"{operator}.py"
    if not src.is_file():
        raise DemoError(f"bundled operator {src} not found: run the demo from a checkout of pypto-tune")
    if workspace.exists():
        if not (workspace / MARKER).exists():
            raise DemoError(f"{workspace} exists and is not a demo workspace; pass --workspace to a new folder")
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    (workspace / MARKER).write_text("created by pypto-tune demo; safe to delete\n")
    shutil.copy2(src, workspace / src.name)
    return workspace


class Agent:
    """The scripted agent: calls tools, prints what a person watching would want to see."""

    def __init__(self, client: Any, t0: float) -> None:
        self.c = client
        self.t0 = t0
        self.kernel_s = 0.0

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    async def call(self, tool: str, expect_error: bool = False, **args: Any) -> dict[str, Any]:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            # the server's message names the tool, the phase, the seconds and the last output line
            self.say(f"    … {message or tool}"[:140])

        res = await self.c.call_tool(tool, args, progress_callback=progress)
        text = "".join(getattr(b, "text", "") for b in res.content)
        if res.is_error:
            if not expect_error:
                raise DemoError(f"{tool} failed unexpectedly:\n{text}")
            return {"error": text}
        if expect_error:
            raise DemoError(f"{tool} was expected to be refused but succeeded")
        return res.structured_content or {}

    async def round(self, sid: str, knob: str, value: Any, catalog_id: str, why: str) -> dict[str, Any]:
        p = await self.call("apply_tuning_patch", session_id=sid, knob=knob, value=value, catalog_id=catalog_id,
                            rationale=why)
        self.say(f"round {p['round']}: {knob.split(':')[-1]} → {value} ({catalog_id})")
        v = await self.call("run_precision_check", session_id=sid)
        self.say(f"    precision: {v['verdict']} ({v['duration_s']:.1f}s)"
                 + ("" if v["verdict"] == "passed" else f" — {v['key_output'].strip().splitlines()[-1][:90]}"))
        if v["verdict"] == "passed":
            m = await self.call("collect_swimlane", session_id=sid)
            self.say(f"    measured: {m['operator_time_us']:.3f} µs")
        r = await self.call("record_round", session_id=sid, notes="demo")
        delta = f"{r['delta_pct']:+.1f} %" if r.get("delta_pct") is not None else "—"
        self.say(f"    server decision: {r['decision'].upper()} ({r['result_type']}, {delta}); best "
                 f"{r['best_us']:.3f} µs, target {r['target_us']:.3f} µs")
        return r


async def _session(workspace: Path, lang: str, operator: str) -> int:
    from mcp import Client, StdioServerParameters

    t0 = time.monotonic()
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "pypto_tune.server.cli", "serve", "--workspace", str(workspace),
                                         "--log-level", "WARNING"], cwd=str(workspace))
    async with Client(params, mode="legacy") as client:
        a = Agent(client, t0)
        tools = await client.list_tools()
        a.say(f"connected to pypto-tune over stdio ({len(tools.tools)} tools)")
        cmd = [sys.executable, f"{operator}.py", "--run-mode", "sim"]
        refused = await a.call("start_session", expect_error=True, workspace=str(workspace),
                               operator_files=[f"{operator}.py"], test_command=cmd, run_mode="sim")
        a.say("refused as expected: " + refused["error"].splitlines()[0][:110])
        s = await a.call("start_session", workspace=str(workspace), operator_files=[f"{operator}.py"],
                         test_command=cmd, run_mode="sim", goal_speedup=12.0, lang=lang)
        sid = s["session_id"]
        a.say(f"session {sid}: goal {s['goal']}, run mode SIM")
        refused = await a.call("collect_swimlane", expect_error=True, session_id=sid)
        a.say("refused as expected: " + refused["error"].splitlines()[0][:110])

        v = await a.call("run_precision_check", session_id=sid)
        a.say(f"baseline precision: {v['verdict']} — numerics checked: {v['numerics_checked']} (SIM computes no "
              "outputs: only 'compiled and simulated' is shown)")
        await a.call("enable_runtime_debug", session_id=sid)
        a.say("runtime_debug_mode 1 added to every jit")
        m = await a.call("collect_swimlane", session_id=sid)
        a.say(f"baseline: {m['operator_time_us']:.3f} µs (E2E {m['e2e_us']:.3f}); target {m['target_us']:.3f} µs")
        an = await a.call("analyze_bubbles", session_id=sid, lang=lang)
        a.say(f"analysis: active-core util {an['active_core_utilization']:.1f} %, bubble "
              f"{an['active_bubble_rate']:.1f} % (reference avg util {an['avg_core_utilization']:.1f} %); "
              f"suggestions: {', '.join(x['catalog_id'] for x in an['suggestions'][:5]) or '—'}")

        knobs = (await a.call("list_knobs", session_id=sid))["knobs"]
        vec = next(k["id"] for k in knobs if k["kind"] == "vec_tile")
        tile_b = next(k["id"] for k in knobs if k["id"].endswith(":TILE_B"))
        a.say(f"{len(knobs)} knobs found; tuning {vec} and {tile_b}")

        src = (workspace / f"{operator}.py").read_text()
        old_line = next(line for line in src.splitlines() if line.startswith("TILE_B"))
        vec_line = next(line for line in src.splitlines() if "set_vec_tile_shapes(" in line)
        import difflib

        def diff_to(new_src: str) -> str:
            return "".join(difflib.unified_diff(src.splitlines(True), new_src.splitlines(True), f"a/{operator}.py",
                                                f"b/{operator}.py"))

        two = diff_to(src.replace(old_line, "TILE_B = 2").replace(vec_line, vec_line.replace("4, 256", "8, 256")))
        refused = await a.call("apply_tuning_patch", expect_error=True, session_id=sid, diff=two,
                               catalog_id="F-10", rationale="demo: two knobs at once is not allowed")
        a.say("refused as expected: " + refused["error"].splitlines()[0][:110])
        smuggled = diff_to(src.replace(vec_line, vec_line.replace("4, 256", "8, 256")).replace("= e / s", "= e"))
        refused = await a.call("apply_tuning_patch", expect_error=True, session_id=sid, diff=smuggled,
                               catalog_id="F-10", rationale="demo: a knob plus a change of the computation")
        a.say("refused as expected: " + refused["error"].splitlines()[0][:110])
        refused = await a.call("apply_tuning_patch", expect_error=True, session_id=sid, knob=vec, value=[4, 32, 256],
                               catalog_id="F-10", rationale="demo: a tile the unified buffer cannot hold")
        a.say("refused as expected: " + refused["error"].splitlines()[0][:110])

        plan = [
            (vec, [1, 8, 256], "F-10", "AIV tasks are tiny (high short-task share): double the vector tile"),
            (vec, [1, 4, 256], "F-10", "check that the smaller tile really was slower (the server will judge)"),
        ]
        last: dict[str, Any] = {}
        for knob, value, cid, why in plan:
            last = await a.round(sid, knob, value, cid, why)
        batches = 0
        while not last.get("finished") and batches < 3:
            prop = await a.call("propose_candidates", session_id=sid, limit=4)
            cands = prop["candidates"][:2]
            if not cands:
                break
            for c in cands:
                a.say(f"  candidate #{c['rank']}: {c['knob'].split(':')[-1]} → {c['value']} ({c['catalog_id']}): "
                      f"{c['why'][:90]}")
            batch = await a.call("run_candidates", session_id=sid, candidates=[c["id"] for c in cands])
            batches += 1
            for t in batch["trials"]:
                time_s = f"{t['operator_time_us']:.3f} µs" if t["operator_time_us"] is not None else "—"
                a.say(f"    round {t['round']}: {t['knob'].split(':')[-1]} = {t['value']}: {time_s}, "
                      f"{t['decision']} ({t['result_type']})")
            a.say(f"  batch {batch['batch']}: {len(batch['trials'])} trials on {batch['parallel']} workers in "
                  f"{batch['wall_s']:.1f} s; best {batch['best_us']:.3f} µs")
            last = {"finished": batch["state"] in ("S5_REPORT", "DONE"), "message": batch["message"]}
            if last["finished"]:
                a.say("the server ended tuning: " + batch["message"].split("; ", 1)[-1][:140])
        if not last.get("finished"):
            await a.call("stop_session", session_id=sid, reason="demo plan exhausted")
            a.say("demo plan exhausted: stop_session")

        status = await a.call("get_status", session_id=sid, lang=lang)
        print(status["board"], flush=True)
        rep = await a.call("render_report", session_id=sid, format="both", lang=lang)
        other = "zh" if lang == "en" else "en"
        rep2 = await a.call("render_report", session_id=sid, format="both", lang=other)
        tables = await _ledger_tables(client, sid)
        decisions = tables["round_decisions"]
        a.kernel_s = sum(float(r["duration_s"]) for r in tables["runs"])
        wall = time.monotonic() - t0
        kinds = {d["decision"] for d in decisions}
        a.say(f"rounds: {len(decisions)} ({', '.join(sorted(kinds))}); debug restored: {rep['debug_restored_now']}")
        for p in rep["paths"] + rep2["paths"]:
            a.say(f"report: {p}")
        a.say(f"demo wall time {wall:.1f} s; sum of the kernel runs the server reported {a.kernel_s:.1f} s")
        missing = {"kept", "reverted"} - kinds
        if missing:
            raise DemoError(f"the demo did not show a {', '.join(sorted(missing))} round")
        if not tables.get("trials"):
            raise DemoError("the demo did not run a candidate batch")
    return 0


async def _ledger_tables(client: Any, sid: str) -> dict[str, list[dict[str, Any]]]:
    import orjson

    res = await client.read_resource(f"pypto-tune://sessions/{sid}/ledger")
    data = orjson.loads(res.contents[0].text)
    return data["tables"]


def run_demo(*, workspace: Path | None, lang: str = "en", operator: str = "softmax") -> int:
    ws = (workspace or Path.cwd() / "demo-run").resolve()
    try:
        _prepare(ws, operator)
        print(f"pypto-tune demo: workspace {ws}", flush=True)
        return anyio.run(_session, ws, lang, operator)
    except DemoError as exc:
        print(f"pypto-tune demo: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:  # errors inside the client's task groups arrive wrapped
        demo_errors = group.subgroup(lambda e: isinstance(e, DemoError))
        if demo_errors is None:
            raise
        first: BaseException = demo_errors
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        print(f"pypto-tune demo: {first}", file=sys.stderr)
        return 1
