"""The one-sentence answers the capacity pages lead with, each number through the one formatter.

A product manager asks "how many requests fit?", "what does this cost?", "how much load does one server
take?", "what does the cache buy?"; each page answers first in one sentence (these functions), with the
numbers behind it one click away. Pure: data in, text out.
"""

from __future__ import annotations

from servebench.analysis.summary import SLO, Stalls
from servebench.capacity.kv import GIB, KVReport
from servebench.dashboard.traces import option_text
from servebench.dashboard.wording import s_to_ms
from servebench.formatting import fmt, fmt_share, fmt_time
from servebench.output.figures.sweep import capacity_reading, load_unit
from servebench.planning import Plan
from servebench.serving.cache_experiment import CacheComparison
from servebench.serving.sweep import SweepResult


def gib_text(n_bytes: int | float | None) -> str:
    """Return bytes as GiB for people ('—' for no data).

    >>> gib_text(8 * 2**30), gib_text(1_048_576_000), gib_text(None)
    ('8 GiB', '0.9766 GiB', '—')
    """
    return fmt(None) if n_bytes is None else f"{fmt(n_bytes / GIB)} GiB"


def kv_answer(report: KVReport) -> str:
    """Say how many requests of this size fit in the KV budget, and why, in one sentence.

    >>> from servebench.capacity import kv
    >>> shape = kv.ModelShape(name="m", layers=32, kv_heads=8, head_dim=128)
    >>> print(kv_answer(kv.analyze(shape, budget_bytes=8 * kv.GIB, prompt_tokens=7800, output_cap=200)))
    8 sequences fit: each request holds 8,000 tokens of KV (0.9766 GiB), and 8 GiB holds 65,536 tokens.
    >>> print(kv_answer(kv.analyze(shape, budget_bytes=kv.GIB // 2, prompt_tokens=7800, output_cap=200)))
    No request fits: one holds 8,000 tokens of KV (0.9766 GiB), and 0.5 GiB holds 4,096 tokens.
    """
    fits = report.max_concurrent_sequences
    held = (f"{fmt(report.tokens_per_request)} tokens of KV ({gib_text(report.bytes_per_request)}), and "
            f"{gib_text(report.budget_bytes)} holds {fmt(report.budget_tokens)} tokens")
    if not fits:
        return f"No request fits: one holds {held}."
    return f"{fmt(fits)} sequence{'' if fits == 1 else 's'} fit: each request holds {held}."


def kv_load_answer(report: KVReport) -> str | None:
    """Say what Little's law makes of the arrival rate against that limit (None without a rate or a limit).

    >>> from servebench.capacity import kv
    >>> shape = kv.ModelShape(name="m", layers=32, kv_heads=8, head_dim=128)
    >>> r = kv.analyze(shape, budget_bytes=8 * kv.GIB, prompt_tokens=7800, output_cap=200, rate_per_s=1.0,
    ...                time_in_service_s=7.369)
    >>> print(kv_load_answer(r))
    At 1 request/s, 7.369 are in service on average: 92.1% of the 8 that fit (full at 1.086 requests/s).
    """
    if report.in_service is None or not report.max_concurrent_sequences or report.rate_per_s is None:
        return None
    rate = report.rate_per_s
    return (f"At {fmt(rate)} request{'' if rate == 1 else 's'}/s, {fmt(report.in_service)} are in service on "
            f"average: {fmt_share(report.utilization)} of the {fmt(report.max_concurrent_sequences)} that fit "
            f"(full at {fmt(report.saturation_rate_per_s)} requests/s).")


