"""Step times from hardware figures (a roofline), as the simulator's linear step model; calibration from a run.

One engine step reads every weight once and the KV of every decoding sequence, and computes
2 x active parameters FLOPs per token (plus attention over the prompt for prefill tokens). So::

    base_s              = weight bytes per GPU / (bandwidth x e_bw)  + 2 x layers x all-reduce latency (tp > 1)
                          + layers x step overhead per layer
                          + half_batch_tokens x decode FLOPs per token per GPU / (FLOP/s x e_compute)
    per_prefill_token_s = FLOPs per prompt token per GPU / (FLOP/s x e_compute) + all-reduce bytes per token / link
    per_decode_seq_s    = 2 x active parameters / tp / (FLOP/s x e_compute)     + all-reduce bytes per token / link
    per_kv_token_s      = KV bytes per token per GPU / (bandwidth x e_bw)

Two terms of ``base_s`` make the efficiency depend on the batch, which one factor could not do: the
model was about 20 % optimistic at batch 8 and 10-22 % pessimistic at saturation against published
figures (``docs/planner.md``). A fixed per-step overhead (``step_overhead_per_layer_s`` for each decoder
layer: its kernel launches and synchronisation, with the step's scheduling and sampling spread over
them) costs every step the same whatever its batch; and the matmuls of a step of n tokens reach the compute
efficiency ``e_compute x n / (n + half_batch_tokens)``, so n tokens take as long as n +
``half_batch_tokens`` would at ``e_compute``: a fixed cost per step plus a per-token cost, which keeps the
model linear for the simulator. ``servebench.planning.published`` holds the figures the defaults were
fitted to.

FLOPs per prompt token = 2 x active parameters + 4 x layers x query heads x head dim x mean context
(the attention score and value products over the tokens before it: half the prompt on average, at
most the window on local layers). Tensor parallelism splits weights, FLOPs and KV heads by ``tp``
and adds two ring all-reduces of the hidden state per layer (2 (tp - 1) / tp of its bytes cross the
link). Times add where a real kernel would overlap memory and compute, so a step is overestimated
by up to 2x where both terms are equal: a deliberate, conservative simplification.

The efficiency factors say how close to peak a real engine gets (defaults in ``Efficiency``).
``calibrate`` replaces them with the ratios measured on a timing run's fitted step model.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from servebench.capacity.gpus import Accelerator
from servebench.capacity.kv import ModelShape, bytes_per_token, kv_heads_per_gpu
from servebench.capacity.stepmodel import StepModel
from servebench.errors import ConfigError

ACTIVATION_BYTES = 2  # the hidden state all-reduced between GPUs is bf16/fp16

# Mixture-of-experts presets: parameters one token passes through (the rest are read, not computed).
ACTIVE_PARAMETERS: dict[str, int] = {
    "mixtral-8x7b": 12_900_000_000,  # mistral.ai/news/mixtral-of-experts: "12.9B active parameters per token"
    "deepseek-v3": 37_000_000_000,  # arxiv.org/abs/2412.19437: "37B activated for each token"
}


class Efficiency(BaseModel):
    """Shares of peak hardware throughput an engine reaches, and its fixed costs per step.

    The defaults are fitted to published serving figures (vLLM's CI latency on H200, NVIDIA NIM and
    TensorRT-LLM throughput on H100 and H200; ``servebench.planning.published``), every one within 10 %.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bandwidth: float = Field(0.85, gt=0, description="Share of peak memory bandwidth reached reading weights and KV "
                             "(fitted; with the step overhead apart, weight streaming reaches 80-90% of peak).")
    compute: float = Field(0.6, gt=0, description="Share of peak tensor throughput reached by the matmuls of a large "
                           "step (fitted; a step of n tokens reaches compute x n / (n + half_batch_tokens)).")
    interconnect: float = Field(0.7, gt=0, description="Share of link bandwidth reached by all-reduce (assumed).")
    step_overhead_per_layer_s: float = Field(60e-6, ge=0, description="Fixed time of every step per decoder layer: "
                                             "its kernel launches and synchronisation, with the step's scheduling "
                                             "and sampling, s (fitted: 1.9 ms a step for 32 layers).")
    half_batch_tokens: float = Field(16, ge=0, description="Tokens in a step at which its matmuls reach half the "
                                     "compute efficiency (fitted; 0: every step at full efficiency).")

    @classmethod
    def ideal(cls) -> "Efficiency":
        """Return peak everything and no fixed cost: the roofline a calibration compares a fit with."""
        return cls(bandwidth=1, compute=1, interconnect=1, step_overhead_per_layer_s=0, half_batch_tokens=0)


