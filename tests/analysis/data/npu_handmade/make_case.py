"""Writes the hand-made NPU-layout run next to this file (run it again after changing it).

Newer-build shape: everything in the run folder, idle cores absent, an AI-CPU lane, the AICPU view prepended to
merged_swimlane.json (pid 0), ref-DSL labels (func = bits 16–25), 11-column dyn_topo.txt, hashOrder-hint.
The log is the B.1 walk of the trace (what the writer computes, B.9.2), with the writer's integer 0 fields.

Tasks (seq 0; taskId = func << 16 | op):
  t0  AI-CPU_80  leaf 0    0.00–0.02                  → a, b, c
  a   AIC_1      leaf 111  1.00–11.00 (psg 0)         → d
  b   AIC_1      leaf 111  12.00–22.00                → e
  c   AIC_2      leaf 111  1.00–6.00
  d   AIV_25     leaf 222  11.50–13.50 (psg 1)        → f
  e   AIV_26     leaf 222  22.50–24.50
  f   AIV_25     leaf 333  14.00–15.00 (psg 2, a sink: no successors)
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN = HERE / "runs" / "output_20261202_120000_000001_4242_C0000202"

T = {  # name: (taskId, lane tid, start, end, leaf, psg, opmagic, successors)
    "t0": ((1 << 16) | 0, 1160, 0.0, 0.02, 0, 0, 10010, ["a", "b", "c"]),
    "a": ((1 << 16) | 1, 1002, 1.0, 11.0, 111, 0, 10001, ["d"]),
    "b": ((2 << 16) | 1, 1002, 12.0, 22.0, 111, 0, 10001, ["e"]),
    "c": ((3 << 16) | 1, 1004, 1.0, 6.0, 111, 0, 10001, []),
    "d": ((1 << 16) | 2, 1050, 11.5, 13.5, 222, 1, 10002, ["f"]),
    "e": ((2 << 16) | 2, 1052, 22.5, 24.5, 222, 1, 10002, []),
    "f": ((1 << 16) | 3, 1050, 14.0, 15.0, 333, 2, 10003, []),
}
LANES = {1000: "Fake Core_0", 1002: "AIC_1", 1004: "AIC_2", 1050: "AIV_25", 1052: "AIV_26", 1160: "AI-CPU_80"}
CORE = {111: 1, 222: 0, 333: 0, 0: 4}
ROOT = 555


def label(tid_, psg):
    return f"0-{(tid_ >> 16) & 0x3FF}-{tid_ & 0xFFFF}-1-{psg}()"


def main():
    RUN.mkdir(parents=True, exist_ok=True)
    ev = [{"args": {"name": "AICPU View", "type": "aicpu"}, "name": "process_name", "ph": "M", "pid": 0},
          {"args": {"name": "SCHED0-AIC-1"}, "name": "thread_name", "ph": "M", "pid": 0, "tid": 3},
          {"cat": "SCHED0-AIC", "freq": 50, "name": "DEV_TASK_BUILD(0)", "ph": "X", "pid": 0, "tid": 3,
           "ts": 0.0, "dur": 30.0},
          {"args": {"name": "Machine View"}, "cat": "__metadata", "name": "process_name", "ph": "M", "pid": 1}]
    ev += [{"args": {"name": n}, "cat": "__metadata", "name": "thread_name", "ph": "M", "pid": 1, "tid": t}
           for t, n in LANES.items()]
    ids = {k: i for i, k in enumerate(T)}
    for k, (tid_, lane, s, e, leaf, psg, op, _) in T.items():
        args = {"event-hint": f"Task:[{label(tid_, psg)[:-6]}], rootHash:{ROOT}, callOpMagic:{op}, leafHash:{leaf}, "
                              f"TaskId:{tid_}",
                "ioperand-hint": "", "ooperand-hint": "", "execution-hint": "", "color": "",
                "taskId": tid_, "seqNo": 0, "wrapId": 0}
        if leaf == 111:
            args["hashOrder-hint"] = ("l1ReuseInfo hashOrder: func5_0, subGraphCount: 4\n"
                                      "cubeMergeInfo hashOrder: func5_1, subGraphCount: 4")
        ev.append({"args": args, "cat": "event", "id": ids[k], "name": label(tid_, psg), "ph": "X", "pid": 1,
                   "tid": lane, "ts": s, "dur": round(e - s, 10)})
    fid = len(T)
    for k, v in T.items():
        for succ in v[7]:
            ev.append({"cat": "machine-view-last-dep", "id": fid, "name": "machine-view-last-dep", "ph": "s",
                       "pid": 1, "tid": v[1], "ts": v[3] - 0.0001})
            ev.append({"bp": "e", "cat": "machine-view-last-dep", "id": fid, "name": "machine-view-last-dep",
                       "ph": "f", "pid": 1, "tid": T[succ][1], "ts": T[succ][2]})
            fid += 1
    ev.append({"name": "ReadyCount_AIC", "pid": 1, "tid": 1, "ph": "C", "ts": 0.02, "args": {"size": 3}})
    (RUN / "merged_swimlane.json").write_text(json.dumps({"traceEvents": ev}, indent=4, ensure_ascii=False))
    rows = ["seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,wrapId,staticSuccCount,succ"]
    for k, (tid_, lane, s, e, leaf, psg, op, succ) in T.items():
        rows.append(",".join(str(x) for x in [0, tid_, 0, ROOT, op, 0, leaf, CORE[leaf], psg, 0, len(succ)]
                             + [T[x][0] for x in succ]))
    (RUN / "dyn_topo.txt").write_text("\n".join(rows) + "\n")
    prog = {"curr_funcmagic": 9, "enable_cvfuse": False, "entryhash": 1, "pass_thread_num": 1, "version": "x",
            "functions": [
                {"hash": 1, "graphtype": 5, "func_magicname": "PROGRAM_ENTRY", "operations": [{"opcode": "CALL"}]},
                {"hash": ROOT, "graphtype": 2, "func_magicname": "TENSOR_LOOP_M_root_3", "operations": []},
                {"hash": 111, "graphtype": 3, "func_magicname": "leaf_mm", "operations": [
                    {"opcode": "COPY_IN"}, {"opcode": "L1_TO_L0A"}, {"opcode": "A_MUL_B", "file": "op.py", "line": 20},
                    {"opcode": "A_MULACC_B", "file": "op.py", "line": 20}, {"opcode": "COPY_OUT"}]},
                {"hash": 222, "graphtype": 3, "func_magicname": "leaf_exp", "operations": [
                    {"opcode": "EXP", "file": "op.py", "line": 22}, {"opcode": "ADDS", "file": "op.py", "line": 24}]},
                {"hash": 333, "graphtype": 3, "func_magicname": "leaf_copy", "operations": [
                    {"opcode": "COPY_IN"}, {"opcode": "COPY_OUT"}]}]}
    (RUN / "program.json").write_text(json.dumps(prog, indent=1))
    (RUN / "tilefwk_L1_prof_data.json").write_text("[]\n")
    from pypto_tune.tools.analysis.crosscheck import recompute_log
    from pypto_tune.tools.analysis.trace import read_trace

    log, _ = recompute_log(read_trace(RUN / "merged_swimlane.json"))
    out = ["Top 10 tasks in waiting schedule"]
    out += [f"    Task:{t.key}, label:{t.label}, wait:{' ' * 17}{t.wait_us}" for t in log.top10]
    out += ["", ""]
    for c in log.cores:
        z = lambda v: 0 if v == 0 else v  # the writer prints int 0 for fields never accumulated
        out.append(f"[{c.name}] Execute task num:{c.n_real}" + (f", Fake Task: {c.n_fake}" if c.n_fake else ""))
        out += [f"    Core Total Work Time: {c.work_us}", f"    Total Wait Time: {z(c.wait_total_us)}",
                f"    Wait Schedule Time: {z(c.wait_schedule_us)}", f"    Wait Predecessor Time: {z(c.wait_predecessor_us)}"]
        if c.n_real or c.n_fake:
            out.append("    Top 3 tasks in waiting schedule time")
            out += [f"    Task:{t.key}, label:{t.label}, wait:{' ' * 21}{t.wait_us}" for t in c.top3]
    (RUN / "bubble_analysis.log").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
