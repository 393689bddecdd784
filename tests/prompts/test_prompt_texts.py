"""The workflow prompts must agree with what the server enforces.

Conventions the prompts follow (and these tests rely on): a tool call is written as ``name(...)`` with no module
prefix (PyPTO APIs always carry one, e.g. ``pypto.set_vec_tile_shapes(...)``); a rule id is written ``GATE <id>``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "prompts" / "workflow"
NAMES = ["perf_tune", "tune_frontend", "tune_swimlane", "tune_incore", "analyze_perf"]
LANGS = ["zh", "en"]
EXTRA_TOOLS = {"wait_job", "cancel_job"}  # the job tools live in server/ (app.py), not in the service


def _load_rules():
    try:
        from pypto_tune.tools.rules import tuning_loop  # type: ignore[import-not-found]

        return tuning_loop
    except ImportError:
        spec = importlib.util.spec_from_file_location("_pt_rules", ROOT / "tools" / "rules" / "tuning_loop.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_pt_rules"] = mod
        spec.loader.exec_module(mod)
        return mod


tuning_loop = _load_rules()


def _service_ops() -> set[str]:
    from pypto_tune.tools.service import TuningService

    return {n for n in dir(TuningService) if not n.startswith("_") and callable(getattr(TuningService, n))}


def _start_session_default(name: str) -> float:
    import inspect

    from pypto_tune.tools.service import TuningService

    param = inspect.signature(TuningService.start_session).parameters.get(name)
    if param is None or param.default is inspect.Parameter.empty:
        raise AssertionError(f"start_session has no default for {name}")
    return float(param.default)


OPS = _service_ops() | EXTRA_TOOLS
RULE_IDS = {r.id for r in tuning_loop.RULES}
CALL = re.compile(r"(?<![\w.])([a-z][a-z0-9]*_[a-z0-9_]+)\(")
GATE = re.compile(r"GATE ([a-z][a-z0-9-]*)")
# Bare backticked names that look like tool names (verb-ish suffixes) must be real operations too.
TOOLISH = re.compile(r"`([a-z][a-z0-9]*_(?:[a-z0-9]+_)*(?:session|patch|round|swimlane|check|stage|report|status|knobs"
                     r"|job|bubbles|debug|checklist))`")


def _text(name: str, lang: str) -> str:
    return (PROMPTS / f"{name}.{lang}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lang", LANGS)
def test_prompt_exists_and_is_focused(name: str, lang: str) -> None:
    path = PROMPTS / f"{name}.{lang}.md"
    assert path.is_file(), path
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# ")
    assert "{session_id}" not in text and "{" + "lang}" not in text, "prompts take only lang, no placeholders"
    limit = 250 if name == "perf_tune" else 120
    assert len(text.splitlines()) <= limit


def test_service_ops_parsed() -> None:
    for op in ("start_session", "run_precision_check", "apply_tuning_patch", "record_round", "render_report"):
        assert op in OPS


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lang", LANGS)
def test_tool_names_are_real(name: str, lang: str) -> None:
    text = _text(name, lang)
    called = set(CALL.findall(text)) | (set(TOOLISH.findall(text)) - set(NAMES))  # prompt names may be cited
    unknown = called - OPS
    assert not unknown, f"{name}.{lang}: not operations of tools/service.py: {sorted(unknown)}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lang", LANGS)
def test_rule_ids_exist(name: str, lang: str) -> None:
    cited = set(GATE.findall(_text(name, lang)))
    unknown = cited - RULE_IDS
    assert not unknown, f"{name}.{lang}: unknown rule ids {sorted(unknown)}"


@pytest.mark.parametrize("lang", LANGS)
def test_perf_tune_lists_every_rule_and_the_loop(lang: str) -> None:
    text = _text("perf_tune", lang)
    assert set(GATE.findall(text)) == RULE_IDS, sorted(RULE_IDS - set(GATE.findall(text)))
    used = set(CALL.findall(text))
    for op in ("start_session", "run_precision_check", "enable_runtime_debug", "collect_swimlane", "analyze_bubbles",
               "list_knobs", "apply_tuning_patch", "record_round", "revert_patch", "mark_checklist", "advance_stage",
               "stop_session", "render_report", "get_status", "wait_job"):
        assert op in used, f"perf_tune.{lang} does not show {op}(...)"
    # the round order
    order = [text.index(f"{op}(", text.index("list_knobs()")) for op in
             ("apply_tuning_patch", "run_precision_check", "collect_swimlane", "record_round")]
    assert order == sorted(order)


@pytest.mark.parametrize("lang", LANGS)
def test_perf_tune_thresholds_match_rules(lang: str) -> None:
    text = _text("perf_tune", lang)
    by_group = {}
    for s in tuning_loop.STAGES:
        by_group.setdefault(s.group, set()).add(s.no_gain_threshold)
    assert all(len(v) == 1 for v in by_group.values())
    triple = "/".join(str(next(iter(by_group[g]))) for g in ("frontend", "swimlane", "incore"))
    assert triple in text
    attempts = f"{tuning_loop.BASELINE_ATTEMPTS} attempts" if lang == "en" else f"{tuning_loop.BASELINE_ATTEMPTS} 次"
    assert attempts in text
    assert f"{tuning_loop.DEFAULT_TIMEOUT_S:g} s" in text
    assert f"{_start_session_default('timeout_s'):g} s" in text
    assert f"> {tuning_loop.GLOBAL_UTIL_PCT:g} %" in text
    assert f"< {tuning_loop.GLOBAL_BUBBLE_PCT:g} %" in text
    assert f"{_start_session_default('time_limit_h'):g} h" in text
    outer = max(s.outer_round for s in tuning_loop.STAGES)
    assert f"n ≤ {outer}" in text
    for pct in (tuning_loop.SIM_TRANSFER_WARN_PCT, tuning_loop.NPU_MIN_MARGIN_PCT, tuning_loop.NPU_SINGLE_SHOT_MARGIN_PCT):
        assert f"{pct:g} %" in text
    cap = tuning_loop.NPU_MAX_SAMPLES_FACTOR  # how far an undecided NPU round measures both states
    assert (f"up to {cap} × `repeats`" if lang == "en" else f"最多到 {cap} 倍 `repeats`") in text


@pytest.mark.parametrize("lang", LANGS)
def test_contradictions_section(lang: str) -> None:
    text = _text("perf_tune", lang)
    heading = ("## How this server resolves the skill's contradictions" if lang == "en"
               else "## 本服务器如何处理原技能中的矛盾")
    assert heading in text
    section = text[text.index(heading):]
    assert len(re.findall(r"^\d+\. ", section, flags=re.M)) >= 14
    for key in ("max(2σ", "max_work_time", "runtime_debug_mode", "R23"):
        assert key in section


@pytest.mark.parametrize("name,prefix,count", [("tune_frontend", "F", 15), ("tune_swimlane", "S", 13),
                                                ("tune_incore", "I", 9)])
@pytest.mark.parametrize("lang", LANGS)
def test_stage_checklists_complete(name: str, prefix: str, count: int, lang: str) -> None:
    text = _text(name, lang)
    rows = set(re.findall(rf"^\| ({prefix}-\d+) \|", text, flags=re.M))
    assert rows == {f"{prefix}-{i}" for i in range(1, count + 1)}
    stage = next(s for s in tuning_loop.STAGES if s.catalog_prefix == f"{prefix}-")
    assert f"**{stage.no_gain_threshold}**" in text


def test_stage_thresholds_consistent_with_rules_text() -> None:
    # tuning_loop.py states the triple in the stage-exit rule text too; the prompts cite the same one.
    triple = "/".join(str(s.no_gain_threshold) for s in tuning_loop.STAGES[:3])
    assert triple in tuning_loop.RULES_BY_ID["stage-exit"].text_en


@pytest.mark.parametrize("name", NAMES)
def test_languages_in_sync(name: str) -> None:
    zh, en = _text(name, "zh"), _text(name, "en")
    assert set(GATE.findall(zh)) == set(GATE.findall(en))
    assert set(CALL.findall(zh)) == set(CALL.findall(en))
    ids = re.compile(r"\b[FSI]-\d+\b")
    assert set(ids.findall(zh)) == set(ids.findall(en))
    assert len(re.findall(r"^#+ ", zh, flags=re.M)) == len(re.findall(r"^#+ ", en, flags=re.M))


def test_readme_exists() -> None:
    assert (PROMPTS / "README.md").is_file()
