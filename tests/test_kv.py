"""KV memory, presets, config.json parsing and ``servebench kv``, against hand-computed numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servebench.capacity.hf_config import load_config, shape_from_config
from servebench.capacity.kv import (
    GIB,
    ModelShape,
    analyze,
    budget_tokens,
    bytes_per_token,
    concurrency_curve,
    dtype_bytes,
    in_service,
    kv_budget_bytes,
    kv_bytes,
    kv_heads_per_gpu,
    max_concurrent_sequences,
    max_sequences_in_budget,
    saturation_rate_per_s,
    time_in_service_s,
    tokens_per_request,
    utilization,
    weight_bytes,
)
from servebench.capacity.model_presets import PRESETS, get_preset, resolve_shape
from servebench.cli.core import app
from servebench.errors import ConfigError, InputFormatError

CONFIGS = Path(__file__).resolve().parent.parent / "sample_data" / "configs"
SPEC = ModelShape(layers=32, kv_heads=8, head_dim=128, bytes_per_element=2)


# --------------------------------------------------------------------------- the spec's numbers


def test_spec_bytes_per_token_and_one_gib_sequence() -> None:
    assert bytes_per_token(SPEC) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv_bytes(SPEC, 8192) == 1_073_741_824 == GIB


def test_spec_budget_reservations_and_limits() -> None:
    tokens = budget_tokens(8 * GIB, SPEC)
    assert tokens == 65_536
    a = tokens_per_request(1000, 200, "reserve")
    b = tokens_per_request(7800, 200, "reserve")
    assert (a, b) == (1200, 8000)
    assert max_concurrent_sequences(tokens, a) == 54  # 65,536 / 1,200 = 54.6
    assert max_concurrent_sequences(tokens, b) == 8   # 65,536 / 8,000 = 8.19


def test_spec_littles_law() -> None:
    w_a = time_in_service_s(0.15, 0.030, 200)
    w_b = time_in_service_s(1.2, 0.031, 200)
    assert w_a == pytest.approx(6.12)
    assert w_b == pytest.approx(7.369)
    assert in_service(1.0, w_a) == pytest.approx(6.12)
    assert in_service(1.0, w_b) == pytest.approx(7.369)
    assert utilization(in_service(1.0, w_b), 8) == pytest.approx(7.369 / 8)
    assert utilization(6.12, 54) == pytest.approx(0.11333, abs=1e-5)
    assert saturation_rate_per_s(8, w_b) == pytest.approx(8 / 7.369)
    assert utilization(3.0, 0) is None
    assert saturation_rate_per_s(8, 0) is None


# --------------------------------------------------------------------------- each feature


def test_gqa_counts_kv_heads_not_query_heads() -> None:
    llama70 = get_preset("llama-3.1-70b")
    assert bytes_per_token(llama70) == 2 * 80 * 8 * 128 * 2 == 327_680
    mha = ModelShape(layers=80, kv_heads=64, head_dim=128)
    assert bytes_per_token(mha) == 8 * 327_680


def test_mla_caches_one_latent_per_layer_without_factor_two() -> None:
    ds = get_preset("deepseek-v3")
    assert bytes_per_token(ds) == 61 * (512 + 64) * 2 == 70_272
    assert bytes_per_token(ds, tensor_parallel=8) == 70_272  # the latent is not split across GPUs
    assert kv_bytes(ds, 1000) == 70_272_000


def test_sliding_window_caps_tokens_on_every_local_layer() -> None:
    mistral = get_preset("mistral-7b-v0.1")
    assert kv_bytes(mistral, 1000) == 1000 * 131_072
    assert kv_bytes(mistral, 4096) == kv_bytes(mistral, 10_000) == 4096 * 131_072 == 536_870_912


def test_mixed_local_and_global_layers() -> None:
    g = get_preset("gemma-2-27b")
    assert (g.local_layers, g.global_layers) == (23, 23)
    per_layer = 2 * 16 * 128 * 2  # 8,192 bytes per token per layer
    assert bytes_per_token(g) == 46 * per_layer == 376_832
    assert kv_bytes(g, 8192) == 23 * 8192 * per_layer + 23 * 4096 * per_layer == 2_315_255_808
    assert kv_bytes(g, 2000) == 46 * 2000 * per_layer
    assert g.layer_kinds()[:4] == ["local", "global", "local", "global"]


def test_kv_dtypes() -> None:
    shape = lambda b: SPEC.model_copy(update={"bytes_per_element": b})  # noqa: E731
    assert bytes_per_token(shape(dtype_bytes("fp32"))) == 262_144
    assert bytes_per_token(shape(dtype_bytes("bf16"))) == 131_072
    assert bytes_per_token(shape(dtype_bytes("float16"))) == 131_072
    assert bytes_per_token(shape(dtype_bytes("fp8"))) == 65_536
    assert bytes_per_token(shape(0.5)) == 32_768
    with pytest.raises(ConfigError, match="unknown dtype 'fp7'"):
        dtype_bytes("fp7")


def test_tensor_parallel_divides_then_replicates() -> None:
    assert bytes_per_token(SPEC, tensor_parallel=2) == 65_536
    assert bytes_per_token(SPEC, tensor_parallel=8) == 16_384  # one KV head per GPU
    assert bytes_per_token(SPEC, tensor_parallel=16) == 16_384  # 8 heads on 16 GPUs: replicated
    assert kv_heads_per_gpu(SPEC, 16) == 1
    with pytest.raises(ConfigError, match="tensor_parallel 3 does not divide kv_heads 8"):
        bytes_per_token(SPEC, tensor_parallel=3)
    with pytest.raises(ConfigError, match="not a multiple"):
        bytes_per_token(SPEC, tensor_parallel=12)


def test_paged_blocks_round_tokens_up() -> None:
    assert kv_bytes(SPEC, 1000, block_size=16) == 1008 * 131_072 == 132_120_576
    assert kv_bytes(SPEC, 1008, block_size=16) == 1008 * 131_072
    assert kv_bytes(SPEC, 1, block_size=16) == 16 * 131_072
    assert kv_bytes(SPEC, 0, block_size=16) == 0
    assert tokens_per_request(1000, 200, "paged", expected_output_tokens=50) == 1056  # 1,050 -> 66 blocks
    assert tokens_per_request(1000, 200, "paged") == 1200
    assert tokens_per_request(1000, 200, "paged", expected_output_tokens=900) == 1200  # capped at the cap
    assert budget_tokens(8 * GIB - 1, SPEC, block_size=16) == 65_520  # 65,535 floored to whole blocks
    mistral = get_preset("mistral-7b-v0.1")
    assert kv_bytes(mistral, 5000, block_size=1000) == 5000 * 131_072  # window 4,096 rounds up to 5,000
    with pytest.raises(ConfigError, match="unknown admission policy"):
        tokens_per_request(1, 1, "greedy")  # type: ignore[arg-type]


def test_window_aware_limit_beats_per_token_count() -> None:
    g = get_preset("gemma-2-9b")
    budget = 40 * GIB
    per_request = tokens_per_request(7800, 200)
    flat = max_concurrent_sequences(budget_tokens(budget, g), per_request)
    aware = max_sequences_in_budget(budget, g, per_request)
    assert flat == 15  # 124,830 tokens / 8,000
    # per request: 21 global layers x 8,000 + 21 local x 4,096 tokens at 8,192 bytes per layer-token
    assert kv_bytes(g, 8000) == 21 * (8000 + 4096) * 8192
    assert aware == 40 * GIB // (21 * 12096 * 8192) == 20
    assert max_sequences_in_budget(8 * GIB, SPEC, 1200) == 54


def test_budget_from_device_memory() -> None:
    weights = weight_bytes(8_030_000_000, 2)
    assert weights == 16_060_000_000
    assert weight_bytes(8_030_000_000, 2, tensor_parallel=2) == 8_030_000_000
    budget = kv_budget_bytes(80 * GIB, memory_utilization=0.9, weights_bytes=16 * GIB, overhead_bytes=4 * GIB)
    assert budget == 52 * GIB
    assert budget_tokens(budget, get_preset("llama-3.1-8b")) == 52 * 8192
    with pytest.raises(ConfigError, match="no memory left for the KV cache"):
        kv_budget_bytes(16 * GIB, memory_utilization=0.9, weights_bytes=16 * GIB)
    with pytest.raises(ConfigError, match="memory_utilization"):
        kv_budget_bytes(16 * GIB, memory_utilization=1.5)
    with pytest.raises(ConfigError, match="tensor_parallel must be at least 1, got 0"):
        weight_bytes(8_030_000_000, 2, tensor_parallel=0)  # was a ZeroDivisionError traceback in the CLI


def test_analyze_reports_only_what_inputs_allow() -> None:
    r = analyze(SPEC)
    assert r.bytes_per_token == 131_072 and r.budget_tokens is None and r.max_concurrent_sequences is None
    b = analyze(SPEC, budget_bytes=8 * GIB, prompt_tokens=7800, output_cap=200, rate_per_s=1.0,
                time_in_service_s=7.369)
    assert (b.budget_tokens, b.tokens_per_request, b.max_concurrent_sequences) == (65_536, 8000, 8)
    assert b.in_service == pytest.approx(7.369) and b.utilization == pytest.approx(0.921125)
    with pytest.raises(ConfigError, match="both prompt_tokens and output_cap"):
        analyze(SPEC, prompt_tokens=10)


def test_concurrency_curve_falls_with_prompt_length() -> None:
    assert concurrency_curve(SPEC, 8 * GIB, [1000, 7800, 65_336, 70_000], 200) == [54, 8, 1, 0]


def test_shape_validation() -> None:
    with pytest.raises(ValueError, match="kv_lora_rank and qk_rope_head_dim"):
        ModelShape(layers=1, kv_heads=1, head_dim=1, kv_lora_rank=4)
    with pytest.raises(ValueError, match="sliding_window is not set"):
        ModelShape(layers=2, kv_heads=1, head_dim=1, layer_pattern=("local", "global"))
    with pytest.raises(ValueError):
        ModelShape(layers=0, kv_heads=1, head_dim=1)


# --------------------------------------------------------------------------- presets and config.json


def test_presets_cover_the_issue_models_with_sources() -> None:
    wanted = {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b-v0.1", "mixtral-8x7b",
              "qwen2.5-7b", "qwen2.5-72b", "gemma-2-9b", "gemma-2-27b", "deepseek-v3", "phi-3-mini-4k"}
    assert wanted <= set(PRESETS)
    for s in PRESETS.values():
        assert s.source and s.source.startswith("https://huggingface.co/"), s.name
        assert s.parameters
    assert get_preset("Meta-Llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert get_preset("qwen2.5-7b").kv_heads == 4
    assert get_preset("llama-3.1-8b", bytes_per_element=1).bytes_per_element == 1
    with pytest.raises(ConfigError, match="unknown model 'gpt-9'"):
        get_preset("gpt-9")


def test_config_explicit_head_dim_wins_as_in_gemma2() -> None:
    g = load_config(CONFIGS / "gemma-2-27b.json")
    assert g.head_dim == 128  # not 4608 / 32 = 144
    assert (g.layers, g.kv_heads, g.sliding_window, g.layer_pattern) == (46, 16, 4096, ("local", "global"))
    assert kv_bytes(g, 8192) == kv_bytes(get_preset("gemma-2-27b"), 8192) == 2_315_255_808


def test_config_llama_and_mla() -> None:
    assert bytes_per_token(load_config(CONFIGS / "llama-3.1-8b.json")) == 131_072
    ds = load_config(CONFIGS / "deepseek-v3.json")
    assert ds.is_mla and bytes_per_token(ds) == 70_272
    assert bytes_per_token(load_config(CONFIGS / "llama-3.1-8b.json", bytes_per_element=1)) == 65_536


def test_config_rules() -> None:
    base = {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512}
    mha = shape_from_config(base)
    assert (mha.kv_heads, mha.head_dim, mha.bytes_per_element) == (8, 64, 2)
    fp32 = shape_from_config({**base, "torch_dtype": "float32"})  # served in 16-bit (vLLM --dtype auto)
    assert fp32.bytes_per_element == 2 and "float32" in (fp32.kv_dtype_note or "")
    assert shape_from_config({**base, "torch_dtype": "float32"}, bytes_per_element=4).bytes_per_element == 4
    off = shape_from_config({**base, "sliding_window": 128, "use_sliding_window": False})
    assert off.sliding_window is None
    typed = shape_from_config({**base, "sliding_window": 128,
                               "layer_types": ["sliding_attention", "full_attention"] * 2})
    assert typed.local_layers == 2 and typed.layer_kinds()[1] == "global"
    gemma3 = shape_from_config({**base, "num_hidden_layers": 12, "sliding_window": 128,
                                "sliding_window_pattern": 6})
    assert gemma3.local_layers == 10
    nested = shape_from_config({"torch_dtype": "float16", "text_config": {**base, "num_key_value_heads": 2}})
    assert nested.kv_heads == 2 and nested.bytes_per_element == 2
    with pytest.raises(ConfigError, match="not a multiple of num_attention_heads"):
        shape_from_config({**base, "hidden_size": 500})
    with pytest.raises(ConfigError, match="'num_hidden_layers' must be a positive integer"):
        shape_from_config({"num_attention_heads": 8, "hidden_size": 512})
    with pytest.raises(ConfigError, match="field 'torch_dtype': unknown dtype 'auto'.*--bytes-per-element"):
        shape_from_config({**base, "torch_dtype": "auto"})
    assert shape_from_config({**base, "torch_dtype": "auto"}, bytes_per_element=1).bytes_per_element == 1


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="no such file"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InputFormatError, match="not a JSON config"):
        load_config(bad)


def test_resolve_shape_takes_exactly_one_source() -> None:
    assert resolve_shape(layers=32, kv_heads=8, head_dim=128) == SPEC
    with pytest.raises(ConfigError, match="one way"):
        resolve_shape(model="llama-3.1-8b", layers=32)
    with pytest.raises(ConfigError, match="need all of"):
        resolve_shape(layers=32)
    assert resolve_shape(required=False) is None


# --------------------------------------------------------------------------- properties


shapes = st.builds(
    lambda layers, kv, hd, window, pattern, bpe: ModelShape(
        layers=layers, kv_heads=kv, head_dim=hd, bytes_per_element=bpe, sliding_window=window,
        layer_pattern=pattern if window else None),
    st.integers(1, 96), st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([64, 96, 128, 256]),
    st.one_of(st.none(), st.integers(1, 8192)),
    st.one_of(st.none(), st.just(("local", "global")), st.just(("local",) * 5 + ("global",))),
    st.sampled_from([0.5, 1, 2, 4]),
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(shapes, st.integers(0, 200_000), st.integers(0, 5000), st.one_of(st.none(), st.sampled_from([1, 16, 32])))
def test_kv_bytes_monotone_in_tokens(shape: ModelShape, tokens: int, extra: int, block: int | None) -> None:
    assert kv_bytes(shape, tokens, block_size=block) <= kv_bytes(shape, tokens + extra, block_size=block)
    assert kv_bytes(shape, tokens) <= tokens * bytes_per_token(shape)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.integers(1, 100), st.integers(1, 50), st.sampled_from([1, 2, 4, 8]), st.integers(0, 100_000))
def test_kv_bytes_monotone_in_layers(layers: int, more: int, kv: int, tokens: int) -> None:
    a = ModelShape(layers=layers, kv_heads=kv, head_dim=128)
    b = ModelShape(layers=layers + more, kv_heads=kv, head_dim=128)
    assert kv_bytes(a, tokens) <= kv_bytes(b, tokens)
    assert bytes_per_token(b) - bytes_per_token(a) == more * 2 * kv * 128 * 2


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.integers(1, 64), st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
def test_tensor_parallel_divides_and_replicates(layers: int, kv: int, tp: int) -> None:
    shape = ModelShape(layers=layers, kv_heads=kv, head_dim=128)
    per_gpu = bytes_per_token(shape, tensor_parallel=tp)
    if tp <= kv:
        assert per_gpu * tp == bytes_per_token(shape)  # split evenly, nothing lost
    else:
        assert per_gpu == bytes_per_token(shape, tensor_parallel=kv)  # one head per GPU, replicated
        assert per_gpu * tp > bytes_per_token(shape)


# --------------------------------------------------------------------------- CLI

runner = CliRunner()


def test_cli_kv_json_reproduces_profile_b() -> None:
    res = runner.invoke(app, ["kv", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                              "--bytes-per-element", "2", "--tokens", "8192", "--budget-gib", "8",
                              "--prompt-tokens", "7800", "--output-cap", "200", "--rate", "1",
                              "--time-in-service-s", "7.369", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key, value in {"bytes_per_token": 131_072, "bytes_for_tokens": GIB, "budget_tokens": 65_536,
                       "tokens_per_request": 8000, "max_concurrent_sequences": 8}.items():
        assert out[key] == value
    assert out["in_service"] == pytest.approx(7.369)
    assert out["utilization"] == pytest.approx(7.369 / 8)
    assert out["saturation_rate_per_s"] == pytest.approx(8 / 7.369)


def test_cli_kv_profile_a_from_stage_times() -> None:
    res = runner.invoke(app, ["kv", "--model", "llama-3.1-8b", "--budget-gib", "8", "--prompt-tokens", "1000",
                              "--output-cap", "200", "--rate", "1", "--prefill-s", "0.15", "--tpot-s", "0.03",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["max_concurrent_sequences"] == 54
    assert out["in_service"] == pytest.approx(6.12)
    assert "bytes_for_tokens" not in out  # no --tokens given


def test_cli_kv_config_gpu_memory_and_tables() -> None:
    res = runner.invoke(app, ["kv", "--config", str(CONFIGS / "llama-3.1-8b.json"), "--gpu-memory-gib", "80",
                              "--weights-gib", "16", "--overhead-gib", "4", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["budget_tokens"] == 52 * 8192
    res = runner.invoke(app, ["kv", "--model", "gemma-2-9b", "--budget-gib", "40", "--prompt-tokens", "7800",
                              "--output-cap", "200"])
    assert res.exit_code == 0 and "window-aware" in res.output
    listing = runner.invoke(app, ["kv", "--list-models", "--json"])
    assert {m["name"] for m in json.loads(listing.output)} == set(PRESETS)
    assert "deepseek-v3" in runner.invoke(app, ["kv", "--list-models"]).output


def test_cli_kv_errors_are_one_line() -> None:
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "servebench", "kv", "--layers", "32"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: explicit shapes need all of --layers, --kv-heads and --head-dim"


def test_no_memory_message_is_in_gib_with_the_fix() -> None:
    with pytest.raises(ConfigError) as no_room:  # a 70B model's weights on one 80 GiB GPU
        kv_budget_bytes(80 * GIB, memory_utilization=0.9, weights_bytes=141_100_000_000, tensor_parallel=1)
    text = str(no_room.value)
    assert text.startswith("no memory left for the KV cache: 80.0 GiB x 90% usable = 72.0 GiB, but the weights "
                           "take 131.4 GiB per GPU, leaving -59.4 GiB.")
    assert "Fix: raise tensor parallelism to 2" in text and "bytes" not in text.replace("bytes per parameter", "")
    with pytest.raises(ConfigError, match="The overhead alone takes the usable memory"):
        kv_budget_bytes(16 * GIB, memory_utilization=0.5, weights_bytes=GIB, overhead_bytes=9 * GIB)
