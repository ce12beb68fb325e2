"""Shapes of popular open-weight models, each with the source of its numbers.

Numbers come from each model's Hugging Face ``config.json`` (the ``source`` URL). Parameter
counts are the checkpoints' published totals, rounded; they only feed the weight estimate.
KV elements default to bf16 (2 bytes); pass another ``bytes_per_element`` for fp8 or fp32 caches.
"""

from __future__ import annotations

from servebench.capacity.kv import ModelShape
from servebench.errors import ConfigError


def _hf(repo: str, note: str = "") -> str:
    url = f"https://huggingface.co/{repo}/blob/main/config.json"
    return f"{url} ({note})" if note else url


PRESETS: dict[str, ModelShape] = {s.name: s for s in (  # type: ignore[misc]
    ModelShape(name="llama-3.1-8b", source=_hf("meta-llama/Llama-3.1-8B"),
               layers=32, kv_heads=8, head_dim=128, num_attention_heads=32, hidden_size=4096,
               parameters=8_030_000_000),
    ModelShape(name="llama-3.1-70b", source=_hf("meta-llama/Llama-3.1-70B"),
               layers=80, kv_heads=8, head_dim=128, num_attention_heads=64, hidden_size=8192,
               parameters=70_550_000_000),
    ModelShape(name="llama-3.1-405b", source=_hf("meta-llama/Llama-3.1-405B"),
               layers=126, kv_heads=8, head_dim=128, num_attention_heads=128, hidden_size=16384,
               parameters=405_850_000_000),
    ModelShape(name="mistral-7b-v0.1", source=_hf("mistralai/Mistral-7B-v0.1", "sliding_window 4096 on every layer"),
               layers=32, kv_heads=8, head_dim=128, num_attention_heads=32, hidden_size=4096,
               sliding_window=4096, parameters=7_240_000_000),
    ModelShape(name="mixtral-8x7b", source=_hf("mistralai/Mixtral-8x7B-v0.1", "sliding_window null"),
               layers=32, kv_heads=8, head_dim=128, num_attention_heads=32, hidden_size=4096,
               parameters=46_700_000_000),
    ModelShape(name="qwen2.5-7b", source=_hf("Qwen/Qwen2.5-7B", "use_sliding_window false"),
               layers=28, kv_heads=4, head_dim=128, num_attention_heads=28, hidden_size=3584,
               parameters=7_620_000_000),
    ModelShape(name="qwen2.5-72b", source=_hf("Qwen/Qwen2.5-72B", "use_sliding_window false"),
               layers=80, kv_heads=8, head_dim=128, num_attention_heads=64, hidden_size=8192,
               parameters=72_710_000_000),
    ModelShape(name="gemma-2-9b", source=_hf("google/gemma-2-9b", "head_dim 256 explicit; even layers local, window 4096"),
               layers=42, kv_heads=8, head_dim=256, num_attention_heads=16, hidden_size=3584,
               sliding_window=4096, layer_pattern=("local", "global"), parameters=9_240_000_000),
    ModelShape(name="gemma-2-27b", source=_hf("google/gemma-2-27b", "head_dim 128 explicit; even layers local, window 4096"),
               layers=46, kv_heads=16, head_dim=128, num_attention_heads=32, hidden_size=4608,
               sliding_window=4096, layer_pattern=("local", "global"), parameters=27_230_000_000),
    ModelShape(name="deepseek-v3", source=_hf("deepseek-ai/DeepSeek-V3", "MLA: kv_lora_rank 512 + qk_rope_head_dim 64"),
               layers=61, kv_heads=128, head_dim=192, num_attention_heads=128, hidden_size=7168,
               kv_lora_rank=512, qk_rope_head_dim=64, parameters=671_000_000_000),
    ModelShape(name="phi-3-mini-4k", source=_hf("microsoft/Phi-3-mini-4k-instruct",
                                                "config lists sliding_window 2047; counted here as full "
                                                "attention, the upper bound"),
               layers=32, kv_heads=32, head_dim=96, num_attention_heads=32, hidden_size=3072,
               parameters=3_820_000_000),
)}

ALIASES: dict[str, str] = {
    "llama-3.1-8b-instruct": "llama-3.1-8b", "llama-3.1-70b-instruct": "llama-3.1-70b",
    "llama-3.1-405b-instruct": "llama-3.1-405b", "mistral-7b": "mistral-7b-v0.1",
    "mixtral-8x7b-v0.1": "mixtral-8x7b", "qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen2.5-72b-instruct": "qwen2.5-72b", "phi-3-mini": "phi-3-mini-4k",
    "phi-3-mini-4k-instruct": "phi-3-mini-4k",
}


def get_preset(name: str, *, bytes_per_element: float | None = None) -> ModelShape:
    """Return a preset shape by name (case-insensitive, ``org/`` prefix ignored), optionally re-typed."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    key = ALIASES.get(key, key)
    if key not in PRESETS:
        raise ConfigError(f"unknown model {name!r}; presets: {', '.join(PRESETS)}")
    shape = PRESETS[key]
    if bytes_per_element is not None:
        shape = ModelShape(**{**shape.model_dump(), "bytes_per_element": bytes_per_element})
    return shape


def resolve_shape(*, model: str | None = None, config: str | None = None, layers: int | None = None,
                  kv_heads: int | None = None, head_dim: int | None = None,
                  bytes_per_element: float | None = None, required: bool = True) -> ModelShape | None:
    """Return a shape from exactly one of: a preset name, a config.json path, or explicit numbers."""
    explicit = [v for v in (layers, kv_heads, head_dim) if v is not None]
    given = sum([model is not None, config is not None, bool(explicit)])
    if given > 1:
        raise ConfigError("give the model shape one way: --model, --config, or --layers/--kv-heads/--head-dim")
    if model is not None:
        return get_preset(model, bytes_per_element=bytes_per_element)
    if config is not None:
        from servebench.capacity.hf_config import load_config
        return load_config(config, bytes_per_element=bytes_per_element)
    if explicit:
        if len(explicit) != 3:
            raise ConfigError("explicit shapes need all of --layers, --kv-heads and --head-dim")
        try:
            return ModelShape(layers=layers, kv_heads=kv_heads, head_dim=head_dim,  # type: ignore[arg-type]
                              bytes_per_element=2 if bytes_per_element is None else bytes_per_element)
        except ValueError as exc:
            raise ConfigError(f"bad model shape: {exc}") from None
    if required:
        raise ConfigError("no model shape: give --model NAME, --config config.json, "
                          "or --layers/--kv-heads/--head-dim")
    return None
