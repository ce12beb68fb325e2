"""Published serving figures, and what the planner's step model says for each: the check of its defaults.

The roofline's efficiency factors and fixed costs (``roofline.Efficiency``) were fitted to these
figures; ``docs/planner.md`` holds the comparison table and ``tests/test_published.py`` keeps every
case within ``TOLERANCE`` of its figure. Each planned value is computed as the planner would:

- ``latency``: a static batch (vLLM's ``benchmark_latency``): one step prefills every prompt of the
  batch, then ``output - 1`` decode steps of the batch, each reading the KV held so far.
- ``ttft`` and ``itl``: one request alone: its prompt in one step; a decode step of one sequence
  with the prompt and half the output cached.
- ``throughput`` (output tokens/s): ``planner.throughput_rps`` at a batch of ``concurrency``, or at
  saturation of the most sequences the planner's KV budget holds (90 % of memory, 2 GiB overhead,
  16-token blocks), whichever is smaller, times the output length.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servebench.capacity import kv
from servebench.capacity.gpus import get_accelerator
from servebench.capacity.model_presets import get_preset
from servebench.capacity.roofline import Efficiency, roofline

TOLERANCE = 0.10  # every planned value within 10 % of its published figure
Kind = Literal["latency", "ttft", "itl", "throughput"]

VLLM_CI = ("vLLM performance benchmarks on H200 (perf.vllm.ai; the latency suite of .buildkite/nightly-benchmarks: "
           "input 32, output 128 tokens, batch 8, bf16), as read for issue 33")
NIM = ("NVIDIA NIM benchmarking, Performance, Llama-3.3-70B-Instruct NIM 1.8.0, 2 x H100 80G, fp8, TP2, 5000 input "
       "/ 500 output tokens (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance)")
TRTLLM = ("TensorRT-LLM perf overview, max-throughput tables, FP8 ModelOpt checkpoints, trtllm-bench "
          "(nvidia.github.io/TensorRT-LLM/performance/perf-overview.html; docs/source/performance/perf-overview.md "
          "at 00f37686)")


class PublishedFigure(BaseModel):
    """One published measurement of a serving engine and the setting it was measured in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str
    model: str = Field(description="A model preset of the same shape.")
    gpu: str
    tensor_parallel: int = Field(ge=1)
    weight_bytes: float = Field(gt=0, description="2 for bf16 weights, 1 for fp8.")
    kv_bytes: float = Field(gt=0, description="KV element size the engine used (fp8 checkpoints: fp8 KV, see docs).")
    kind: Kind
    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    batch: int | None = Field(None, ge=1, description="latency: the static batch; throughput: the clients (None: "
                                                      "as many as fit, a max-throughput run).")
    published: float = Field(gt=0, description="The figure: s for latency, TTFT and ITL; output tokens/s for "
                                               "throughput.")


def _vllm_ci(model: str, size: str, tp: int, published_s: float) -> PublishedFigure:
    gpus = "H200" if tp == 1 else f"{tp} x H200"
    return PublishedFigure(name=f"vLLM CI, Llama-3.1-{size}, {gpus}, batch-8 latency", source=VLLM_CI, model=model,
                           gpu="H200", tensor_parallel=tp, weight_bytes=2, kv_bytes=2, kind="latency",
                           prompt_tokens=32, output_tokens=128, batch=8, published=published_s)


def _nim(what: str, kind: Kind, clients: int, published: float) -> PublishedFigure:
    return PublishedFigure(name=f"NIM, 70B fp8, 2 x H100, {what}", source=NIM, model="llama-3.1-70b", gpu="H100",
                           tensor_parallel=2, weight_bytes=1, kv_bytes=1, kind=kind, prompt_tokens=5000,
                           output_tokens=500, batch=clients, published=published)


def _trtllm(size: str, gpu: str, tp: int, prompt: int, output: int, published: float) -> PublishedFigure:
    gpus = gpu if tp == 1 else f"{tp} x {gpu}"
    return PublishedFigure(name=f"TensorRT-LLM, {size} fp8, {gpus}, {prompt}/{output}", source=TRTLLM,
                           model=f"llama-3.1-{size.lower()}", gpu=gpu, tensor_parallel=tp, weight_bytes=1,
                           kv_bytes=1, kind="throughput", prompt_tokens=prompt, output_tokens=output,
                           published=published)


