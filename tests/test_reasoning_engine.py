"""serve-engine streams a reasoning part (issue 37, part 4), checked end to end on 127.0.0.1.

With ``--reasoning-tokens N`` (``create_app(reasoning_tokens=N)``) or a request's ``reasoning: {tokens: N}``
a chat reply's first N tokens stream as ``delta.reasoning_content``, as vLLM and SGLang stream a reasoning
model's thinking, and the usage says ``completion_tokens_details.reasoning_tokens`` as OpenAI's does. The
real ``openai`` client, plain httpx and ``servebench load`` read it.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

pytest.importorskip("torch")
openai = pytest.importorskip("openai")

from asgi_server import serve_in_background  # noqa: E402
from conftest import openai_client  # noqa: E402

from servebench.analysis.summary import build_report  # noqa: E402
from servebench.load.generator import LoadConfig, plan_requests, records_table, run_load_sync  # noqa: E402
from servebench.serving.engine.http_api import create_app  # noqa: E402
from servebench.serving.engine.service import EngineService  # noqa: E402
from servebench.serving.scheduler import SchedulerConfig  # noqa: E402

PRESET_THINKING = 2


@pytest.fixture(scope="module")
def server():
    """One tiny engine whose chat replies think PRESET_THINKING tokens unless a request says otherwise."""
    service = EngineService("tiny", scheduler=SchedulerConfig(kv_budget_tokens=16_384, max_num_seqs=16,
                                                              max_waiting=256, policy="paged"),
                            device="cpu", threads=1, warmup_steps=1)
    with serve_in_background(create_app(service, reasoning_tokens=PRESET_THINKING)) as url:
        yield url


@pytest.fixture
def client(server):
    with openai_client(server) as c:
        yield c


def test_the_openai_client_reads_reasoning_then_answer(client):
    stream = client.chat.completions.create(
        model="servebench-tiny", messages=[{"role": "user", "content": "why is the sky blue"}], max_tokens=8,
        stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "reasoning": {"tokens": 3}})
    kinds, usage = [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if extra.get("reasoning_content"):
                kinds.append("reasoning")
            elif choice.delta.content:
                kinds.append("answer")
    assert kinds == ["reasoning"] * 3 + ["answer"] * 5
    assert usage.completion_tokens == 8 and usage.completion_tokens_details.reasoning_tokens == 3


def test_a_whole_reply_holds_the_reasoning_beside_the_content(client):
    reply = client.chat.completions.create(
        model="servebench-tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6,
        extra_body={"ignore_eos": True})
    message = reply.choices[0].message
    assert len(message.model_extra["reasoning_content"].split()) == PRESET_THINKING
    assert len(message.content.split()) == 6 - PRESET_THINKING
    assert reply.usage.completion_tokens_details.reasoning_tokens == PRESET_THINKING


def test_a_reply_that_ends_while_thinking_is_all_reasoning(server):
    body = {"model": "servebench-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "stream": True, "ignore_eos": True, "reasoning": {"tokens": 10},
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with httpx.Client(trust_env=False, timeout=60) as http:
        lines = http.post(f"{server}/v1/chat/completions", json=body).text.splitlines()
    docs = [json.loads(x[5:]) for x in lines if x.startswith("data: {")]
    deltas = [d["choices"][0]["delta"] for d in docs if d["choices"]]
    assert sum("reasoning_content" in d for d in deltas) == 4 and not any(d.get("content") for d in deltas)
    assert docs[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}
    assert docs[1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 1}  # counted so far
    assert [d["choices"][0]["finish_reason"] for d in docs if d["choices"]][-1] == "length"


def test_a_plain_completion_has_no_reasoning_and_refuses_to_be_asked(client):
    reply = client.completions.create(model="servebench-tiny", prompt="hi", max_tokens=3,
                                      extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens_details is None and len(reply.choices[0].text.split()) == 3
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="servebench-tiny", prompt="hi", max_tokens=3,
                                  extra_body={"reasoning": {"tokens": 2}})
    assert refused.value.body["param"] == "reasoning" and refused.value.body["code"] == "unsupported_parameter"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="servebench-tiny", messages=[{"role": "user", "content": "hi"}],
                                       extra_body={"reasoning": {"effort": "high"}})
    assert refused.value.body["param"] == "reasoning.tokens"


def test_servebench_load_measures_the_thinking(server):
    """The load generator's records against the engine: TTFT at the first reasoning token, TTFA after it."""
    n = 4
    plan = plan_requests(np.arange(n) / 20.0, [5] * n, [6] * n, np.random.default_rng(3))
    result = run_load_sync(LoadConfig(url=server, api="chat"), plan)
    table, ws, we = records_table(result.outcomes)
    for rec in table.to_dicts():
        assert rec["status"] == "success" and rec["output_tokens"] == 6
        assert rec["reasoning_tokens"] == PRESET_THINKING
        assert rec["first_token"] == rec["token_times"][0] <= rec["first_answer_token"] == rec["token_times"][2]
    rs = build_report(table, ws, we).reasoning
    assert rs is not None and rs.requests == n and rs.reasoning_token_share == PRESET_THINKING / 6
