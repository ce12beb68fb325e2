"""KV-cache memory from a model's shape, and the limit it puts on concurrent sequences.

The spec's estimate for an ordinary decoder with full attention::

    KV bytes = 2 x layers x KV_heads x head_dim x cached_tokens x bytes_per_element

and on top of it the accounting that real models need:

- **GQA/MQA**: only KV heads count, never query heads.
- **MLA** (DeepSeek-V2/V3): each layer caches one compressed latent of ``kv_lora_rank`` plus the
  decoupled RoPE key of ``qk_rope_head_dim`` per token, with no factor 2 (keys and values are
  both rebuilt from the latent). The latent is not split by heads, so every tensor-parallel GPU
  holds all of it.
- **Sliding windows**: a local layer stores at most ``sliding_window`` tokens of a sequence.
  ``layer_pattern`` says which layers are local (Gemma-2 alternates local and global).
- **Tensor parallelism**: KV heads per GPU = max(1, kv_heads // tp); when tp exceeds the KV
  heads, heads are replicated, so per-GPU bytes stop falling. All byte counts are per GPU.
- **Paged blocks**: a sequence holds whole blocks, so its tokens round up to ``block_size``.

Shapes are bounded well past every public model (``MAX_LAYERS`` and the rest, ``docs/kv.md``), so a
hostile config gets one line, not a MemoryError; query heads must be a whole multiple of the KV
heads (grouped-query attention shares each KV head among a group of query heads).

Budgets are bytes per GPU. ``budget_tokens`` counts tokens at the full per-token rate (exact for
full attention); ``max_sequences_in_budget`` is window-aware and is what to use for local layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from servebench.capacity.documents import as_tuple
from servebench.errors import ConfigError

GIB = 2**30
DEFAULT_BLOCK_SIZE = 16

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4, "float32": 4, "float": 4,
    "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8": 1, "int8": 1,
    "int4": 0.5, "fp4": 0.5,
}

# Bounds on a model's shape: each about 8x the largest public model's (Llama-3.1-405B: 126 layers,
# 128 query heads, width 16,384; DeepSeek-V3: 128 KV heads, MLA rank 512; Gemma: head_dim 256).
MAX_LAYERS = 1_024
MAX_HEADS = 1_024  # query heads and KV heads
MAX_HEAD_DIM = 4_096
MAX_HIDDEN_SIZE = 131_072
MAX_LORA_RANK = 65_536
MAX_PARAMETERS = 100_000_000_000_000  # 100T, 50x the largest public checkpoints
MAX_BYTES_PER_ELEMENT = 8  # fp64

Policy = Literal["reserve", "paged"]  # KV admission policy (see tokens_per_request)
POLICIES: tuple[str, ...] = ("reserve", "paged")
LayerKind = Literal["global", "local"]


def dtype_bytes(name: str) -> float:
    """Return bytes per element for a dtype name (``bf16``, ``float16``, ``fp8``...).

    >>> dtype_bytes("bfloat16"), dtype_bytes("fp8")
    (2, 1)
    """
    key = name.strip().lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {name!r}; expected one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[key]


def given_dtype_note(bytes_per_element: float) -> str:
    """Say that a KV element size was given, not read (``ModelShape.kv_dtype_note``).

    >>> given_dtype_note(1)
    '1 byte an element, as given (--kv-dtype or --bytes-per-element)'
    """
    unit = "byte" if bytes_per_element == 1 else "bytes"
    return f"{bytes_per_element:g} {unit} an element, as given (--kv-dtype or --bytes-per-element)"


class ModelShape(BaseModel):
    """The numbers of a model that decide its KV-cache size (and optionally its weights)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(None, description="Model name.")
    source: str | None = Field(None, description="Where the numbers come from (URL or file).")
    layers: int = Field(ge=1, le=MAX_LAYERS, description="Decoder layers that keep a KV cache.")
    kv_heads: int = Field(ge=1, le=MAX_HEADS, description="Key/value heads per layer (not query heads).")
    head_dim: int = Field(ge=1, le=MAX_HEAD_DIM, description="Dimension of one head.")
    bytes_per_element: float = Field(2, gt=0, le=MAX_BYTES_PER_ELEMENT,
                                     description="Bytes per cached element: 4 fp32, 2 bf16/fp16, 1 fp8.")
    num_attention_heads: int | None = Field(None, ge=1, le=MAX_HEADS,
                                            description="Query heads: a whole multiple of kv_heads.")
    hidden_size: int | None = Field(None, ge=1, le=MAX_HIDDEN_SIZE, description="Model width (informational).")
    parameters: int | None = Field(None, ge=1, le=MAX_PARAMETERS, description="Parameter count, for the weight "
                                                                              "estimate.")
    kv_lora_rank: int | None = Field(None, ge=1, le=MAX_LORA_RANK,
                                     description="MLA latent size; set with qk_rope_head_dim.")
    qk_rope_head_dim: int | None = Field(None, ge=0, le=MAX_HEAD_DIM, description="MLA decoupled RoPE key size.")
    sliding_window: int | None = Field(None, ge=1, description="Tokens a local layer keeps; None: all global.")
    kv_dtype_note: str | None = Field(None, description="Which KV element type was used and why (a config's "
                                                         "torch_dtype under the serving rule, or an override).")
    layer_pattern: Annotated[tuple[LayerKind, ...], BeforeValidator(as_tuple)] | None = Field(
        None, max_length=MAX_LAYERS, description="Kinds of layers, repeated cyclically over the layers (e.g. local, global); "
                          "None with a sliding_window: every layer is local.")

    @model_validator(mode="after")
    def _check(self) -> "ModelShape":
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError("MLA needs both kv_lora_rank and qk_rope_head_dim (or neither)")
        problem = heads_problem(self.num_attention_heads, self.kv_heads)
        if problem:
            raise ValueError(problem)
        if self.layer_pattern is not None:
            if len(self.layer_pattern) == 0:
                raise ValueError("layer_pattern must not be empty")
            if "local" in self.layer_pattern and self.sliding_window is None:
                raise ValueError("layer_pattern names local layers but sliding_window is not set")
        return self

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def layer_kinds(self) -> list[LayerKind]:
        """Return the kind of every layer, in order."""
        if self.sliding_window is None:
            return ["global"] * self.layers
        if self.layer_pattern is None:
            return ["local"] * self.layers
        p = self.layer_pattern
        return [p[i % len(p)] for i in range(self.layers)]

    @property
    def local_layers(self) -> int:
        """Number of sliding-window layers."""
        return self.layer_kinds().count("local")

    @property
    def global_layers(self) -> int:
        """Number of full-attention layers."""
        return self.layers - self.local_layers


