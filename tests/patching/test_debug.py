"""Runtime-debug toggle (domain R7/R22): on in every jit, off removes only what was added, never a knob change."""

from __future__ import annotations

import pytest
from patching_helpers import crlf, data_source

from pypto_tune.tools.patching import (
    extract_knobs, functional_sources, hash_sources, knob_delta, plan_knob_edit, set_runtime_debug,
)

LAYOUTS = {
    "call": '@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})\n',
    "bare": "@pypto.frontend.jit\n",
    "empty_call": "@pypto.frontend.jit()\n",
    "multiline_trailing_comma": '@pypto.frontend.jit(\n    runtime_options={"run_mode": 1},  # sim\n)\n',
    "multiline_no_comma": '@pypto.frontend.jit(\n    runtime_options={"run_mode": 1}\n)\n',
    "has_debug_other_key": '@pypto.frontend.jit(debug_options={"compile_debug_mode": 0})\n',
    "has_debug_zero": "@pypto.frontend.jit(debug_options={'runtime_debug_mode': 0})\n",
    "debug_dict_call": "@pypto.frontend.jit(debug_options=dict(compile_debug_mode=0))\n",
    "debug_multiline": '@pypto.frontend.jit(\n    debug_options={\n        "compile_debug_mode": 0,\n    },\n)\n',
    "comments_no_comma": '@pypto.frontend.jit(  # opts\n    runtime_options={"run_mode": 1}  # sim\n)\n',
    "debug_comment_in_dict": '@pypto.frontend.jit(debug_options={\n    "compile_debug_mode": 0,  # keep\n})\n',
    "debug_comment_no_comma": '@pypto.frontend.jit(debug_options={\n    "compile_debug_mode": 0  # keep\n})\n',
}
BODY = "def k(x):\n    pypto.set_vec_tile_shapes(1, 4, 256)\n"


def src_of(layout: str, eol: str = "\n") -> dict[str, str]:
    return {"k.py": ("import pypto\n" + LAYOUTS[layout] + BODY).replace("\n", eol)}


def debug_values(sources):
    return [k.value for k in extract_knobs(sources) if k.name == "runtime_debug_mode"]


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_on_then_off_gives_back_the_original_bytes(layout, eol):
    src = src_of(layout, eol)
    on = set_runtime_debug(src, True)
    assert debug_values(on) == [1]
    assert knob_delta(src, on) == []
    assert set_runtime_debug(on, False, baseline=src) == src
    assert set_runtime_debug(on, True) == on  # idempotent


@pytest.mark.parametrize("layout", ["call", "multiline_trailing_comma", "multiline_no_comma", "has_debug_other_key",
                                    "debug_dict_call", "debug_multiline", "comments_no_comma",
                                    "debug_comment_in_dict", "debug_comment_no_comma"])
def test_off_without_a_baseline_also_restores_what_on_added(layout):
    src = src_of(layout)
    assert set_runtime_debug(set_runtime_debug(src, True), False) == src


def test_on_merges_with_existing_options_in_every_jit():
    on = set_runtime_debug(data_source("awkward.py"), True)["awkward.py"]
    assert ('    pass_options=PASS_OPTS,  # shared dict\n    debug_options={"runtime_debug_mode": 1},\n)\ndef mm('
            in on)
    assert '@pt.frontend.jit(debug_options={"runtime_debug_mode": 1})\ndef vec(' in on


def test_off_keeps_other_edits_made_since_the_toggle():
    base = data_source("awkward.py")
    on = set_runtime_debug(base, True)
    tuned = plan_knob_edit(on, "BLOCK_M", 64).new_sources
    off = set_runtime_debug(tuned, False, baseline=base)
    assert off == plan_knob_edit(base, "BLOCK_M", 64).new_sources


def test_off_keeps_an_edit_right_next_to_the_toggled_line():
    base = src_of("multiline_trailing_comma")
    on = set_runtime_debug(base, True)
    edited = {"k.py": on["k.py"].replace('{"run_mode": 1},  # sim', '{"run_mode": 1, "device_sched_mode": 2},  # sim')}
    off = set_runtime_debug(edited, False, baseline=base)
    assert off == {"k.py": base["k.py"].replace('{"run_mode": 1}', '{"run_mode": 1, "device_sched_mode": 2}')}


def test_off_puts_back_a_runtime_debug_mode_the_baseline_already_had():
    base = src_of("has_debug_zero")
    on = set_runtime_debug(base, True)
    assert debug_values(on) == [1]
    edited = plan_knob_edit(on, "set_vec_tile_shapes", [1, 8, 256]).new_sources
    off = set_runtime_debug(edited, False, baseline=base)
    assert debug_values(off) == [0]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_functional_hash_ignores_runtime_debug_mode_only(layout):
    src = src_of(layout)
    on = set_runtime_debug(src, True)
    assert hash_sources(functional_sources(on)) == hash_sources(functional_sources(src))
    tuned = plan_knob_edit(on, "set_vec_tile_shapes", [1, 8, 256]).new_sources
    assert hash_sources(functional_sources(tuned)) != hash_sources(functional_sources(src))
    assert debug_values(functional_sources(on)) == []


def test_functional_sources_leaves_files_without_debug_options_byte_identical():
    src = data_source("awkward.py")
    assert functional_sources(src) == src
    assert functional_sources({"bad.py": "def (:"}) == {"bad.py": "def (:"}


def test_crlf_and_shared_variable_debug_dict():
    src = {"k.py": crlf('import pypto\nDBG = {"compile_debug_mode": 0}\n@pypto.frontend.jit(debug_options=DBG)\n'
                        'def a(x):\n    pass\n@pypto.frontend.jit(debug_options=DBG)\ndef b(x):\n    pass\n')}
    on = set_runtime_debug(src, True)
    assert 'DBG = {"compile_debug_mode": 0, "runtime_debug_mode": 1}\r\n' in on["k.py"]
    assert set_runtime_debug(on, False) == src


def test_comments_stay_on_the_line_they_annotate():
    on = set_runtime_debug(src_of("debug_comment_in_dict"), True)["k.py"]
    assert '    "compile_debug_mode": 0,  # keep\n    "runtime_debug_mode": 1,\n})' in on
    on = set_runtime_debug(src_of("comments_no_comma"), True)["k.py"]
    assert '(  # opts\n    runtime_options={"run_mode": 1},  # sim\n    debug_options={"runtime_debug_mode": 1}\n)' in on


def test_a_jit_that_splats_options_is_refused_rather_than_guessed():
    from pypto_tune.tools.errors import PatchError

    src = {"k.py": "import pypto\nOPTS = {}\n@pypto.frontend.jit(**OPTS)\ndef k(x):\n    pass\n"}
    with pytest.raises(PatchError, match=r"\*\*options"):
        set_runtime_debug(src, True)
    assert [k for k in extract_knobs(src) if not k.present] == []  # nothing is offered for adding either


@pytest.mark.parametrize("layout", ["call", "multiline_trailing_comma", "bare", "comments_no_comma"])
def test_off_after_a_round_that_edited_the_same_decorator_equals_that_round_on_the_original(layout):
    src = src_of(layout)
    tuned_with_debug = plan_knob_edit(set_runtime_debug(src, True), "vec_nbuffer_setting", {-2: 1, -1: 2}).new_sources
    expected = plan_knob_edit(src, "vec_nbuffer_setting", {-2: 1, -1: 2}).new_sources
    assert set_runtime_debug(tuned_with_debug, False, baseline=src) == expected
