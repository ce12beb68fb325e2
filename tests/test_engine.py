"""The torch engine on the CPU with the tiny preset: model, KV cache, step execution, real-time loop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from servebench.engine.executor import Executor, StepPlan  # noqa: E402
from servebench.engine.kvcache import KVCacheFullError, PagedKVCache  # noqa: E402
from servebench.engine.model import PRESETS, Decoder, ModelConfig, preset  # noqa: E402
from servebench.errors import ConfigError, ServebenchError  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))
TINY = preset("tiny")


@pytest.fixture(scope="module")
def model() -> Decoder:
    return Decoder(TINY, seed=7)


def _prompt(seed: int, n: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY.vocab, (n,), generator=gen).tolist()


def _executor(model: Decoder, capacity_tokens: int = 4096) -> Executor:
    return Executor(model, PagedKVCache(TINY, capacity_tokens, block_size=16))


def _run_alone(model: Decoder, prompt: list[int], new_tokens: int) -> tuple[list[int], list[torch.Tensor]]:
    """Prefill in one chunk, then decode one token per step; return tokens and each step's logits."""
    ex = _executor(model)
    ex.add("a", prompt, new_tokens)
    res = ex.execute(StepPlan(prefill=(("a", len(prompt)),)), keep_logits=True)
    logits = [res.logits["a"]]
    while not ex.sequences["a"].done:
        res = ex.execute(StepPlan(decode=("a",)), keep_logits=True)
        logits.append(res.logits["a"])
    return ex.sequences["a"].tokens[len(prompt):], logits


# --------------------------------------------------------------------------- model


def test_presets_are_consistent_and_count_parameters() -> None:
    c = PRESETS["llama-3.1-8b"]
    assert 7.9e9 < c.param_count < 8.1e9  # Llama-3.1-8B has 8.03B parameters
    assert 1.2e9 < PRESETS["llama-3.2-1b"].param_count < 1.3e9  # 1.24B, tied embeddings
    assert c.kv_bytes_per_token(2) == 131_072  # the spec's worked example
    assert sum(p.numel() for p in Decoder(TINY).parameters()) == TINY.param_count


def test_bad_shape_and_unknown_preset_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="multiple of kv_heads"):
        ModelConfig("x", layers=1, hidden=8, heads=3, kv_heads=2, head_dim=4, ffn=8, vocab=8, max_positions=8)
    with pytest.raises(ConfigError, match="unknown model preset 'nope'"):
        preset("nope")


def test_same_seed_same_weights_other_seed_other_weights() -> None:
    a, b, c = Decoder(TINY, seed=3), Decoder(TINY, seed=3), Decoder(TINY, seed=4)
    assert torch.equal(a.wqkv[0], b.wqkv[0])
    assert not torch.equal(a.wqkv[0], c.wqkv[0])


def test_cached_decode_matches_full_recompute(model: Decoder) -> None:
    prompt = _prompt(1, 23)
    tokens, logits = _run_alone(model, prompt, 12)
    full = model.forward_full(torch.tensor(prompt + tokens))
    for i, step_logits in enumerate(logits):
        ref = full[len(prompt) - 1 + i]
        assert torch.allclose(step_logits, ref, atol=1e-4, rtol=0), f"step {i}: {(step_logits - ref).abs().max()}"
    assert tokens == full.argmax(-1)[len(prompt) - 1:-1].tolist()


def test_batched_sequences_of_different_lengths_match_their_unbatched_runs(model: Decoder) -> None:
    lengths = [1, 5, 16, 17, 40]
    prompts = {f"s{i}": _prompt(10 + i, n) for i, n in enumerate(lengths)}
    alone = {sid: _run_alone(model, p, 8) for sid, p in prompts.items()}
    ex = _executor(model)
    for sid, p in prompts.items():
        ex.add(sid, p, 8)
    # staggered: two prefill now (one chunked), the rest join while the first ones decode
    got: dict[str, list[torch.Tensor]] = {sid: [] for sid in prompts}

    def step(plan: StepPlan) -> None:
        res = ex.execute(plan, keep_logits=True)
        for sid, lg in (res.logits or {}).items():
            got[sid].append(lg)

    step(StepPlan(prefill=(("s0", 1), ("s4", 30))))
    step(StepPlan(prefill=(("s4", 10), ("s1", 5)), decode=("s0",)))
    step(StepPlan(prefill=(("s2", 16), ("s3", 17)), decode=("s0", "s1", "s4")))
    while any(not s.done for s in ex.sequences.values()):
        step(StepPlan(decode=tuple(sid for sid, s in ex.sequences.items() if not s.done)))
    for sid, (tokens, logits) in alone.items():
        assert ex.sequences[sid].tokens[len(prompts[sid]):] == tokens, sid
        assert len(got[sid]) == len(logits)
        for a, b in zip(got[sid], logits):
            assert torch.allclose(a, b, atol=1e-4, rtol=0), sid


