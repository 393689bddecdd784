"""A stand-in for the reference scripts, written for this benchmark from their description in domain.md.

It does what they do the way they do it: each analysis is its own process that re-reads its inputs with
``json.load`` / ``csv`` and loops over everything itself (perf → B.2 from the log; swimlane → B.4; core_usage →
B.5; dep_chains → B.7; leafhash → A.7). It is not the reference code and is not used by the server.

Usage: python benchmarks/baseline.py {perf|swimlane|core_usage|dep_chains|leafhash} RUN_DIR
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
from pathlib import Path


def _swim(run: Path) -> Path:
    sim = run / "CostModelSimulationOutput"
    return sim if (sim / "merged_swimlane.json").exists() else run


def perf(run: Path) -> dict:
    text = (_swim(run) / "bubble_analysis.log").read_text()
    cores = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^\[(AIC_\d+|AIV_\d+)\] Execute task num:(\d+)", line)
        if m:
            cur = cores.setdefault(m.group(1), {})
            continue
        if line.startswith("["):
            cur = None
        if cur is None:
            continue
        for key, tag in (("work", "Core Total Work Time:"), ("wait", "Total Wait Time:"),
                         ("sched", "Wait Schedule Time:"), ("pred", "Wait Predecessor Time:")):
            if tag in line:
                cur[key] = float(line.split(":")[1])
    util, bub, aic = [], [], []
    for name, c in cores.items():
        busy = c["work"] - c["wait"]
        util.append(busy / (busy + c["wait"]) * 100 if busy + c["wait"] else 0)
        bub.append(c["sched"] / (busy + c["sched"]) * 100 if busy + c["sched"] else 0)
        if name.startswith("AIC"):
            aic.append(busy)
    mu = sum(aic) / len(aic) if aic else 0
    lb = 100.0 if len(aic) < 2 else (0 if mu == 0 else (1 - math.sqrt(sum((x - mu) ** 2 for x in aic) / len(aic)) / mu) * 100)
    out = {"util": sum(util) / len(util), "bubble": sum(bub) / len(bub), "lb": lb,
           "max_work": max(c["work"] for c in cores.values())}
    (_swim(run) / "baseline_report.md").write_text(json.dumps(out))
    return out


def swimlane(run: Path) -> dict:
    with open(_swim(run) / "merged_swimlane.json") as fh:
        trace = json.load(fh)
    with open(run / "program.json") as fh:
        program = json.load(fh)
    roots = {f["hash"]: f.get("func_magicname", "") for f in program["functions"] if f.get("graphtype") == 2}
    leaves = {f["hash"]: f for f in program["functions"] if f.get("graphtype") == 3}
    lanes = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name"}
    stats: dict = {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        hint = e.get("args", {}).get("event-hint", "")
        m = re.search(r"leafHash:(\d+)", hint)
        if not m or m.group(1) == "0":
            continue
        r = re.search(r"rootHash:(\d+)", hint)
        s = stats.setdefault(int(m.group(1)), {"d": [], "core": lanes.get(e["tid"], ""), "root": int(r.group(1))})
        s["d"].append(e["dur"])
    rows = []
    for h, s in stats.items():
        ops = [o.get("opcode") for o in leaves.get(h, {}).get("operations", [])]
        rows.append((h, min(s["d"]), max(s["d"]), sum(s["d"]) / len(s["d"]), sum(s["d"]), s["core"],
                     roots.get(s["root"], "").replace("TENSOR_LOOP_", ""),
                     [o for o in ops if o not in ("COPY_IN", "COPY_OUT", "SYNC_SRC", "SYNC_DST", "PHASE1", "PHASE2")]))
    rows.sort(key=lambda r: -r[4])
    return {"leaves": len(rows)}


def core_usage(run: Path) -> dict:
    with open(_swim(run) / "merged_swimlane.json") as fh:
        trace = json.load(fh)
    lanes = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name"}
    used: dict = {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        m = re.search(r"leafHash:(\d+)", e.get("args", {}).get("event-hint", ""))
        if not m or m.group(1) == "0":
            continue
        name = lanes.get(e["tid"], "")
        if "Fake" in name:
            continue
        parts = e["name"].split("-")
        psg = parts[4].split("(")[0] if len(parts) >= 5 else "?"
        u = used.setdefault(m.group(1), {"lanes": set(), "psg": set()})
        u["lanes"].add(name)
        u["psg"].add(psg)
    n_aic = len({n for n in lanes.values() if "AIC" in n})
    n_aiv = len({n for n in lanes.values() if "AIV" in n})
    return {h: (len(u["lanes"]), n_aic if any("AIC" in x for x in u["lanes"]) else n_aiv) for h, u in used.items()}


def dep_chains(run: Path) -> dict:
    nodes, succ = {}, {}
    with open(run / "dyn_topo.txt") as fh:
        rd = csv.reader(fh)
        next(rd)
        for row in rd:
            if len(row) < 11:  # the reference drops successor-less rows
                continue
            key = (int(row[0]), int(row[1]))
            nodes[key] = (int(row[6]), int(row[4]), int(row[7]), int(row[8]))
            succ[key] = [(int(row[0]), int(x)) for x in row[10:] if x]
    aiv_succ, has_pred = {}, set()
    for k, (leaf, op, ct, psg) in nodes.items():
        if ct != 0:
            continue
        s = list(dict.fromkeys(x for x in succ[k] if x in nodes and nodes[x][2] == 0))
        aiv_succ[k] = s
        has_pred.update(s)
    groups: dict = {}
    for k in aiv_succ:
        if k in has_pred:
            continue
        levels, frontier, seen = [], [k], {k}
        while frontier:
            levels.append(tuple(sorted((nodes[x][0], nodes[x][1]) for x in frontier)))
            nxt = []
            for x in frontier:
                for y in aiv_succ.get(x, ()):
                    if y not in seen:
                        seen.add(y)
                        nxt.append(y)
            frontier = nxt
        groups[tuple(levels)] = groups.get(tuple(levels), 0) + 1
    return {"groups": len(groups), "tasks": len(nodes)}


def leafhash(run: Path) -> dict:
    with open(run / "program.json") as fh:
        program = json.load(fh)
    leaves = {f["hash"]: f for f in program["functions"] if f.get("graphtype") == 3}
    count: dict = {}
    with open(run / "dyn_topo.txt") as fh:
        rd = csv.reader(fh)
        next(rd)
        for row in rd:
            if len(row) < 11:
                continue
            count[int(row[6])] = count.get(int(row[6]), 0) + 1
    out = {}
    for h in count:
        ops = leaves.get(h, {}).get("operations", [])
        lines = [o["line"] for o in ops if o.get("line") is not None]
        out[h] = (min(lines), max(lines)) if lines else None
    return {"mapped": len(out)}


STEPS = {"perf": perf, "swimlane": swimlane, "core_usage": core_usage, "dep_chains": dep_chains, "leafhash": leafhash}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in STEPS:
        raise SystemExit(__doc__)
    print(json.dumps(STEPS[sys.argv[1]](Path(sys.argv[2])), default=str)[:200])
