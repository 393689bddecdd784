"""Fuzzed NPU-only artifacts: mutated ``machine_runtime_operator_trace*.json`` (both forms) and ``pipe_usage.csv``
raise only ArtifactError, never anything else. Seeds are emulated NPU files built from a recorded SIM run
(tests/npu_emulator), so the mutations start from the real shapes. FUZZ_EXAMPLES as in test_fuzz_parsers.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import orjson
from hypothesis import given
from hypothesis import strategies as st

from pypto_tune.tools.analysis.aicpu_trace import parse_aicpu_trace
from pypto_tune.tools.analysis.pipe_usage import parse_pipe_usage_text
from pypto_tune.tools.errors import ArtifactError
from tests.npu_emulator.box import load_convert
from tests.reliability.test_fuzz_parsers import FUZZ, JSON_VALUES, _line_mutate, _mutate

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "fixtures/runs/softmax_tuned/output/output_20261202_133856_808870_18710_C0000202"


def _seeds() -> tuple[bytes, bytes, str]:
    conv = load_convert()
    blocks = json.loads((RUN / "CostModelSimulationOutput/_simulate.swim.json").read_text())
    record, ratios = conv.npu_record(blocks, conv.parse_dyn_topo(RUN / "dyn_topo.txt"), conv.Options())
    raw = conv.aicpu_phase_record(record, 0)
    # the Perfetto form as PyPTO's own converter writes it
    spec = importlib.util.spec_from_file_location("_fuzz_machine_perf_trace",
                                                  conv._script(conv.Options(), "machine_perf_trace.py"))
    mpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mpt)
    busy = {b["blockIdx"]: dict.fromkeys(conv.PIPES, 900.0) for b in record}
    return (json.dumps(mpt.convert_to_perfetto_format(raw)).encode(), json.dumps(raw).encode(),
            conv.pipe_usage_rows(record, ratios, busy))


PERFETTO, RAW, PIPES = _seeds()


def _aicpu(data: bytes) -> None:
    try:
        parse_aicpu_trace(orjson.loads(data), "t.json")
    except (orjson.JSONDecodeError, ArtifactError):
        pass  # read_aicpu_trace turns the decode error into an ArtifactError


def test_the_seeds_themselves_parse() -> None:
    assert parse_aicpu_trace(orjson.loads(PERFETTO)).e2e_us == parse_aicpu_trace(orjson.loads(RAW)).e2e_us > 0
    assert parse_pipe_usage_text(PIPES).total_cores == 32


@FUZZ
@given(st.one_of(_mutate(PERFETTO), _mutate(RAW), JSON_VALUES.map(lambda v: json.dumps({"traceEvents": v}).encode()),
                 JSON_VALUES.map(lambda v: json.dumps(v).encode())))
def test_fuzzed_aicpu_trace_raises_only_artifact_error(data: bytes) -> None:
    _aicpu(data)


@FUZZ
@given(st.one_of(_mutate(PIPES), _line_mutate(PIPES), st.text(max_size=300)))
def test_fuzzed_pipe_usage_raises_only_artifact_error(text: str) -> None:
    try:
        parse_pipe_usage_text(text)
    except ArtifactError:
        pass
