"""Tile a real SIM run to about N tasks: a synthetic but format-exact run folder for the benchmarks.

Copy k of the source run side by side in time: every X/s/f event of the Machine View is repeated with ``ts``
shifted by k · (source span + 1 µs), ``seqNo`` += k (so task keys stay unique) and flow ids offset; dyn_topo.txt
rows get the same seqNo shift; program.json is copied. The bubble_analysis.log is then written from the tiled
trace with the engine's own B.1 walk (the writer itself is not shipped with this project), in the exact A.3 format.
The output is pretty-printed with indent 4 like the PyPTO writer, so file sizes match real traces.

Usage: python benchmarks/gen_trace.py SRC_RUN_DIR DEST_DIR N_TASKS
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

from pypto_tune.tools.analysis.crosscheck import recompute_log
from pypto_tune.tools.analysis.layout import locate
from pypto_tune.tools.analysis.trace import read_trace


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def _dump_event(ev: dict) -> str:
    # json.dumps(indent=4) of one element, re-indented to sit at depth 2 of {"traceEvents": [...]}
    return "\n".join("        " + line for line in json.dumps(ev, indent=4, ensure_ascii=False).split("\n"))


def tile(src_run: Path, dest: Path, n_tasks: int) -> Path:
    files = locate(src_run)
    if files.trace is None or files.topo is None or files.program is None:
        raise SystemExit(f"{src_run}: needs merged_swimlane.json, dyn_topo.txt and program.json")
    events = _load(files.trace)["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") in ("X", "s", "f") and e.get("pid") == 1]
    xs = [e for e in body if e["ph"] == "X"]
    per_tile = len(xs)
    copies = max(1, -(-n_tasks // per_tile))
    t_end = max(e["ts"] + e.get("dur", 0.0) for e in body)
    t_start = min(e["ts"] for e in xs)
    shift_us = (t_end - t_start) + 1.0
    max_id = max(e.get("id", 0) for e in body) + 1
    seqs = [e["args"]["seqNo"] for e in xs]
    seq_step = max(seqs) + 1

    # The writer puts each 's' at exactly (predecessor start + dur) − 0.0001 in float arithmetic; shifting that
    # value by dt would round differently than shifting the start, so rebuild it from the shifted predecessor.
    pred_of_s = {}
    ends = {(e["tid"], e["ts"] + e["dur"] - 0.0001): e for e in xs}
    for e in body:
        if e["ph"] == "s":
            pred_of_s[id(e)] = ends.get((e["tid"], e["ts"]))

    run = dest / src_run.name
    swim = run / "CostModelSimulationOutput"
    swim.mkdir(parents=True, exist_ok=True)
    shutil.copy(files.program, run / "program.json")
    with open(swim / "merged_swimlane.json", "w", encoding="utf-8") as out:
        out.write('{\n    "traceEvents": [\n')
        first = True
        for ev in meta:
            out.write(("" if first else ",\n") + _dump_event(ev))
            first = False
        for k in range(copies):
            dt = k * shift_us
            for ev in body:
                e = dict(ev)
                pred = pred_of_s.get(id(ev)) if ev["ph"] == "s" else None
                e["ts"] = (pred["ts"] + dt) + pred["dur"] - 0.0001 if pred is not None else ev["ts"] + dt
                e["id"] = ev.get("id", 0) + k * max_id
                if ev["ph"] == "X":
                    a = dict(ev["args"])
                    a["seqNo"] = a["seqNo"] + k * seq_step
                    e["args"] = a
                    head, _, rest = ev["name"].partition("-")
                    e["name"] = f"{int(head) + k * seq_step}-{rest}"
                out.write(",\n" + _dump_event(e))
        out.write("\n    ]\n}")
    lines = files.topo.read_text().splitlines()
    with open(run / "dyn_topo.txt", "w") as out:
        out.write(lines[0] + "\n")
        for k in range(copies):
            for line in lines[1:]:
                seq, _, rest = line.partition(",")
                out.write(f"{int(seq) + k * seq_step},{rest}\n")
    tr = read_trace(swim / "merged_swimlane.json")
    log, _ = recompute_log(tr)
    write_log(log, swim / "bubble_analysis.log")
    return run


def write_log(log, path: Path) -> None:
    """bubble_analysis.log in the writer's format (A.3), including its odd space runs."""
    with open(path, "w") as out:
        if log.top10:
            out.write("Top 10 tasks in waiting schedule\n")
            for t in log.top10:
                out.write(f"    Task:{t.key}, label:{t.label}, wait:{' ' * 17}{t.wait_us}\n")
        out.write("\n\n")
        for c in log.cores:
            fake = f", Fake Task: {c.n_fake}" if c.n_fake else ""
            out.write(f"[{c.name}] Execute task num:{c.n_real}{fake}\n"
                      f"    Core Total Work Time: {c.work_us}\n    Total Wait Time: {c.wait_total_us}\n"
                      f"    Wait Schedule Time: {c.wait_schedule_us}\n    Wait Predecessor Time: {c.wait_predecessor_us}\n")
            if c.n_real or c.n_fake:
                out.write("    Top 3 tasks in waiting schedule time\n")
                for t in c.top3:
                    out.write(f"    Task:{t.key}, label:{t.label}, wait:{' ' * 21}{t.wait_us}\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    print(tile(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])))