def test_chunked_prefill_matches_one_chunk(model: Decoder) -> None:
    prompt = _prompt(2, 50)
    ex = _executor(model)
    ex.add("a", prompt, 1)
    for n in (7, 16, 20):
        assert ex.execute(StepPlan(prefill=(("a", n),))).emitted == {}
    res = ex.execute(StepPlan(prefill=(("a", 7),)), keep_logits=True)
    ref = model.forward_full(torch.tensor(prompt))[-1]
    assert torch.allclose(res.logits["a"], ref, atol=1e-4, rtol=0)


def test_preempted_sequence_recomputes_to_the_same_tokens(model: Decoder) -> None:
    prompt = _prompt(3, 9)
    tokens, _ = _run_alone(model, prompt, 10)
    ex = _executor(model)
    ex.add("a", prompt, 10)
    ex.execute(StepPlan(prefill=(("a", 9),)))
    for _ in range(4):
        ex.execute(StepPlan(decode=("a",)))
    assert ex.preempt("a") == 13 and ex.cache.used_tokens == 0
    ex.execute(StepPlan(prefill=(("a", ex.sequences["a"].pending),)))
    while not ex.sequences["a"].done:
        ex.execute(StepPlan(decode=("a",)))
    assert ex.sequences["a"].tokens[9:] == tokens


# --------------------------------------------------------------------------- KV cache


def test_kv_cache_blocks_are_taken_as_tokens_grow_and_all_returned() -> None:
    cache = PagedKVCache(TINY, 64, block_size=16)
    assert cache.num_blocks == 4 and cache.capacity_tokens == 64
    s = cache.extend("a", 17)
    assert s.tolist()[:2] == [0, 1] and cache.used_blocks == 2
    cache.extend("b", 16)
    cache.extend("a", 32)
    assert cache.used_blocks == 3 and cache.used_tokens == 48
    with pytest.raises(KVCacheFullError, match="needs 2 more KV blocks"):
        cache.extend("b", 48)
    assert cache.length("b") == 16  # nothing changed
    assert cache.free("a") == 32 and cache.free("b") == 16 and cache.free("zzz") == 0
    assert cache.used_tokens == 0 and cache.free_blocks == 4


def test_slots_follow_the_block_table() -> None:
    cache = PagedKVCache(TINY, 64, block_size=4)
    cache.extend("a", 3)
    cache.extend("b", 5)
    cache.extend("a", 6)
    assert cache.slots("a", 0, 6).tolist() == [0, 1, 2, 3, 12, 13]  # b took blocks 1 and 2
    with pytest.raises(ServebenchError, match="not all stored"):
        cache.slots("a", 0, 7)


def test_step_that_does_not_fit_raises_and_changes_nothing(model: Decoder) -> None:
    ex = _executor(model, capacity_tokens=32)
    ex.add("a", _prompt(4, 20), 4)
    ex.add("b", _prompt(5, 20), 4)
    with pytest.raises(KVCacheFullError):
        ex.execute(StepPlan(prefill=(("a", 20), ("b", 20))))
    assert ex.cache.used_tokens == 0 and ex.sequences["a"].computed == 0


def test_executor_rejects_bad_plans(model: Decoder) -> None:
    ex = _executor(model)
    ex.add("a", _prompt(6, 4), 2)
    with pytest.raises(ServebenchError, match="expected 1"):
        ex.execute(StepPlan(decode=("a",)))
    with pytest.raises(ServebenchError, match="cannot compute 5 tokens"):
        ex.execute(StepPlan(prefill=(("a", 5),)))
    with pytest.raises(ServebenchError, match="not in the engine"):
        ex.execute(StepPlan(decode=("zz",)))
    with pytest.raises(ServebenchError, match="already in the engine"):
        ex.add("a", [1], 1)