FIGURES: tuple[PublishedFigure, ...] = (
    _vllm_ci("llama-3.1-8b", "8B", 1, 0.833),
    _vllm_ci("llama-3.1-70b", "70B", 4, 2.078),
    _nim("1 client: ITL", "itl", 1, 0.01858),
    _nim("1 client: TTFT", "ttft", 1, 0.40677),
    _nim("25 clients", "throughput", 25, 623.4),
    _nim("50 clients", "throughput", 50, 814.37),
    _nim("saturated (150 clients)", "throughput", 150, 920.9),
    _trtllm("8B", "H200", 1, 5000, 500, 3902),
    _trtllm("8B", "H200", 1, 2048, 128, 3538),
    _trtllm("8B", "H200", 1, 1000, 1000, 17744),
    _trtllm("70B", "H200", 1, 5000, 500, 566),
    _trtllm("70B", "H200", 1, 2048, 128, 442),
    _trtllm("70B", "H100", 2, 5000, 500, 898),
)


class Comparison(BaseModel):
    """One figure beside the planner's value for it."""

    model_config = ConfigDict(extra="forbid")

    figure: PublishedFigure
    planned: float
    batch: int | None = Field(description="The running sequences the planned value assumes (throughput).")

    @property
    def ratio(self) -> float:
        """Planned / published (below 1: the plan is faster for times, slower for throughput)."""
        return self.planned / self.figure.published


def saturation_batch(fig: PublishedFigure) -> int:
    """Return the most sequences of the figure's length the planner's KV budget holds (paged, 16-token blocks)."""
    from servebench.planning.planner import PlanRequest

    defaults = PlanRequest.model_fields
    shape = get_preset(fig.model, bytes_per_element=fig.kv_bytes)
    acc = get_accelerator(fig.gpu)
    assert shape.parameters is not None
    weights = kv.weight_bytes(shape.parameters, fig.weight_bytes, tensor_parallel=fig.tensor_parallel)
    budget = kv.kv_budget_bytes(acc.memory_gib * kv.GIB, memory_utilization=defaults["memory_utilization"].default,
                                weights_bytes=weights, overhead_bytes=defaults["overhead_gib"].default * kv.GIB)
    tokens = kv.budget_tokens(budget, shape, tensor_parallel=fig.tensor_parallel, block_size=kv.DEFAULT_BLOCK_SIZE)
    return tokens // kv.tokens_per_request(fig.prompt_tokens, fig.output_tokens, "paged")


def planned(fig: PublishedFigure, efficiency: Efficiency | None = None) -> Comparison:
    """Return the planner's value for a published figure (see the module docstring)."""
    from servebench.planning.planner import throughput_rps

    shape = get_preset(fig.model, bytes_per_element=fig.kv_bytes)
    step = roofline(shape, get_accelerator(fig.gpu), tensor_parallel=fig.tensor_parallel,
                    weight_bytes_per_parameter=fig.weight_bytes, prompt_tokens=fig.prompt_tokens,
                    efficiency=efficiency).step_model
    p, o = fig.prompt_tokens, fig.output_tokens
    if fig.kind == "latency":
        b = fig.batch or 1
        value = step.step_s(b * p, 0, 0) + sum(step.step_s(0, b, b * (p + k)) for k in range(1, o))
        return Comparison(figure=fig, planned=value, batch=b)
    if fig.kind == "ttft":
        return Comparison(figure=fig, planned=step.step_s(p, 0, 0), batch=1)
    if fig.kind == "itl":
        return Comparison(figure=fig, planned=step.step_s(0, 1, p + o // 2), batch=1)
    fit = saturation_batch(fig)
    batch = min(fig.batch, fit) if fig.batch is not None else fit
    rps, _ = throughput_rps(step, prompt_tokens=p, decode_tokens=o - 1, kv_tokens_per_seq=p + o / 2, batch=batch)
    return Comparison(figure=fig, planned=rps * o, batch=batch)


def comparisons(efficiency: Efficiency | None = None) -> list[Comparison]:
    """Return every published figure beside its planned value."""
    return [planned(f, efficiency) for f in FIGURES]


def markdown_table(efficiency: Efficiency | None = None, before: Efficiency | None = None) -> str:
    """Return the comparison as a Markdown table (``before``: a column for other factors, e.g. the old ones)."""
    def shown(fig: PublishedFigure, v: float) -> str:
        return f"{v * 1000:,.4g} ms" if fig.kind != "throughput" else f"{v:,.0f} tok/s"

    head = "| figure | published | planned | planned / published |" + (" before |" if before else "")
    rule = "|---|---|---|---|" + ("---|" if before else "")
    rows = [head, rule]
    old = comparisons(before) if before is not None else [None] * len(FIGURES)
    for c, b in zip(comparisons(efficiency), old):
        batch = f" (batch {c.batch})" if c.figure.kind == "throughput" else ""
        row = (f"| {c.figure.name} | {shown(c.figure, c.figure.published)} | {shown(c.figure, c.planned)}{batch} | "
               f"{c.ratio:.3f} |")
        rows.append(row + (f" {b.ratio:.3f} |" if b is not None else ""))
    return "\n".join(rows)
