"""AIPerf's reasoning metrics (issue 37, part 4): reasoning_token_count and time_to_first_output_token.

AIPerf's ``time_to_first_token`` counts a token of either kind; its time to first output token is the
first answer token, and ``output_token_count`` leaves the reasoning out while ``output_sequence_length``
holds both. A raw export's reasoning chunks are output, as ``servebench load`` reads them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from servebench.analysis.summary import build_report
from servebench.records.importers import import_bytes
from servebench.records.loaders import to_table

DATA = Path(__file__).parent / "data" / "importers"
CLEAN = DATA / "aiperf-0.13.0-clean-profile_export.jsonl"


def first_line() -> dict:
    return json.loads(CLEAN.read_text().splitlines()[0])


def reasoning_line(**metrics: float) -> dict:
    """The clean export's first line as a reasoning model's: 12 reasoning tokens before 23 answer tokens."""
    line = first_line()
    m = line["metrics"]
    m["time_to_first_token"] = {"value": 69.0, "unit": "ms"}
    m["time_to_first_output_token"] = {"value": 250.0, "unit": "ms"}
    m["reasoning_token_count"] = {"value": 12, "unit": "tokens"}
    m["output_token_count"] = {"value": 23, "unit": "tokens"}
    m["output_sequence_length"] = {"value": 35, "unit": "tokens"}
    for name, value in metrics.items():
        if value is None:
            m.pop(name)
        else:
            m[name] = {"value": value, "unit": "ms" if name.startswith("time_") else "tokens"}
    return line


def imported(*lines: dict, spec: str = "aiperf"):
    loaded = import_bytes("".join(json.dumps(x) + "\n" for x in lines).encode(), "profile_export.jsonl", spec)
    table, ws, we = to_table(loaded)
    return loaded, table, table.to_dicts(), (ws, we)


def test_a_reasoning_line_gives_both_first_tokens_and_its_reasoning_tokens():
    loaded, table, (rec,), window = imported(reasoning_line())
    start = rec["start"]
    assert rec["first_token"] == pytest.approx(start + 0.069) and rec["first_answer_token"] == pytest.approx(start + 0.25)
    assert rec["output_tokens"] == 35 and rec["reasoning_tokens"] == 12
    assert any("first_answer_token is start + time_to_first_output_token" in w for w in loaded.warnings)
    rs = build_report(table, *window).reasoning
    assert rs is not None and rs.ttfa_s.at(50) == pytest.approx(0.25, abs=1e-6) and rs.reasoning_token_share == 12 / 35


def test_aiperf_before_0_13_names_it_time_to_first_output():
    line = reasoning_line(time_to_first_output_token=None, time_to_first_output=300.0)
    _, _, (rec,), _ = imported(line)
    assert rec["first_answer_token"] - rec["start"] == pytest.approx(0.3)


def test_without_an_output_sequence_length_the_reasoning_is_added_to_the_output_count():
    _, _, (rec,), _ = imported(reasoning_line(output_sequence_length=None))
    assert rec["output_tokens"] == 35 and rec["reasoning_tokens"] == 12


def test_a_run_without_reasoning_gets_neither_field():
    """AIPerf 0.13 gives every streamed line a time to first output token, equal to its TTFT: not a reasoning model."""
    loaded = import_bytes(CLEAN.read_bytes(), "profile_export.jsonl", "aiperf")
    table, ws, we = to_table(loaded)
    assert not table.has_reasoning and build_report(table, ws, we).reasoning is None
    assert "time_to_first_output_token" in CLEAN.read_text()


def test_impossible_values_are_left_out_and_counted():
    over = reasoning_line(usage_reasoning_tokens=99)
    early = reasoning_line(time_to_first_output_token=10.0)
    early["metadata"]["x_request_id"] = "early"
    loaded, _, records, _ = imported(over, early, spec="aiperf:tokens=server")
    assert "reasoning_tokens" not in records[0] and "first_answer_token" not in records[1]
    note = next(w for w in loaded.warnings if "a reasoning model" in w)
    assert "1 count(s) above their output tokens left out" in note
    assert "1 first answer(s) before their first token left out" in note


def test_a_raw_lines_reasoning_chunks_are_output():
    line = first_line()
    start_perf = 10_000_000_000

    def sse(at_ms: float, payload: object) -> dict:
        value = payload if isinstance(payload, str) else json.dumps(payload)
        return {"perf_ns": start_perf + round(at_ms * 1e6), "packets": [{"name": "data", "value": value}]}

    responses = [sse(50, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    responses += [sse(60 + 10 * i, {"choices": [{"index": 0, "delta": {"reasoning_content": f" r{i}"}}]})
                  for i in range(3)]
    responses += [sse(100 + 10 * i, {"choices": [{"index": 0, "delta": {"content": f" a{i}"}}]}) for i in range(4)]
    usage = {"prompt_tokens": 5, "completion_tokens": 7, "completion_tokens_details": {"reasoning_tokens": 3}}
    responses += [sse(140, {"choices": [], "usage": usage}), sse(140, "[DONE]")]
    raw = {"metadata": copy.deepcopy(line["metadata"]), "start_perf_ns": start_perf,
           "payload": {"model": "m", "stream": True, "max_completion_tokens": 64}, "status": 200,
           "responses": responses}
    _, _, (rec,), _ = imported(raw)
    start = rec["start"]
    assert rec["output_tokens"] == 7 and rec["reasoning_tokens"] == 3
    assert rec["first_token"] == pytest.approx(start + 0.06) and rec["first_answer_token"] == pytest.approx(start + 0.1)
    assert len(rec["token_times"]) == 7 and rec["token_times"][3] == rec["first_answer_token"]
    # without the usage's details, the reasoning chunks are counted (they match the output tokens one to one)
    usage.pop("completion_tokens_details")
    responses[-2] = sse(140, {"choices": [], "usage": usage})
    _, _, (rec,), _ = imported(raw)
    assert rec["reasoning_tokens"] == 3
