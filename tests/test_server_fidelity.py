"""The server serves what the engine makes, undistorted: the peer-client checks of issue 14, on 127.0.0.1.

Kept-alive connections get tokens as they are made (TCP_NODELAY); non-streaming replies hold every
token they count, under load; a client that leaves is cancelled; the address is announced only
when it accepts requests; bad requests get OpenAI-style 4xx errors; stop sequences, sampling,
EOS and the API's defaults behave as OpenAI's; slow bodies and headers are timed out in one log line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("torch")
openai = pytest.importorskip("openai")

import torch  # noqa: E402
from asgi_server import serve_in_background  # noqa: E402
from conftest import openai_client  # noqa: E402
from processes import stop as stop_process  # noqa: E402

from servebench.serving.engine.executor import ComputePlan, Executor  # noqa: E402
from servebench.serving.engine.http_api import create_app  # noqa: E402
from servebench.serving.engine.kvcache import PagedKVCache  # noqa: E402
from servebench.serving.engine.model import Decoder, SamplingParams, preset, sample_tokens  # noqa: E402
from servebench.serving.engine.service import EngineService  # noqa: E402
from servebench.serving.engine.words import decode  # noqa: E402
from servebench.serving.scheduler import SchedulerConfig  # noqa: E402

MODEL = "servebench-tiny"
EOS = preset("tiny").eos_token_id


def _service(model: object = "tiny", **sched: object) -> EngineService:
    cfg = {"kv_budget_tokens": 16_384, "max_num_seqs": 16, "max_waiting": 256, "policy": "paged", **sched}
    return EngineService(model, scheduler=SchedulerConfig(**cfg), device="cpu", threads=1,  # type: ignore[arg-type]
                         warmup_steps=1)


@pytest.fixture(scope="module")
def server():
    """One tiny engine behind the HTTP server, with a 1 s read timeout for the slow-client checks."""
    with serve_in_background(create_app(_service(), body_timeout_s=1.0), read_timeout_s=1.0) as url:
        yield url


@pytest.fixture
def client(server):
    with openai_client(server) as c:
        yield c


def _state(url: str) -> dict:
    return httpx.get(f"{url}/servebench/engine", trust_env=False).json()


def _idle(url: str) -> dict:
    """Poll the engine until nothing is live (bounded); return its last state."""
    state: dict = {}
    for _ in range(1000):
        state = _state(url)
        if state["running"] == 0 and state["waiting"] == 0 and state["kv_tokens_held"] == 0:
            break
        time.sleep(0.01)
    return state


# --------------------------------------------------------------------------- transport


def test_a_get_then_a_stream_on_one_connection_arrives_token_by_token(server):
    """Nagle's algorithm held a kept-alive stream back until the client's delayed ACK (~40 ms)."""
    with httpx.Client(trust_env=False, timeout=30) as http:
        assert http.get(f"{server}/v1/models").status_code == 200
        body = {"prompt": "one two three", "max_tokens": 64, "stream": True, "ignore_eos": True, "temperature": 0}
        times: list[float] = []
        sent = time.perf_counter()
        with http.stream("POST", f"{server}/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    times.append(time.perf_counter() - sent)
        assert http.get(f"{server}/health").status_code == 200
    assert len(times) == 64
    first, last = times[0], times[-1]
    # token by token, the first chunk comes a step or two after the send and the last 63 steps later;
    # held back, they come together
    assert first < 0.5 * last, (first, last)


def _server_end_of(client: socket.socket) -> socket.socket:
    """Return a duplicate of the in-process server's socket for this client connection (Linux /proc)."""
    me = client.getsockname()
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:  # not a socket (or gone)
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.getpeername() == me:
                return sock
        except OSError:
            pass
        sock.close()
    raise AssertionError(f"no server socket has peer {me}")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the server's socket through /proc")
def test_every_accepted_connection_has_tcp_nodelay(server):
    with socket.create_connection(_host_port(server)) as client:
        client.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        assert client.recv(65536).startswith(b"HTTP/1.1 200 ")
        with _server_end_of(client) as end:
            assert end.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# --------------------------------------------------------------------------- non-streaming replies


def test_non_streaming_replies_hold_every_counted_token_under_load(server):
    async def run() -> list:
        c = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300,
                               http_client=httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=200)))
        try:
            return await asyncio.gather(*(
                c.completions.create(model=MODEL, prompt=f"request {i} asks", max_tokens=8 + i % 40,
                                     extra_body={"ignore_eos": True}) for i in range(120)))
        finally:
            await c.close()

    replies = asyncio.run(run())
    for i, reply in enumerate(replies):
        words = reply.choices[0].text.split()
        assert reply.usage.completion_tokens == 8 + i % 40
        assert len(words) == reply.usage.completion_tokens, (i, reply.choices[0].text)
        assert reply.choices[0].finish_reason == "length"
    assert _idle(server)["kv_tokens_held"] == 0


