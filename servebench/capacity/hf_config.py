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

import json
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from servebench.errors import ConfigError, InputFormatError
from servebench.capacity.kv import LayerKind, ModelShape, dtype_bytes


def _int(cfg: Mapping[str, Any], key: str, source: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{source}: field {key!r} must be a positive integer, got {value!r}")
    return value


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
    layers = _int(cfg, "num_hidden_layers", where)
    heads = _int(cfg, "num_attention_heads", where)
    kv_heads = _int(cfg, "num_key_value_heads", where) if cfg.get("num_key_value_heads") is not None else heads
    if cfg.get("kv_lora_rank") is not None and cfg.get("qk_nope_head_dim") is not None:
        head_dim = _int(cfg, "qk_nope_head_dim", where) + int(cfg.get("qk_rope_head_dim") or 0)
    elif cfg.get("head_dim") is not None:
        head_dim = _int(cfg, "head_dim", where)
    else:
        hidden = _int(cfg, "hidden_size", where)
        if hidden % heads:
            raise ConfigError(f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; "
                              "give head_dim")
        head_dim = hidden // heads
    if bytes_per_element is None:
        key = "torch_dtype" if cfg.get("torch_dtype") else "dtype"
        dt = cfg.get(key) or "bfloat16"
        try:
            bytes_per_element = dtype_bytes(str(dt))
        except ConfigError as exc:
            raise ConfigError(f"{where}: field {key!r}: {exc}; give the KV element size "
                              "(--bytes-per-element or --kv-dtype)") from None
    mla: dict[str, int] = {}
    if cfg.get("kv_lora_rank") is not None:
        mla = {"kv_lora_rank": _int(cfg, "kv_lora_rank", where),
               "qk_rope_head_dim": int(cfg.get("qk_rope_head_dim") or 0)}
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False or not isinstance(window, int) or isinstance(window, bool):
        window = None
    pattern = _layer_pattern(cfg, layers, where) if window is not None else None
    if pattern is not None and "local" not in pattern:
        window, pattern = None, None
    hidden_size = cfg.get("hidden_size") if isinstance(cfg.get("hidden_size"), int) else None
    try:
        return ModelShape(name=name or cfg.get("_name_or_path") or cfg.get("model_type"), source=source,
                          layers=layers, kv_heads=kv_heads, head_dim=head_dim,
                          bytes_per_element=bytes_per_element, num_attention_heads=heads,
                          hidden_size=hidden_size, sliding_window=window, layer_pattern=pattern, **mla)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {exc.errors()[0]['msg']}") from None


def load_config(path: str | Path, *, bytes_per_element: float | None = None) -> ModelShape:
    """Read a config.json file and return its KV shape."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(f"{p}: no such file")
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFormatError(f"{p}: not a JSON config ({exc})") from None
    return shape_from_config(cfg, name=p.parent.name if p.name == "config.json" else p.stem,
                             source=str(p), bytes_per_element=bytes_per_element)
