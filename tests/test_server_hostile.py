"""serve-engine against hostile and demanding requests, with the real openai and httpx clients on 127.0.0.1.

Text that is not Unicode gets a JSON 400, never a 500 and a traceback; every request field is bounded;
and a client that asks for a feature gets it (logprobs, top_logprobs, echo, continuous usage) or a
400 naming the parameter (presence_penalty, best_of, ...), never a quiet no.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
openai = pytest.importorskip("openai")

import torch  # noqa: E402
from asgi_server import serve_in_background  # noqa: E402
from test_server_fidelity import client, server_log  # noqa: E402,F401  (fixtures: an openai client, the server's log)

from servebench.serving.engine.http_api import body_limit_bytes, create_app  # noqa: E402
from servebench.serving.engine.request_body import MAX_LOGIT_BIAS, MAX_STOP_CHARS  # noqa: E402
from servebench.serving.engine.request_rules import NOT_IMPLEMENTED  # noqa: E402
from servebench.serving.engine.service import EngineService  # noqa: E402
from servebench.serving.engine.words import decode, encode  # noqa: E402
from servebench.serving.scheduler import SchedulerConfig  # noqa: E402

MODEL = "servebench-tiny"
PROMPT = "the quick brown fox jumps"
FIXED = {"ignore_eos": True}


@pytest.fixture(scope="module")
def served():
    """One tiny engine behind the HTTP server: (url, service)."""
    service = EngineService("tiny", scheduler=SchedulerConfig(kv_budget_tokens=16_384, max_num_seqs=16,
                                                              max_waiting=256, policy="paged"),
                            device="cpu", threads=1, warmup_steps=1)
    with serve_in_background(create_app(service)) as url:
        yield url, service


@pytest.fixture
def server(served):
    """The base URL, as test_server_fidelity's client fixture takes it."""
    return served[0]


@pytest.fixture
def url(server):
    return server


def _post(url: str, path: str, body: bytes | dict) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}{path}", content=content, headers={"content-type": "application/json"},
                      trust_env=False, timeout=60)


def _refused(r: httpx.Response, status: int, code: str, param: str | None) -> dict:
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == code and error["param"] == param, error
    return error


# --------------------------------------------------------------------------- text that is not Unicode


SURROGATES = [  # raw bodies: the JSON escape \ud800 decodes to a lone surrogate
    ("/v1/completions", b'{"prompt": "hi \\ud800 there", "max_tokens": 2}', "prompt"),
    ("/v1/completions", b'{"prompt": ["\\udfff"], "max_tokens": 2}', "prompt.0"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 2}',
     "messages.0.content"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "a\\udc00"}]}]}',
     "messages.0.content.0.text"),
    ("/v1/chat/completions", b'{"messages": [{"role": "\\ud800", "content": "hi"}]}', "messages.0.role"),
    ("/v1/completions", b'{"prompt": "hi", "stop": ["x", "\\ud800"]}', "stop.1"),
    ("/v1/completions", b'{"prompt": "hi", "model": "\\ud800"}', "model"),
    ("/v1/completions", b'{"prompt": "hi", "logit_bias": {"\\ud800": 1}}', "logit_bias.\\ud800"),
    ("/v1/completions", b'{"prompt": "hi", "user": "\\ud800"}', "user"),
    ("/v1/completions", b'"\\ud800"', None),
]


@pytest.mark.parametrize("path, body, param", SURROGATES, ids=[p or "body" for _, _, p in SURROGATES])
def test_a_lone_surrogate_anywhere_gets_a_json_400_and_no_traceback(url, server_log, path, body, param):
    error = _refused(_post(url, path, body), 400, "invalid_value", param)
    assert "lone surrogate" in error["message"]
    assert not any(r.exc_info for r in server_log)


@settings(max_examples=25, deadline=None)
@given(before=st.text(max_size=20), after=st.text(max_size=20),
       surrogate=st.integers(min_value=0xD800, max_value=0xDFFF), chat=st.booleans())