class RooflineTerms(BaseModel):
    """The quantities behind one step model, for explaining every coefficient."""

    model_config = ConfigDict(extra="forbid")

    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: int
    prefill_flops_per_token: float = Field(description="Per GPU.")
    decode_flops_per_seq: float = Field(description="Per GPU.")
    allreduce_bytes_per_token: float = Field(description="Bytes of one token's hidden states each GPU sends per step.")
    weight_read_s: float
    allreduce_fixed_s: float
    step_overhead_s: float = Field(description="The fixed per-step overhead: layers x "
                                   "Efficiency.step_overhead_per_layer_s.")
    small_batch_s: float = Field(description="half_batch_tokens x decode FLOPs per token at e_compute: what a step's "
                                 "matmuls lose to their batch-dependent efficiency.")
    prefill_compute_s_per_token: float
    decode_compute_s_per_seq: float
    allreduce_s_per_token: float
    context_tokens: float = Field(description="Mean prompt length the attention FLOPs assume.")


class Roofline(BaseModel):
    """A step model estimated from hardware, with its terms and how each coefficient was computed."""

    model_config = ConfigDict(extra="forbid")

    accelerator: str
    tensor_parallel: int
    efficiency: Efficiency
    step_model: StepModel
    terms: RooflineTerms
    how: dict[str, str] = Field(description="One line per coefficient: the formula with its numbers.")


def _require(shape: ModelShape) -> tuple[int, int, int]:
    """Return (parameters, hidden size, query heads x head dim); raise when the shape lacks them."""
    if shape.parameters is None:
        raise ConfigError(f"model {shape.name or '(unnamed)'}: the roofline needs the parameter count "
                          "(a preset has it; for a config.json it is estimated from the layer sizes)")
    q_width = (shape.num_attention_heads or shape.kv_heads) * shape.head_dim
    hidden = shape.hidden_size or q_width
    return shape.parameters, hidden, q_width


def attention_context_tokens(shape: ModelShape, prompt_tokens: float) -> float:
    """Return the mean tokens a prompt token attends to, averaged over layers (window-aware).

    >>> attention_context_tokens(ModelShape(layers=2, kv_heads=1, head_dim=1), 1000)
    500.5
    """
    full = (prompt_tokens + 1) / 2
    if not shape.local_layers or shape.sliding_window is None:
        return full
    local = min(full, float(shape.sliding_window))
    return (shape.global_layers * full + shape.local_layers * local) / shape.layers


