"""``pypto-tune demo``: a scripted agent runs a complete SIM tuning session over stdio, exactly as a client would.

It starts ``pypto-tune serve`` as a child process, speaks MCP to it with the official client, and follows the
server's rules: it shows refusals on purpose (no goal; measuring before precision; two knobs in one diff; a knob
change with a change of the computation riding along; a tile the unified buffer cannot hold), then a baseline, a
kept gain, a regression the server rolls back, and batches of the server's own candidates run as parallel gated
rounds (``propose_candidates`` → ``run_candidates``) until the goal is reached, and renders the report. Every
number printed comes from the server's structured results.

One demo at a time per folder: the running one holds a lock on its marker file, and a second is refused with the
holder's pid and start. Ctrl-C or SIGTERM prints one line: the session's state, what the operator file holds, and
how to go on. ``--resume`` continues the interrupted session through the server (an open round is rolled back to
the kept state and done again); the plan is the same, so it reaches the same result as an uninterrupted run.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import anyio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "operators"
MARKER = ".pypto-tune-demo"


class DemoError(RuntimeError):
    pass


def clip(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, ending on a whole word and an ellipsis when it is longer."""
    if len(text) <= n:
        return text
    cut = text[: n - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(",;:") + "…"


class DemoLock:
    """A lock file (``flock``) held while this demo runs, recording who holds it. It sits beside the workspace
    (``.demo-run.lock`` for ``demo-run/``): every file inside is part of what the session records (its own folder
    ``.pypto-tune/`` too), and a lock rewritten by a resumed demo would be drift."""

    def __init__(self, workspace: Path) -> None:
        self.path = workspace.parent / f".{workspace.name}.lock"
        self.fh: TextIO | None = None

    def holder(self) -> str | None:
        """Who holds the folder now ("pid 123, started 2026-…"), or None when nobody does."""
        if not self.path.exists():
            return None
        with open(self.path, "a+", encoding="utf-8") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                try:
                    info = json.loads(fh.read() or "{}")
                except ValueError:
                    info = {}
                return f"pid {info.get('pid', '?')}, started {info.get('started_at', '?')}"
            fcntl.flock(fh, fcntl.LOCK_UN)
        return None

    def acquire(self) -> None:
        self.fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open (and locked) until release
        fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(json.dumps({"pid": os.getpid(), "started_at": datetime.now().astimezone().isoformat(
            timespec="seconds")}) + "\n")
        self.fh.flush()

    def release(self) -> None:
        if self.fh is not None:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()
            self.fh = None


def _prepare(workspace: Path, operator: str, *, resume: bool) -> DemoLock:
    """The demo's folder, locked: a fresh copy of the operator, or (``resume``) the interrupted demo's folder."""
    src = FIXTURES / operator / f"{operator}.py"
    if not src.is_file():
        raise DemoError(f"bundled operator {src} not found: run the demo from a checkout of pypto-tune")
    lock = DemoLock(workspace)
    if workspace.exists():
        if not (workspace / MARKER).exists():
            raise DemoError(f"{workspace} exists and is not a demo workspace; pass --workspace to a new folder")
        holder = lock.holder()
        if holder is not None:
            raise DemoError(f"another demo is running in {workspace} ({holder}); wait for it to end, or pass "
                            "--workspace to another folder")
        if not resume:
            shutil.rmtree(workspace)
    elif resume:
        raise DemoError(f"no demo to resume in {workspace}; run pypto-tune demo without --resume")
    if not workspace.exists():
        workspace.mkdir(parents=True)
        (workspace / MARKER).write_text("created by pypto-tune demo; safe to delete\n")
        shutil.copy2(src, workspace / src.name)
    lock.acquire()
    return lock


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
            self.say(clip(f"    … {message or tool}", 140))

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
                 + ("" if v["verdict"] == "passed" else f" — {clip(v['key_output'].strip().splitlines()[-1], 90)}"))
        if v["verdict"] == "passed":
            m = await self.call("collect_swimlane", session_id=sid)
            self.say(f"    measured: {m['operator_time_us']:.3f} µs")
        r = await self.call("record_round", session_id=sid, notes="demo")
        delta = f"{r['delta_pct']:+.1f} %" if r.get("delta_pct") is not None else "—"
        self.say(f"    server decision: {r['decision'].upper()} ({r['result_type']}, {delta}); best "
                 f"{r['best_us']:.3f} µs, target {r['target_us']:.3f} µs")
        return r