def test_a_lone_surrogate_in_any_prompt_is_refused(served, before, after, surrogate, chat):
    text = before + chr(surrogate) + after
    doc = ({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}) | {"max_tokens": 2}
    body = json.dumps(doc).encode()  # ensure_ascii: the surrogate travels as its \u escape
    r = _post(served[0], "/v1/chat/completions" if chat else "/v1/completions", body)
    _refused(r, 400, "invalid_value", "messages.0.content" if chat else "prompt")


def test_a_surrogate_pair_is_one_real_character_and_is_served(url):
    r = _post(url, "/v1/completions", b'{"prompt": "smile \\ud83d\\ude00", "max_tokens": 2}')
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 2


# --------------------------------------------------------------------------- bounds


def test_stop_sequences_are_bounded_in_length(url):
    error = _refused(_post(url, "/v1/completions", {"prompt": "hi", "stop": "x" * 500_000}), 400, "invalid_value",
                     "stop")
    assert f"at most {MAX_STOP_CHARS} characters" in error["message"] and "500000" in error["message"]
    _refused(_post(url, "/v1/completions", {"prompt": "hi", "stop": "x" * 10_000_000}), 413, "request_too_large", None)
    _refused(_post(url, "/v1/completions", {"prompt": "hi", "stop": ["a", "x" * (MAX_STOP_CHARS + 1)]}), 400,
             "invalid_value", "stop")
    r = _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stop": "x" * MAX_STOP_CHARS})
    assert r.status_code == 200


def test_a_prompt_longer_than_the_context_is_refused_before_it_is_split(url, served):
    positions = served[1].model.config.max_positions
    started = time.monotonic()
    long = "a " * 500_000  # half a million words, within the body limit: refused after reading the first 2048
    error = _refused(_post(url, "/v1/completions", {"prompt": long, "max_tokens": 1}), 400, "context_length_exceeded",
                     "prompt")
    assert f"{positions} positions" in error["message"] and time.monotonic() - started < 30
    _refused(_post(url, "/v1/completions", {"prompt": list(range(positions)), "max_tokens": 1}), 400,
             "context_length_exceeded", "prompt")
    chat = {"messages": [{"role": "user", "content": "b " * 1000}] * 3, "max_tokens": 1}
    _refused(_post(url, "/v1/chat/completions", chat), 400, "context_length_exceeded", "messages")
    fits = {"prompt": "a " * (positions - 1), "max_tokens": 1}
    assert _post(url, "/v1/completions", fits).json()["usage"]["prompt_tokens"] == positions - 1


def test_logit_bias_is_bounded_and_odd_keys_are_400_not_500(url, server_log):
    too_many = {str(i): 1 for i in range(MAX_LOGIT_BIAS + 1)}
    _refused(_post(url, "/v1/completions", {"prompt": "hi", "logit_bias": too_many}), 400, "invalid_value",
             "logit_bias")
    for key in ("\u00b2", "9" * 5000, "-1", "1.0", "512"):  # a superscript two is a digit to str.isdigit
        _refused(_post(url, "/v1/completions", {"prompt": "hi", "logit_bias": {key: 1}}), 400, "invalid_value",
                 "logit_bias")
    assert not any(r.exc_info for r in server_log)


def test_an_unknown_model_name_is_not_echoed_whole(url):
    error = _refused(_post(url, "/v1/completions", {"prompt": "hi", "model": "m" * 1_000_000}), 404,
                     "model_not_found", "model")
    assert len(error["message"]) < 300


