"""The OpenAI-compatible server in front of the tiny engine, on loopback, with the load generator and openai."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("torch")

from asgi_server import serve_in_background  # noqa: E402
from processes import stop  # noqa: E402

from servebench.analysis.summary import build_report  # noqa: E402
from servebench.load.generator import LoadConfig, plan_requests, records_table, run_load_sync  # noqa: E402
from servebench.serving.engine.http_api import create_app  # noqa: E402
from servebench.serving.engine.service import EngineService  # noqa: E402
from servebench.serving.engine.words import encode  # noqa: E402
from servebench.serving.scheduler import SchedulerConfig  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _service(**sched: object) -> EngineService:
    cfg = {"kv_budget_tokens": 8192, "max_num_seqs": 16, "max_waiting": 64, "policy": "paged", **sched}
    return EngineService("tiny", scheduler=SchedulerConfig(**cfg), device="cpu", threads=1, warmup_steps=1)


@pytest.fixture(scope="module")
def server():
    """One tiny engine behind the HTTP server for the whole module: (url, service)."""
    service = _service()
    with serve_in_background(create_app(service)) as url:
        yield url, service


def _plan(n: int, words: int = 6, out: int = 5, rate: float = 100.0, seed: int = 0):
    return plan_requests(np.arange(n) / rate, [words] * n, [out] * n, np.random.default_rng(seed))


def _idle(url: str) -> dict:
    """Poll the engine until nothing is live (bounded); return its last state."""
    state: dict = {}
    for _ in range(500):
        state = httpx.get(f"{url}/servebench/engine", trust_env=False).json()
        if state["running"] == 0 and state["waiting"] == 0 and state["kv_tokens_held"] == 0:
            break
        time.sleep(0.01)
    return state


def test_health_and_models(server):
    url, _ = server
    assert httpx.get(f"{url}/health", trust_env=False).json() == {"status": "ok"}
    models = httpx.get(f"{url}/v1/models", trust_env=False).json()
    assert models["data"][0]["id"] == "servebench-tiny" and models["data"][0]["max_model_len"] == 2048


def test_word_tokenizer_gives_one_token_per_word():
    assert len(encode("a bb  ccc\nd", 512)) == 4 and encode("same", 512) == encode("same", 512)


def test_openai_client_streams_one_token_per_chunk_with_usage(server):
    openai = pytest.importorskip("openai")
    url, _ = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30,
                           http_client=httpx.Client(trust_env=False))
    fixed = {"ignore_eos": True}  # exactly max_tokens: an EOS token cannot end it early
    stream = client.completions.create(model="servebench-tiny", prompt="one two three four", max_tokens=7,
                                       stream=True, stream_options={"include_usage": True}, extra_body=fixed)
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len(texts) == 7 and all(t.startswith(" t") for t in texts)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7 and chunks[-1].usage.prompt_tokens == 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"

    chat = client.chat.completions.create(model="servebench-tiny", max_tokens=3, stream=True, extra_body=fixed,
                                          messages=[{"role": "user", "content": "hello there"}])
    deltas = [c.choices[0].delta.content for c in chat if c.choices]
    assert deltas[0] == "" and len(deltas) == 4  # the role chunk, then one chunk per token

    whole = client.completions.create(model="servebench-tiny", prompt=[1, 2, 3], max_tokens=4, extra_body=fixed)
    assert whole.usage.prompt_tokens == 3 and whole.usage.completion_tokens == 4
    assert len(whole.choices[0].text.split()) == 4
    client.close()


def test_bad_requests_get_openai_errors(server):
    url, _ = server
    post = lambda body: httpx.post(f"{url}/v1/completions", json=body, trust_env=False)  # noqa: E731
    r = post({"model": "gpt-x", "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = post({"prompt": "hi " * 2040, "max_tokens": 20})
    assert r.status_code == 400 and "exceed the model's 2048 positions" in r.json()["error"]["message"]
    r = post({"prompt": ["a", "b"], "max_tokens": 2})
    assert r.status_code == 400 and "batch" in r.json()["error"]["message"]
    r = post({"prompt": "hi", "max_tokens": 0})
    assert r.status_code == 400


def test_load_generator_end_to_end(server):
    url, _ = server
    result = run_load_sync(LoadConfig(url=url, deadline_s=30), _plan(12, words=6, out=5))
    assert result.model == "servebench-tiny"
    assert [o.status for o in result.outcomes] == ["success"] * 12
    for o in result.outcomes:
        assert o.prompt_tokens == 6 and o.output_tokens == 5 and o.token_level_chunks is True
    lag = result.stats.schedule_lag_s
    assert lag.n == 12 and lag.p50_s is not None and lag.p50_s >= 0  # the generator's own lag is measured
    table, ws, we = records_table(result.outcomes)
    report = build_report(table, ws, we)
    assert report.completed == 12 and report.summary["successful_output_tokens_per_second"] > 0
    chat = run_load_sync(LoadConfig(url=url, api="chat", users=2), _plan(4, out=3))
    assert chat.stats.completed == 4 and chat.stats.peak_in_flight <= 2


def test_client_deadline_gives_timeouts_and_the_server_frees_the_kv(server):
    url, _ = server
    result = run_load_sync(LoadConfig(url=url, deadline_s=0.3), _plan(3, words=8, out=1500))
    assert [o.status for o in result.outcomes] == ["timeout"] * 3
    assert all(o.end_s - o.intended_s >= 0.3 for o in result.outcomes)
    state = _idle(url)
    assert (state["running"], state["waiting"], state["kv_tokens_held"], state["kv_tokens_used"]) == (0, 0, 0, 0)


def test_full_queue_answers_503_and_the_summary_counts_rejections():
    # one running sequence and a one-slot queue: of six simultaneous long requests, at most two get in
    service = _service(max_num_seqs=1, max_waiting=1)
    with serve_in_background(create_app(service)) as url:
        plan = plan_requests([0.0] * 6, [4] * 6, [400] * 6, np.random.default_rng(1))
        result = run_load_sync(LoadConfig(url=url, deadline_s=60), plan)
        state = _idle(url)
    statuses = [o.status for o in result.outcomes]
    assert statuses.count("rejected") >= 4 and statuses.count("rejected") + statuses.count("success") == 6
    rejected = [o for o in result.outcomes if o.status == "rejected"]
    assert all(o.http_status == 503 and o.error == "HTTP 503: request rejected: queue_full" for o in rejected)
    table, ws, we = records_table(result.outcomes)
    report = build_report(table, ws, we)
    assert report.rejected == statuses.count("rejected") and report.by_cause[rejected[0].error] == len(rejected)
    assert result.stats.accepted == 6 - len(rejected)
    assert state["kv_tokens_held"] == 0


@pytest.mark.slow
def test_serve_engine_command_and_load_command_end_to_end(tmp_path):
    exe = [sys.executable, "-m", "servebench"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*exe, "serve-engine", "--preset", "tiny", "--port", "0", "--threads", "1",
                             "--device", "cpu", "--json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        head = []
        for line in proc.stdout:  # --port 0 --json: the address it bound comes first
            head.append(line.decode())
            if line.startswith(b"}"):
                break
        text = "".join(head)
        assert "{" in text, text[-2000:]
        url = json.loads(text[text.index("{"):])["url"]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        # announced only once warm and listening: no need to wait
        assert httpx.get(f"{url}/health", trust_env=False, timeout=10).status_code == 200
        out = tmp_path / "run"
        r = subprocess.run([*exe, "load", url, "--rate", "20", "--requests", "10", "--prompt-tokens", "8",
                            "--output-tokens", "6", "-o", str(out), "--json"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        doc = json.loads(r.stdout)
        assert doc["summary"]["requests"] == 10 and doc["completed"] == 10 and doc["model"] == "servebench-tiny"
        meta = json.loads((out / "metadata.json").read_text())
        assert meta["model"]["name"] == "servebench-tiny" and meta["endpoint"]["url"] == url
        records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
        assert all(rec["prompt_tokens"] == 8 and rec["output_tokens"] == 6 for rec in records)
    finally:
        stop(proc, timeout_s=15)


def test_sweep_against_the_engine(server, tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    url, _ = server
    r = CliRunner().invoke(app, ["load", url, "--sweep", "10,40", "--requests", "6", "--output-tokens", "4",
                                 "-o", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [p["load"] for p in doc["points"]] == [10.0, 40.0]
    assert all(p["offered"] == 6 and p["completed"] == 6 for p in doc["points"])
    assert doc["scenario"] == f"measured servebench-tiny at {url}"
    assert (tmp_path / "sweep.csv").is_file() and (tmp_path / "rate_40" / "records.jsonl").is_file()
