"""A guided interview question on capacity, answered by the planner: predict first, then reveal.

"A 70B model at 20 requests/s with 2,000-token prompts: how many H100s?" The reader predicts the
GPU count; the reveal runs the planner on H100s only and scores the prediction with the
walk-through's scorer (``servebench.analysis.walkthrough.score_prediction``).
"""

from __future__ import annotations

from servebench.analysis.summary import SLO
from servebench.analysis.walkthrough import NumericAnswer, WalkthroughStep
from servebench.capacity.model_presets import get_preset
from servebench.planning.planner import Evaluation, Plan, PlanRequest, Workload

QUESTION_RATE_RPS = 20.0
QUESTION = ("A product team launches a feature on Llama-3.1-70B (bf16 weights) at 20 requests/s, with 2,000-token "
            "prompts and 200-token answers. The SLOs: 95% of requests see their first token within 2 s and then "
            "at most 50 ms per token. How many H100s (80 GB) does it need, tensor parallelism and replicas "
            "included?")


def interview_request(requests_per_simulation: int = 150) -> PlanRequest:
    """Return the planner request behind the question (H100s only)."""
    return PlanRequest(model=get_preset("llama-3.1-70b"), workload=Workload.fixed(2000, 200),
                       slo=SLO(ttft_s=2.0, tpot_s=0.05), gpus=["H100"], max_num_seqs=[64, 256],
                       requests_per_simulation=requests_per_simulation)


def interview_step(evaluation: Evaluation, result: Plan) -> WalkthroughStep:
    """Return the question as a predict-then-reveal step whose answer the plan computed."""
    best = result.best
    if best is None or best.gpus_total is None:
        raise ValueError("the interview plan found no option; its reason: " + (result.reason or ""))
    req = evaluation.request
    weights_gib = 70.55e9 * 2 / 2**30
    explanation = (
        f"Memory first: 70.55B parameters x 2 bytes = {weights_gib:.0f} GiB of weights, more than one 80 GB H100 "
        f"holds, so a replica needs tensor parallelism of at least 2, and more GPUs leave more room for KV. Then "
        f"time: every decode step reads a GPU's share of the weights (at {req.efficiency.bandwidth:.0%} of 3.35 "
        f"TB/s), and every prompt costs 2 x 70.55B x 2,000 FLOPs of prefill. The planner turns that into a step "
        f"model, simulates one replica under load, and finds {best.capacity_rps_per_replica:.3g} requests/s per "
        f"{best.tensor_parallel}-GPU replica within the SLOs (binding limit: {best.limit}). With "
        f"{req.headroom:.0%} headroom, 20 requests/s needs {best.replicas} replicas: {best.gpus_total} H100s, "
        f"about ${best.cost_per_hour_usd:,.0f} per hour at ${result.details[0].price_usd_per_hour:.2f} per "
        f"GPU-hour. An estimate, not a guarantee: a timing run on the real hardware (--calibrate) tightens it.")
    return WalkthroughStep(
        number=1, title="How many H100s?", question=QUESTION,
        numbers=[NumericAnswer(name="h100s", label="H100 GPUs in all", value=best.gpus_total,
                               tolerance=max(2.0, 0.25 * best.gpus_total), unit="GPUs")],
        explanation=explanation)
