"""``servebench kv``: KV-cache bytes, the tokens a budget holds, and the concurrency limit."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from servebench.capacity.kv import (
    GIB,
    KVReport,
    ModelShape,
    analyze,
    bytes_per_token,
    dtype_bytes,
    given_dtype_note,
    kv_budget_bytes,
    weight_bytes,
)
from servebench.capacity.model_presets import PRESETS, resolve_shape
from servebench.cli.core import app, console, emit_json
from servebench.errors import ConfigError
from servebench.formatting import fmt
from servebench.output.safetext import safe_markup


def _shape_row(s: ModelShape) -> list[str]:
    kinds = []
    if s.is_mla:
        kinds.append(f"MLA {s.kv_lora_rank}+{s.qk_rope_head_dim}")
    elif s.num_attention_heads and s.num_attention_heads != s.kv_heads:
        kinds.append(f"GQA {s.num_attention_heads}q/{s.kv_heads}kv")
    else:
        kinds.append("MHA")
    if s.sliding_window:
        kinds.append(f"window {s.sliding_window} on {s.local_layers}/{s.layers} layers")
    return [safe_markup(s.name or "-"), str(s.layers), str(s.kv_heads), str(s.head_dim), ", ".join(kinds),
            f"{bytes_per_token(s):,}"]


def _list_models(as_json: bool) -> None:
    if as_json:
        emit_json([{**s.model_dump(exclude_none=True), "bytes_per_token": bytes_per_token(s)} for s in PRESETS.values()])
        return
    t = Table(title="Model presets (KV elements bf16)")
    for col in ("name", "layers", "kv heads", "head dim", "attention", "bytes/token"):
        t.add_column(col, justify="right" if col in ("layers", "kv heads", "head dim", "bytes/token") else "left",
                     no_wrap=col == "name")
    for s in PRESETS.values():
        t.add_row(*_shape_row(s))
    console.print(t)
    console.print("Sources:")
    for s in PRESETS.values():
        console.print(safe_markup(f"  {s.name}: {s.source}"), soft_wrap=True)


def _print_report(r: KVReport, dtype_note: str) -> None:
    s = r.shape
    if s.is_mla:
        formula = f"{s.layers} layers x ({s.kv_lora_rank} + {s.qk_rope_head_dim}) x {fmt(s.bytes_per_element)} B"
    else:
        formula = (f"2 x {s.layers} layers x {max(1, s.kv_heads // r.tensor_parallel)} KV heads x {s.head_dim} "
                   f"x {fmt(s.bytes_per_element)} B")
    t = Table(title=f"KV cache: {safe_markup(s.name or 'model')}" + (f" (per GPU, tp={r.tensor_parallel})" if r.tensor_parallel > 1 else ""))
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("how")
    t.add_row("KV element", f"{fmt(s.bytes_per_element)} B", safe_markup(dtype_note))
    t.add_row("bytes per token", f"{r.bytes_per_token:,}", formula)
    if s.sliding_window:
        t.add_row("sliding window", f"{s.sliding_window:,}", f"{s.local_layers} of {s.layers} layers keep at most this")
    if r.bytes_for_tokens is not None:
        t.add_row(f"bytes for {r.tokens:,} tokens", f"{r.bytes_for_tokens:,}", f"{r.bytes_for_tokens / GIB:.4g} GiB")
    if r.budget_tokens is not None and r.budget_bytes is not None:
        t.add_row("tokens in budget", f"{r.budget_tokens:,}", f"{r.budget_bytes / GIB:.4g} GiB / bytes per token")
    if r.tokens_per_request is not None:
        how = "prompt + full output cap" if r.policy == "reserve" else f"prompt + expected output, in blocks of {r.block_size}"
        t.add_row("tokens per request", f"{r.tokens_per_request:,}", f"{r.policy}: {how}")
    if r.max_concurrent_sequences is not None:
        how = ("floor(budget bytes / KV bytes of one request), window-aware" if s.local_layers
               else "floor(budget tokens / tokens per request)")
        t.add_row("max concurrent sequences", str(r.max_concurrent_sequences), how)
    if r.in_service is not None:
        t.add_row("in service (Little's law)", fmt(r.in_service), f"{fmt(r.rate_per_s)}/s x {fmt(r.time_in_service_s)} s")
    if r.utilization is not None:
        t.add_row("utilization of the limit", fmt(r.utilization), "in service / max concurrent")
    if r.saturation_rate_per_s is not None:
        t.add_row("saturation rate", f"{fmt(r.saturation_rate_per_s)}/s", "max concurrent / time in service")
    console.print(t)


@app.command("kv")
def kv_command(
    model: Optional[str] = typer.Option(None, "--model", help="Preset name (see --list-models)."),
    config: Optional[Path] = typer.Option(None, "--config", help="A Hugging Face config.json."),
    layers: Optional[int] = typer.Option(None, help="Layers (explicit shape)."),
    kv_heads: Optional[int] = typer.Option(None, help="KV heads, not query heads (explicit shape)."),
    head_dim: Optional[int] = typer.Option(None, help="Head dimension (explicit shape)."),
    bytes_per_element: Optional[float] = typer.Option(None, help="Bytes per cached element (default 2, or the config's dtype)."),
    kv_dtype: Optional[str] = typer.Option(None, help="KV dtype name instead of bytes: fp32, bf16, fp16, fp8."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel GPUs; bytes are per GPU."),
    tokens: Optional[int] = typer.Option(None, help="Cached tokens of one sequence to size."),
    budget_gib: Optional[float] = typer.Option(None, help="KV budget per GPU, GiB."),
    gpu_memory_gib: Optional[float] = typer.Option(None, help="Device memory, GiB (budget = memory x util - weights - overhead)."),
    memory_utilization: float = typer.Option(0.9, help="Share of device memory the runtime may use."),
    weights_gib: Optional[float] = typer.Option(None, help="Weight memory per GPU, GiB (default: parameters x bytes / tp)."),
    weight_bytes_per_param: float = typer.Option(2.0, help="Bytes per weight parameter."),
    overhead_gib: float = typer.Option(0.0, help="Activations, buffers, CUDA graphs, GiB."),
    prompt_tokens: Optional[int] = typer.Option(None, help="Prompt tokens per request."),
    output_cap: Optional[int] = typer.Option(None, help="Output token cap per request."),
    policy: str = typer.Option("reserve", help="Admission policy: reserve (prompt + cap) or paged."),
    expected_output_tokens: Optional[int] = typer.Option(None, help="Paged policy: expected output length (default: the cap)."),
    block_size: int = typer.Option(16, help="Paged block size, tokens."),
    rate: Optional[float] = typer.Option(None, help="Arrival rate, requests/s."),
    time_in_service_s: Optional[float] = typer.Option(None, help="Time one request is in service, s."),
    prefill_s: Optional[float] = typer.Option(None, help="Prefill time, s (with --tpot-s instead of --time-in-service-s)."),
    tpot_s: Optional[float] = typer.Option(None, help="Request TPOT, s."),
    output_tokens: Optional[int] = typer.Option(None, help="Output tokens N for prefill + (N - 1) x TPOT (default: the cap)."),
    list_models: bool = typer.Option(False, "--list-models", help="Print the model presets and exit."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Estimate KV-cache memory from a model's shape and turn a budget into a concurrency limit."""
    if list_models:
        _list_models(as_json)
        return
    if kv_dtype is not None:
        if bytes_per_element is not None:
            raise ConfigError("give --bytes-per-element or --kv-dtype, not both")
        bytes_per_element = dtype_bytes(kv_dtype)
    shape = resolve_shape(model=model, config=str(config) if config else None, layers=layers,
                          kv_heads=kv_heads, head_dim=head_dim, bytes_per_element=bytes_per_element)
    assert shape is not None
    budget = None
    if budget_gib is not None and gpu_memory_gib is not None:
        raise ConfigError("give --budget-gib or --gpu-memory-gib, not both")
    if budget_gib is not None:
        budget = int(budget_gib * GIB)
    elif gpu_memory_gib is not None:
        if weights_gib is not None:
            weights = int(weights_gib * GIB)
        elif shape.parameters is not None:
            weights = weight_bytes(shape.parameters, weight_bytes_per_param, tensor_parallel=tp)
        else:
            raise ConfigError(f"{shape.name or 'this shape'} has no parameter count: give --weights-gib")
        budget = kv_budget_bytes(gpu_memory_gib * GIB, memory_utilization=memory_utilization,
                                 weights_bytes=weights, overhead_bytes=overhead_gib * GIB, tensor_parallel=tp)
    w = time_in_service_s
    if w is None and prefill_s is not None and tpot_s is not None:
        n = output_tokens if output_tokens is not None else output_cap
        if n is None:
            raise ConfigError("give --output-tokens (or --output-cap) to compute prefill + (N - 1) x TPOT")
        from servebench.capacity.kv import time_in_service_s as tis
        w = tis(prefill_s, tpot_s, n)
    report = analyze(shape, tensor_parallel=tp, tokens=tokens, budget_bytes=budget, prompt_tokens=prompt_tokens,
                     output_cap=output_cap, policy=policy,  # type: ignore[arg-type]
                     expected_output_tokens=expected_output_tokens, block_size=block_size,
                     rate_per_s=rate, time_in_service_s=w)
    dtype_note = shape.kv_dtype_note or (given_dtype_note(shape.bytes_per_element) if bytes_per_element is not None
                                         else "bf16, 2 bytes: the 16-bit dtype engines serve in; --kv-dtype overrides")
    if as_json:
        emit_json(report.model_dump(mode="json", exclude_none=True) | {"kv_dtype": dtype_note})
        return
    _print_report(report, dtype_note)
