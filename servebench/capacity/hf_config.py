"""Read a model's KV shape from a Hugging Face ``config.json``.

Rules, in order: a multimodal config's ``text_config`` is used when present; ``head_dim`` wins
when given (Gemma-2's is not hidden_size / heads), else hidden_size / num_attention_heads;
``num_key_value_heads`` defaults to the query heads (plain multi-head attention); MLA configs
(``kv_lora_rank``) cache one latent per layer; a ``sliding_window`` is honoured unless
``use_sliding_window`` is false, on the layers named by ``layer_types`` when given, else by the
model family (Gemma-2: even layers local; Gemma-3: ``sliding_window_pattern``; Qwen2: layers
from ``max_window_layers`` on), else on every layer (Mistral).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from servebench.capacity import kv
from servebench.capacity.documents import check_values, read_json
from servebench.capacity.kv import LayerKind, ModelShape, dtype_bytes, given_dtype_note, heads_problem
from servebench.errors import ConfigError, InputFormatError

SERVED_BYTES = 2  # 16-bit: what an engine serves (and caches) a float32 checkpoint in
# Largest value each integer field of a config may hold: ModelShape's bounds, and for the parameter
# estimate about 8x the largest public model's (Llama-3.1-405B: intermediate 53,248; vocabularies of
# 256k; DeepSeek-V3: 256 routed experts, 8 per token)
CONFIG_BOUNDS: dict[str, int] = {
    "num_hidden_layers": kv.MAX_LAYERS, "num_attention_heads": kv.MAX_HEADS, "num_key_value_heads": kv.MAX_HEADS,
    "head_dim": kv.MAX_HEAD_DIM, "hidden_size": kv.MAX_HIDDEN_SIZE, "kv_lora_rank": kv.MAX_LORA_RANK,
    "qk_nope_head_dim": kv.MAX_HEAD_DIM, "qk_rope_head_dim": kv.MAX_HEAD_DIM,
    "intermediate_size": 1_048_576, "moe_intermediate_size": 1_048_576, "vocab_size": 16_777_216,
    "num_local_experts": 65_536, "n_routed_experts": 65_536, "num_experts_per_tok": 65_536,
    "n_shared_experts": 65_536, "first_k_dense_replace": kv.MAX_LAYERS,
}


def config_int(cfg: Mapping[str, Any], key: str, source: str, *, minimum: int = 1) -> int:
    """Return an integer field of a config, at least ``minimum`` and at most its ``CONFIG_BOUNDS`` entry.

    >>> config_int({"num_hidden_layers": 10**18}, "num_hidden_layers", "config.json")
    Traceback (most recent call last):
    ...
    servebench.errors.ConfigError: config.json: field 'num_hidden_layers' is 1,000,000,000,000,000,000; at most 1,024 (docs/kv.md: bounds well past every public model)
    """
    value = cfg.get(key)
    bound = CONFIG_BOUNDS.get(key)
    if bound is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and value > bound:
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        raise ConfigError(f"{source}: field {key!r} is {shown}; at most {bound:,} (docs/kv.md: bounds well past "
                          "every public model)")
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise ConfigError(f"{source}: field {key!r} must be {what}, got {value!r}")
    return value



def kv_dtype(cfg: Mapping[str, Any], source: str) -> tuple[float, str]:
    """Return the KV element size a config implies when served, and why (see the module docstring).

    >>> kv_dtype({"torch_dtype": "float32"}, "c.json")
    (2, 'bf16, 2 bytes: the checkpoint is float32 (torch_dtype), and serving engines run float32 checkpoints in 16-bit (vLLM --dtype auto), caching KV in it; --kv-dtype overrides')
    >>> kv_dtype({"torch_dtype": "bfloat16"}, "c.json")[0]
    2
    """
    key = "torch_dtype" if cfg.get("torch_dtype") else "dtype"
    dt = cfg.get(key)
    if not dt:
        return SERVED_BYTES, "bf16, 2 bytes: the config names no torch_dtype, and engines serve in 16-bit; --kv-dtype overrides"
    try:
        stored = dtype_bytes(str(dt))
    except ConfigError as exc:
        raise ConfigError(f"{source}: field {key!r}: {exc}; give the KV element size "
                          "(--bytes-per-element or --kv-dtype)") from None
    if stored > SERVED_BYTES:
        return SERVED_BYTES, (f"bf16, 2 bytes: the checkpoint is {dt} ({key}), and serving engines run float32 "
                              "checkpoints in 16-bit (vLLM --dtype auto), caching KV in it; --kv-dtype overrides")
    if stored < SERVED_BYTES:  # quantized storage; activations, and so the KV cache, stay 16-bit
        return SERVED_BYTES, (f"bf16, 2 bytes: the checkpoint stores {dt} ({key}) but engines compute and cache KV "
                              "in 16-bit unless told otherwise (vLLM --kv-cache-dtype auto); --kv-dtype fp8 for an "
                              "fp8 cache")
    return stored, f"{dt}, 2 bytes: the checkpoint's {key}, which engines serve and cache KV in; --kv-dtype overrides"


def _layer_pattern(cfg: Mapping[str, Any], layers: int, source: str) -> tuple[LayerKind, ...] | None:
    """Return which layers are local, or None for 'every layer' (a plain sliding window)."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise ConfigError(f"{source}: layer_types has {len(types)} entries for {layers} layers")
        return tuple("local" if "sliding" in str(t) or "local" in str(t) else "global" for t in types)
    model_type = str(cfg.get("model_type", ""))
    if model_type == "gemma2":
        return ("local", "global")
    every = cfg.get("sliding_window_pattern")
    if isinstance(every, int) and every > 1:
        return ("local",) * (every - 1) + ("global",)
    if model_type.startswith("qwen2") and isinstance(cfg.get("max_window_layers"), int):
        first_local = cfg["max_window_layers"]
        return tuple("local" if i >= first_local else "global" for i in range(layers))
    return None