def roofline(shape: ModelShape, acc: Accelerator, *, tensor_parallel: int = 1, weight_bytes_per_parameter: float = 2,
             prompt_tokens: float = 1000, efficiency: Efficiency | None = None,
             active_parameters: int | None = None) -> Roofline:
    """Return the step model ``shape`` on ``tensor_parallel`` devices of ``acc`` would follow (see the module doc)."""
    eff = efficiency or Efficiency()
    tp = tensor_parallel
    if tp < 1:
        raise ConfigError(f"tensor_parallel must be at least 1, got {tp}")
    kv_heads_per_gpu(shape, tp)  # raises when tp cannot split the KV heads
    params, hidden, q_width = _require(shape)
    active = active_parameters or ACTIVE_PARAMETERS.get(shape.name or "", params)
    flops = acc.flops(weight_bytes_per_parameter) * eff.compute
    bandwidth = acc.memory_bandwidth_bytes_per_s * eff.bandwidth
    link = acc.interconnect_bytes_per_s * eff.interconnect

    weight_bytes = params * weight_bytes_per_parameter / tp
    kv_token_bytes = bytes_per_token(shape, tensor_parallel=tp)
    context = attention_context_tokens(shape, prompt_tokens)
    attention_flops = 4 * shape.layers * q_width * context
    prefill_flops = (2 * active + attention_flops) / tp
    decode_flops = 2 * active / tp
    ring = 2 * (tp - 1) / tp
    allreduce_bytes = 2 * shape.layers * hidden * ACTIVATION_BYTES * ring
    allreduce_fixed = 2 * shape.layers * acc.allreduce_latency_s if tp > 1 else 0.0

    weight_read_s = weight_bytes / bandwidth
    allreduce_s = allreduce_bytes / link
    small_batch_s = eff.half_batch_tokens * decode_flops / flops
    overhead_s = shape.layers * eff.step_overhead_per_layer_s
    terms = RooflineTerms(
        weight_bytes_per_gpu=weight_bytes, kv_bytes_per_token_per_gpu=kv_token_bytes,
        prefill_flops_per_token=prefill_flops, decode_flops_per_seq=decode_flops,
        allreduce_bytes_per_token=allreduce_bytes, weight_read_s=weight_read_s, allreduce_fixed_s=allreduce_fixed,
        step_overhead_s=overhead_s, small_batch_s=small_batch_s,
        prefill_compute_s_per_token=prefill_flops / flops, decode_compute_s_per_seq=decode_flops / flops,
        allreduce_s_per_token=allreduce_s, context_tokens=context)
    step = StepModel(base_s=weight_read_s + allreduce_fixed + overhead_s + small_batch_s,
                     per_prefill_token_s=prefill_flops / flops + allreduce_s,
                     per_decode_seq_s=decode_flops / flops + allreduce_s,
                     per_kv_token_s=kv_token_bytes / bandwidth)
    bw, fl = f"{acc.memory_bandwidth_bytes_per_s / 1e12:.3g} TB/s x {eff.bandwidth:g}", \
        f"{acc.flops(weight_bytes_per_parameter) / 1e12:.4g} TFLOP/s x {eff.compute:g}"
    tp_note = f" + {2 * shape.layers} all-reduces x {acc.allreduce_latency_s * 1e6:g} us" if tp > 1 else ""
    link_note = (f" + {allreduce_bytes / 1e3:.3g} kB all-reduced / ({acc.interconnect_bytes_per_s / 1e9:.3g} GB/s "
                 f"x {eff.interconnect:g})") if tp > 1 else ""
    how = {
        "base_s": f"weights {weight_bytes / 1e9:.4g} GB per GPU / ({bw}){tp_note}"
                  + (f" + {shape.layers} layers x {eff.step_overhead_per_layer_s * 1e6:g} us step overhead"
                     if eff.step_overhead_per_layer_s else "")
                  + (f" + {eff.half_batch_tokens:g} tokens' matmuls at the batch-dependent efficiency "
                     f"({small_batch_s * 1e3:.3g} ms)" if eff.half_batch_tokens else ""),
        "per_prefill_token_s": (f"(2 x {active / 1e9:.4g}B active parameters + attention over {context:,.0f} tokens) "
                                f"/ {tp} GPU(s) = {prefill_flops / 1e9:.4g} GFLOP / ({fl}){link_note}"),
        "per_decode_seq_s": f"2 x {active / 1e9:.4g}B / {tp} = {decode_flops / 1e9:.4g} GFLOP / ({fl}){link_note}",
        "per_kv_token_s": f"{kv_token_bytes:,} KV bytes per token per GPU / ({bw})",
    }
    return Roofline(accelerator=acc.name, tensor_parallel=tp, efficiency=eff, step_model=step, terms=terms, how=how)


def unloaded_times_s(step: StepModel, prompt_tokens: int, output_tokens: int,
                     max_num_batched_tokens: int | None = None) -> tuple[float, float, float]:
    """Return (TTFT, TPOT, latency) of one request alone on the server: the best any load can do.

    The prompt runs in chunks of ``max_num_batched_tokens`` (each chunk a step with its base);
    each later token is a decode step of one sequence reading its own KV.

    >>> unloaded_times_s(StepModel(base_s=0.01, per_prefill_token_s=1e-4), 1000, 3)
    (0.11, 0.01, 0.13)
    """
    chunks = 1 if not max_num_batched_tokens else max(1, math.ceil(prompt_tokens / max_num_batched_tokens))
    ttft = chunks * step.base_s + step.per_prefill_token_s * prompt_tokens
    context = prompt_tokens + output_tokens / 2
    tpot = step.base_s + step.per_decode_seq_s + step.per_kv_token_s * context if output_tokens > 1 else 0.0
    return ttft, tpot, ttft + (output_tokens - 1) * tpot


class Calibration(BaseModel):
    """Efficiency factors measured on one accelerator from a fitted step model, with the comparison."""

    model_config = ConfigDict(extra="forbid")

    accelerator: str
    source: str = Field(description="The run the fit came from.")
    efficiency: Efficiency
    fitted: StepModel
    ideal: StepModel = Field(description="The roofline at 100% efficiency for the run's model and device.")
    notes: list[str]


