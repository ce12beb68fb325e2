"""servebench load against a reasoning model (issue 37, part 4): its thinking is output.

A local server streams reasoning chunks, then answer chunks, as vLLM and SGLang do for DeepSeek-R1 or
Qwen3. TTFT is the first token of either kind, token_times hold every chunk, the record keeps the first
answer token and the reasoning tokens, and the report shows both first tokens.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest
from reasoning_server import ReasoningServer

from servebench.analysis.summary import build_report
from servebench.cli.core import main
from servebench.load.client import HttpOutcome, exchange
from servebench.load.generator import LoadConfig, plan_requests, records_table, run_load_sync


def run(server: ReasoningServer, n: int = 3, api: str = "chat", **config: object):
    """Send n requests at 50/s; return the outcomes and their validated records (dicts)."""
    plan = plan_requests(np.arange(n) / 50.0, [5] * n, [64] * n, np.random.default_rng(1))
    with server as url:
        result = run_load_sync(LoadConfig(url=url, model="m", api=api, **config), plan)  # type: ignore[arg-type]
    table, ws, we = records_table(result.outcomes)
    return result.outcomes, table, table.to_dicts(), (ws, we)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thinking_is_output_and_the_answer_is_kept_apart(field):
    gap_s = 0.02
    outcomes, table, records, window = run(ReasoningServer(reasoning=(3,), answer=4, field=field, gap_s=gap_s))
    for rec in records:
        assert rec["status"] == "success" and rec["output_tokens"] == 7 and rec["reasoning_tokens"] == 3
        times = rec["token_times"]
        assert len(times) == 7 and times[0] == rec["first_token"]  # TTFT: the first reasoning chunk
        assert rec["first_answer_token"] == times[3]  # the first content chunk
        assert rec["first_answer_token"] - rec["first_token"] >= 3 * gap_s * 0.9
    report = build_report(table, *window)
    rs = report.reasoning
    assert rs is not None and rs.requests == 3 and rs.reasoning_tokens == 9 and rs.output_tokens == 21
    assert rs.ttfa_s.at(50) > report.ttft_s.at(50) + 3 * gap_s * 0.9
    assert rs.reasoning_s.n == 3 and rs.reasoning_s.at(50) >= 3 * gap_s * 0.9
    # request TPOT runs over every chunk after the first, reasoning included: 6 gaps of about gap_s
    assert report.request_tpot_s.at(50) >= gap_s * 0.9


def test_without_usage_details_the_reasoning_chunks_are_counted():
    _, _, records, _ = run(ReasoningServer(reasoning=(2,), answer=3, details=False))
    assert [r["reasoning_tokens"] for r in records] == [2, 2, 2]


def test_chunks_of_several_tokens_count_by_the_running_usage():
    """vLLM's continuous usage stats: each chunk says the tokens so far, so reasoning tokens are its chunks' counts."""
    _, _, records, _ = run(ReasoningServer(reasoning=(2,), answer=3, tokens_per_chunk=2, details=False))
    for rec in records:
        assert rec["output_tokens"] == 10 and rec["token_counts"] == [2] * 5 and rec["reasoning_tokens"] == 4
        assert rec["first_answer_token"] == rec["token_times"][2]


def test_a_reply_that_thinks_nothing_counts_zero_in_a_reasoning_run():
    outcomes, table, records, window = run(ReasoningServer(reasoning=(3, 0), answer=2), n=4)
    assert sorted(r["reasoning_tokens"] for r in records) == [0, 0, 3, 3]
    for rec in records:
        if rec["reasoning_tokens"] == 0:
            assert rec["first_answer_token"] == rec["first_token"]
    assert build_report(table, *window).reasoning.requests == 4  # the time to first answer covers every reply


def test_cut_short_while_thinking_keeps_its_tokens_and_no_answer():
    _, _, records, _ = run(ReasoningServer(reasoning=(40,), answer=2, prefill_s=0.0, gap_s=0.05), n=1,
                           deadline_s=0.4)
    (rec,) = records
    assert rec["status"] == "timeout" and "first_answer_token" not in rec
    assert rec["output_tokens"] == rec["reasoning_tokens"] >= 3


def test_the_completions_endpoint_has_no_reasoning_field():
    """vLLM's completions endpoint streams the thinking as text: nothing tells it apart, so no reasoning fields."""
    _, table, records, _ = run(ReasoningServer(reasoning=(3,), answer=4), api="completions")
    assert all("first_answer_token" not in r and "reasoning_tokens" not in r for r in records)
    assert [len(r["token_times"]) for r in records] == [7, 7, 7] and not table.has_reasoning


def test_a_plain_model_gets_no_reasoning_fields():
    _, table, records, window = run(ReasoningServer(reasoning=(0,), answer=4, details=False))
    assert all("first_answer_token" not in r and "reasoning_tokens" not in r for r in records)
    assert build_report(table, *window).reasoning is None


def test_a_whole_reply_reads_message_reasoning():
    """Not streamed: both arrive with the body, so the first token and the first answer are the end."""
    body = {"choices": [{"message": {"content": "42", "reasoning_content": "six times seven"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 3}}}
    out = HttpOutcome("r", 0.0, requested_output_tokens=10)

    async def ask() -> None:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
        async with httpx.AsyncClient(transport=transport) as client:
            await exchange(client, "http://127.0.0.1:1/v1/chat/completions", {}, {}, out, lambda: 1.0, stream=False)

    asyncio.run(ask())
    assert out.status == "success" and out.first_token_s == out.first_answer_s == 1.0
    assert out.reasoned and out.reasoning_tokens() == 3
    assert out.reasoning_fields() == {"reasoning_tokens": 3, "first_answer_token": 1.0}


def test_the_cli_reports_both_first_tokens(tmp_path, capsys):
    with ReasoningServer(reasoning=(3,), answer=2, gap_s=0.01) as url:
        with pytest.raises(SystemExit) as done:
            main(["load", url, "--api", "chat", "--model", "m", "--rate", "40", "--requests", "4", "-o",
                  str(tmp_path / "out")])
    assert done.value.code in (0, None)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["summarize", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert done.value.code in (0, None)
    assert "ttfa_s" in text and "Reasoning" in text
    records = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert all(r["reasoning_tokens"] == 3 and r["first_answer_token"] > r["first_token"] for r in records)