def shape_from_config(cfg: Mapping[str, Any], *, name: str | None = None, source: str | None = None,
                      bytes_per_element: float | None = None) -> ModelShape:
    """Return the KV shape a config.json describes; KV dtype from ``torch_dtype`` unless given."""
    where = source or name or "config.json"
    if not isinstance(cfg, Mapping):
        raise InputFormatError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    if isinstance(cfg.get("text_config"), Mapping):
        outer_dtype = cfg.get("torch_dtype")
        cfg = dict(cfg["text_config"])
        cfg.setdefault("torch_dtype", outer_dtype)
    layers = config_int(cfg, "num_hidden_layers", where)
    heads = config_int(cfg, "num_attention_heads", where)
    kv_heads = config_int(cfg, "num_key_value_heads", where) if cfg.get("num_key_value_heads") is not None else heads
    problem = heads_problem(heads, kv_heads, ("num_attention_heads", "num_key_value_heads"))
    if problem:
        raise ConfigError(f"{where}: {problem}")
    rope = config_int(cfg, "qk_rope_head_dim", where, minimum=0) if cfg.get("qk_rope_head_dim") is not None else 0
    if cfg.get("kv_lora_rank") is not None and cfg.get("qk_nope_head_dim") is not None:
        head_dim = config_int(cfg, "qk_nope_head_dim", where) + rope
    elif cfg.get("head_dim") is not None:
        head_dim = config_int(cfg, "head_dim", where)
    else:
        hidden = config_int(cfg, "hidden_size", where)
        if hidden % heads:
            raise ConfigError(f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; "
                              "give head_dim")
        head_dim = hidden // heads
    if bytes_per_element is None:
        bytes_per_element, note = kv_dtype(cfg, where)
    else:
        note = given_dtype_note(bytes_per_element)
    mla: dict[str, int] = {}
    if cfg.get("kv_lora_rank") is not None:
        mla = {"kv_lora_rank": config_int(cfg, "kv_lora_rank", where), "qk_rope_head_dim": rope}
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False or not isinstance(window, int) or isinstance(window, bool):
        window = None
    pattern = _layer_pattern(cfg, layers, where) if window is not None else None
    if pattern is not None and "local" not in pattern:
        window, pattern = None, None
    hidden_size = config_int(cfg, "hidden_size", where) if isinstance(cfg.get("hidden_size"), int) else None
    try:
        return ModelShape(name=name or cfg.get("_name_or_path") or cfg.get("model_type"), source=source,
                          layers=layers, kv_heads=kv_heads, head_dim=head_dim,
                          bytes_per_element=bytes_per_element, num_attention_heads=heads,
                          hidden_size=hidden_size, sliding_window=window, layer_pattern=pattern,
                          kv_dtype_note=note, **mla)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {exc.errors()[0]['msg']}") from None


def read_config(path: str | Path) -> Any:
    """Read a config.json file strictly (see the module docstring): its parsed JSON, every number finite."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(f"{p}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(f"{p}: not a JSON config (not UTF-8 text at byte {exc.start})") from None
    cfg = read_json(text, str(p), what="a JSON config", error=InputFormatError)
    check_values(cfg, str(p))
    return cfg


def load_config(path: str | Path, *, bytes_per_element: float | None = None) -> ModelShape:
    """Read a config.json file and return its KV shape."""
    p = Path(path)
    return shape_from_config(read_config(p), name=p.parent.name if p.name == "config.json" else p.stem,
                             source=str(p), bytes_per_element=bytes_per_element)
