"""Cache experiments: one workload simulated twice on the same seed, prefix caching off and on.

Four workloads span the question (see ``WORKLOADS``): cold prompts (nothing shared), repeated
prompts (identical), partly shared prompts (a shared document then a question), and multi-turn
chats (each turn resends the history). :func:`run_cache_experiment` returns both runs' numbers
side by side, so a page or a test reads what caching changed and what it did not.

    exp = run_cache_experiment(CacheExperiment(workload="partly_shared", rate_rps=2.0))
    exp.on.ttft_p50_s, exp.off.ttft_p50_s, exp.on.token_hit_rate
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servebench.analysis.summary import build_report
from servebench.serving.scenario import Scenario, parse_scenario
from servebench.serving.simulate import simulate

WorkloadKind = Literal["cold", "repeated", "partly_shared", "multi_turn"]
WORKLOADS: dict[str, str] = {
    "cold": "Cold prompts: every prompt is its own tokens; nothing to reuse.",
    "repeated": "Repeated prompts: every request sends the same prompt.",
    "partly_shared": "Partly shared: one of a few shared documents, then the request's own question.",
    "multi_turn": "Multi-turn chats: each turn resends the history (previous prompt and answer) plus a new message.",
}


class CacheExperiment(BaseModel):
    """What to simulate: the workload, the load, the KV budget (which bounds the cache) and the seed."""

    model_config = ConfigDict(extra="forbid")

    workload: WorkloadKind = "partly_shared"
    prompt_tokens: int = Field(1600, ge=16, description="Prompt length (multi-turn: each new message), tokens.")
    shared_share: float = Field(0.8, gt=0, le=1, description="Partly shared: share of the prompt that is shared.")
    documents: int = Field(4, ge=1, description="Partly shared: distinct shared documents.")
    output_tokens: int = Field(150, ge=1, description="Median output length, tokens.")
    turns: int = Field(4, ge=2, description="Multi-turn: turns per chat.")
    think_s: float = Field(3.0, ge=0, description="Multi-turn: time between an answer and the next message, s.")
    rate_rps: float = Field(2.0, gt=0, description="Arrivals per second (multi-turn: of chats' first turns).")
    num_requests: int = Field(400, ge=1, le=20_000)
    kv_budget_tokens: int = Field(40_000, ge=256, description="KV budget: the running requests and the cache share it.")
    seed: int = Field(16, ge=0)

    def scenario(self, caching: bool) -> Scenario:
        """Return the scenario (a vLLM-like paged server with chunked prefill) with caching on or off."""
        out = self.output_tokens
        cls: dict[str, Any] = {
            "name": self.workload, "prompt": {"kind": "fixed", "value": self.prompt_tokens},
            "output": {"kind": "lognormal", "median": out, "sigma": 0.4, "min_tokens": 1, "max_tokens": 4 * out},
            "max_output_tokens": 4 * out}
        if self.workload == "repeated":
            cls["shared_prefix"] = {"tokens": self.prompt_tokens, "groups": 1}
        elif self.workload == "partly_shared":
            cls["shared_prefix"] = {"tokens": max(1, round(self.shared_share * self.prompt_tokens)),
                                    "groups": self.documents}
        elif self.workload == "multi_turn":
            cls["conversation"] = {"turns": self.turns, "think_s": self.think_s}
        return parse_scenario({
            "name": f"{self.workload} (caching {'on' if caching else 'off'})", "seed": self.seed,
            "server": {"policy": "paged", "kv_budget_tokens": self.kv_budget_tokens, "max_num_seqs": 64,
                       "max_num_batched_tokens": 2048, "timeout_s": 60, "prefix_caching": caching},
            "step_model": {"base_s": 0.012, "per_prefill_token_s": 0.00012, "per_decode_seq_s": 0.0002,
                           "per_kv_token_s": 0.00000002},
            "workload": {"arrival": {"kind": "poisson", "rate_rps": self.rate_rps},
                         "num_requests": self.num_requests, "classes": [cls]}},
            source="cache experiment")


class CacheRun(BaseModel):
    """One simulation's numbers that caching can change, and those it should not."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    caching: bool
    completed: int
    failed: int = Field(description="Requests that did not succeed (timeouts, rejections, failures).")
    token_hit_rate: float | None = Field(description="Cached / prompt tokens; None with caching off.")
    requests_with_hit: int | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    prefill_p50_s: float | None
    request_tpot_p50_s: float | None
    latency_p50_s: float | None
    estimated_prefill_saved_s: float | None
    prefix_evictions: int
    mean_prompt_tokens: float


