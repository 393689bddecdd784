"""dyn_topo.txt in both column layouts and program.json; sinks (rows without successors) are kept."""

from __future__ import annotations

import pytest

from pypto_tune.tools.analysis.topo import parse_program_bytes, parse_topo_text
from pypto_tune.tools.errors import ArtifactError

OLD = ("seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,successors\n"
       "0,0,0,55,10010,0,0,4,0,,1,2\n"
       "0,1,0,55,10007,1,99,0,3,,9\n"
       "0,9,0,55,10011,0,0,4,0,\n")
NEW = ("seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,wrapId,staticSuccCount,succ\n"
       "0,1,0,55,10007,1,99,0,3,7,1,9\n"
       "0,9,0,55,10011,0,0,4,0,7,0\n")


def test_020_layout_successors_after_the_empty_field():
    t = parse_topo_text(OLD)
    assert t.layout == "0.2.0" and len(t.rows) == 3
    assert [r.successors for r in t.rows] == [[1, 2], [9], []]  # the sink row is kept (E.4.23)
    assert (t.rows[1].leaf_hash, t.rows[1].psg_id, t.rows[1].core_type) == (99, 3, 0)


def test_newer_layout_eleven_fixed_columns():
    t = parse_topo_text(NEW)
    assert t.layout == "ref"
    assert [r.successors for r in t.rows] == [[9], []]
    assert t.rows[0].wrap_id == 7


@pytest.mark.parametrize("text, where", [("", "line 1"), ("a,b\n", "line 1"), (OLD + "0,1,2\n", "line 5"),
                                         (OLD.replace("10007", "x"), "line 3"), (OLD.replace(",99,", ",9x9,"), "line 3")])
def test_bad_topo(text, where):
    with pytest.raises(ArtifactError) as err:
        parse_topo_text(text, "/r/dyn_topo.txt")
    assert where in str(err.value) and "/r/dyn_topo.txt" in str(err.value)


def test_program_roots_and_leaves():
    prog = parse_program_bytes(b'{"functions": [{"hash": 0, "graphtype": 5, "operations": []},'
                               b'{"hash": 55, "graphtype": 2, "func_magicname": "TENSOR_LOOP_B_root_11"},'
                               b'{"hash": 99, "graphtype": 3, "func_magicname": "leaf", "operations": '
                               b'[{"opcode": "EXP", "file": "k.py", "line": 9}, {"opcode": "COPY_IN"}]}]}')
    assert prog.root_names == {55: "B_root_11"} and prog.root_positions == {55: 1}
    assert prog.leaves[99].ops == [("EXP", "k.py", 9), ("COPY_IN", None, None)]
    with pytest.raises(ArtifactError, match="malformed"):
        parse_program_bytes(b'{"functions": 3}')
    with pytest.raises(ArtifactError, match="empty"):
        parse_program_bytes(b"")


def test_fast_reader_agrees_with_the_full_parser():
    from .analysis_helpers import run_dirs
    from pypto_tune.tools.analysis.chains import aiv_chains, lite_of
    from pypto_tune.tools.analysis.topo import read_topo, scan_topo, scan_topo_text

    for text in (OLD, NEW, OLD.replace("\n", "\r\n"), OLD + "\n\n"):
        lite, full = scan_topo_text(text), lite_of(parse_topo_text(text))
        assert (lite.core_of, lite.aiv, lite.leaf_psg, lite.n_rows, lite.rows_with_successors) == (
            full.core_of, full.aiv, full.leaf_psg, full.n_rows, full.rows_with_successors)
    for scen in ("sim_softmax", "sim_matmul", "npu_handmade"):
        p = run_dirs(scen)[-1] / "dyn_topo.txt"
        assert aiv_chains(scan_topo(p)) == aiv_chains(read_topo(p))


@pytest.mark.parametrize("text, where", [("", "line 1"), ("a,b\n", "line 1"), (OLD + "0,1,2\n", "line 5"),
                                         (OLD.replace("10007", "x"), "line 3"), (OLD.replace(",99,", ",9.9,"), "line 3"),
                                         (NEW + "0,1,0,55,10007,1,99,0,3\n", "line 4")])
def test_fast_reader_errors(text, where):
    from pypto_tune.tools.analysis.topo import scan_topo_text

    with pytest.raises(ArtifactError) as err:
        scan_topo_text(text, "/r/dyn_topo.txt")
    assert where in str(err.value)