def _refused(a: "Agent", res: dict[str, Any], rule: str) -> None:
    """A refusal the demo provoked on purpose must be refused by the rule it shows, not by another one."""
    text = res["error"]
    if rule not in text:
        raise DemoError(f"expected a refusal by {rule}, got another one:\n{text}")
    a.say("refused as expected: " + clip(text.splitlines()[0], 110))


async def _session(workspace: Path, lang: str, operator: str, resume: bool) -> int:
    """The demo's plan, driven from the session's state: a fresh demo walks it from the start; a resumed one picks
    it up where the ledger says the interrupted one was (an open round is rolled back and done again)."""
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
        if not resume:
            _refused(a, await a.call("start_session", expect_error=True, workspace=str(workspace),
                                     operator_files=[f"{operator}.py"], test_command=cmd, run_mode="sim"), "GATE goal")
        s = await a.call("start_session", workspace=str(workspace), operator_files=[f"{operator}.py"],
                         test_command=cmd, run_mode="sim", goal_speedup=12.0, lang=lang)
        sid = s["session_id"]
        if resume and not s["resumed"]:
            raise DemoError(f"no unfinished demo session in {workspace} to resume (started {sid} instead)")
        a.say(f"session {sid}{' resumed' if s['resumed'] else ''}: goal {s['goal']}, run mode SIM")
        st = await a.call("get_status", session_id=sid, lang=lang)
        if st["state"] == "S1_SETUP":
            if not resume:
                _refused(a, await a.call("collect_swimlane", expect_error=True, session_id=sid), "GATE precision-first")
            v = await a.call("run_precision_check", session_id=sid)
            a.say(f"baseline precision: {v['verdict']} — numerics checked: {v['numerics_checked']} (SIM computes no "
                  "outputs: only 'compiled and simulated' is shown)")
            st = await a.call("get_status", session_id=sid, lang=lang)
        if st["state"] == "S2_COLLECT":
            await a.call("enable_runtime_debug", session_id=sid)
            a.say("runtime_debug_mode 1 added to every jit")
            m = await a.call("collect_swimlane", session_id=sid)
            a.say(f"baseline: {m['operator_time_us']:.3f} µs (E2E {m['e2e_us']:.3f}); target {m['target_us']:.3f} µs")
            st = await a.call("get_status", session_id=sid, lang=lang)
        if st["state"] == "S3_ANALYZE":
            an = await a.call("analyze_bubbles", session_id=sid, lang=lang)
            a.say(f"analysis: active-core util {an['active_core_utilization']:.1f} %, bubble "
                  f"{an['active_bubble_rate']:.1f} % (reference avg util {an['avg_core_utilization']:.1f} %); "
                  f"suggestions: {', '.join(x['catalog_id'] for x in an['suggestions'][:5]) or '—'}")
            st = await a.call("get_status", session_id=sid, lang=lang)
        if not st["finished"]:
            await _tune(a, workspace, sid, operator, fresh=not resume)

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
        for path in rep["paths"] + rep2["paths"]:
            a.say(f"report: {_shown(Path(path))}")
        a.say(f"demo wall time {wall:.1f} s; sum of the kernel runs the server reported {a.kernel_s:.1f} s")
        missing = {"kept", "reverted"} - kinds
        if missing:
            raise DemoError(f"the demo did not show a {', '.join(sorted(missing))} round")
        if not tables.get("trials"):
            raise DemoError("the demo did not run a candidate batch")
    return 0


