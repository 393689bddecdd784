"""Measure every configuration of a fixture operator's knob grid in SIM and write the landscape as JSON.

    .venv/bin/python benchmarks/grids/measure_grid.py fixtures/operators/rmsnorm_grid
    .venv/bin/python benchmarks/grids/measure_grid.py fixtures/operators/matmul_act --workers 2 --timeout 120
    .venv/bin/python benchmarks/grids/measure_grid.py OP_DIR --summary-only        # re-print a written file
    .venv/bin/python benchmarks/grids/measure_grid.py OP_DIR --markdown            # ... as a Markdown table

The grid lives next to the operator, in ``OP_DIR/grid.json``::

    {"command": ["rmsnorm_grid.py", "--run-mode", "sim"],
     "knobs": [{"name": "rows_per_block", "file": "rmsnorm_grid.py",
                "shipped": "ROWS_PER_BLOCK = 1", "template": "ROWS_PER_BLOCK = {v}",
                "values": [1, 2, 4], "shipped_value": 1}, ...],
     "configs": [...]}            # optional: an explicit list of partial configs instead of the full product

``shipped`` must occur exactly once in ``file``; each configuration replaces it with ``template`` filled in
(``{v}`` = the value as a Python literal, ``{args}`` = a list value's items joined by ", ", ``{0}``, ``{1}``… =
a list value's items). Knobs missing from an explicit config keep their shipped value. A knob whose shipped text
computes its value (``"shipped_is_expression": true``, e.g. ``pypto.set_vec_tile_shapes(*tile_list)`` where a
comprehension builds ``tile_list``) keeps that text for its ``shipped_value`` and is pinned to literals otherwise.

Each configuration runs in a fresh temporary copy of the operator folder (the simulator writes ``output/`` under
the working directory; HOME points into the copy too, so pypto's ``~/.pypto/run`` records stay out of the real
home), with the environment pypto-tune gives a test command (``build_child_env``). The operator time is what the
server measures: ``analyze_runs`` over the run's output folders, i.e. the sum over folders of the maximum over
AIC/AIV blocks of "Core Total Work Time" in ``bubble_analysis.log`` (domain B.10); E2E is the writer's AICore
end-to-end time. A configuration that exits non-zero, or leaves no output folder with a bubble log, is recorded
as not compiled with its first error line. Progress goes to stderr; the summary to stdout.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as _dt
import hashlib
import importlib.metadata
import itertools
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pypto_tune.tools.analysis import analyze_runs, validate_run
from pypto_tune.tools.running.runner import build_child_env

HERE = Path(__file__).resolve().parent
DEFAULT_TIMEOUT_S = 180.0
# Lines that are noise in every SIM run: pypto's PNG helpers without matplotlib/pandas (domain A.2b).
_NOISE = re.compile(r"No module named '(matplotlib|pandas)")
# What a compile failure looks like in 0.2.0: "Run pass failed., func CompileFunction, ...", "Errcode: FC4000!",
# "[ERROR] ...", a Python exception line, or our fixtures' own error verdict.
_ERROR_LINE = re.compile(r"Run pass failed|Errcode|\[ERROR\]|^\w[\w.]*(Error|Exception)\b:|PRECISION: error|"
                         r"\b(?:failed|error)\b", re.IGNORECASE)
_EXCEPTION_LINE = re.compile(r"^\w[\w.]*(Error|Exception)\b:")
_VERDICT_LINE = re.compile(r"PRECISION:|✓|\bpassed\b|completed successfully|\bFAIL", re.IGNORECASE)


# ---------------------------------------------------------------- grid spec


def load_spec(op_dir: Path) -> dict:
    spec = json.loads((op_dir / "grid.json").read_text())
    for k in spec["knobs"]:
        text = (op_dir / k["file"]).read_text()
        n = text.count(k["shipped"])
        if n != 1:
            raise SystemExit(f"grid.json: knob {k['name']!r}: {k['shipped']!r} occurs {n} times in {k['file']} "
                             "(must be exactly once)")
        if k["shipped_value"] not in k["values"]:
            raise SystemExit(f"grid.json: knob {k['name']!r}: shipped_value is not among values")
        if k.get("shipped_is_expression"):
            continue  # the shipped text computes its value (a comprehension, a field): it stays as written
        if render(k, k["shipped_value"]) != k["shipped"]:
            raise SystemExit(f"grid.json: knob {k['name']!r}: template with shipped_value gives "
                             f"{render(k, k['shipped_value'])!r}, not the shipped text {k['shipped']!r}")
    merged = [json.dumps(c, sort_keys=True) for c in configurations(spec)]
    if len(set(merged)) != len(merged):
        raise SystemExit("grid.json: the explicit configs repeat a configuration (after filling in shipped values)")
    return spec


def source_digests(op_dir: Path) -> dict[str, str]:
    """SHA-256 of every Python file of the operator folder: the result file describes exactly these sources."""
    return {str(p.relative_to(op_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(op_dir.rglob("*.py")) if "output" not in p.relative_to(op_dir).parts
            and "__pycache__" not in p.parts}


def _literal(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    return repr(v)


def render(knob: dict, value) -> str:
    items = value if isinstance(value, list) else [value]
    return knob["template"].format(*[_literal(x) for x in items], v=_literal(value),
                                   args=", ".join(_literal(x) for x in items))


def configurations(spec: dict) -> list[dict]:
    """Every configuration as {knob name: value}, in grid order (the first knob varies slowest)."""
    shipped = {k["name"]: k["shipped_value"] for k in spec["knobs"]}
    if spec.get("configs"):
        return [{**shipped, **c} for c in spec["configs"]]
    names = [k["name"] for k in spec["knobs"]]
    return [dict(zip(names, combo)) for combo in itertools.product(*(k["values"] for k in spec["knobs"]))]


# ---------------------------------------------------------------- one configuration


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# pypto 0.2.0 prints only "Run pass failed" / "Errcode: …" on a compile failure; the reason (e.g. "in/output total
# size [262144] exceeds MEM_UB size [196608]") goes to $HOME/ascend/log/debug/plog/pypto-log-<pid>_<ts>.log.
_PLOG_ERROR = re.compile(r"^\[ERROR\] \S+ ?:?\d{4}-\d\d-\d\d [\d:.]+ \[[^\]]*\]\[[^\]]*\]:(.*)$")
# Records about pypto's PNG helper scripts failing without matplotlib (A.2b) are skipped: every SIM kernel that got as
# far as simulating writes one, so in a multi-kernel test they precede the failing kernel's real reason.
_PLOG_HELPER = re.compile(r"cmd error: python3? \S*pypto/lib/scripts/")


def _first(lines: list[str], pattern: re.Pattern) -> str | None:
    for line in lines:
        if pattern.search(line) and not _NOISE.search(line):
            return line.strip()[:400]
    return None


def _plog_errors(home: Path, limit: int = 3) -> list[str]:
    """The first ERROR records of pypto's own log files under ``home`` (the compile failure's real reason)."""
    out: list[str] = []
    for f in sorted((home / "ascend" / "log").rglob("*.log")):
        for line in f.read_text(errors="replace").splitlines():
            m = _PLOG_ERROR.match(line)
            if m and not _PLOG_HELPER.search(m.group(1)):
                out.append(m.group(1).strip()[:400])
                if len(out) >= limit:
                    return out
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_folder(dst: Path, argv: list[str], *, home: Path, timeout_s: float) -> dict:
    """Run ``argv`` in the prepared operator folder ``dst`` as a test command of pypto-tune (``build_child_env``, HOME
    at ``home``) and read its operator time the way the server does; returns the measurement fields of a row."""
    row: dict = {}
    env = build_child_env(run_mode="sim", base={**os.environ, "HOME": str(home)})
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=dst, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    row["wall_s"] = round(time.monotonic() - t0, 2)
    row["exit_code"] = None if timed_out else proc.returncode
    text = _ANSI.sub("", out.decode(errors="replace") + "\n" + err.decode(errors="replace"))
    lines = text.replace(str(dst) + os.sep, "").replace(str(dst), ".").splitlines()
    run_dirs = sorted(p for p in (dst / "output").glob("output_*") if p.is_dir()) if (dst / "output").is_dir() \
        else []
    logged = [p for p in run_dirs if (p / "CostModelSimulationOutput" / "bubble_analysis.log").is_file()]
    row["output_folders"] = len(run_dirs)
    row["verdict_line"] = next((ln.strip() for ln in reversed(lines)
                                if _VERDICT_LINE.search(ln) and not _NOISE.search(ln)
                                and not ln.startswith("[")), None)
    compiled = not timed_out and proc.returncode == 0 and bool(logged)
    row["compiled"] = compiled
    if not compiled:
        row["error"] = f"timeout after {timeout_s:.0f} s" if timed_out else (
            _first(lines, re.compile(r"Run pass failed")) or _first(lines, re.compile(r"Errcode"))
            or _first(lines, _ERROR_LINE) or f"exit code {proc.returncode}, no bubble_analysis.log")
        row["exception"] = _first(list(reversed(lines)), _EXCEPTION_LINE) or _first(
            list(reversed(lines)), re.compile(r"PRECISION: error"))
        row["log_errors"] = _plog_errors(home)
        row.update(operator_time_us=None, e2e_us=None, task_count=None)
        return row
    a = analyze_runs(logged, run_mode="sim")
    row["operator_time_us"] = round(a.operator_time_us, 6)
    row["e2e_us"] = round(a.e2e_us, 6)
    row["task_count"] = a.task_count
    row["per_folder_operator_time_us"] = [round(d.operator_time_us, 6) for d in a.per_dir]
    reasons = [r for p in logged for r in validate_run(p, "sim")]
    return judge_complete({**row, "valid": not reasons, **({"invalid_reasons": reasons} if reasons else {})})


def missing_kernels(row: dict) -> int:
    """Kernel run folders of a row that left no time (no ``bubble_analysis.log``: a kernel past the simulator's
    swimlane limit writes none). The row's operator time then sums only the kernels that were timed: it is no
    measurement of the operator, and the server refuses such a run too."""
    return (row.get("output_folders") or 0) - len(row.get("per_folder_operator_time_us") or [])


def judge_complete(row: dict) -> dict:
    """``row`` made invalid when a kernel left no time (:func:`missing_kernels`); rows cached before this check
    are judged again the same way."""
    missing = missing_kernels(row) if row.get("compiled") else 0
    if missing <= 0 or not row.get("valid", True):
        return row
    why = (f"{missing} of {row['output_folders']} kernel run folders left no bubble_analysis.log: the operator time "
           "would leave those kernels out")
    return {**row, "valid": False, "invalid_reasons": [*row.get("invalid_reasons", []), why]}


def run_config(op_dir: Path, spec: dict, config: dict, *, timeout_s: float, keep: bool = False) -> dict:
    """Run one configuration in a temporary copy of ``op_dir``; returns its row of the result file."""
    knobs = {k["name"]: k for k in spec["knobs"]}
    work = Path(tempfile.mkdtemp(prefix=f"grid_{op_dir.name}_"))
    row: dict = {"knobs": config}
    try:
        dst = work / op_dir.name
        shutil.copytree(op_dir, dst, ignore=shutil.ignore_patterns("output", "__pycache__", ".pypto-tune"))
        for name, value in config.items():
            k = knobs[name]
            if k.get("shipped_is_expression") and value == k["shipped_value"]:
                continue
            path = dst / k["file"]
            text = path.read_text()
            path.write_text(text.replace(k["shipped"], render(k, value), 1))
        home = work / "home"
        home.mkdir()
        row.update(run_folder(dst, [sys.executable, *spec["command"]], home=home, timeout_s=timeout_s))
        return row
    finally:
        if keep:
            row["kept_at"] = str(work)
        else:
            shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- summary


def summarise(rows: list[dict], shipped: dict) -> dict:
    """Grid size N, shipped and best times, and how many configs are "good" (K) at 90 % / 99 % of the best
    speed-up, with random search's expected number of trials to hit one of them, (N+1)/(K+1) (sampling without
    replacement over all N configurations, failures included)."""
    n = len(rows)
    ok = [r for r in rows if r["compiled"] and r.get("valid", True)]
    ship = next((r for r in rows if r["knobs"] == shipped), None)
    out: dict = {"grid_size": n, "compiled": sum(r["compiled"] for r in rows),
                 "failed_to_compile": sum(not r["compiled"] for r in rows),
                 "invalid_runs": sum(1 for r in rows if r["compiled"] and not r.get("valid", True))}
    if not ok or ship is None or not ship["compiled"]:
        out["note"] = "shipped configuration missing or failed: no speed-ups"
        return out
    best = min(ok, key=lambda r: r["operator_time_us"])
    t_ship, t_best = ship["operator_time_us"], best["operator_time_us"]
    best_speedup = t_ship / t_best
    out.update(shipped_us=t_ship, best_us=t_best, best_knobs=best["knobs"], best_speedup=round(best_speedup, 4),
               configs_at_best=sum(1 for r in ok if r["operator_time_us"] <= t_best * (1 + 1e-9)))
    for pct in (90, 99):
        k = sum(1 for r in ok if t_ship / r["operator_time_us"] >= best_speedup * pct / 100)
        out[f"within_{pct}pct"] = k
        out[f"random_search_expected_trials_{pct}pct"] = round((n + 1) / (k + 1), 2)
    # the best a one-knob move from the shipped state reaches (what a greedy first round can see)
    one = [r for r in ok if sum(r["knobs"][k] != shipped[k] for k in shipped) == 1]
    if one:
        b1 = min(one, key=lambda r: r["operator_time_us"])
        out["best_single_knob_move"] = {"knobs": b1["knobs"], "operator_time_us": b1["operator_time_us"],
                                        "speedup": round(t_ship / b1["operator_time_us"], 4)}
    return out


def print_summary(data: dict) -> None:
    s = data["summary"]
    print(f"{data['operator']}: {s['grid_size']} configs ({s['compiled']} compiled, {s['failed_to_compile']} failed,"
          f" {s['invalid_runs']} invalid runs); wall {data.get('wall_s', '?')} s")
    if "shipped_us" not in s:
        print("  " + s.get("note", ""))
        return
    print(f"  shipped {s['shipped_us']:.3f} µs → best {s['best_us']:.3f} µs ({s['best_speedup']:.2f}×) at "
          f"{s['best_knobs']} ({s['configs_at_best']} config(s) tie)")
    for pct in (90, 99):
        print(f"  within {pct} % of the best speed-up: {s[f'within_{pct}pct']} configs → random search needs "
              f"{s[f'random_search_expected_trials_{pct}pct']} trials on average")
    if "best_single_knob_move" in s:
        b = s["best_single_knob_move"]
        print(f"  best one-knob move from shipped: {b['knobs']} {b['operator_time_us']:.3f} µs ({b['speedup']:.2f}×)")
    fails = [r for r in data["configs"] if not r["compiled"]]
    for r in fails:
        why = (r.get("log_errors") or [""])[0]
        print(f"  not compiled: {r['knobs']}: {r['error']}" + (f" | log: {why}" if why else ""))


def failure_reason(row: dict) -> str:
    """The most telling line of a failed row: pypto's own log record (minus its ``[Module.Part]:`` tag), else the
    first error line of the output."""
    why = (row.get("log_errors") or [row["error"]])[0]
    return re.sub(r"^\[[\w.]+\]:\s*", "", why)


def _fmt(v) -> str:
    return "(" + ", ".join(map(str, v)) + ")" if isinstance(v, list) else str(v)


def markdown(data: dict) -> str:
    """The result file as Markdown: a pivot table (operator time µs per cell) for a full product grid, else one
    row per configuration. ``*`` marks the shipped configuration, bold the grid best, ``FAIL`` a compile failure."""
    knobs = data["knobs"]
    names = [k["name"] for k in knobs]
    rows = data["configs"]
    s = data["summary"]
    best = s.get("best_us")

    def cell(r: dict) -> str:
        if not r["compiled"]:
            return "FAIL"
        t = f"{r['operator_time_us']:.3f}"
        if best is not None and r["operator_time_us"] <= best * (1 + 1e-9):
            t = f"**{t}**"
        return t + ("*" if r["shipped"] else "")

    product = 1
    for k in knobs:
        product *= len(k["values"])
    out = []
    if len(rows) == product and len(knobs) >= 2:
        split = (len(knobs) + 1) // 2
        rk, ck = knobs[:split], knobs[split:]
        index = {tuple(json.dumps(r["knobs"][n]) for n in names): r for r in rows}
        col_keys = list(itertools.product(*(k["values"] for k in ck)))
        row_keys = list(itertools.product(*(k["values"] for k in rk)))
        head = " / ".join(k["name"] for k in rk) + " \\ " + " / ".join(k["name"] for k in ck)
        out.append("| " + head + " | " + " | ".join(" / ".join(_fmt(v) for v in c) for c in col_keys) + " |")
        out.append("|---" * (len(col_keys) + 1) + "|")
        for rkey in row_keys:
            cells = [cell(index[tuple(json.dumps(v) for v in (*rkey, *ckey))]) for ckey in col_keys]
            out.append("| " + " / ".join(_fmt(v) for v in rkey) + " | " + " | ".join(cells) + " |")
    else:
        shipped = data["shipped"]
        out.append("| change from shipped | operator µs | E2E µs | tasks | speed-up | compiled |")
        out.append("|---|---|---|---|---|---|")
        for r in rows:
            diff = ", ".join(f"{n} {_fmt(r['knobs'][n])}" for n in names if r["knobs"][n] != shipped[n]) or "shipped"
            if r["compiled"]:
                sp = f"{s['shipped_us'] / r['operator_time_us']:.2f}×" if "shipped_us" in s else ""
                out.append(f"| {diff} | {cell(r)} | {r['e2e_us']:.3f} | {r['task_count']} | {sp} | yes |")
            else:
                out.append(f"| {diff} | — | — | — | — | **no**: {failure_reason(r)} |")
    return "\n".join(out)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op_dir", type=Path, help="operator folder holding grid.json")
    ap.add_argument("--out", type=Path, help="result file (default benchmarks/grids/<operator>.json)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per configuration")
    ap.add_argument("--limit", type=int, help="measure only the first N configurations (trial runs)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folders (their paths are recorded)")
    ap.add_argument("--summary-only", action="store_true", help="print the summary of an existing result file")
    ap.add_argument("--markdown", action="store_true", help="print an existing result file as a Markdown table")
    args = ap.parse_args(argv)
    op_dir = args.op_dir.resolve()
    out = args.out or HERE / f"{op_dir.name}.json"
    if args.summary_only or args.markdown:
        data = json.loads(out.read_text())
        print(markdown(data) if args.markdown else "", end="\n" if args.markdown else "")
        if args.summary_only:
            print_summary(data)
        return 0
    spec = load_spec(op_dir)
    digests = source_digests(op_dir)
    configs = configurations(spec)
    if args.limit:
        configs = configs[: args.limit]
    shipped = {k["name"]: k["shipped_value"] for k in spec["knobs"]}
    print(f"{op_dir.name}: {len(configs)} configurations, {args.workers} workers", file=sys.stderr)
    t0 = time.monotonic()
    rows: list[dict | None] = [None] * len(configs)
    with cf.ThreadPoolExecutor(max_workers=args.workers) as pool:
        futs = {pool.submit(run_config, op_dir, spec, c, timeout_s=args.timeout, keep=args.keep): i
                for i, c in enumerate(configs)}
        for done, fut in enumerate(cf.as_completed(futs), 1):
            i = futs[fut]
            try:
                r = fut.result()
            except Exception as exc:  # a harness failure must not hide the other configurations' results
                r = {"knobs": configs[i], "compiled": False, "wall_s": None, "operator_time_us": None,
                     "e2e_us": None, "task_count": None, "error": f"harness error: {type(exc).__name__}: {exc}"}
            rows[i] = r
            what = (f"{r['operator_time_us']:.3f} µs, {r['task_count']} tasks" if r["compiled"]
                    else f"NOT COMPILED: {r['error']}")
            print(f"[{done}/{len(configs)}] {r['knobs']}: {what} ({r['wall_s']} s)", file=sys.stderr, flush=True)
    for r in rows:
        r["shipped"] = r["knobs"] == shipped  # type: ignore[index]
    if source_digests(op_dir) != digests:
        print("warning: the operator's sources changed during the measurement; the result file is stale",
              file=sys.stderr)
    data = {
        "operator": op_dir.name,
        "source_sha256": digests,
        "command": spec["command"],
        "metric": "operator_time_us = Σ over output folders of max over AIC/AIV blocks of 'Core Total Work Time' "
                  "in bubble_analysis.log (domain B.10), via pypto_tune.tools.analysis.analyze_runs; "
                  "e2e_us = writer's AICore end-to-end time; task_count = real tasks in merged_swimlane.json "
                  "(HUB included, fake excluded)",
        "pypto_version": importlib.metadata.version("pypto"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), {args.workers} parallel workers",
        "measured_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "wall_s": round(time.monotonic() - t0, 1),
        "knobs": spec["knobs"],
        "shipped": shipped,
        "configs": rows,
    }
    data["summary"] = summarise(rows, shipped)  # type: ignore[arg-type]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print_summary(data)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
