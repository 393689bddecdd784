"""AIV dependency chains (B.7) keep successor-less sinks; sg_set_scope candidates; outer loops from source."""

from __future__ import annotations

from pypto_tune.tools.analysis.chains import aiv_chains, outer_loops_of_source
from pypto_tune.tools.analysis.topo import parse_topo_text

HEAD = "seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,successors\n"


def test_sink_aiv_task_is_part_of_the_chain():
    # 1 (leaf 10, psg 0) → 2 (leaf 20, psg 1) → 3 (leaf 30, psg 1, sink with no successors)
    t = parse_topo_text(HEAD + "0,1,0,5,100,0,10,0,0,,2\n0,2,0,5,101,1,20,0,1,,3\n0,3,0,5,102,2,30,0,1,\n")
    ch = aiv_chains(t)
    assert ch.reference_task_count == 2  # what the reference keeps: the sink row vanishes there
    (g,) = ch.groups
    assert g.levels == [["10/100"], ["20/101"], ["30/102"]] and g.count == 1
    (cand,) = ch.scope_candidates
    assert cand.leaf_hashes == ["10", "20", "30"] and cand.psg_ids == [0, 1]


def test_chain_stops_below_a_leaf_with_a_cube_successor():
    t = parse_topo_text(HEAD + "0,1,0,5,100,0,10,0,0,,2,4\n0,2,0,5,101,1,20,0,1,,3\n0,3,0,5,102,2,30,0,1,\n"
                        "0,4,0,5,103,3,40,1,2,\n")
    ch = aiv_chains(t)
    assert ch.groups[0].levels == [["10/100"], ["20/101"], ["30/102"]]
    assert ch.truncated_groups[0].levels == [["10/100"]]  # leaf 10 feeds the cube task 4: not merged past it
    assert ch.scope_candidates == []


def test_equal_shapes_are_grouped_and_cycles_do_not_hang():
    rows = "".join(f"0,{i},0,5,100,0,10,0,0,\n" for i in range(1, 6))
    assert [g.count for g in aiv_chains(parse_topo_text(HEAD + rows)).groups] == [5]
    cyc = aiv_chains(parse_topo_text(HEAD + "0,1,0,5,1,0,10,0,0,,2\n0,2,0,5,1,0,10,0,0,,1\n0,3,0,5,1,0,11,0,0,,1\n"))
    assert cyc.groups[0].levels == [["11/1"], ["10/1"], ["10/1"]]


def test_outer_loops_from_the_loop_nesting():
    src = ("import pypto\nB, T = 32, 4\nN = B // T\n"
           "def k(x):\n"
           "    for b in pypto.loop(N, name='B'):\n"
           "        for s in pypto.loop(8):\n"
           "            for u in pypto.loop(3):\n"
           "                pass\n"
           "        for j in pypto.loop(2):\n"
           "            pass\n")
    assert outer_loops_of_source(src) == 8 * 8  # B-loop (8) and s-loop (8) contain loops; innermost do not
    assert outer_loops_of_source("import pypto\nfor i in pypto.loop(16):\n    pass\n") == 1
    assert outer_loops_of_source("import pypto\nfor i in pypto.loop(n):\n    for j in pypto.loop(2):\n"
                                 "        pass\n") is None  # unknown trip count of an outer loop: ask
    assert outer_loops_of_source("x = 1\n") is None


def test_long_chains_keep_their_depth_but_not_every_level():
    rows = "".join(f"0,{i},0,5,{100 + i},0,{10 + i},0,{i % 2},,{i + 1}\n" for i in range(1, 40)) + "0,40,0,5,140,0,50,0,0,\n"
    ch = aiv_chains(parse_topo_text(HEAD + rows))
    (g,) = ch.groups
    assert g.depth == 40 and len(g.levels) == 16
    assert ch.scope_candidates[0].count == 1 and len(ch.scope_candidates[0].leaf_hashes) == 40