def _shown(path: Path) -> str:
    """A path as a person at this terminal types it: relative to the current folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


async def _tune(a: "Agent", workspace: Path, sid: str, operator: str, *, fresh: bool) -> None:
    """S4_TUNE: the refusals (on a fresh session), the two hand-made rounds not yet decided, then the server's
    candidates in batches until the goal (at most three batches in all)."""
    tables = await _ledger_tables(a.c, sid)
    st = await a.call("get_status", session_id=sid)
    if "revert_patch" in st["next_actions"]:  # a round left open by the interruption: back to the kept state
        r = await a.call("revert_patch", session_id=sid, notes="demo resumed: the interrupted round is done again")
        a.say(f"round {r.get('round', '?')} was open when the demo stopped: rolled back to the kept state")
        tables = await _ledger_tables(a.c, sid)
    knobs = (await a.call("list_knobs", session_id=sid))["knobs"]
    vec = next(k["id"] for k in knobs if k["kind"] == "vec_tile")
    tile_b = next(k["id"] for k in knobs if k["id"].endswith(":TILE_B"))
    a.say(f"{len(knobs)} knobs found; tuning {vec} and {tile_b}")
    if fresh:
        await _show_refusals(a, workspace, sid, operator, vec)
    plan = [
        (vec, [1, 8, 256], "F-10", "AIV tasks are tiny (high short-task share): double the vector tile"),
        (vec, [1, 4, 256], "F-10", "check that the smaller tile really was slower (the server will judge)"),
    ]
    done = _decided_changes(tables)
    last: dict[str, Any] = {}
    for knob, value, cid, why in plan:
        if (knob, json.dumps(value)) in done:
            continue
        last = await a.round(sid, knob, value, cid, why)
        if last.get("finished"):
            return
    batches = len({t["batch"] for t in tables.get("trials", []) if t.get("batch")})
    while not last.get("finished") and batches < 3:
        prop = await a.call("propose_candidates", session_id=sid, limit=4)
        cands = prop["candidates"][:2]
        if not cands:
            break
        for c in cands:
            a.say(f"  candidate #{c['rank']}: {c['knob'].split(':')[-1]} → {c['value']} ({c['catalog_id']}): "
                  f"{clip(c['why'], 90)}")
        batch = await a.call("run_candidates", session_id=sid, candidates=[c["id"] for c in cands])
        batches += 1
        for tr in batch["trials"]:
            time_s = f"{tr['operator_time_us']:.3f} µs" if tr["operator_time_us"] is not None else "—"
            a.say(f"    round {tr['round']}: {tr['knob'].split(':')[-1]} = {tr['value']}: {time_s}, "
                  f"{tr['decision']} ({tr['result_type']})")
        a.say(f"  batch {batch['batch']}: {len(batch['trials'])} trials on {batch['parallel']} workers in "
              f"{batch['wall_s']:.1f} s; best {batch['best_us']:.3f} µs")
        last = {"finished": batch["state"] in ("S5_REPORT", "DONE"), "message": batch["message"]}
        if last["finished"]:
            a.say("the server ended tuning: " + clip(batch["message"].split("; ", 1)[-1], 140))
    if not last.get("finished"):
        await a.call("stop_session", session_id=sid, reason="demo plan exhausted")
        a.say("demo plan exhausted: stop_session")


def _decided_changes(tables: dict[str, list[dict[str, Any]]]) -> set[tuple[str, str]]:
    """(knob, value as JSON) of every round the ledger holds decided with a measurement or a failure — not one
    rolled back unjudged by an interruption, which the resumed demo does again."""
    decided = {int(d["number"]): d for d in tables.get("round_decisions", [])}
    out = set()
    for p in tables.get("patches", []):
        d = decided.get(int(p["round"])) if p.get("round") is not None else None
        if d is None or d.get("result_type") == "abandoned":
            continue
        changes = p.get("knob_changes") or []
        if isinstance(changes, str):
            changes = json.loads(changes)
        out |= {(c["knob_id"], json.dumps(c["after"])) for c in changes if isinstance(c, dict) and "knob_id" in c}
    return out


async def _show_refusals(a: "Agent", workspace: Path, sid: str, operator: str, vec: str) -> None:
    src = (workspace / f"{operator}.py").read_text()
    old_line = next(line for line in src.splitlines() if line.startswith("TILE_B"))
    vec_line = next(line for line in src.splitlines() if "set_vec_tile_shapes(" in line)
    import difflib

    def diff_to(new_src: str) -> str:
        return "".join(difflib.unified_diff(src.splitlines(True), new_src.splitlines(True), f"a/{operator}.py",
                                            f"b/{operator}.py"))

    two = diff_to(src.replace(old_line, "TILE_B = 2").replace(vec_line, vec_line.replace("4, 256", "8, 256")))
    _refused(a, await a.call("apply_tuning_patch", expect_error=True, session_id=sid, diff=two, catalog_id="F-10",
                             rationale="demo: two knobs at once is not allowed"), "GATE one-change")
    smuggled = diff_to(src.replace(vec_line, vec_line.replace("4, 256", "8, 256")).replace("= e / s", "= e"))
    _refused(a, await a.call("apply_tuning_patch", expect_error=True, session_id=sid, diff=smuggled,
                             catalog_id="F-10", rationale="demo: a knob plus a change of the computation"),
             "GATE one-change")
    _refused(a, await a.call("apply_tuning_patch", expect_error=True, session_id=sid, knob=vec, value=[4, 32, 256],
                             catalog_id="F-10", rationale="demo: a tile the unified buffer cannot hold"),
             "GATE legality")


async def _ledger_tables(client: Any, sid: str) -> dict[str, list[dict[str, Any]]]:
    import orjson

    res = await client.read_resource(f"pypto-tune://sessions/{sid}/ledger")
    data = orjson.loads(res.contents[0].text)
    return data["tables"]


def interrupted_line(workspace: Path, why: str) -> str:
    """One line for a person who stopped the demo: the session's state, what the operator file holds, how to go on."""
    from pypto_tune.tools.rules import gates
    from pypto_tune.tools.session.ledger import Ledger
    from pypto_tune.tools.session.state import load_rows, derive_state

    again = f"start over: pypto-tune demo --workspace {shlex.quote(_shown(workspace))}"
    go_on = f"resume: pypto-tune demo --resume --workspace {shlex.quote(_shown(workspace))}"
    try:
        ledger = Ledger.for_workspace(workspace)
        try:
            sessions = ledger.rows("sessions")
            st = derive_state(load_rows(ledger, str(sessions[-1]["id"]))) if sessions else None
        finally:
            ledger.close()
    except Exception:  # noqa: BLE001 - no ledger yet, or one mid-write: say what is certain
        st = None
    if st is None:
        return f"pypto-tune demo: {why} before the session started; nothing to keep — {again}"
    where = st.level1 + (f" / {st.stage}" if st.stage else "")
    if st.finished:
        return f"pypto-tune demo: {why} after session {st.id} finished ({where}); its reports are in the workspace"
    if st.open_round is not None:
        held = (f"round {st.open_round.number} is open (step {gates.round_phase(st)}): the operator file holds its "
                "change; resuming rolls it back to the kept state and does it again")
    else:
        held = "no round is open: the operator file holds the kept state"
    return f"pypto-tune demo: {why} in session {st.id} at {where}; {held} — {go_on} (or {again})"