def plan_answer(result: Plan) -> str:
    """Say what the planned traffic needs, in one sentence: replicas, GPU, tensor parallelism, cost per hour.

    >>> from servebench.planning import Option
    >>> o = Option(gpu="H100", tensor_parallel=8, max_num_seqs=64, capacity_rps_per_replica=3.0, replicas=4,
    ...            gpus_total=32, meets_slo=True, cost_per_hour_usd=96.0, cost_per_million_output_tokens_usd=2.5,
    ...            limit="decode")
    >>> print(plan_answer(Plan(rate_rps=10.0, options=[o], best=o, reason="", details=[])))
    4 replicas of H100 ×8, $96.00/h: 32 GPUs serve 10 requests/s within the SLOs ($2.50 per million output tokens).
    >>> print(plan_answer(Plan(rate_rps=10.0, options=[], best=None, reason="", details=[])))
    No configuration tried serves 10 requests/s within the SLOs.
    """
    best = result.best
    if best is None:
        return f"No configuration tried serves {fmt(result.rate_rps)} requests/s within the SLOs."
    per_million = best.cost_per_million_output_tokens_usd
    gpus = "1 GPU serves" if best.gpus_total == 1 else f"{fmt(best.gpus_total)} GPUs serve"
    return (f"{option_text(best)}: {gpus} "
            f"{fmt(result.rate_rps)} requests/s within the SLOs"
            + ("." if per_million is None else f" ({usd_text(per_million)} per million output tokens)."))


def slo_text(slo: SLO, target: float) -> str:
    """Say what the SLOs ask, in words: TTFT and TPOT in ms, as their inputs take them; latency in s from 1 s.

    >>> slo_text(SLO(ttft_s=5.0, tpot_s=0.05), 0.95), slo_text(SLO(), 0.9)
    ('95% of requests with TTFT at most 5,000 ms and request TPOT at most 50 ms', '90% of requests succeeding')
    """
    limits = [f"{name} at most {fmt(value)} s" if name == "latency" and value >= 1
              else f"{name} at most {fmt(s_to_ms(value))} ms"
              for name, value in (("TTFT", slo.ttft_s), ("request TPOT", slo.tpot_s), ("latency", slo.latency_s))
              if value is not None]
    return f"{fmt_share(target)} of requests " + (f"with {' and '.join(limits)}" if limits else "succeeding")


def sweep_answer(result: SweepResult) -> str:
    """Say how much load one server of the scenario takes within the SLOs, and where latency breaks.

    The capacity is the sweep's reading (rounded down to what its requests per point resolve).
    """
    unit = load_unit(result)
    reading = capacity_reading(result)
    slo = slo_text(result.slo, result.slo_target)
    if result.capacity.load is None:
        head = f"Not even the lowest load tried meets the SLOs ({slo}): {reading.interval or 'none found'}."
    elif result.capacity.upper is None:
        head = f"Every load tried meets the SLOs ({slo}), up to {fmt(result.capacity.load)} {unit}: try higher loads."
    else:
        head = f"One server takes up to {reading.value} {unit} within the SLOs ({slo})."
    knee = ("" if result.knee_load is None else
            f" Past {fmt(result.knee_load)} {unit} latency climbs steeply (the knee: p95 over twice its value at "
            "the lowest load).")
    return head + knee


def cache_answer(comparison: CacheComparison) -> str:
    """Say what prefix caching does to TTFT and TPOT here, in one sentence.

    >>> from servebench.serving.cache_experiment import CacheExperiment, CacheRun
    >>> run = dict(completed=400, failed=0, requests_with_hit=None, ttft_p95_s=None, prefill_p50_s=None,
    ...            latency_p50_s=None, estimated_prefill_saved_s=None, prefix_evictions=0, mean_prompt_tokens=1600)
    >>> off = CacheRun(caching=False, token_hit_rate=None, ttft_p50_s=0.8, request_tpot_p50_s=0.03, **run)
    >>> on = CacheRun(caching=True, token_hit_rate=0.792, ttft_p50_s=0.2, request_tpot_p50_s=0.0297, **run)
    >>> both = CacheComparison(experiment=CacheExperiment(), off=off, on=on, allowed_hit_rate=0.8)
    >>> print(cache_answer(both))  # doctest: +NORMALIZE_WHITESPACE
    Prefix caching serves 79.2% of prompt tokens from the cache, cuts TTFT p50 by 75% (800 ms to 200 ms) and cuts
    request TPOT p50 by 1% (30 ms to 29.7 ms).
    """
    on, off = comparison.on, comparison.off
    ttft = _change_text("TTFT p50", off.ttft_p50_s, on.ttft_p50_s, comparison.ttft_p50_change)
    tpot = _change_text("request TPOT p50", off.request_tpot_p50_s, on.request_tpot_p50_s,
                        comparison.tpot_p50_change)
    return f"Prefix caching serves {fmt_share(on.token_hit_rate)} of prompt tokens from the cache, {ttft} and {tpot}."