def heads_problem(query_heads: int | None, kv_heads: int, names: tuple[str, str] = ("num_attention_heads",
                                                                                    "kv_heads")) -> str | None:
    """Say why ``kv_heads`` cannot serve ``query_heads`` (None: they can, or the query heads are unknown).

    Grouped-query attention gives each KV head a group of query heads: as many KV heads as query
    heads (multi-head), fewer that divide them (GQA, MQA), never more.

    >>> heads_problem(32, 7)
    'num_attention_heads 32 is not a multiple of kv_heads 7: each KV head serves a whole group of query heads'
    >>> heads_problem(8, 32), heads_problem(32, 8)
    ('kv_heads 32 is more than num_attention_heads 8: each KV head serves at least one query head', None)
    """
    q, kv = names
    if query_heads is None:
        return None
    if kv_heads > query_heads:
        return f"{kv} {kv_heads} is more than {q} {query_heads}: each KV head serves at least one query head"
    if query_heads % kv_heads:
        return f"{q} {query_heads} is not a multiple of {kv} {kv_heads}: each KV head serves a whole group of query heads"
    return None


def kv_heads_per_gpu(shape: ModelShape, tensor_parallel: int = 1) -> int:
    """Return KV heads stored on each GPU: max(1, kv_heads // tp), replicated beyond that.

    Raises ConfigError when neither divides the other (runtimes refuse such splits).

    >>> kv_heads_per_gpu(ModelShape(layers=1, kv_heads=8, head_dim=1), 16)
    1
    """
    if tensor_parallel < 1:
        raise ConfigError(f"tensor_parallel must be at least 1, got {tensor_parallel}")
    h = shape.kv_heads
    if shape.is_mla:
        return h
    if tensor_parallel <= h and h % tensor_parallel:
        raise ConfigError(f"tensor_parallel {tensor_parallel} does not divide kv_heads {h}")
    if tensor_parallel > h and tensor_parallel % h:
        raise ConfigError(f"tensor_parallel {tensor_parallel} is not a multiple of kv_heads {h}")
    return max(1, h // tensor_parallel)


def _layer_bytes_per_token(shape: ModelShape, tensor_parallel: int) -> Fraction:
    """Return exact bytes one layer caches per token on one GPU."""
    bpe = Fraction(str(shape.bytes_per_element))
    if shape.is_mla:
        assert shape.kv_lora_rank is not None and shape.qk_rope_head_dim is not None
        kv_heads_per_gpu(shape, tensor_parallel)  # validates tp
        return (shape.kv_lora_rank + shape.qk_rope_head_dim) * bpe
    return 2 * kv_heads_per_gpu(shape, tensor_parallel) * shape.head_dim * bpe


def _ceil(x: Fraction) -> int:
    return math.ceil(x)


def bytes_per_token(shape: ModelShape, *, tensor_parallel: int = 1) -> int:
    """Return KV bytes per cached token over all layers, per GPU (below any sliding window).

    >>> bytes_per_token(ModelShape(layers=32, kv_heads=8, head_dim=128, bytes_per_element=2))
    131072
    """
    return _ceil(_layer_bytes_per_token(shape, tensor_parallel) * shape.layers)


def _round_up(tokens: int, block_size: int | None) -> int:
    if block_size is None:
        return tokens
    if block_size < 1:
        raise ConfigError(f"block_size must be at least 1, got {block_size}")
    return -(-tokens // block_size) * block_size


def kv_bytes(shape: ModelShape, tokens: int, *, tensor_parallel: int = 1, block_size: int | None = None,
             sequences: int = 1) -> int:
    """Return KV bytes per GPU for ``sequences`` sequences of ``tokens`` cached tokens each.

    Local layers keep at most the window; with ``block_size`` every layer holds whole blocks
    (tokens and window round up to it). For full attention ``tokens`` may be a total over
    sequences; with sliding windows it must be one sequence's length.

    >>> kv_bytes(ModelShape(layers=32, kv_heads=8, head_dim=128), 8192) == 2**30
    True
    """
    if tokens < 0:
        raise ConfigError(f"tokens must be non-negative, got {tokens}")
    if sequences < 0:
        raise ConfigError(f"sequences must be non-negative, got {sequences}")
    per_layer = _layer_bytes_per_token(shape, tensor_parallel)
    t = _round_up(tokens, block_size)
    held = shape.global_layers * t
    if shape.local_layers:
        assert shape.sliding_window is not None
        held += shape.local_layers * min(t, _round_up(shape.sliding_window, block_size))
    return _ceil(per_layer * held * sequences)


def budget_tokens(budget_bytes: int | float, shape: ModelShape, *, tensor_parallel: int = 1,
                  block_size: int | None = None) -> int:
    """Return the cached tokens a per-GPU budget holds at the full per-token rate.

    With ``block_size`` the count is floored to whole blocks. Sliding windows are ignored here
    (a window caps one sequence, not the pool); use ``max_sequences_in_budget`` for them.

    >>> budget_tokens(8 * GIB, ModelShape(layers=32, kv_heads=8, head_dim=128))
    65536
    """
    if budget_bytes < 0:
        raise ConfigError(f"KV budget must be non-negative, got {budget_bytes} bytes")
    per_token = _layer_bytes_per_token(shape, tensor_parallel) * shape.layers
    tokens = math.floor(Fraction(budget_bytes) / per_token)
    if block_size is not None:
        _round_up(0, block_size)  # validates block_size
        tokens = (tokens // block_size) * block_size
    return tokens


def tokens_per_request(prompt_tokens: int, output_cap: int, policy: Policy = "reserve",
                       expected_output_tokens: int | None = None, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Return the KV tokens one request needs under an admission policy.

    ``reserve`` (the spec's scheduler): prompt + the full output cap, reserved at admission.
    ``paged``: the blocks a request holds at its largest, prompt + expected output (default:
    the cap, at most the cap) rounded up to ``block_size``.

    >>> tokens_per_request(1000, 200), tokens_per_request(7800, 200)
    (1200, 8000)
    >>> tokens_per_request(1000, 200, "paged", expected_output_tokens=50)
    1056
    """
    if prompt_tokens < 0 or output_cap < 0:
        raise ConfigError(f"prompt_tokens and output_cap must be non-negative, got {prompt_tokens}, {output_cap}")
    if policy == "reserve":
        return prompt_tokens + output_cap
    if policy == "paged":
        expected = output_cap if expected_output_tokens is None else expected_output_tokens
        if expected < 0:
            raise ConfigError(f"expected_output_tokens must be non-negative, got {expected}")
        return _round_up(prompt_tokens + min(expected, output_cap), block_size)
    raise ConfigError(f"unknown admission policy {policy!r}; expected 'reserve' or 'paged'")


def max_concurrent_sequences(budget_tokens: int, tokens_per_request: int) -> int:
    """Return floor(budget tokens / tokens per request): how many sequences fit at once.

    >>> max_concurrent_sequences(65536, 1200), max_concurrent_sequences(65536, 8000)
    (54, 8)
    """
    if tokens_per_request <= 0:
        raise ConfigError(f"tokens_per_request must be positive, got {tokens_per_request}")
    if budget_tokens < 0:
        raise ConfigError(f"budget_tokens must be non-negative, got {budget_tokens}")
    return budget_tokens // tokens_per_request


@dataclass(frozen=True)
class SharedPrefixFit:
    """How many sequences fit when a shared prompt prefix is held once (prefix caching) instead of per request."""

    shared_tokens_held: int  # the cached prefixes' full blocks, held once per group
    tokens_per_request_unshared: int
    tokens_per_request_shared: int  # what each request holds beyond the shared blocks
    max_sequences_unshared: int
    max_sequences_shared: int


def shared_prefix_concurrency(budget_tokens: int, prompt_tokens: int, output_cap: int, shared_prefix_tokens: int, *,
                              groups: int = 1, policy: Policy = "reserve", expected_output_tokens: int | None = None,
                              block_size: int = DEFAULT_BLOCK_SIZE) -> SharedPrefixFit:
    """Return the most concurrent sequences with and without holding ``groups`` shared prefixes once.

    Only full blocks of a prefix are shared (as vLLM caches them), so a request still holds its
    prefix's partial last block, its own prompt tokens and its output.

    >>> fit = shared_prefix_concurrency(65536, 7800, 200, 7000)
    >>> fit.max_sequences_unshared, fit.shared_tokens_held, fit.tokens_per_request_shared, fit.max_sequences_shared
    (8, 6992, 1008, 58)
    """
    if not 0 <= shared_prefix_tokens <= prompt_tokens:
        raise ConfigError(f"shared_prefix_tokens must be between 0 and prompt_tokens {prompt_tokens}, "
                          f"got {shared_prefix_tokens}")
    if groups < 1 or block_size < 1:
        raise ConfigError(f"groups and block_size must be at least 1, got {groups} and {block_size}")
    unshared = tokens_per_request(prompt_tokens, output_cap, policy, expected_output_tokens, block_size)
    cached = shared_prefix_tokens // block_size * block_size
    own = tokens_per_request(prompt_tokens - cached, output_cap, policy, expected_output_tokens, block_size)
    held = groups * cached
    return SharedPrefixFit(
        shared_tokens_held=held, tokens_per_request_unshared=unshared, tokens_per_request_shared=own,
        max_sequences_unshared=max_concurrent_sequences(budget_tokens, unshared),
        max_sequences_shared=max_concurrent_sequences(max(budget_tokens - held, 0), own) if own else 0)


def max_sequences_in_budget(budget_bytes: int | float, shape: ModelShape, tokens_per_request: int, *,
                            tensor_parallel: int = 1, block_size: int | None = None) -> int:
    """Return how many sequences of ``tokens_per_request`` fit in a per-GPU budget, window-aware.

    Equals ``max_concurrent_sequences(budget_tokens(...), tokens_per_request)`` for full attention.
    """
    if tokens_per_request <= 0:
        raise ConfigError(f"tokens_per_request must be positive, got {tokens_per_request}")
    one = kv_bytes(shape, tokens_per_request, tensor_parallel=tensor_parallel, block_size=block_size)
    return math.floor(Fraction(budget_bytes) / one)


# --------------------------------------------------------------------------- budgets from devices


def weight_bytes(parameters: int, bytes_per_parameter: float = 2, *, tensor_parallel: int = 1) -> int:
    """Return dense weight bytes per GPU: parameters x bytes / tp (no quantization metadata)."""
    if parameters < 0 or bytes_per_parameter <= 0:
        raise ConfigError(f"bad weight inputs: parameters={parameters}, bytes_per_parameter={bytes_per_parameter}")
    if tensor_parallel < 1:
        raise ConfigError(f"tensor_parallel must be at least 1, got {tensor_parallel}")
    return _ceil(Fraction(parameters) * Fraction(str(bytes_per_parameter)) / tensor_parallel)


def kv_budget_bytes(device_memory_bytes: int | float, *, memory_utilization: float = 0.9,
                    weights_bytes: int = 0, overhead_bytes: int | float = 0,
                    tensor_parallel: int | None = None) -> int:
    """Return bytes left for KV on one GPU: memory x utilization - weights - overhead.

    ``tensor_parallel`` (the GPUs the weights are already split over) only words the fix when nothing is left.

    >>> kv_budget_bytes(80 * GIB, memory_utilization=0.9, weights_bytes=16 * GIB, overhead_bytes=4 * GIB) // GIB
    52
    """
    if not 0 < memory_utilization <= 1:
        raise ConfigError(f"memory_utilization must be in (0, 1], got {memory_utilization}")
    usable = Fraction(device_memory_bytes) * Fraction(str(memory_utilization))
    left = math.floor(usable - weights_bytes - Fraction(overhead_bytes))
    if left <= 0:
        raise ConfigError(_no_memory_message(device_memory_bytes, memory_utilization, weights_bytes,
                                             overhead_bytes, tensor_parallel))
    return left


def _gib(n: float | Fraction) -> str:
    return f"{float(n) / GIB:,.1f} GiB"


def _no_memory_message(device_memory_bytes: float, memory_utilization: float, weights_bytes: int,
                       overhead_bytes: float, tensor_parallel: int | None) -> str:
    """Say in GiB why no KV memory is left, and the smallest change that leaves some."""
    usable = Fraction(device_memory_bytes) * Fraction(str(memory_utilization))
    left = usable - weights_bytes - Fraction(overhead_bytes)
    text = (f"no memory left for the KV cache: {_gib(device_memory_bytes)} x {memory_utilization:.0%} usable = "
            f"{_gib(usable)}, but the weights take {_gib(weights_bytes)} per GPU"
            + (f" and the overhead {_gib(overhead_bytes)}" if overhead_bytes else "")
            + f", leaving {_gib(left)}.")
    room = usable - Fraction(overhead_bytes)
    if room <= 0:
        return text + " The overhead alone takes the usable memory: lower it or raise the memory utilization."
    tp = tensor_parallel or 1
    split = next((k for k in (2, 4, 8, 16, 32, 64) if Fraction(weights_bytes) / k < room), None)
    if split is None:
        return text + " Use a GPU with more memory or store the weights in fewer bytes per parameter."
    how = (f"raise tensor parallelism to {tp * split}" if tensor_parallel is not None
           else f"split the weights over {split} times as many GPUs (tensor parallelism x {split})")
    return text + f" Fix: {how}, use a GPU with more memory, or store the weights in fewer bytes per parameter."


# --------------------------------------------------------------------------- Little's law


def time_in_service_s(prefill_s: float, tpot_s: float, output_tokens: int) -> float:
    """Return prefill + (N - 1) x TPOT: how long one request holds its place.

    >>> round(time_in_service_s(0.15, 0.030, 200), 6)
    6.12
    """
    if output_tokens < 1:
        raise ConfigError(f"output_tokens must be at least 1, got {output_tokens}")
    return prefill_s + (output_tokens - 1) * tpot_s


def in_service(rate_per_s: float, time_in_service_s: float) -> float:
    """Return Little's law L = lambda x W: the average number of requests in service."""
    if rate_per_s < 0 or time_in_service_s < 0:
        raise ConfigError(f"rate and time in service must be non-negative, got {rate_per_s}, {time_in_service_s}")
    return rate_per_s * time_in_service_s


def utilization(in_service: float, max_concurrent: int) -> float | None:
    """Return average in service / the concurrency limit; None when nothing fits (limit 0)."""
    if max_concurrent <= 0:
        return None
    return in_service / max_concurrent


def saturation_rate_per_s(max_concurrent: int, time_in_service_s: float) -> float | None:
    """Return the arrival rate at which the average in service reaches the limit (limit / W)."""
    if time_in_service_s <= 0:
        return None
    return max_concurrent / time_in_service_s


# --------------------------------------------------------------------------- one call for the CLI and app


class KVReport(BaseModel):
    """Everything the inputs allow about one model's KV cache; None where an input is missing."""

    model_config = ConfigDict(extra="forbid")

    shape: ModelShape
    tensor_parallel: int
    policy: Policy
    block_size: int | None = Field(description="Paged block size; None under the reserve policy.")
    bytes_per_token: int = Field(description="KV bytes per cached token, per GPU, below any window.")
    tokens: int | None = None
    bytes_for_tokens: int | None = Field(None, description="KV bytes for one sequence of `tokens`, per GPU.")
    budget_bytes: int | None = None
    budget_tokens: int | None = None
    prompt_tokens: int | None = None
    output_cap: int | None = None
    tokens_per_request: int | None = None
    bytes_per_request: int | None = Field(None, description="KV bytes of one request's tokens, window-aware, per GPU.")
    max_concurrent_sequences: int | None = None
    rate_per_s: float | None = None
    time_in_service_s: float | None = None
    in_service: float | None = Field(None, description="Little's law: rate x time in service.")
    utilization: float | None = Field(None, description="In service / max concurrent sequences.")
    saturation_rate_per_s: float | None = Field(None, description="Arrival rate at which in service reaches the limit.")


def analyze(shape: ModelShape, *, tensor_parallel: int = 1, tokens: int | None = None,
            budget_bytes: int | None = None, prompt_tokens: int | None = None, output_cap: int | None = None,
            policy: Policy = "reserve", expected_output_tokens: int | None = None,
            block_size: int = DEFAULT_BLOCK_SIZE, rate_per_s: float | None = None,
            time_in_service_s: float | None = None) -> KVReport:
    """Compute every KV quantity the given inputs allow (blocks apply under the paged policy)."""
    if policy not in ("reserve", "paged"):
        raise ConfigError(f"unknown admission policy {policy!r}; expected 'reserve' or 'paged'")
    blocks = block_size if policy == "paged" else None
    out = KVReport(shape=shape, tensor_parallel=tensor_parallel, policy=policy, block_size=blocks,
                   bytes_per_token=bytes_per_token(shape, tensor_parallel=tensor_parallel),
                   tokens=tokens, budget_bytes=budget_bytes, prompt_tokens=prompt_tokens, output_cap=output_cap,
                   rate_per_s=rate_per_s, time_in_service_s=time_in_service_s)
    if tokens is not None:
        out.bytes_for_tokens = kv_bytes(shape, tokens, tensor_parallel=tensor_parallel, block_size=blocks)
    if budget_bytes is not None:
        out.budget_tokens = budget_tokens(budget_bytes, shape, tensor_parallel=tensor_parallel, block_size=blocks)
    if (prompt_tokens is None) != (output_cap is None):
        raise ConfigError("give both prompt_tokens and output_cap to size a request")
    if prompt_tokens is not None and output_cap is not None:
        out.tokens_per_request = tokens_per_request(prompt_tokens, output_cap, policy, expected_output_tokens,
                                                    block_size)
        out.bytes_per_request = kv_bytes(shape, out.tokens_per_request, tensor_parallel=tensor_parallel,
                                         block_size=blocks)
        if budget_bytes is not None and out.budget_tokens is not None:
            if shape.local_layers:
                out.max_concurrent_sequences = max_sequences_in_budget(
                    budget_bytes, shape, out.tokens_per_request, tensor_parallel=tensor_parallel, block_size=blocks)
            else:
                out.max_concurrent_sequences = max_concurrent_sequences(out.budget_tokens, out.tokens_per_request)
    if rate_per_s is not None and time_in_service_s is not None:
        out.in_service = in_service(rate_per_s, time_in_service_s)
    if out.max_concurrent_sequences is not None:
        if out.in_service is not None:
            out.utilization = utilization(out.in_service, out.max_concurrent_sequences)
        if time_in_service_s is not None:
            out.saturation_rate_per_s = saturation_rate_per_s(out.max_concurrent_sequences, time_in_service_s)
    return out


def concurrency_curve(shape: ModelShape, budget_bytes: int, prompt_tokens: list[int], output_cap: int, *,
                      policy: Policy = "reserve", expected_output_tokens: int | None = None,
                      block_size: int = DEFAULT_BLOCK_SIZE, tensor_parallel: int = 1) -> list[int]:
    """Return max concurrent sequences for each prompt length (for plotting the limit)."""
    blocks = block_size if policy == "paged" else None
    return [max_sequences_in_budget(budget_bytes, shape,
                                    tokens_per_request(p, output_cap, policy, expected_output_tokens, block_size),
                                    tensor_parallel=tensor_parallel, block_size=blocks) for p in prompt_tokens]