def calibrate(fitted: StepModel, shape: ModelShape, acc: Accelerator, *, weight_bytes_per_parameter: float,
              prompt_tokens: float, source: str = "a timing run", default: Efficiency | None = None) -> Calibration:
    """Return the efficiency factors a fitted step model implies (tensor parallel 1, as ``servebench run`` runs).

    The rules, each a ratio of the ideal (100%, no fixed cost: ``Efficiency.ideal``) roofline to the fit:

    - bandwidth = ideal base_s / fitted base_s: the fixed cost of a step is taken as reading the
      weights, so per-step overhead (kernel launches, Python) lowers this factor, and the calibrated
      factors carry no step overhead and no batch-dependent term (``step_overhead_per_layer_s`` and
      ``half_batch_tokens`` 0): the measured base already holds them;
    - compute = ideal per_prefill_token_s / fitted per_prefill_token_s;
    - interconnect is kept (a one-device run has no all-reduce).

    A coefficient the fit pinned at 0 leaves its factor at the default (said in ``notes``).
    """
    base = default or Efficiency()
    ideal = roofline(shape, acc, weight_bytes_per_parameter=weight_bytes_per_parameter, prompt_tokens=prompt_tokens,
                     efficiency=Efficiency.ideal()).step_model
    notes = []
    bandwidth, compute = base.bandwidth, base.compute
    if fitted.base_s > 0:
        bandwidth = ideal.base_s / fitted.base_s
    else:
        notes.append(f"the fit has no fixed step cost; bandwidth efficiency stays at the default {base.bandwidth:g}")
    if fitted.per_prefill_token_s > 0:
        compute = ideal.per_prefill_token_s / fitted.per_prefill_token_s
    else:
        notes.append(f"the fit has no prefill cost; compute efficiency stays at the default {base.compute:g}")
    for name, value in (("bandwidth", bandwidth), ("compute", compute)):
        if value > 1:
            notes.append(f"{name} efficiency {value:.3g} is above 1: the {acc.name} preset understates this "
                         "device (or the model fits in cache); the factor is kept as measured")
    notes.append(f"interconnect efficiency stays at {base.interconnect:g} (a one-device run has no all-reduce)")
    notes.append("the run's fixed costs per step are in its bandwidth factor: no step overhead or batch-dependent "
                 "term is added for this device")
    predicted_seq_s = ideal.per_decode_seq_s / compute
    if fitted.per_decode_seq_s > 0 and not 0.5 <= fitted.per_decode_seq_s / predicted_seq_s <= 2:
        notes.append(f"the fitted cost per decoding sequence ({fitted.per_decode_seq_s:.3g} s) is "
                     f"{fitted.per_decode_seq_s / predicted_seq_s:.3g}x what the calibrated roofline predicts "
                     f"({predicted_seq_s:.3g} s): per-sequence overhead the roofline does not model")
    return Calibration(accelerator=acc.name, source=source, fitted=fitted, ideal=ideal,
                       efficiency=Efficiency(bandwidth=bandwidth, compute=compute, interconnect=base.interconnect,
                                             step_overhead_per_layer_s=0, half_batch_tokens=0),
                       notes=notes)


def estimate_parameters(cfg: dict, source: str = "config.json") -> tuple[int, int]:
    """Return (total, active) parameters a Hugging Face ``config.json`` describes (an estimate).

    Embeddings (and an untied output head), per layer the attention projections and a gated MLP of
    ``intermediate_size``; mixture-of-experts configs (``num_local_experts`` or ``n_routed_experts``)
    count every expert in the total and ``num_experts_per_tok`` (plus shared experts) in the active.
    Norms and biases are left out (well under 1%). Every size is bounded (``hf_config.CONFIG_BOUNDS``).

    >>> total, active = estimate_parameters({"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256})
    >>> round(total / 1e9, 2), total == active
    (8.03, True)
    """
    from servebench.capacity.hf_config import config_int

    cfg = dict(cfg.get("text_config") or cfg)
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if k not in cfg]
    if missing:
        raise ConfigError(f"{source}: cannot estimate the parameter count without {missing[0]!r}")

    def size(key: str, default: int | None = None, minimum: int = 1) -> int:
        if cfg.get(key) is None and default is not None:
            return default
        return config_int(cfg, key, source, minimum=minimum)

    hidden, layers, heads, vocab = (size(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                      "vocab_size"))
    kv_heads = size("num_key_value_heads", heads)
    head_dim = size("head_dim", hidden // heads)
    intermediate = size("intermediate_size", 4 * hidden)
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    experts = size("num_local_experts", 0, 0) or size("n_routed_experts", 0, 0)
    if experts:
        expert_size = 3 * hidden * size("moe_intermediate_size", intermediate)
        shared = size("n_shared_experts", 0, 0) * expert_size
        per_token = size("num_experts_per_tok", 2)
        dense_layers = min(size("first_k_dense_replace", 0, 0), layers)
        moe_layers = layers - dense_layers
        dense_mlp = 3 * hidden * intermediate
        total = embed + layers * attention + dense_layers * dense_mlp + moe_layers * (experts * expert_size + shared)
        active = embed + layers * attention + dense_layers * dense_mlp + moe_layers * (per_token * expert_size + shared)
        return total, active
    total = embed + layers * (attention + 3 * hidden * intermediate)
    return total, total