def test_a_non_streaming_client_that_leaves_is_cancelled_and_its_kv_freed(server):
    before = _idle(server)
    host, port = server.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"prompt": "a long answer please", "max_tokens": 2000, "ignore_eos": True}).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        for _ in range(1000):  # until the engine runs it
            if _state(server)["running"] == 1:
                break
            time.sleep(0.01)
        assert _state(server)["running"] == 1
    after = _idle(server)
    assert (after["running"], after["waiting"], after["kv_tokens_held"], after["kv_tokens_used"]) == (0, 0, 0, 0)
    # run to its end, the request would have taken at least one step per token
    assert after["steps"] - before["steps"] < 2000


# --------------------------------------------------------------------------- start-up


def test_serve_engine_announces_its_address_only_when_it_accepts_requests():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "servebench", "serve-engine", "--preset", "tiny", "--port", "0",
                             "--threads", "1", "--device", "cpu", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        lines = []
        for line in proc.stdout:  # the JSON object ends with a line "}"
            lines.append(line.decode())
            if line.startswith(b"}"):
                break
        assert lines, proc.stderr.read().decode()[-2000:]
        url = json.loads("".join(lines))["url"]
        # at once, no retry: the server is listening and warm
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 2, "ignore_eos": True},
                       trust_env=False, timeout=30)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
    finally:
        stop_process(proc, timeout_s=15)


# --------------------------------------------------------------------------- bad requests


DEEP = b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def _chat(content: object) -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


BAD_REQUESTS = [
    ("GET", "/nope", None, 404, "not_found"),
    ("POST", "/v1/nope", {"prompt": "hi"}, 404, "not_found"),
    ("GET", "/v1/completions", None, 405, "method_not_allowed"),
    ("DELETE", "/v1/models", None, 405, "method_not_allowed"),
    ("POST", "/v1/chat/completions", _chat([{"type": "text", "text": 5}]), 400, "invalid_value"),
    ("POST", "/v1/chat/completions", _chat([None]), 400, "invalid_value"),
    ("POST", "/v1/chat/completions", _chat([{"type": "text", "text": None}]), 400, "invalid_value"),
    ("POST", "/v1/chat/completions", _chat([{"type": "image_url", "image_url": {"url": "x"}}]), 400, "invalid_value"),
    ("POST", "/v1/chat/completions", {"messages": [], "max_tokens": 2}, 400, "invalid_value"),
    ("POST", "/v1/chat/completions", {"messages": "hello"}, 400, "invalid_value"),
    ("POST", "/v1/completions", DEEP, 400, "invalid_json"),
    ("POST", "/v1/chat/completions", DEEP, 400, "invalid_json"),
    ("POST", "/v1/completions", b'{"prompt": "hi", ', 400, "invalid_json"),
    ("POST", "/v1/completions", b"\xff\xfe\x00", 400, "invalid_json"),
    ("POST", "/v1/completions", b'{"prompt": "hi", "temperature": NaN}', 400, "invalid_json"),
    ("POST", "/v1/completions", b"[1, 2]", 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": "3"}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": True}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 3.0}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 0}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "stream": "yes"}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": [1, True]}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": ["a", "b"]}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": ""}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": []}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "n": 2}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "temperature": -1}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "temperature": "0"}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "top_p": 0}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "seed": 1.5}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "stop": ""}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "stop": 5}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "ignore_eos": "true"}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "logit_bias": {"x": 1}}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "logit_bias": {"5": 101}}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi", "stream_options": {"include_usage": "yes"}}, 400, "invalid_value"),
    ("POST", "/v1/completions", {"prompt": "hi " * 2040, "max_tokens": 20}, 400, "context_length_exceeded"),
    ("POST", "/v1/completions", {"model": "gpt-x", "prompt": "hi"}, 404, "model_not_found"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), BAD_REQUESTS,
                         ids=[f"{i}-{m} {p} {status}" for i, (m, p, _, status, _) in enumerate(BAD_REQUESTS)])
def test_every_bad_request_gets_an_openai_style_4xx(server, method, path, body, status, code):
    content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    r = httpx.request(method, f"{server}{path}", content=content, trust_env=False, timeout=30,
                      headers={"content-type": "application/json"})
    assert r.status_code == status, r.text[:500]
    error = r.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["code"] == code