def test_the_body_is_bounded_by_the_model_s_context(url, served):
    limit = body_limit_bytes(served[1].model.config.max_positions)
    assert limit == 2**20  # the tiny model's 2048 positions: the 1 MiB floor
    many = b'{"messages": [' + b",".join([b'{"role":"u"}'] * (limit // 13 + 1)) + b'], "max_tokens": 1}'
    error = _refused(_post(url, "/v1/chat/completions", many), 413, "request_too_large", None)
    assert str(limit) in error["message"]
    _refused(_post(url, "/v1/completions", {"prompt": "a " * 3_000_000}), 413, "request_too_large", None)


# --------------------------------------------------------------------------- parameters: done, or refused by name


REFUSED = [("presence_penalty", 0.5), ("frequency_penalty", -1), ("best_of", 2), ("suffix", "end"),
           ("response_format", {"type": "json_object"}), ("tools", [{"type": "function"}]), ("top_k", 5),
           ("repetition_penalty", 1.2), ("prompt_logprobs", 1), ("best_of", True),
           ("presence_penalty", "0")]


@pytest.mark.parametrize("param, value", REFUSED, ids=[f"{p}={v!r}" for p, v in REFUSED])
def test_a_parameter_the_engine_does_not_implement_is_refused_by_name(url, param, value):
    for path, body in (("/v1/completions", {"prompt": "hi"}), ("/v1/chat/completions",
                                                              {"messages": [{"role": "user", "content": "hi"}]})):
        error = _refused(_post(url, path, {**body, "max_tokens": 2, param: value}), 400, "unsupported_parameter",
                         param)
        assert f"'{param}'" in error["message"]


def test_min_tokens_is_served_only_where_it_changes_nothing(url):
    fixed = {"prompt": "hi", "max_tokens": 4, "ignore_eos": True}
    assert _post(url, "/v1/completions", {**fixed, "min_tokens": 4}).json()["usage"]["completion_tokens"] == 4
    assert _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "min_tokens": 1}).status_code == 200
    for body in ({"prompt": "hi", "max_tokens": 4, "min_tokens": 3}, {**fixed, "min_tokens": 3, "stop": "t1"}):
        _refused(_post(url, "/v1/completions", body), 400, "unsupported_parameter", "min_tokens")
    _refused(_post(url, "/v1/completions", {**fixed, "min_tokens": 5}), 400, "invalid_value", "min_tokens")
    _refused(_post(url, "/v1/completions", {**fixed, "min_tokens": True}), 400, "invalid_value", "min_tokens")


def test_the_value_that_asks_for_nothing_is_served(url):
    neutral = {"presence_penalty": 0, "frequency_penalty": 0.0, "best_of": 1, "n": 1, "suffix": None, "top_k": -1,
               "tools": [], "logit_bias": {}, "echo": False, "logprobs": None, "unknown_field": 5}
    assert _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 2, **neutral}).status_code == 200
    assert set(NOT_IMPLEMENTED) >= {"presence_penalty", "frequency_penalty", "best_of"}


def test_the_openai_client_hears_no_for_what_is_not_done(client):
    for kwargs in ({"presence_penalty": 0.5}, {"frequency_penalty": 1.0}, {"best_of": 2}, {"n": 2},
                   {"logprobs": 21}, {"echo": True, "logprobs": 1}):
        with pytest.raises(openai.BadRequestError) as exc:
            client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, **kwargs)
        assert exc.value.body["param"] == next(iter(kwargs)), kwargs
    chat = dict(model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=2)
    for kwargs, param in (({"presence_penalty": 0.5}, "presence_penalty"), ({"top_logprobs": 2}, "top_logprobs"),
                          ({"extra_body": {"echo": True}}, "echo"), ({"extra_body": {"logprobs": 3}}, "logprobs")):
        with pytest.raises(openai.BadRequestError) as exc:
            client.chat.completions.create(**chat, **kwargs)
        assert exc.value.body["param"] == param, kwargs


# --------------------------------------------------------------------------- logprobs, echo, continuous usage


def _model_logprobs(service: EngineService, prompt_ids: list[int], output_ids: list[int]) -> torch.Tensor:
    """The model's own log-probabilities of each output token, recomputed without the cache."""
    with torch.no_grad():
        logits = service.model.forward_full(torch.tensor(prompt_ids + output_ids))
    logprobs = torch.log_softmax(logits.float(), dim=-1)[len(prompt_ids) - 1:-1]
    return logprobs.gather(1, torch.tensor(output_ids).unsqueeze(1)).squeeze(1)