def _change_text(name: str, before: float | None, after: float | None, change: float | None) -> str:
    """Say how a time moved: 'cuts TTFT p50 by 75% (800 ms to 200 ms)'; under half a percent it 'leaves' it.

    >>> _change_text("TPOT", 0.03, 0.03, 0.0), _change_text("TTFT", None, 0.2, None)
    ('leaves TPOT at 30 ms', 'gives TTFT 200 ms')
    """
    if change is None:
        return f"gives {name} {ms_text(after)}"
    if abs(change) < 0.005:
        return f"leaves {name} at {ms_text(after)}"
    return f"{'cuts' if change < 0 else 'raises'} {name} by {abs(change):.0%} ({ms_text(before)} to {ms_text(after)})"


def usd_text(dollars: float | None) -> str:
    """Return dollars with cents ('—' for no data).

    >>> usd_text(2.2), usd_text(1234.5), usd_text(None)
    ('$2.20', '$1,234.50', '—')
    """
    return fmt(None) if dollars is None else f"${dollars:,.2f}"


def ms_text(seconds: float | None) -> str:
    """Return a time in milliseconds for people.

    >>> ms_text(0.0297), ms_text(1.25), ms_text(None)
    ('29.7 ms', '1,250 ms', '—')
    """
    return fmt(None) if seconds is None else f"{fmt(seconds * 1000)} ms"


MOST_STALLED = 0.5  # past this share under the relative rule, the answer says why so many count


def stall_answer(stalls: Stalls | None, itl_p50_s: float | None, unit: str = "ms") -> str | None:
    """Return what the stalled share means, and why most requests count when the threshold is relative to the median.

    A stream that pauses past 4x the median gap looks stalled; on a server whose prompts are prefilled in chunks
    beside the decodes, every running stream waits through each such step, so that rule counts most requests (92%
    of ``paged_chat``'s): the sentence says so rather than leave "92% stalled" to read as a broken server.

    >>> s = Stalls(threshold_s=0.1, threshold_rule="4x median ITL", requests=100, stalled=92, share=0.92)
    >>> print(stall_answer(s, 0.025))  # doctest: +NORMALIZE_WHITESPACE
    92% of requests paused longer than 100 ms at least once (4x the median gap between tokens, 25 ms). A threshold
    relative to the median counts most streams when some steps are much longer than a decode step, as when prompts
    are prefilled in chunks beside the decodes: each running stream waits through those steps. The longest-stall
    chart shows how long the pauses are.
    >>> print(stall_answer(Stalls(threshold_s=0.5, threshold_rule="--stall-s", requests=10, stalled=1, share=0.1),
    ...                    0.02, "s"))
    10% of requests paused longer than 0.5 s at least once (--stall-s).
    >>> stall_answer(None, None) is None
    True
    """
    if stalls is None or stalls.share is None:
        return None
    relative = stalls.threshold_rule != "--stall-s"
    rule = f"4x the median gap between tokens, {fmt_time(itl_p50_s, unit)}" if relative and itl_p50_s else \
        stalls.threshold_rule
    text = (f"{fmt_share(stalls.share)} of requests paused longer than {fmt_time(stalls.threshold_s, unit)} at least "
            f"once ({rule}).")
    if relative and stalls.share > MOST_STALLED:
        text += (" A threshold relative to the median counts most streams when some steps are much longer than a "
                 "decode step, as when prompts are prefilled in chunks beside the decodes: each running stream waits "
                 "through those steps. The longest-stall chart shows how long the pauses are.")
    return text