def test_a_bad_request_names_the_field(server):
    r = httpx.post(f"{server}/v1/completions", json={"prompt": "hi", "max_tokens": "3"}, trust_env=False)
    assert r.json()["error"]["param"] == "max_tokens" and "max_tokens" in r.json()["error"]["message"]
    r = httpx.post(f"{server}/v1/chat/completions", json=_chat([{"type": "text", "text": 5}]), trust_env=False)
    assert r.json()["error"]["param"] == "messages.0.content.0.text"


# --------------------------------------------------------------------------- API fidelity


def _full(client, **kw):
    return client.completions.create(model=MODEL, prompt="the quick brown fox", max_tokens=24, temperature=0,
                                     extra_body={"ignore_eos": True}, **kw)


def test_stop_sequences_end_the_reply_before_them(client):
    full = _full(client).choices[0].text
    words = full.split()
    stop = words[9]  # a word some way in; the reply must end before its first occurrence
    cut = full.index(stop)
    expected_tokens = next(k for k in range(1, 25) if len("".join(" " + w for w in words[:k])) >= cut + len(stop))
    reply = _full(client, stop=["never appears", stop])
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].text == full[:cut] and not reply.choices[0].text.endswith(stop)
    assert reply.usage.completion_tokens == expected_tokens  # tokens generated, the stop's own included

    chunks = list(_full(client, stop=stop, stream=True, stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == full[:cut]
    assert len(texts) == chunks[-1].usage.completion_tokens == expected_tokens  # one chunk per token, as counted
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"

    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "the quick brown fox"}],
                                          max_tokens=24, temperature=0, stop=stop, extra_body={"ignore_eos": True})
    assert chat.choices[0].finish_reason == "stop" and stop not in chat.choices[0].message.content


def test_a_stop_sequence_across_tokens_and_text_held_back_while_it_may_match(client):
    full = _full(client).choices[0].text
    stop = full[10:17]  # spans a word boundary, starts mid-word
    reply = _full(client, stop=stop)
    assert reply.choices[0].text == full[:full.index(stop)] and reply.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in _full(client, stop=stop, stream=True))
    assert streamed == reply.choices[0].text


def test_temperature_zero_is_greedy_and_seeds_reproduce(client):
    def text(**kw) -> str:
        return client.completions.create(model=MODEL, prompt="sampling test prompt", max_tokens=20,
                                         extra_body={"ignore_eos": True}, **kw).choices[0].text

    greedy = text(temperature=0)
    assert text(temperature=0) == greedy and text(temperature=0, seed=3) == greedy
    seeded = text(temperature=1.0, seed=7)
    assert text(temperature=1.0, seed=7) == seeded
    assert text(temperature=1.0, seed=7, top_p=0.9) == text(temperature=1.0, seed=7, top_p=0.9)
    others = {text(temperature=1.0, seed=s) for s in (8, 9, 10)}
    assert others != {seeded} and seeded != greedy  # sampling does sample
    assert text(temperature=1.0, top_p=1e-6, seed=11) == greedy  # top_p keeps only the likeliest token


def test_eos_ends_a_reply_unless_ignored(client):
    bias = {str(EOS): 100}
    ended = client.completions.create(model=MODEL, prompt="stop now", max_tokens=10, logit_bias=bias)
    assert ended.choices[0].finish_reason == "stop" and ended.choices[0].text == ""
    assert ended.usage.completion_tokens == 1  # the EOS token is generated and counted, never shown
    fixed = client.completions.create(model=MODEL, prompt="stop now", max_tokens=10, logit_bias=bias,
                                      extra_body={"ignore_eos": True})
    assert fixed.choices[0].finish_reason == "length" and fixed.usage.completion_tokens == 10
    assert fixed.choices[0].text.split() == [decode(EOS).strip()] * 10
    stream = client.chat.completions.create(model=MODEL, max_tokens=10, logit_bias=bias, stream=True,
                                            messages=[{"role": "user", "content": "stop now"}])
    chunks = [c for c in stream if c.choices]
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""


def test_the_api_defaults_and_a_real_created_time(client):
    before = int(time.time())
    reply = client.completions.create(model=MODEL, prompt="defaults", extra_body={"ignore_eos": True})
    after = int(time.time())
    assert reply.usage.completion_tokens == 16  # OpenAI's legacy completions default
    assert before <= reply.created <= after
    models = httpx.get(f"{client.base_url}models", trust_env=False).json()
    assert models["data"][0]["created"] <= after


def test_chat_without_max_tokens_runs_to_the_context_limit():
    small = dataclasses.replace(preset("tiny"), max_positions=48)
    with serve_in_background(create_app(_service(small))) as url, openai_client(url) as c:
        reply = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "five words in this one"}],
                                          extra_body={"ignore_eos": True})
    assert reply.usage.prompt_tokens == 5 and reply.usage.completion_tokens == 48 - 5
    assert reply.choices[0].finish_reason == "length"