def test_completion_logprobs_are_the_model_s_own(client, served):
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, logprobs=3,
                                      extra_body=FIXED)
    choice = reply.choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == reply.usage.completion_tokens == 12
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [len("".join(lp.tokens[:k])) for k in range(12)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert token in top and top[token] == logprob and len(top) in (3, 4)
        assert logprob == pytest.approx(max(top.values()))  # greedy: the chosen token is the most likely
    vocab = served[1].vocab_size
    out_ids = [int(t.removeprefix(" t")) for t in lp.tokens]
    expected = _model_logprobs(served[1], encode(PROMPT, vocab), out_ids)
    assert lp.token_logprobs == pytest.approx(expected.tolist(), abs=2e-3)

    zero = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=0,
                                     extra_body=FIXED).choices[0].logprobs
    assert all(len(top) == 1 for top in zero.top_logprobs) and zero.tokens == lp.tokens[:3]


def test_streamed_logprobs_match_the_whole_reply_one_token_a_chunk(client):
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2,
                                      extra_body=FIXED).choices[0].logprobs
    chunks = [c for c in client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                                   logprobs=2, stream=True, extra_body=FIXED) if c.choices]
    assert [c.choices[0].logprobs.tokens for c in chunks] == [[t] for t in whole.tokens]
    assert [c.choices[0].logprobs.token_logprobs[0] for c in chunks] == pytest.approx(whole.token_logprobs)
    assert [c.choices[0].logprobs.text_offset[0] for c in chunks] == whole.text_offset


def test_chat_logprobs_and_top_logprobs(client):
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=6, temperature=0,
                  logprobs=True, top_logprobs=2, extra_body=FIXED)
    reply = client.chat.completions.create(**kwargs)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == 6
    assert "".join(e.token for e in content) == reply.choices[0].message.content
    for e in content:
        assert e.bytes == list(e.token.encode()) and len(e.top_logprobs) == 2 and e.logprob <= 0
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
    streamed = [c.choices[0].logprobs for c in client.chat.completions.create(**kwargs, stream=True)
                if c.choices and c.choices[0].logprobs is not None]
    assert [s.content[0].token for s in streamed] == [e.token for e in content]
    plain = client.chat.completions.create(**{**kwargs, "logprobs": False, "top_logprobs": None})
    assert plain.choices[0].logprobs is None


def test_logprobs_count_every_generated_token_a_stop_sequence_included(client):
    full = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0,
                                     extra_body=FIXED).choices[0].text
    stop = full.split()[4]
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, logprobs=1,
                                      stop=stop, extra_body=FIXED)
    assert reply.choices[0].finish_reason == "stop"
    assert len(reply.choices[0].logprobs.tokens) == reply.usage.completion_tokens
    assert "".join(reply.choices[0].logprobs.tokens).startswith(reply.choices[0].text)


def test_echo_puts_the_prompt_before_the_reply(client):
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0, extra_body=FIXED)
    echoed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0, echo=True,
                                       extra_body=FIXED)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    assert echoed.usage.completion_tokens == 4
    chunks = [c.choices[0].text for c in client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4,
                                                                    temperature=0, echo=True, stream=True,
                                                                    extra_body=FIXED) if c.choices]
    assert chunks[0] == PROMPT and "".join(chunks) == echoed.choices[0].text and len(chunks) == 5
    ids = client.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=1, echo=True, extra_body=FIXED)
    assert ids.choices[0].text.startswith(decode(1) + decode(2) + decode(3))


def test_continuous_usage_counts_the_tokens_so_far_in_every_chunk(url):
    body = {"prompt": PROMPT, "max_tokens": 5, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, trust_env=False, timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    running = [e["usage"]["completion_tokens"] for e in events if e["choices"]]
    assert running == [1, 2, 3, 4, 5] and events[-1]["usage"]["completion_tokens"] == 5
