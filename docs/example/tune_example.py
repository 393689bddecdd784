"""The README's worked example: tune gelu_like.py (a blank operator, written from scratch) from its baseline to a
kept gain over MCP stdio, one tool call at a time, as an agent would.

    .venv/bin/python docs/example/tune_example.py /tmp/my-op     # copies gelu_like.py there and tunes it (SIM)

Every line it prints is a tool call and what the server answered.
"""

import shutil
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
PYPTO_TUNE = Path(sys.executable).with_name("pypto-tune")  # the checkout's .venv/bin/pypto-tune


async def tune(ws: Path) -> dict:
    server = StdioServerParameters(command=str(PYPTO_TUNE), args=["serve", "--workspace", str(ws), "--log-level", "WARNING"], cwd=str(ws))
    async with Client(server, mode="legacy") as client:

        async def call(tool: str, **args):
            res = await client.call_tool(tool, args)
            if res.is_error:
                raise SystemExit(f"{tool} refused:\n" + "".join(getattr(b, "text", "") for b in res.content))
            return res.structured_content

        s = await call("start_session", workspace=str(ws), operator_files=["gelu_like.py"],
                       test_command=["python", "gelu_like.py", "--run-mode", "sim"], run_mode="sim",
                       goal_speedup=20.0)
        sid = s["session_id"]
        print(f"start_session        -> goal {s['goal']}, run mode {s['run_mode']}")
        v = await call("run_precision_check", session_id=sid)
        print(f"run_precision_check  -> {v['verdict']} (numerics checked: {v['numerics_checked']})")
        await call("enable_runtime_debug", session_id=sid)
        print("enable_runtime_debug -> runtime_debug_mode 1 on every jit")
        m = await call("collect_swimlane", session_id=sid)
        print(f"collect_swimlane     -> baseline {m['operator_time_us']:.3f} µs, target {m['target_us']:.3f} µs")
        an = await call("analyze_bubbles", session_id=sid, lang="en")
        print(f"analyze_bubbles      -> bubble {an['active_bubble_rate']:.1f} %, suggestions "
              + ", ".join(x["catalog_id"] for x in an["suggestions"][:4]) + f"; stage now {an['stage']}")
        knobs = (await call("list_knobs", session_id=sid))["knobs"]
        tile = next(k for k in knobs if k["kind"] == "vec_tile")
        print(f"list_knobs           -> {len(knobs)} knobs; {tile['id']} = {tile['value']}")
        p = await call("apply_tuning_patch", session_id=sid, knob=tile["id"], value=[8, 512], catalog_id="F-10",
                       rationale="one tile per loop iteration's row block: fewer, larger vector tasks")
        print(f"apply_tuning_patch   -> round {p['round']} open: {tile['id'].split(':')[-1]} -> [8, 512]")
        v = await call("run_precision_check", session_id=sid)
        print(f"run_precision_check  -> {v['verdict']}")
        m = await call("collect_swimlane", session_id=sid)
        print(f"collect_swimlane     -> {m['operator_time_us']:.3f} µs")
        r = await call("record_round", session_id=sid)
        print(f"record_round         -> {r['decision']} ({r['delta_pct']:+.1f} %), best {r['best_us']:.3f} µs")
        await call("stop_session", session_id=sid, reason="example done")
        rep = await call("render_report", session_id=sid, format="html", lang="en")
        print(f"render_report        -> {min((Path(p).name for p in rep['paths']), key=len)}")
        return r


def main() -> int:
    ws = Path(sys.argv[1] if len(sys.argv) > 1 else "example-run").resolve()
    ws.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "gelu_like.py", ws / "gelu_like.py")
    record = anyio.run(tune, ws)
    return 0 if record["decision"] == "kept" else 1


if __name__ == "__main__":
    sys.exit(main())