def test_sampling_is_per_sequence_inside_a_batched_step():
    """A seeded sequence draws the same tokens alone or batched with greedy and other seeded ones."""
    model = Decoder(preset("tiny"), seed=0)

    def run(specs: dict[str, SamplingParams], steps: int = 12) -> dict[str, list[int]]:
        cache = PagedKVCache(model.config, 2048, block_size=16, device=model.device, dtype=model.dtype)
        ex = Executor(model, cache)
        for sid, sp in specs.items():
            ex.add(sid, [3 + ord(sid[0]) % 7, 5, 7, 11], steps, sp)
        ex.execute(ComputePlan(prefill=tuple((sid, 4) for sid in specs)))
        for _ in range(steps - 1):
            ex.execute(ComputePlan(decode=tuple(specs)))
        return {sid: ex.sequences[sid].tokens[4:] for sid in specs}

    seeded = SamplingParams(temperature=1.0, seed=42)
    alone = run({"a": seeded})["a"]
    batched = run({"g": SamplingParams(), "a": seeded, "b": SamplingParams(temperature=0.7, top_p=0.8, seed=5)})
    assert batched["a"] == alone
    assert batched["g"] == run({"g": SamplingParams()})["g"]


def test_sample_tokens_follows_the_probabilities_and_top_p():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]] * 4))
    greedy = sample_tokens(logits, [SamplingParams()] * 4, [None] * 4)
    assert greedy == [1, 1, 1, 1]
    gen = torch.Generator().manual_seed(0)
    draws = [sample_tokens(logits[:1], [SamplingParams(temperature=1.0, seed=0)], [gen])[0] for _ in range(3000)]
    shares = [draws.count(t) / len(draws) for t in range(3)]
    assert abs(shares[0] - 0.1) < 0.03 and abs(shares[1] - 0.6) < 0.03 and abs(shares[2] - 0.3) < 0.03
    gen = torch.Generator().manual_seed(0)
    top = [sample_tokens(logits[:1], [SamplingParams(temperature=1.0, top_p=0.65, seed=0)], [gen])[0]
           for _ in range(500)]
    assert set(top) == {1, 2}  # 0.6 alone falls short of 0.65; 0.1 is never needed
    assert sample_tokens(logits[:1], [SamplingParams(logit_bias=((0, 100.0),))], [None]) == [0]


# --------------------------------------------------------------------------- slow clients


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_log():
    """Every record the server's and uvicorn's loggers emit while the test runs."""
    handler = _Records()
    loggers = [logging.getLogger(n) for n in ("servebench", "uvicorn", "uvicorn.error", "uvicorn.access")]
    for lg in loggers:
        lg.addHandler(handler)
    yield handler.records
    for lg in loggers:
        lg.removeHandler(handler)


def _read_until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(30)  # the server's bound is 1 s; this only keeps a broken server from hanging the test
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def test_a_stalled_body_gets_408_and_the_connection_closes_in_one_log_line(server, server_log):
    with socket.create_connection(_host_port(server)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n{\"prompt\": ")
        answer = _read_until_closed(sock)  # returns only once the server closes the connection
    assert answer.startswith(b"HTTP/1.1 408 ") and b'"code":"request_timeout"' in answer.replace(b" ", b"")
    lines = [r for r in server_log if "body" in r.getMessage()]
    assert len(lines) == 1 and "not complete within 1 s" in lines[0].getMessage()
    assert not any(r.exc_info for r in server_log)


def test_stalled_headers_are_closed_and_an_abandoned_body_logs_one_line(server, server_log):
    with socket.create_connection(_host_port(server)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 ")
    with socket.create_connection(_host_port(server)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"pro")
        time.sleep(0.2)
    _idle(server)
    for _ in range(200):  # the server notices the close on its own time
        if any("left before" in r.getMessage() for r in server_log):
            break
        time.sleep(0.01)
    messages = [r.getMessage() for r in server_log]
    assert sum("headers" in m for m in messages) == 1 and sum("left before" in m for m in messages) == 1, messages
    assert not any(r.exc_info for r in server_log)
    assert httpx.get(f"{server}/health", trust_env=False).status_code == 200  # still serving


def test_a_server_deadline_is_504_with_a_json_error_not_a_refusal():
    with serve_in_background(create_app(_service(timeout_s=0.2))) as url:
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "long", "max_tokens": 2000, "ignore_eos": True},
                       trust_env=False, timeout=60)
        state = _idle(url)
    assert r.status_code == 504 and r.json()["error"]["code"] == "deadline_exceeded"
    assert state["kv_tokens_held"] == 0
