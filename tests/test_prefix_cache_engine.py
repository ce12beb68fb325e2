"""Prefix caching in the torch engine: reused KV blocks hold what a recompute gives, on the tiny CPU model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from accounting import check_accounting  # noqa: E402

from servebench.errors import ConfigError  # noqa: E402
from servebench.serving.engine.executor import ComputePlan, Executor  # noqa: E402
from servebench.serving.engine.kvcache import PagedKVCache  # noqa: E402
from servebench.serving.engine.loop import EngineLoop  # noqa: E402
from servebench.serving.engine.model import Decoder, preset  # noqa: E402
from servebench.serving.engine.runner import run_workload  # noqa: E402
from servebench.serving.scheduler import Request, SchedulerConfig  # noqa: E402
from servebench.serving.workload import (  # noqa: E402
    ArrivalSpec,
    ClassSpec,
    ConversationSpec,
    LengthSpec,
    SharedPrefixSpec,
    WorkloadSpec,
)

torch.set_num_threads(1)
TINY = preset("tiny")
BS = 16


@pytest.fixture(scope="module")
def model() -> Decoder:
    return Decoder(TINY, seed=7)


def _ids(seed: int, n: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY.vocab - 1, (n,), generator=gen).tolist()


def test_adopted_blocks_hold_the_recomputed_kv_and_give_the_same_logits(model: Decoder) -> None:
    doc, question = _ids(1, 4 * BS), _ids(2, 11)
    prompt = doc + question
    cache = PagedKVCache(TINY, 1024, block_size=BS)
    ex = Executor(model, cache)
    ex.add("first", doc + _ids(3, 9), 1)  # another request with the same document computes it
    ex.execute(ComputePlan(prefill=(("first", len(doc) + 9),)))
    blocks = [cache.block_of("first", j) for j in range(4)]
    for b in blocks:
        cache.pin(b)  # what the loop does when the scheduler caches them
    ex.remove("first")
    assert cache.used_blocks == 4  # the pinned document outlives its request
    ex.add("cached", prompt, 1)
    ex.adopt("cached", blocks, 4 * BS)
    res = ex.execute(ComputePlan(prefill=(("cached", len(question)),)), keep_logits=True)

    fresh = Executor(model, PagedKVCache(TINY, 1024, block_size=BS))
    fresh.add("uncached", prompt, 1)
    ref = fresh.execute(ComputePlan(prefill=(("uncached", len(prompt)),)), keep_logits=True)
    torch.testing.assert_close(res.logits["cached"], ref.logits["uncached"], rtol=1e-5, atol=1e-5)
    assert res.emitted["cached"] == ref.emitted["uncached"]
    mine = cache.slots("cached", 0, len(prompt))
    theirs = fresh.cache.slots("uncached", 0, len(prompt))
    torch.testing.assert_close(cache.k[:, mine], fresh.cache.k[:, theirs], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cache.v[:, mine], fresh.cache.v[:, theirs], rtol=1e-5, atol=1e-6)
    ex.remove("cached")
    for b in blocks:
        cache.unpin(b)
    assert cache.used_blocks == 0 and cache.free_blocks == cache.num_blocks


class _Keep:
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.outcome = None

    def on_token(self, token_id: int, time_s: float) -> None:
        self.tokens.append(token_id)

    def on_outcome(self, outcome) -> None:
        self.outcome = outcome


def _serve(loop: EngineLoop, rid: str, prompt: list[int], new_tokens: int) -> _Keep:
    keep = _Keep()
    assert loop.submit(Request(rid, loop.clock(), len(prompt), new_tokens), prompt, keep) is None
    while keep.outcome is None:
        loop.run_once(0.001)
    return keep


@pytest.mark.parametrize("policy", ["paged", "reserve"])
def test_loop_reuses_a_shared_prefix_and_generates_the_same_tokens(model: Decoder, policy: str) -> None:
    doc = _ids(5, 5 * BS + 3)
    config = SchedulerConfig(kv_budget_tokens=512, policy=policy, max_num_batched_tokens=48)
    cached = EngineLoop(model, SchedulerConfig(**{**config.__dict__, "prefix_caching": True}))
    plain = EngineLoop(model, config)
    a = _serve(cached, "a", doc + _ids(6, 20), 6)
    assert a.outcome.cached_prompt_tokens == 0
    b = _serve(cached, "b", doc + _ids(7, 20), 6)
    assert b.outcome.status == "success" and b.outcome.cached_prompt_tokens == 5 * BS
    assert b.outcome.to_record()["cached_prompt_tokens"] == 5 * BS
    b_plain = _serve(plain, "b", doc + _ids(7, 20), 6)
    assert b_plain.outcome.cached_prompt_tokens is None
    assert b.tokens == b_plain.tokens  # greedy: the cached run computes the same continuation
    snap = cached.snapshot()
    assert snap["kv_tokens_used"] == 0 and snap["running"] == 0
    check_accounting(cached.scheduler)
    # everything no request holds is still cached, and its physical blocks are pinned, not leaked
    assert cached.cache.used_blocks == cached.scheduler.cache.num_cached


def test_loop_evicts_and_returns_physical_blocks_under_pressure(model: Decoder) -> None:
    loop = EngineLoop(model, SchedulerConfig(kv_budget_tokens=8 * BS, policy="paged", prefix_caching=True))
    for i in range(5):  # each caches 4 blocks of 8: later ones evict earlier ones
        out = _serve(loop, str(i), _ids(20 + i, 4 * BS + 2), 3).outcome
        assert out.status == "success"
        check_accounting(loop.scheduler)
        assert loop.cache.used_blocks == loop.scheduler.cache.num_cached <= 8
    assert loop.scheduler.evictions > 0
    again = _serve(loop, "again", _ids(24, 4 * BS + 2), 3).outcome
    assert again.cached_prompt_tokens == 4 * BS  # the most recent prompt is still there


def _shared_workload(n: int, conversation: bool = False) -> WorkloadSpec:
    cls = ClassSpec(name="rag", prompt=LengthSpec(kind="fixed", value=5 * BS + 10),
                    output=LengthSpec(kind="fixed", value=4), shared_prefix=SharedPrefixSpec(tokens=5 * BS, groups=2),
                    conversation=ConversationSpec(turns=2) if conversation else None)
    return WorkloadSpec(arrival=ArrivalSpec(kind="poisson", rate_rps=40.0), num_requests=n, classes=[cls])


def test_run_sends_the_workloads_shared_prompts_and_records_cached_tokens(model: Decoder) -> None:
    cfg = SchedulerConfig(kv_budget_tokens=2048, policy="paged", prefix_caching=True, max_num_batched_tokens=128)
    run = run_workload(model, cfg, _shared_workload(16), seed=5, warmup_steps=0)
    cached = [r["cached_prompt_tokens"] for r in run.records if r["status"] == "success"]
    assert len(cached) == 16
    assert sum(c == 5 * BS for c in cached) >= 12  # both documents are computed once, then reused
    assert all(c in (0, 5 * BS) for c in cached)
    with pytest.raises(ConfigError, match="conversations"):
        run_workload(model, cfg, _shared_workload(4, conversation=True), seed=5, warmup_steps=0)


def test_server_reports_cached_tokens_and_the_load_generator_records_them() -> None:
    openai = pytest.importorskip("openai")
    import httpx
    from asgi_server import serve_in_background

    from servebench.analysis.summary import build_report
    from servebench.load.generator import LoadConfig, records_table, run_load_sync, workload_plan
    from servebench.serving.engine.http_api import create_app
    from servebench.serving.engine.service import EngineService

    service = EngineService("tiny", scheduler=SchedulerConfig(kv_budget_tokens=4096, max_num_seqs=8, max_waiting=64,
                                                              policy="paged", prefix_caching=True),
                            device="cpu", threads=1, warmup_steps=1)
    doc = " ".join(f"w{i}" for i in range(3 * BS))
    with serve_in_background(create_app(service)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30,
                               http_client=httpx.Client(trust_env=False))
        first = client.completions.create(model="servebench-tiny", prompt=doc + " first question", max_tokens=2)
        second = client.completions.create(model="servebench-tiny", prompt=doc + " second one", max_tokens=2)
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        assert second.usage.prompt_tokens_details.cached_tokens == 3 * BS  # the shared words, in whole blocks
        stream = client.completions.create(model="servebench-tiny", prompt=doc + " streamed", max_tokens=2,
                                           stream=True, stream_options={"include_usage": True})
        assert list(stream)[-1].usage.prompt_tokens_details.cached_tokens == 3 * BS
        client.close()

        plan = workload_plan(_shared_workload(10), np.random.default_rng(3))
        result = run_load_sync(LoadConfig(url=url, deadline_s=30), plan)
        table, ws, we = records_table(result.outcomes)
    assert [o.status for o in result.outcomes] == ["success"] * 10
    cached = table.cached_prompt_tokens.tolist()
    assert all(0 <= c <= p for c, p in zip(cached, table.prompt_tokens.tolist()))
    assert sum(c >= 5 * BS for c in cached) >= 6  # the workload's two documents were sent as the same words
    pc = build_report(table, ws, we).prefix_cache
    assert pc is not None and pc.token_hit_rate > 0.4
