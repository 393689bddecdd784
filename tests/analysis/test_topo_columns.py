"""The numpy dyn_topo.txt reader gives exactly what the text reader gives: recorded runs, hand-made graphs (cycles,
cube successors, duplicate keys, repeated successors), files it must hand back to the text reader, and fuzzed text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pypto_tune.tools.analysis.chains import aiv_chains, column_chains, topo_summary
from pypto_tune.tools.analysis.topo import scan_topo
from pypto_tune.tools.analysis.topo_columns import read_columns
from pypto_tune.tools.errors import ArtifactError

from .analysis_helpers import DATA

ROOT = Path(__file__).resolve().parents[2]
RECORDED = sorted(DATA.glob("*/runs/*/dyn_topo.txt")) + sorted((ROOT / "fixtures" / "runs").glob("*/output/*/dyn_topo.txt"))
OLD = "seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,successors\n"
NEW = "seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,wrapId,staticSuccCount,succ\n"


def _text(path: Path) -> dict:
    lite = scan_topo(path)
    return {"psg": lite.leaf_psg, "chains": aiv_chains(lite), "layout": lite.layout}


def _outcome(fn, path: Path):
    try:
        return fn(path)
    except ArtifactError as exc:
        return ("error", str(exc))


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "dyn_topo.txt"
    p.write_bytes(text.encode())
    return p


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parts[-4]}-{p.parts[-2][-12:]}")
def test_recorded_runs_read_as_columns_give_the_text_readers_answer(path):
    cols = read_columns(path)
    assert cols is not None  # PyPTO's own files are canonical: the fast path takes them
    assert {"psg": cols.leaf_psg, "chains": column_chains(cols), "layout": cols.layout} == _text(path)


GRAPHS = {
    "chain with a sink": "0,1,0,5,100,0,10,0,0,,2\n0,2,0,5,101,1,20,0,1,,3\n0,3,0,5,102,2,30,0,1,\n",
    "cube successor truncates": ("0,1,0,5,100,0,10,0,0,,2,4\n0,2,0,5,101,1,20,0,1,,3\n0,3,0,5,102,2,30,0,1,\n"
                                 "0,4,0,5,103,3,40,1,2,\n"),
    "cycle": "0,1,0,5,1,0,10,0,0,,2\n0,2,0,5,1,0,10,0,0,,1\n0,3,0,5,1,0,11,0,0,,1\n",
    "self loop and repeats": "0,1,0,5,1,0,10,0,0,,1,2,2,,2,\n0,2,0,5,7,0,10,0,3,,\n0,3,0,5,1,0,10,0,0,\n",
    "duplicate keys, last wins": ("0,1,0,5,1,0,10,0,0,,2\n0,2,0,5,1,0,10,1,0,\n0,2,0,5,9,0,12,0,4,\n"
                                  "0,1,0,5,3,0,11,0,0,,2\n"),
    "two seqNos, HUB rows": ("0,0,0,5,10010,0,0,4,0,,1,2\n0,1,0,5,100,1,99,0,3,,0\n1,1,0,5,100,1,99,0,3,,2\n"
                             "1,2,0,5,101,2,98,0,2,\n0,2,0,5,101,2,98,0,5,,1\n"),
    "equal shapes tie in first-seen order": ("".join(f"0,{i},0,5,{100 + i % 3},0,{10 + i % 3},0,{i % 2},\n"
                                                     for i in range(1, 10))),
    "big hashes": "3,4194305,0,18446744073709551615,7,0,18446744073709551615,0,9,,4194306\n"
                  "3,4194306,0,1,8,0,15855036303422360413,0,9,\n",
    "no trailing newline": "0,1,0,5,100,0,10,0,0,,2\n0,2,0,5,101,1,20,0,1,",
    "header only": "",
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("head", [OLD, NEW])
def test_hand_made_graphs(tmp_path, name, head):
    body = GRAPHS[name]
    if head is NEW:  # the same rows with wrapId and staticSuccCount before the successors
        body = "\n".join(",".join(ln.split(",")[:9] + ["7", "1"] + ln.split(",")[10:]) if ln else ln
                         for ln in body.split("\n"))
    p = _write(tmp_path, head + body)
    cols = read_columns(p, block_bytes=64)  # tiny blocks: rows straddle block edges
    assert cols is not None
    assert {"psg": cols.leaf_psg, "chains": column_chains(cols), "layout": cols.layout} == _text(p)


@pytest.mark.parametrize("text", [
    OLD + "0,1,0,5,100,0,-10,0,0,\n",  # a sign
    OLD + "0,01,0,5,100,0,10,0,0,\n",  # a leading zero
    OLD + "0,1,0,5,100,0,10,0,0,\r\n",  # CRLF
    OLD + "0,1,0,5,100,0,10,0,0,\n\n0,2,0,5,100,0,10,0,0,\n",  # a blank line
    OLD + "0,1,0,5,100,0,10,0,0\n",  # a field short
    OLD + "0,1,0,5,100,0,,0,0,\n",  # an empty leafHash
    OLD + "0,1,0,5,100,0,18446744073709551616,0,0,\n",  # beyond 64 bits
    OLD + "0,1,0,5,100,0,10,0,0,,x\n",  # not a number
    "a,b\n0,1\n",  # unknown header
    "",
])
def test_files_outside_the_fast_path_go_to_the_text_reader(tmp_path, text):
    p = _write(tmp_path, text)
    assert read_columns(p) is None
    assert _outcome(topo_summary, p) == _outcome(_text, p)


_row = st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(100, 103), st.sampled_from([0, 10, 11, 12]),
                 st.sampled_from([0, 0, 0, 1, 4]), st.integers(0, 3),
                 st.lists(st.one_of(st.integers(0, 12), st.just("")), max_size=4))


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_row, max_size=30), newer=st.booleans(), block=st.integers(16, 400))
def test_random_graphs_agree(tmp_path_factory, rows, newer, block):
    lines = []
    for seq, task, op, leaf, core, psg, succ in rows:
        mid = "7,1" if newer else ""
        tail = ",".join(str(x) for x in succ)
        lines.append(f"{seq},{task},0,5,{op},0,{leaf},{core},{psg},{mid}" + ("," + tail if tail or succ else ""))
    p = _write(tmp_path_factory.mktemp("t"), (NEW if newer else OLD) + "\n".join(lines) + ("\n" if lines else ""))
    cols = read_columns(p, block_bytes=block)
    got = {"psg": cols.leaf_psg, "chains": column_chains(cols), "layout": cols.layout} if cols else topo_summary(p)
    assert got == _text(p)


_SEED = RECORDED[0].read_text() if RECORDED else OLD


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(cuts=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["", "0", "1", ",", "\n", "-", "9" * 21, ",,"])),
                     max_size=4))
def test_mutated_files_agree_or_fail_alike(tmp_path_factory, cuts):
    text = _SEED
    for at, ins in cuts:
        i = int(at * len(text))
        text = text[:i] + ins + text[i + 1:]
    p = _write(tmp_path_factory.mktemp("m"), text)
    assert _outcome(topo_summary, p) == _outcome(_text, p)