class _Terminated(Exception):
    pass


def run_demo(*, workspace: Path | None, lang: str = "en", operator: str = "softmax", resume: bool = False) -> int:
    ws = (workspace or Path.cwd() / "demo-run").resolve()
    try:
        lock = _prepare(ws, operator, resume=resume)
    except DemoError as exc:
        print(f"pypto-tune demo: {exc}", file=sys.stderr)
        return 1

    def on_term(signum: int, frame: Any) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        print(f"pypto-tune demo: workspace {_shown(ws)}", flush=True)
        return anyio.run(_session, ws, lang, operator, resume)
    except DemoError as exc:
        print(f"pypto-tune demo: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Terminated) as exc:
        name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
        print("\n" + interrupted_line(ws, f"stopped by {name}"), file=sys.stderr, flush=True)
        return 130 if name == "SIGINT" else 143
    except BaseExceptionGroup as group:  # errors inside the client's task groups arrive wrapped
        stopped = group.subgroup(lambda e: isinstance(e, (KeyboardInterrupt, _Terminated)))
        if stopped is not None:
            name = "SIGINT" if group.subgroup(lambda e: isinstance(e, KeyboardInterrupt)) else "SIGTERM"
            print("\n" + interrupted_line(ws, f"stopped by {name}"), file=sys.stderr, flush=True)
            return 130 if name == "SIGINT" else 143
        demo_errors = group.subgroup(lambda e: isinstance(e, DemoError))
        if demo_errors is None:
            raise
        first: BaseException = demo_errors
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        print(f"pypto-tune demo: {first}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        lock.release()