class CacheComparison(BaseModel):
    """The same workload (same seed) with prefix caching off and on."""

    experiment: CacheExperiment
    off: CacheRun
    on: CacheRun
    allowed_hit_rate: float | None = Field(
        description="The share of prompt tokens the workload lets a cache reuse at best (full blocks; the first "
                    "request of each document or chat always misses). None for multi-turn, where it depends on "
                    "the answers.")

    @property
    def ttft_p50_change(self) -> float | None:
        """Return on / off - 1 for TTFT p50 (negative: caching cut it)."""
        return _change(self.on.ttft_p50_s, self.off.ttft_p50_s)

    @property
    def tpot_p50_change(self) -> float | None:
        """Return on / off - 1 for request TPOT p50."""
        return _change(self.on.request_tpot_p50_s, self.off.request_tpot_p50_s)


    def rows(self) -> list[tuple[str, float | int | None, float | int | None]]:
        """Return (metric, caching off, caching on) rows for a side-by-side table."""
        off, on = self.off, self.on
        return [
            ("token hit rate", off.token_hit_rate, on.token_hit_rate),
            ("requests with a hit", off.requests_with_hit, on.requests_with_hit),
            ("TTFT p50, s", off.ttft_p50_s, on.ttft_p50_s), ("TTFT p95, s", off.ttft_p95_s, on.ttft_p95_s),
            ("prefill p50, s", off.prefill_p50_s, on.prefill_p50_s),
            ("request TPOT p50, s", off.request_tpot_p50_s, on.request_tpot_p50_s),
            ("latency p50, s", off.latency_p50_s, on.latency_p50_s),
            ("completed", off.completed, on.completed), ("not completed", off.failed, on.failed),
            ("blocks evicted from the cache", off.prefix_evictions, on.prefix_evictions),
            ("mean prompt tokens", off.mean_prompt_tokens, on.mean_prompt_tokens),
        ]


def _change(on: float | None, off: float | None) -> float | None:
    return None if on is None or off is None or off == 0 else on / off - 1


def _run(exp: CacheExperiment, caching: bool) -> CacheRun:
    result = simulate(exp.scenario(caching))
    report = build_report(result.records, result.window_start_s, result.window_end_s)
    pc = report.prefix_cache
    pick = (lambda d: None if d is None else d.at(50))  # noqa: E731
    return CacheRun(
        caching=caching, completed=report.completed, failed=report.offered - report.completed,
        token_hit_rate=None if pc is None else pc.token_hit_rate,
        requests_with_hit=None if pc is None else pc.requests_with_hit,
        ttft_p50_s=report.ttft_s.at(50), ttft_p95_s=report.ttft_s.at(95), prefill_p50_s=pick(report.prefill_s),
        request_tpot_p50_s=report.request_tpot_s.at(50), latency_p50_s=report.latency_s.at(50),
        estimated_prefill_saved_s=None if pc is None else pc.estimated_prefill_saved_s,
        prefix_evictions=result.prefix_evictions,
        mean_prompt_tokens=float(result.records.prompt_tokens.mean()) if len(result.records) else 0.0)


def run_cache_experiment(exp: CacheExperiment) -> CacheComparison:
    """Simulate ``exp`` with caching off and on (same seed, so the same arrivals and prompts)."""
    allowed: float | None
    bs = 16
    if exp.workload == "cold":
        allowed = 0.0
    elif exp.workload == "repeated":
        allowed = ((exp.prompt_tokens - 1) // bs * bs) / exp.prompt_tokens
    elif exp.workload == "partly_shared":
        allowed = (max(1, round(exp.shared_share * exp.prompt_tokens)) // bs * bs) / exp.prompt_tokens
    else:
        allowed = None
    return CacheComparison(experiment=exp, off=_run(exp, False), on=_run(exp, True), allowed_hit_rate=allowed)
