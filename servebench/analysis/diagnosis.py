"""Tell queueing, prefill, decode and KV-memory limits apart from stage timings and concurrency.

Input is either timing records with ``admitted`` (and ``prompt_tokens`` for the KV limit), from
which ``measure`` builds a profile's measurements, or a measurement table like the spec's
(``ProfileTable``). For each profile ``diagnose`` computes the KV limit on concurrent sequences,
Little's law in service = rate x (prefill p50 + (N - 1) x TPOT p50), the utilization of the
limit, the shares of TTFT p95 that are queue wait and prefill, and a verdict.

Rules (default thresholds in ``Thresholds``). Every rule is checked and listed (``Verdict.rules``);
without a symptom the verdict is ``none``; with one, the first rule in this order whose every
condition holds wins (``PRECEDENCE``), and ``Verdict.explanation`` says why in one sentence::

    limit       pattern (all must hold)                                       why
    ----------  ------------------------------------------------------------  ------------------------------------
    none        no symptom: TTFT p95 <= objective (2 s), no timeouts, no     the server keeps up at this load
                rejections, TPOT growth at the load < 1.25
    kv_memory   peak active >= KV limit; share of run at peak >= 25%;         admission waits for KV memory while
                queue wait p95 >= 50% of TTFT p95; TPOT growth < 1.25         running sequences decode at full speed
    decode      TPOT growth >= 1.25 (TPOT with many sequences active /        each decode step slows as the batch
                TPOT with few, or / a baseline), and at the load requests     grows: compute or bandwidth bound
                decode under (when known)
    queueing    queue wait p95 >= 50% of TTFT p95; peak active below the     a cap other than memory (max
                KV limit (or no limit known)                                  sequences, scheduler, client) holds
    prefill     prefill p95 >= 50% of TTFT p95; queue wait p95 < 50%          first tokens wait for prompt compute
    none        a symptom, but no pattern above (evidence says which)         look at failures by cause
    undetermined  a symptom, no admitted times, not decode                    queue wait cannot be told from prefill

``TPOT growth`` is TPOT p50 over a baseline: from records, TPOT p50 of requests decoding while
in-service was in its top quarter over the bottom quarter; in a table, ``tpot_baseline_s`` (default:
the lowest TPOT p50 among the table's profiles). ``TPOT growth at the load`` reads a line
TPOT(L) = TPOT(1) + slope x (L - 1) (fitted to records' TPOT against the number in service, or
taken from a fitted step model) at the mean number in service requests decode under: a server
whose TPOT grows in brief bursts but not at its typical load is below saturation.

Below saturation (verdict ``none``) ``first_to_bind`` says which limit binds first as load grows
and at about what arrival rate: the KV limit and the cap on running sequences at
rate = limit / time in service (Little's law, with TPOT at that many in service), decode at the
number in service where TPOT reaches 1.25x its unloaded value. The same rules are in
``docs/diagnosis.md``.
The guided walkthrough of the spec's exercise is ``servebench.analysis.walkthrough``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servebench.analysis.percentiles import percentile
from servebench.analysis.server_metrics import ServerState, server_state
from servebench.analysis.summary import build_report
from servebench.analysis.timeline import active_counts
from servebench.capacity import kv
from servebench.capacity.stepmodel import StepModel
from servebench.errors import ConfigError
from servebench.formatting import fmt, fmt_percent, fmt_rate, fmt_share, fmt_time
from servebench.records.server_samples import ServerSamples
from servebench.records.table import RecordTable

Limit = Literal["kv_memory", "queueing", "prefill", "decode", "none", "undetermined"]
LIMITS: tuple[str, ...] = ("kv_memory", "queueing", "prefill", "decode", "none")  # what a verdict can name
PRECEDENCE: tuple[str, ...] = ("kv_memory", "decode", "queueing", "prefill")  # the first rule that holds wins
MIN_LOAD_BINS = 2  # distinct in-service counts needed to fit TPOT against load
MIN_FIT_REQUESTS = 100  # requests in that fit before decode's binding rate is extrapolated from it


class Thresholds(BaseModel):
    """The thresholds the rules compare measurements against."""

    model_config = ConfigDict(extra="forbid")
    ttft_objective_s: float = Field(2.0, gt=0, description="TTFT p95 above this is a symptom.")
    queue_share: float = Field(0.5, gt=0, le=1, description="Queue wait p95 / TTFT p95 at or above: queueing dominates.")
    prefill_share: float = Field(0.5, gt=0, le=1, description="Prefill p95 / TTFT p95 at or above: prefill dominates.")
    share_at_peak: float = Field(0.25, gt=0, le=1, description="Share of the run at peak active: 'much of the run'.")
    tpot_growth: float = Field(1.25, gt=1, description="TPOT over its baseline at or above: TPOT grows with load.")


class TpotLine(BaseModel):
    """Request TPOT against the number in service: TPOT(L) = unloaded_s + per_seq_s x (L - 1)."""

    model_config = ConfigDict(extra="forbid")
    unloaded_s: float = Field(gt=0, description="TPOT with one sequence in service, s.")
    per_seq_s: float = Field(ge=0, description="TPOT added per extra sequence in service, s.")
    source: str = Field(description="Where the line comes from: records or a fitted step model.")
    fitted_requests: int | None = Field(None, ge=0, description="Requests the fit used (records only).")

    def at(self, in_service: float) -> float:
        """Return TPOT with ``in_service`` sequences in service (at least one)."""
        return self.unloaded_s + self.per_seq_s * max(in_service - 1.0, 0.0)


class ProfileMeasurements(BaseModel):
    """One load profile's measurements (the spec's table columns); None where not measured."""

    model_config = ConfigDict(extra="forbid")
    name: str
    prompt_tokens: int | None = Field(None, ge=0, description="Prompt tokens per request (mean if they vary).")
    requests: int = Field(ge=1)
    timeouts: int = Field(0, ge=0)
    rejected: int = Field(0, ge=0, description="Requests refused at admission (queue full, too large); in failures.")
    failures: int = Field(0, ge=0, description="Non-success outcomes other than timeouts.")
    queue_wait_p50_s: float | None = Field(None, ge=0, description="Arrival to admission.")
    queue_wait_p95_s: float | None = Field(None, ge=0)
    prefill_p50_s: float | None = Field(None, ge=0, description="Admission to first token.")
    prefill_p95_s: float | None = Field(None, ge=0)
    ttft_p95_s: float | None = Field(None, ge=0, description="Arrival to first token, successes.")
    tpot_p50_s: float | None = Field(None, ge=0, description="Request TPOT p50.")
    tpot_baseline_s: float | None = Field(None, gt=0, description="TPOT p50 with few sequences active.")
    tpot_high_load_s: float | None = Field(None, ge=0, description="TPOT p50 with many sequences active.")
    peak_active: int | None = Field(None, ge=0, description="Peak sequences in service (admitted to end).")
    share_at_peak: float | None = Field(None, ge=0, le=1, description="Share of the run at that peak.")
    share_at_peak_is_upper_bound: bool = Field(False, description="True when the table says 'under x%'.")
    mean_in_service: float | None = Field(None, ge=0, description="Measured time-average in service.")
    arrival_rate_per_s: float = Field(gt=0)
    output_tokens: int = Field(ge=1, description="Output tokens per success (N in prefill + (N-1) x TPOT).")
    output_cap: int | None = Field(None, ge=1)
    deadline_s: float | None = Field(None, gt=0)
    duration_s: float | None = Field(None, gt=0)
    has_admitted: bool = Field(True, description="False: no admission times, so queue wait and prefill are "
                                                 "unknown and 'active' counts requests in flight.")
    ttft_p50_s: float | None = Field(None, ge=0, description="Arrival to first token p50, successes.")
    tpot_line: TpotLine | None = Field(None, description="TPOT against the number in service (records).")
    decode_load: float | None = Field(None, ge=0, description="Mean number in service while requests decode.")
    max_num_seqs: int | None = Field(None, ge=1, description="The server's cap on running sequences, if known.")
    shared_prefix_share: float | None = Field(
        None, ge=0, le=1, description="Share of prompt tokens prompts share with earlier ones (a prefix cache's "
                                      "reachable hit rate; from records, their cached_prompt_tokens hit rate).")
    server: ServerState | None = Field(None, description="The server's own metrics over the window (running, "
                                                        "waiting, KV use, preemptions); None without them.")
    shared_clock: bool = Field(True, description="False: every request on its own clock (llmperf), so there is "
                                                 "no arrival rate, concurrency or capacity in requests/s.")


class ProfileTable(BaseModel):
    """Profiles measured on one deployment: the shared model shape, KV budget and admission policy."""

    model_config = ConfigDict(extra="forbid")
    description: str | None = None
    model: kv.ModelShape | None = None
    kv_budget_gib: float | None = Field(None, gt=0, description="Memory left for the KV cache, GiB per GPU.")
    policy: kv.Policy = "reserve"
    expected_output_tokens: int | None = Field(None, ge=0, description="Paged policy: expected output length.")
    thresholds: Thresholds = Field(default_factory=Thresholds)
    profiles: list[ProfileMeasurements] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> "ProfileTable":
        names = [p.name for p in self.profiles]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"profile names must be unique; repeated: {', '.join(dups)}")
        return self


class Evidence(BaseModel):
    """One measurement checked against one threshold."""

    measurement: str
    value: float | None
    threshold: float | None
    rule: str = Field(description="The comparison, e.g. '>=' or '<'.")
    crossed: bool | None = Field(description="Whether value meets the rule; None when not measured.")
    note: str


class Experiment(BaseModel):
    """One experiment that would confirm the verdict, and the result that would refute it."""

    action: str
    confirm: str
    refute: str


class RuleCheck(BaseModel):
    """One rule of the precedence list: its conditions and whether all of them hold."""

    limit: Limit
    holds: bool
    conditions: list[Evidence]


class Binding(BaseModel):
    """Where one limit binds as the arrival rate grows, estimated from this profile's measurements."""

    limit: Limit
    rate_per_s: float | None = Field(description="Arrival rate at which it binds (None: it does not, as far "
                                                 "as the data shows).")
    in_service: float | None = Field(description="Sequences in service when it binds.")
    headroom: float | None = Field(description="That rate over the measured arrival rate.")
    basis: str = Field(description="How the rate was estimated.")


Standing = Literal["below_limit", "at_limit", "cannot_tell"]


class Headline(BaseModel):
    """One answer for a profile: the load it was measured at, the capacity it implies, the limit that binds.

    Consistent with the verdict by construction: at a limit, the capacity is at most the measured
    load; under "cannot tell" nothing is extrapolated.
    """

    standing: Standing = Field(description="below_limit: nothing limits it yet; at_limit: a limit binds at this "
                                           "load; cannot_tell: the data cannot say which limit, or has no rate.")
    measured_rate_per_s: float | None = Field(description="Offered arrival rate (None: no shared clock).")
    completed_rate_per_s: float | None = Field(description="Successes per second of the window.")
    non_success_share: float | None = Field(description="Share of requests that did not succeed.")
    limit: Limit | None = Field(description="The limit that binds: at this load, or first as load grows.")
    capacity_rate_per_s: float | None = Field(description="The arrival rate it can take before (at_limit: "
                                                          "at most) that limit binds; None when not estimated.")
    capacity_basis: str = Field(description="How the capacity was estimated, or why it was not.")
    evidence: list[str] = Field(default_factory=list, description="The measurements behind it, one per line.")
    evidence_words: list[str] = Field(default_factory=list, exclude=True,
                                      description="The same lines with each measurement named in words, for a reader "
                                                  "who does not know the rules' keys (the dashboard; not in the JSON).")
    text: str = Field(description="The answer in one or two sentences.")


class Verdict(BaseModel):
    """What limits one profile, the numbers behind it, and how to check."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    profile: str
    limit: Limit
    summary: str
    evidence: list[Evidence]
    bytes_per_token: int | None = None
    budget_tokens: int | None = None
    tokens_per_request: int | None = None
    max_concurrent_sequences: int | None = None
    time_in_service_s: float | None = None
    in_service: float | None = Field(None, description="Little's law: rate x time in service.")
    utilization: float | None = Field(None, description="In service / max concurrent sequences.")
    saturation_rate_per_s: float | None = None
    queue_share_of_ttft: float | None = Field(None, description="Queue wait p95 / TTFT p95.")
    prefill_share_of_ttft: float | None = Field(None, description="Prefill p95 / TTFT p95.")
    prefill_share_of_service: float | None = Field(None, description="Prefill p50 / time in service.")
    tpot_growth: float | None = None
    tpot_growth_at_load: float | None = Field(None, description="TPOT at the mean load requests decode under "
                                                                "over TPOT with one in service.")
    rules: list[RuleCheck] = Field(default_factory=list, description="Every rule, in precedence order.")
    explanation: str = Field("", description="Why this verdict, in one sentence.")
    explanation_words: str = Field("", exclude=True, description="The same sentence naming limits and measurements in "
                                                                 "words (the dashboard; not in the JSON).")
    first_to_bind: Binding | None = Field(None, description="The limit that binds first as load grows.")
    bindings: list[Binding] = Field(default_factory=list, description="Every limit's estimated binding rate.")
    cannot_tell: list[str] = Field(default_factory=list, description="What this data cannot tell.")
    prefill: str = Field(description="What prefill contributes.")
    experiment: Experiment
    measurements: ProfileMeasurements
    headline: Headline | None = Field(None, description="The one answer the verdict, bindings and load give.")


# --------------------------------------------------------------------------- measuring records


def tpot_by_load(table: RecordTable) -> tuple[float | None, float | None]:
    """Return TPOT p50 of requests decoding at low and at high in-service counts (bottom, top quarter).

    Each multi-token success is placed by the number in service (admitted to end; arrival to end
    when records have no admitted times) at the middle of its decode.
    Returns (None, None) when load did not vary (no way to see TPOT grow).
    """
    begin = table.admitted if table.has_admitted else table.start
    ok = table.is_success & np.isfinite(begin) & (table.output_tokens > 1)
    adm = np.isfinite(begin)
    if np.count_nonzero(ok) < 4:
        return None, None
    ft, end, out = table.first_token[ok], table.end[ok], table.output_tokens[ok]
    tpot = (end - ft) / (out - 1)
    load = active_counts(begin[adm], table.end[adm], (ft + end) / 2)
    lo_cut, hi_cut = percentile(load, 25), percentile(load, 75)
    assert lo_cut is not None and hi_cut is not None
    if lo_cut >= hi_cut:
        return None, None
    return percentile(tpot[load <= lo_cut], 50), percentile(tpot[load >= hi_cut], 50)


def tpot_line(table: RecordTable) -> tuple[TpotLine | None, float | None]:
    """Fit TPOT against the number in service; return the line and the mean load requests decode under.

    Each multi-token success is placed by the number in service (admitted to end; arrival to end
    without admitted times) at the middle of its decode. The line is a weighted least-squares fit
    to the median TPOT of each in-service count seen by at least 3 requests (so a few slow requests
    do not tilt it); it needs two such counts, else the line is None.
    """
    has_adm = table.has_admitted
    begin = table.admitted if has_adm else table.start
    valid = np.isfinite(begin)
    ok = table.is_success & valid & np.isfinite(table.first_token) & (table.output_tokens > 1)
    if not ok.any():
        return None, None
    ft, end, out = table.first_token[ok], table.end[ok], table.output_tokens[ok]
    tpot = (end - ft) / (out - 1)
    load = active_counts(begin[valid], table.end[valid], (ft + end) / 2)
    mean_load = float(load.mean())
    levels, counts = np.unique(load, return_counts=True)
    keep = counts >= 3
    if int(keep.sum()) < MIN_LOAD_BINS:
        return None, mean_load
    x = levels[keep].astype(np.float64)
    y = np.array([np.median(tpot[load == lv]) for lv in levels[keep]])
    w = counts[keep].astype(np.float64)
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))
    slope = max(0.0, float(slope))
    unloaded = float(intercept) + slope if slope > 0 else float(np.average(y, weights=w))
    if unloaded <= 0:
        unloaded = float(y.min()) if y.min() > 0 else float(tpot[tpot > 0].min(initial=np.inf))
    if not np.isfinite(unloaded) or unloaded <= 0:
        return None, mean_load
    return TpotLine(unloaded_s=unloaded, per_seq_s=slope, source="records",
                    fitted_requests=int(counts[keep].sum())), mean_load


def measure(table: RecordTable, window_start: float, window_end: float, *, name: str | None = None,
            output_cap: int | None = None, deadline_s: float | None = None,
            require_admitted: bool = True) -> ProfileMeasurements:
    """Build a profile's measurements from records (reusing the report).

    Records without ``admitted`` times are refused unless ``require_admitted`` is False: then queue
    wait and prefill stay unknown and peak active counts requests in flight (arrival to end).
    """
    if not table.has_admitted and require_admitted:
        raise ConfigError(f"{table.source or 'records'}: no 'admitted' times, so queue wait cannot be told "
                          "from prefill; add the server's admission time to each record")
    report = build_report(table, window_start, window_end, by_slice=False)
    qw, pf = report.queue_wait_s, report.prefill_s
    starts = np.sort(table.start)
    span = float(starts[-1] - starts[0])
    rate = (len(table) - 1) / span if len(table) > 1 and span > 0 else len(table) / report.window_s
    prompt = table.prompt_tokens[table.prompt_tokens >= 0]
    ok_out = table.output_tokens[table.is_success & (table.output_tokens >= 1)]
    produced = table.output_tokens[table.output_tokens >= 0]
    n_out = percentile(ok_out, 50)
    if n_out is None:
        raise ConfigError(f"{table.source or 'records'}: no successful request, so there is no time in service "
                          "to measure; see the failure report (servebench summarize)")
    has_adm = table.has_admitted
    begin = table.admitted if has_adm else table.start
    adm = np.isfinite(begin)
    busy = np.clip(table.end[adm], window_start, window_end) - np.clip(begin[adm], window_start, window_end)
    low, high = tpot_by_load(table)
    line, decode_load = tpot_line(table)
    ins = report.in_service if has_adm else report.active_requests
    assert ins is not None
    return ProfileMeasurements(
        name=name or table.source or "records",
        prompt_tokens=math.ceil(float(prompt.mean())) if prompt.size else None,
        requests=report.offered, timeouts=report.timed_out, rejected=report.rejected,
        failures=report.offered - report.completed - report.timed_out,
        queue_wait_p50_s=qw.at(50) if qw else None, queue_wait_p95_s=qw.at(95) if qw else None,
        prefill_p50_s=pf.at(50) if pf else None, prefill_p95_s=pf.at(95) if pf else None,
        ttft_p95_s=report.ttft_s.at(95), tpot_p50_s=report.request_tpot_s.at(50),
        tpot_baseline_s=low if low else None, tpot_high_load_s=high,
        peak_active=ins.peak, share_at_peak=min(1.0, ins.share_of_window_at_peak),
        mean_in_service=float(busy.sum()) / report.window_s,
        arrival_rate_per_s=rate, output_tokens=int(n_out),
        output_cap=output_cap if output_cap is not None else (int(produced.max()) if produced.size else None),
        deadline_s=deadline_s, duration_s=report.window_s, has_admitted=has_adm,
        ttft_p50_s=report.ttft_s.at(50), tpot_line=line, decode_load=decode_load,
        shared_prefix_share=None if report.prefix_cache is None else report.prefix_cache.token_hit_rate,
    )


# --------------------------------------------------------------------------- the rules


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _ev(measurement: str, value: float | None, rule: str, threshold: float | None, note: str) -> Evidence:
    crossed = None
    if value is not None and threshold is not None:
        crossed = {">=": value >= threshold, "<": value < threshold, "<=": value <= threshold,
                   ">": value > threshold}[rule]
    return Evidence(measurement=measurement, value=value, threshold=threshold, rule=rule, crossed=crossed, note=note)


def diagnose(m: ProfileMeasurements, *, shape: kv.ModelShape | None = None, budget_bytes: int | None = None,
             policy: kv.Policy = "reserve", expected_output_tokens: int | None = None,
             thresholds: Thresholds | None = None, tpot_baseline_s: float | None = None,
             budget_tokens: int | None = None, step_model: StepModel | None = None, unit: str = "s") -> Verdict:
    """Return the verdict for one profile.

    The KV limit needs prompt tokens and either a shape with a budget in bytes, or ``budget_tokens``
    (a server's KV budget in tokens, as a scenario gives it). ``step_model`` (fitted to a timing
    run) gives TPOT against the number in service when the records cannot. ``unit`` ('s' or 'ms') is the one
    the verdict's sentences give times in (the CLI's seconds, the dashboard's ms); every number stays in seconds.
    """
    th = thresholds or Thresholds()
    if budget_bytes is not None and shape is None:
        raise ConfigError(f"profile {m.name!r}: a KV budget needs the model shape (--model, --config or "
                          "--layers/--kv-heads/--head-dim) to turn memory into concurrent sequences")
    out: dict = {}
    limit_n: int | None = None
    cap = m.output_cap if m.output_cap is not None else m.output_tokens
    tpr = kv.tokens_per_request(m.prompt_tokens, cap, policy, expected_output_tokens) \
        if m.prompt_tokens is not None else None
    if shape is not None:
        out["bytes_per_token"] = kv.bytes_per_token(shape)
        if budget_bytes is not None:
            out["budget_tokens"] = kv.budget_tokens(budget_bytes, shape)
        if tpr is not None:
            out["tokens_per_request"] = tpr
            if budget_bytes is not None:
                limit_n = kv.max_sequences_in_budget(budget_bytes, shape, tpr)
    elif budget_tokens is not None:
        out["budget_tokens"] = budget_tokens
        if tpr is not None:
            out["tokens_per_request"] = tpr
            limit_n = kv.max_concurrent_sequences(budget_tokens, tpr)
    if limit_n is not None:
        out["max_concurrent_sequences"] = limit_n
    first_s = m.prefill_p50_s if m.prefill_p50_s is not None else (None if m.has_admitted else m.ttft_p50_s)
    w = kv.time_in_service_s(first_s, m.tpot_p50_s, m.output_tokens) \
        if first_s is not None and m.tpot_p50_s is not None else None
    l_srv = kv.in_service(m.arrival_rate_per_s, w) if w is not None else None
    util = kv.utilization(l_srv, limit_n) if l_srv is not None and limit_n is not None else None
    sat = kv.saturation_rate_per_s(limit_n, w) if limit_n is not None and w is not None else None
    q_share = _ratio(m.queue_wait_p95_s, m.ttft_p95_s)
    p_share = _ratio(m.prefill_p95_s, m.ttft_p95_s)
    base = m.tpot_baseline_s or tpot_baseline_s
    growth = _ratio(m.tpot_high_load_s if m.tpot_high_load_s is not None else m.tpot_p50_s, base)
    at_limit = m.peak_active / limit_n if m.peak_active is not None and limit_n else None
    line = m.tpot_line or _line_from(step_model, m)
    load = m.decode_load if m.decode_load is not None else l_srv
    growth_at_load = line.at(max(load, 1.0)) / line.unloaded_s if line is not None and load is not None else None

    e_ttft = _ev("ttft_p95_s", m.ttft_p95_s, ">", th.ttft_objective_s, "TTFT p95 above the objective")
    e_timeouts = _ev("timeouts", m.timeouts, ">", 0, "requests that hit the deadline")
    e_rejected = _ev("rejected", m.rejected, ">", 0, "requests refused at admission (queue full or too large)")
    e_growth = _ev("tpot_growth", growth, ">=", th.tpot_growth,
                   f"TPOT {fmt_time(m.tpot_high_load_s or m.tpot_p50_s, unit)} over baseline {fmt_time(base, unit)}")
    e_load = _ev("tpot_growth_at_load", growth_at_load, ">=", th.tpot_growth,
                 f"TPOT at {fmt(load, 3)} in service (the mean requests decode under) over TPOT alone "
                 f"{fmt_time(line.unloaded_s if line else None, unit)}" + (f" ({line.source})" if line else ""))
    e_peak = _ev("peak_active / max_concurrent_sequences", at_limit, ">=", 1.0,
                 f"peak {fmt(m.peak_active)} against the KV limit {fmt(limit_n)}" if limit_n else "no KV limit known")
    e_share = _ev("share_at_peak", m.share_at_peak, ">=", th.share_at_peak,
                  ("under " if m.share_at_peak_is_upper_bound else "")
                  + f"{fmt_percent(m.share_at_peak)} of the run at the peak")
    e_queue = _ev("queue_share_of_ttft", q_share, ">=", th.queue_share,
                  f"queue wait p95 {fmt_time(m.queue_wait_p95_s, unit)} of TTFT p95 {fmt_time(m.ttft_p95_s, unit)}")
    e_flat = _ev("tpot_growth", growth, "<", th.tpot_growth,
                 f"TPOT {fmt_time(m.tpot_p50_s, unit)} against baseline {fmt_time(base, unit)}")
    e_prefill = _ev("prefill_share_of_ttft", p_share, ">=", th.prefill_share,
                    f"prefill p95 {fmt_time(m.prefill_p95_s, unit)} of TTFT p95 {fmt_time(m.ttft_p95_s, unit)}")
    e_below = _ev("peak_active / max_concurrent_sequences", at_limit, "<", 1.0,
                  f"peak {fmt(m.peak_active)} below the KV limit {fmt(limit_n)}" if limit_n else "no KV limit known")
    e_util = _ev("utilization", util, "<", 1.0,
                 f"{l_srv:.3g} in service against the limit {fmt(limit_n)}" if l_srv is not None
                 else "in service unknown")

    # TPOT growth is a symptom at the load requests typically decode under, when that is known
    decode_symptom = e_load if e_load.crossed is not None else e_growth
    symptoms = [e for e in (e_ttft, e_timeouts, e_rejected, decode_symptom) if e.crossed]
    kv_rule = [e_peak, e_share, e_queue, e_flat]
    decode_rule = [e_growth] + ([e_load] if e_load.crossed is not None else [])
    queue_rule = [e_queue, e_below]
    prefill_rule = [e_prefill, _ev("queue_share_of_ttft", q_share, "<", th.queue_share, "little queueing")]

    def holds(rule: list[Evidence], allow_unknown: Sequence[Evidence] = ()) -> bool:
        return all(e.crossed or (e.crossed is None and e in allow_unknown) for e in rule)

    rules = [RuleCheck(limit="kv_memory", holds=holds(kv_rule, allow_unknown=[e_flat]), conditions=kv_rule),
             RuleCheck(limit="decode", holds=holds(decode_rule), conditions=decode_rule),
             RuleCheck(limit="queueing", holds=holds([e_queue]) and (limit_n is None or bool(e_below.crossed)),
                       conditions=queue_rule),
             RuleCheck(limit="prefill", holds=holds(prefill_rule), conditions=prefill_rule)]
    winner = None
    if symptoms and not m.has_admitted and m.server is not None:  # the server's own evidence comes first
        server_checks = server_rules(m.server, e_growth, th)  # (a full, preempting KV cache also grows TPOT)
        rules += server_checks
        winner = next((r for r in server_checks if r.holds), None)
    if symptoms and winner is None:
        winner = next((r for r in rules if r.holds), None)
    limit: Limit
    if not symptoms:
        limit = "none"
        evidence = [e_ttft, e_timeouts, e_rejected, e_growth] + ([e_load] if e_load.crossed is not None else []) \
            + [e_util, e_below, e_share, e_queue]
    elif winner is not None:
        limit = winner.limit
        evidence = winner.conditions + symptoms if _by_server(winner) else \
            {"kv_memory": kv_rule + [e_util] + symptoms, "decode": decode_rule + [e_queue, e_prefill],
                    "queueing": queue_rule + [e_share] + symptoms, "prefill": prefill_rule + symptoms}[limit]
    else:
        limit = "none" if m.has_admitted else "undetermined"
        evidence = symptoms + [e_queue, e_prefill, e_peak]

    bindings = _bindings(m, limit_n, line, first_s, th, unit)
    if not m.shared_clock:
        bindings = [_not_estimated(b, "the records have no timestamps on one clock, so there is no arrival rate to "
                                      "scale") for b in bindings]
    elif symptoms and winner is None:
        bindings = [_not_estimated(b, "something already limits this load and the data cannot tell which, so no "
                                      "limit's rate is extrapolated") for b in bindings]
    elif winner is not None:
        now = _binds_now(winner.limit, m, bindings)
        bindings = [now, *(b for b in bindings if b.limit != winner.limit)]
    else:  # nothing limits the measured load, so an estimate below it does not fit this run
        bindings = [_not_estimated(b, f"{b.basis} gives {b.rate_per_s:.3g}/s, below the measured "
                                      f"{m.arrival_rate_per_s:.3g}/s where nothing limits it, so the estimate does "
                                      "not fit this run")
                    if b.rate_per_s is not None and b.rate_per_s < m.arrival_rate_per_s else b for b in bindings]
    known = [b for b in bindings if b.rate_per_s is not None]
    first = min(known, key=lambda b: b.rate_per_s) if known else None  # type: ignore[arg-type, return-value]
    if winner is not None:
        first = bindings[0]  # it binds at the measured load: whatever Little's law says of the others comes later
    cannot_tell = [] if m.has_admitted else [
        "the records have no admitted times, so TTFT cannot be split into queue wait and prefill: kv_memory, "
        "queueing and prefill cannot be told apart",
        "'active' counts requests in flight (arrival to end), queued ones included, not sequences in service"]
    share_srv = _ratio(m.prefill_p50_s, w)
    verdict = Verdict(
        profile=m.name, limit=limit, summary="", evidence=evidence, time_in_service_s=w, in_service=l_srv,
        utilization=util, saturation_rate_per_s=sat, queue_share_of_ttft=q_share, prefill_share_of_ttft=p_share,
        prefill_share_of_service=share_srv, tpot_growth=growth, tpot_growth_at_load=growth_at_load, rules=rules,
        first_to_bind=first, bindings=bindings, cannot_tell=cannot_tell, prefill="",
        experiment=Experiment(action="", confirm="", refute=""), measurements=m, **out)
    verdict.summary = _summary(verdict, bool(symptoms), unit)
    verdict.explanation = _explanation(verdict, symptoms, winner)
    verdict.explanation_words = _explanation(verdict, symptoms, winner, words=True)
    verdict.prefill = _prefill_text(verdict, unit)
    verdict.experiment = _experiment(verdict, shape, budget_bytes, policy, expected_output_tokens, unit)
    verdict.headline = _headline(verdict, symptoms, winner, unit)
    if winner is not None and _by_server(winner):
        _told_by_server(verdict, winner)
    return verdict


def _line_from(step_model: StepModel | None, m: ProfileMeasurements) -> TpotLine | None:
    """Return TPOT against load from a fitted step model: one decode step of L sequences per token."""
    if step_model is None:
        return None
    context = (m.prompt_tokens or 0) + m.output_tokens / 2  # tokens a decoding sequence attends over, on average
    one = step_model.step_s(0, 1, int(round(context)))
    if one <= 0:
        return None
    return TpotLine(unloaded_s=one, per_seq_s=step_model.per_decode_seq_s + step_model.per_kv_token_s * context,
                    source="fitted step model")


def _bindings(m: ProfileMeasurements, limit_n: int | None, line: TpotLine | None, first_s: float | None,
              th: Thresholds, unit: str = "s") -> list[Binding]:
    """Return where each limit binds as the arrival rate grows (Little's law with TPOT at that load)."""
    def time_in_service(in_service: float) -> float | None:
        tpot = line.at(in_service) if line is not None else m.tpot_p50_s
        if first_s is None or tpot is None:
            return None
        return kv.time_in_service_s(first_s, tpot, m.output_tokens)

    def at(limit: Limit, in_service: float | None, basis: str) -> Binding:
        w = time_in_service(in_service) if in_service is not None else None
        rate = in_service / w if in_service is not None and w else None
        head = rate / m.arrival_rate_per_s if rate is not None else None
        return Binding(limit=limit, rate_per_s=rate, in_service=in_service, headroom=head, basis=basis)

    tpot_how = "TPOT growing with load as measured" if line is not None else "TPOT as measured"
    out = []
    if limit_n is not None:
        out.append(at("kv_memory", float(limit_n), f"Little's law: the KV limit of {limit_n} sequences over the "
                                                    f"time in service at that load ({tpot_how})"))
    else:
        out.append(Binding(limit="kv_memory", rate_per_s=None, in_service=None, headroom=None,
                           basis="no KV limit known (give the model shape and KV budget)"))
    if m.max_num_seqs is not None and (limit_n is None or m.max_num_seqs < limit_n):
        out.append(at("queueing", float(m.max_num_seqs), f"Little's law: the cap of {m.max_num_seqs} running "
                                                         f"sequences over the time in service ({tpot_how})"))
    few = line is not None and line.fitted_requests is not None and line.fitted_requests < MIN_FIT_REQUESTS
    if few:
        out.append(Binding(limit="decode", rate_per_s=None, in_service=None, headroom=None,
                           basis=f"not extrapolated: TPOT against load is fitted to {line.fitted_requests} requests "
                                 f"(at least {MIN_FIT_REQUESTS} needed)"))
    elif line is not None and line.per_seq_s > 0:
        n_decode = 1.0 + (th.tpot_growth - 1.0) * line.unloaded_s / line.per_seq_s
        out.append(at("decode", n_decode, f"TPOT reaches {th.tpot_growth:g}x its unloaded "
                                          f"{fmt_time(line.unloaded_s, unit)} at {n_decode:.3g} in service "
                                          f"({line.source}: +{fmt_time(line.per_seq_s, unit)} per sequence)"))
    else:
        out.append(Binding(limit="decode", rate_per_s=None, in_service=None, headroom=None,
                           basis="TPOT does not grow measurably with load in this data"
                           if line is not None else "TPOT against load unknown (one load level measured)"))
    return out


def _not_estimated(b: Binding, why: str) -> Binding:
    """Return ``b`` with no rate: the data cannot support extrapolating it."""
    return Binding(limit=b.limit, rate_per_s=None, in_service=None, headroom=None, basis=f"not estimated: {why}")


def _completed_rate(m: ProfileMeasurements) -> float | None:
    """Return successes per second of the run (None without its duration)."""
    if not m.duration_s:
        return None
    return max(m.requests - m.timeouts - m.failures, 0) / m.duration_s


def _binds_now(limit: Limit, m: ProfileMeasurements, bindings: list[Binding]) -> Binding:
    """Return where a limit that already binds at the measured load binds: at most that load.

    The capacity is the smallest of the measured arrival rate, the successes per second completed
    there and Little's law's rate for that limit (when known): a server past its limit completes
    what it can, and a rate above the measured one would contradict the verdict.
    """
    done = _completed_rate(m)
    own = next((b for b in bindings if b.limit == limit and b.rate_per_s is not None), None)
    said = [f"the measured {m.arrival_rate_per_s:.3g}/s"]
    if done is not None:
        said.append(f"the {done:.3g} successes/s completed there")
    if own is not None:
        said.append(f"{own.rate_per_s:.3g}/s from its own estimate ({own.basis})")
    rate = min(r for r in (m.arrival_rate_per_s, done, own.rate_per_s if own else None) if r is not None)
    in_service = m.decode_load if limit == "decode" and m.decode_load is not None else m.mean_in_service
    return Binding(limit=limit, rate_per_s=rate, in_service=in_service, headroom=rate / m.arrival_rate_per_s,
                   basis=f"binds at the measured load (its rule holds): at most the smallest of {', '.join(said)}")


LIMIT_WORDS = {"kv_memory": "KV memory", "queueing": "queueing", "prefill": "prefill", "decode": "decode",
               "none": "nothing", "undetermined": "an undetermined limit"}

# The rules' measurements in words, and how their values read: 'time' (seconds, shown in the unit asked), 'share'
# (a percent), 'times' (a ratio, '1.03x'), else fmt. The server's own metrics keep their names (Prometheus's).
MEASUREMENT_WORDS: dict[str, tuple[str, str]] = {
    "ttft_p95_s": ("TTFT p95", "time"), "timeouts": ("Timeouts", ""), "rejected": ("Rejected at admission", ""),
    "tpot_growth": ("TPOT growth (many active / few)", "times"),
    "tpot_growth_at_load": ("TPOT growth at the typical load", "times"),
    "peak_active / max_concurrent_sequences": ("Peak active / the KV limit", ""),
    "share_at_peak": ("Share of the run at the peak", "share"),
    "queue_share_of_ttft": ("Queue wait share of TTFT p95", "share"),
    "prefill_share_of_ttft": ("Prefill share of TTFT p95", "share"),
    "utilization": ("Utilization of the KV limit", "share"),
}


def _valued(kind: str, value: float | None, unit: str) -> str:
    if kind == "time":
        return fmt_time(value, unit)
    if kind == "share":
        return fmt_share(value)
    if kind == "times" and value is not None:
        return f"{fmt(value, 3)}x"
    return fmt(value)


def shown_in_words(e: Evidence, unit: str = "s") -> tuple[str, str, str]:
    """Return (words, value, threshold) of a measurement: a time in ``unit``, a share as a percent, a ratio as '1.03x'.

    >>> shown_in_words(Evidence(measurement="queue_share_of_ttft", value=0.845, rule=">=", threshold=0.5,
    ...                         crossed=True, note="queue wait dominates TTFT"), "ms")
    ('Queue wait share of TTFT p95', '84.5%', '50%')
    """
    words, kind = MEASUREMENT_WORDS.get(e.measurement, (e.measurement, ""))
    return words, _valued(kind, e.value, unit), _valued(kind, e.threshold, unit)


def _symptom(e: Evidence, unit: str = "s") -> str:
    """Return a symptom in a few words: 'TTFT p95 9.43 s over its 2 s objective', '128 timeouts'."""
    if e.measurement == "ttft_p95_s":
        return f"TTFT p95 {fmt_time(e.value, unit)} over its {fmt_time(e.threshold, unit)} objective"
    if e.measurement in ("timeouts", "rejected"):
        return f"{fmt(int(e.value or 0))} {e.measurement}"
    return f"TPOT {fmt(e.value, 3)}x its unloaded value"


def shown_measurement(e: Evidence, unit: str = "s") -> tuple[str, str, str]:
    """Return a measurement's name, value and threshold as a sentence shows them in ``unit``.

    In seconds as measured ('ttft_p95_s', '9.43', '2'); in ms a time loses its '_s' and its numbers carry the unit
    ('ttft_p95', '9,430 ms', '2,000 ms'). Other measurements read the same in both.
    """
    if unit != "s" and e.measurement.endswith("_s"):
        return e.measurement[:-2], fmt_time(e.value, unit), fmt_time(e.threshold, unit)
    return e.measurement, fmt(e.value, 3), fmt(e.threshold, 3)


def _said(e: Evidence, unit: str = "s", words: bool = False) -> str:
    """Return one measurement against its rule, e.g. 'ttft_p95_s 9.43 > 2: TTFT p95 above the objective', or with
    ``words`` the measurement in words: 'TTFT p95 9,430 ms > 2,000 ms: ...'."""
    name, value, threshold = (shown_in_words if words else shown_measurement)(e, unit)
    return f"{name} {value} {e.rule} {threshold}: {e.note}"


def _evidence_lines(shown: list[Evidence], unit: str, unique: bool = False) -> dict[str, list[str]]:
    """Return a headline's evidence lines both ways (the rules' keys, and words), each line once with ``unique``."""
    def lines(words: bool) -> list[str]:
        said = [_said(e, unit, words) for e in shown]
        return list(dict.fromkeys(said)) if unique else said
    return {"evidence": lines(False), "evidence_words": lines(True)}


def _headline(v: Verdict, symptoms: list[Evidence], winner: RuleCheck | None, unit: str = "s") -> Headline:
    """Return the one answer: measured load, implied capacity and the binding limit, never contradicting the verdict."""
    m = v.measurements
    done = _completed_rate(m) if m.shared_clock else None
    failing = (m.timeouts + m.failures) / m.requests
    common = {"measured_rate_per_s": m.arrival_rate_per_s if m.shared_clock else None,
              "completed_rate_per_s": done, "non_success_share": failing}
    if not m.shared_clock:
        return Headline(standing="cannot_tell", limit=None, capacity_rate_per_s=None, **common,
                        capacity_basis="no arrival rate: the records have no timestamps on one clock",
                        text="The records have no timestamps on one clock (each request on its own), so there is "
                             "no measured load, limit or capacity in requests/s; each request's latency, TTFT and "
                             "TPOT stand.")
    rate = f"Measured at {fmt_rate(m.arrival_rate_per_s)}"
    lost = f"{failing:.0%} not successful" if failing else "every request successful"
    if winner is not None:
        now = v.first_to_bind
        assert now is not None and now.rate_per_s is not None
        also = [r for r in v.rules if r.holds and r.limit != winner.limit]
        crossed = [e for r in [winner, *also] for e in r.conditions if e.crossed]
        lines = _evidence_lines([*symptoms, *crossed], unit, unique=True)
        held = f" ({' and '.join(LIMIT_WORDS[r.limit] for r in also)}'s pattern holds too)" if also else ""
        names = ", ".join(_symptom(e, unit) for e in symptoms)
        done_text = f", it completed {done:.3g}/s ({lost}; {names})" if done is not None else f" ({lost}; {names})"
        return Headline(standing="at_limit", limit=winner.limit, capacity_rate_per_s=now.rate_per_s, **common,
                        capacity_basis=now.basis, **lines,
                        text=f"{rate}{done_text}: {LIMIT_WORDS[winner.limit]} binds at this load{held}, so its "
                             f"capacity is at most about {fmt_rate(now.rate_per_s)}.")
    if symptoms:
        names = ", ".join(_symptom(e, unit) for e in symptoms)
        why = ("without admitted times the data cannot tell which limit binds" if v.limit == "undetermined"
               else "no limit's whole pattern holds (see the failures by cause)")
        return Headline(standing="cannot_tell", limit=None, capacity_rate_per_s=None, **common,
                        capacity_basis=f"not estimated: {why}", **_evidence_lines(symptoms, unit),
                        text=f"{rate} ({lost}): something limits it ({names}), but {why}, so no capacity is "
                             "estimated.")
    first = v.first_to_bind
    lines = _evidence_lines([e for e in v.evidence if e.crossed is not None], unit)
    if first is None or first.rate_per_s is None:
        reasons = "; ".join(b.basis for b in v.bindings) or "no limit known"
        return Headline(standing="below_limit", limit=None, capacity_rate_per_s=None, **common,
                        capacity_basis=reasons, **lines,
                        text=f"{rate} ({lost}), with no symptom: nothing limits it at this load. No limit's rate is "
                             f"estimated from this data ({reasons}).")
    return Headline(standing="below_limit", limit=first.limit, capacity_rate_per_s=first.rate_per_s, **common,
                    capacity_basis=first.basis, **lines,
                    text=f"{rate} ({lost}), with no symptom: nothing limits it at this load. As load grows, "
                         f"{LIMIT_WORDS[first.limit]} binds first, at about {fmt_rate(first.rate_per_s)} "
                         f"({fmt(first.headroom, 3)}x the measured rate).")


def _explanation(v: Verdict, symptoms: list[Evidence], winner: RuleCheck | None, words: bool = False) -> str:
    """Return one sentence saying why this verdict, naming the other rules that crossed: by the rules' keys, or with
    ``words`` in words ('KV memory', 'TTFT p95')."""
    def limit(key: str) -> str:
        return LIMIT_WORDS.get(key, key) if words else key

    others = [limit(r.limit) for r in v.rules if r.holds and (winner is None or r.limit != winner.limit)]
    also = f"; {', '.join(others)} also held but come{'s' if len(others) == 1 else ''} later in the precedence " \
           f"({' > '.join(map(limit, PRECEDENCE))})" if others else ""
    if not symptoms:
        bind = v.first_to_bind
        where = (f"; as load grows, {limit(bind.limit)} binds first, at about {bind.rate_per_s:.3g}/s "
                 f"({bind.headroom:.3g}x the measured rate)") if bind is not None and bind.rate_per_s and bind.headroom \
            else ""
        held = f" (the {', '.join(others)} pattern holds, but without a symptom nothing limits yet)" if others else ""
        return f"No symptom at this load (TTFT within its objective, no failures, TPOT flat at the typical load), " \
               f"so nothing limits it{held}{where}."
    names = ", ".join(MEASUREMENT_WORDS.get(e.measurement, (e.measurement,))[0] if words else e.measurement
                      for e in symptoms)
    if winner is not None:
        first = limit(winner.limit)
        first = first[:1].upper() + first[1:] if words else first
        return f"{first} because its whole pattern holds given the symptom{'s' if len(symptoms) > 1 else ''} " \
               f"({names}){also}."
    if v.limit == "undetermined":
        return f"A symptom ({names}) but no admitted times to split TTFT into queue wait and prefill, and TPOT " \
               "does not grow with load, so the data cannot say which limit binds."
    return f"A symptom ({names}) but no rule's whole pattern holds, so no single limit is named."


def _summary(v: Verdict, stressed: bool, unit: str = "s") -> str:
    m = v.measurements
    if v.limit == "kv_memory":
        return (f"KV memory: at most {v.max_concurrent_sequences} sequences fit; {fmt(m.peak_active)} were active for "
                f"{fmt_percent(m.share_at_peak)} of the run, and queue wait is "
                f"{fmt_percent(v.queue_share_of_ttft)} of TTFT p95 while TPOT stays flat."
                + (f" Little's law puts {v.in_service:.2f} in service on average against "
                f"the limit of {v.max_concurrent_sequences} ({fmt_percent(v.utilization)}), "
                + ("where waits rise sharply." if v.utilization < 1 else
                   "beyond it: the queue grows for as long as this load lasts.")
                if v.in_service is not None and v.utilization is not None else ""))
    if v.limit == "decode":
        return f"Decode: TPOT grows {v.tpot_growth:.2f}x with active sequences; each step slows as the batch grows."
    if v.limit == "queueing":
        where = f"below the KV limit of {v.max_concurrent_sequences}" if v.max_concurrent_sequences else \
            "(no KV limit known to compare)"
        return (f"Queueing: queue wait is {fmt_percent(v.queue_share_of_ttft)} of TTFT p95 while active sequences "
                f"stop at {fmt(m.peak_active)}, {where}: a cap other than memory."
                + (f" {m.rejected} of {m.requests} requests were rejected at admission." if m.rejected else ""))
    if v.limit == "prefill":
        return (f"Prefill: prefill is {fmt_percent(v.prefill_share_of_ttft)} of TTFT p95 "
                f"({fmt_time(m.ttft_p95_s, unit)}) with little queueing.")
    if v.limit == "undetermined":
        return ("Something limits this profile (see the symptoms), but without admitted times queue wait cannot be "
                "told from prefill, so KV memory, queueing and prefill cannot be told apart; TPOT does not grow "
                "with load, so it is not decode.")
    if stressed:
        return "No single limit matches; the symptoms are listed in the evidence (check failures by cause)."
    util = f" and {v.in_service:.2f} in service against a limit of {v.max_concurrent_sequences}" \
        if v.in_service is not None and v.max_concurrent_sequences else ""
    bind = v.first_to_bind
    grows = (f" As load grows, {LIMIT_WORDS[bind.limit]} binds first, at about {fmt_rate(bind.rate_per_s)} "
             f"({bind.in_service:.3g} in service).") if bind is not None and bind.rate_per_s is not None \
        and bind.in_service is not None else ""
    return (f"Nothing limits this profile at this load: TTFT p95 {fmt_time(m.ttft_p95_s, unit)}, {m.timeouts} "
            f"timeouts{util}.{grows}")


def _prefill_text(v: Verdict, unit: str = "s") -> str:
    m = v.measurements
    if m.prefill_p50_s is None:
        return "Prefill was not measured (records need admitted times)."
    text = (f"Prefill takes {fmt_time(m.prefill_p50_s, unit)} p50 ({fmt_time(m.prefill_p95_s, unit)} p95): "
            f"{fmt_percent(v.prefill_share_of_ttft)} of TTFT p95 and {fmt_percent(v.prefill_share_of_service)} of "
            "each request's time in service.")
    if v.limit == "prefill":
        return text + " It is the limit: shorter prompts, prefix caching or more prefill compute would cut TTFT."
    if v.limit == "kv_memory":
        without = ""
        if v.in_service is not None and v.time_in_service_s and v.max_concurrent_sequences:
            rest = v.in_service * (1 - (v.prefill_share_of_service or 0))
            without = (f" Even with no prefill at all, {rest:.2f} would be in service against "
                       f"{v.max_concurrent_sequences} ({rest / v.max_concurrent_sequences:.0%}).")
        return (text + " It is not the limit, but it lengthens how long each KV reservation is held." + without)
    return text + " It is not what limits this profile."


def _experiment(v: Verdict, shape: kv.ModelShape | None, budget_bytes: int | None, policy: kv.Policy,
                expected_output_tokens: int | None, unit: str = "s") -> Experiment:
    m = v.measurements
    if v.limit == "kv_memory" and shape is not None and budget_bytes and v.tokens_per_request:
        doubled = kv.max_sequences_in_budget(2 * budget_bytes, shape, v.tokens_per_request)
        util = f" (utilization {v.in_service / doubled:.2f})" if v.in_service is not None and doubled else ""
        return Experiment(
            action=(f"Rerun {m.name} at the same arrival rate with twice the KV budget (or an fp8 KV cache, which "
                    f"halves bytes per token): the limit becomes {doubled} sequences{util}."),
            confirm=(f"Peak active rises above {fmt(m.peak_active)} and no longer sits at a ceiling, queue wait p95 "
                     f"falls far below {fmt_time(m.queue_wait_p95_s, unit)}, TPOT stays near "
                     f"{fmt_time(m.tpot_p50_s, unit)}."),
            refute=(f"Peak active stays at {fmt(m.peak_active)} with the same queue wait: a cap other than KV memory "
                    "(max sequences, scheduler) binds, so the verdict is queueing."))
    if v.limit == "kv_memory":
        return Experiment(action=f"Rerun {m.name} with a larger KV budget or shorter output cap.",
                          confirm="Peak active rises and queue wait falls.",
                          refute=f"Peak active stays at {fmt(m.peak_active)}: another cap binds.")
    if v.limit == "queueing":
        return Experiment(
            action=(f"Raise the cap on concurrent sequences (server max sequences, scheduler or client concurrency) "
                    f"above {fmt(m.peak_active)}, keeping the KV budget and arrival rate."),
            confirm=(f"Peak active rises above {fmt(m.peak_active)} and queue wait p95 falls well below "
                     f"{fmt_time(m.queue_wait_p95_s, unit)}."),
            refute=f"Peak active stays at {fmt(m.peak_active)}: the cap is elsewhere (or it is memory after all).")
    if v.limit == "decode":
        return Experiment(
            action=f"Cap active sequences at half of {fmt(m.peak_active)} (or halve the arrival rate).",
            confirm=f"TPOT p50 falls back toward {fmt_time(m.tpot_baseline_s, unit)}.",
            refute=(f"TPOT stays near {fmt_time(m.tpot_high_load_s or m.tpot_p50_s, unit)}: decode speed is not "
                    "load-bound."))
    prefix = _prefix_cache_experiment(v, unit)
    if prefix is not None:
        return prefix
    if v.limit == "prefill":
        return Experiment(
            action="Halve the prompt length (or enable prefix caching or chunked prefill) at the same arrival rate.",
            confirm=(f"TTFT p95 falls roughly with prefill, from {fmt_time(m.ttft_p95_s, unit)} toward "
                     f"{fmt_time((m.ttft_p95_s or 0) / 2, unit)}."),
            refute="TTFT p95 barely moves: the time is spent elsewhere (queueing or emit).")
    if v.limit == "undetermined":
        return Experiment(
            action=f"Rerun {m.name} with the server's admission time recorded for each request (admitted).",
            confirm="Queue wait and prefill separate: the rules then name kv_memory, queueing or prefill.",
            refute="Queue wait and prefill both stay small while TTFT is high: the time is spent before the server "
                   "(client or network).")
    bind = v.first_to_bind
    if bind is not None and bind.rate_per_s is not None and bind.limit != "kv_memory":
        rate = f" toward {bind.rate_per_s:.2f}/s, where {bind.limit} should bind first"
    else:
        rate = f" toward the saturation rate of {v.saturation_rate_per_s:.2f}/s (limit / time in service)" \
            if v.saturation_rate_per_s else ""
    return Experiment(
        action=f"Raise the arrival rate of {m.name} stepwise from {m.arrival_rate_per_s:.3g}/s{rate}.",
        confirm="Queue wait and TTFT stay flat until in service nears the limit, then rise sharply.",
        refute="Queue wait or TTFT rise well below that rate: a limit is already close at the current load.")


PREFIX_SHARE_MIN = 0.2  # prompts sharing at least this share of their tokens make prefix caching worth trying
PREFILL_DOMINATES = 0.5  # prefill at least this share of TTFT p95


def _prefix_cache_experiment(v: Verdict, unit: str = "s") -> Experiment | None:
    """Name prefix caching as the experiment when prefill dominates TTFT and prompts share prefixes; else None."""
    m = v.measurements
    share = m.shared_prefix_share
    if (share is None or share < PREFIX_SHARE_MIN or v.limit not in ("prefill", "none")
            or (v.prefill_share_of_ttft or 0) < PREFILL_DOMINATES):
        return None
    return Experiment(
        action=(f"Turn prefix caching on (vLLM --enable-prefix-caching; scenario server.prefix_caching: true) for "
                f"{m.name} at the same arrival rate and prompts: {share:.0%} of prompt tokens are shared with "
                "earlier prompts, and prefill is most of TTFT."),
        confirm=(f"Token hit rate near {share:.0%}, prefill p50 and TTFT p95 fall roughly by that share "
                 f"(from {fmt_time(m.ttft_p95_s, unit)} toward {fmt_time((m.ttft_p95_s or 0) * (1 - share), unit)}), "
                 "TPOT unchanged."),
        refute="Hit rate well below the shared share (prompts differ in their first tokens, or the cache evicts "
               "documents before reuse), or TTFT barely moves: the time is not in recomputing the shared part.")


# --------------------------------------------------------------------------- whole inputs


def diagnose_table(table: ProfileTable, unit: str = "s") -> list[Verdict]:
    """Return a verdict per profile; the TPOT baseline defaults to the lowest TPOT p50 in the table.

    ``unit``: the unit of the times in the verdicts' sentences (:func:`diagnose`)."""
    budget = int(table.kv_budget_gib * kv.GIB) if table.kv_budget_gib is not None else None
    tpots = [p.tpot_p50_s for p in table.profiles if p.tpot_p50_s is not None]
    base = min(tpots) if len(tpots) > 1 else None
    return [diagnose(p, shape=table.model, budget_bytes=budget, policy=table.policy,
                     expected_output_tokens=table.expected_output_tokens, thresholds=table.thresholds,
                     tpot_baseline_s=base, unit=unit) for p in table.profiles]


def diagnose_records(table: RecordTable, window_start: float, window_end: float, *,
                     shape: kv.ModelShape | None = None, budget_bytes: int | None = None,
                     policy: kv.Policy = "reserve", output_cap: int | None = None,
                     expected_output_tokens: int | None = None, deadline_s: float | None = None,
                     thresholds: Thresholds | None = None, name: str | None = None,
                     budget_tokens: int | None = None, max_num_seqs: int | None = None,
                     step_model: StepModel | None = None, shared_clock: bool = True,
                     server_metrics: ServerSamples | None = None, unit: str = "s") -> Verdict:
    """Measure records, then diagnose them as one profile.

    Records without admitted times get the verdict their data supports (``cannot_tell`` says what
    is missing). ``budget_tokens`` and ``max_num_seqs`` are the server's KV budget in tokens and
    its cap on running sequences (a timing run's scenario has both); ``step_model`` a fitted one.
    ``shared_clock`` False: each record is on its own clock (an importer's ``unavailable_metrics``),
    so no rate or capacity is given. ``server_metrics``: the server's Prometheus samples on the records' clock
    (a load run's): without admitted times, they tell queueing, KV memory and decode apart (:func:`server_rules`).
    """
    m = measure(table, window_start, window_end, name=name, output_cap=output_cap, deadline_s=deadline_s,
                require_admitted=False)
    if max_num_seqs is not None or not shared_clock:
        m = m.model_copy(update={"max_num_seqs": max_num_seqs, "shared_clock": shared_clock})
    if server_metrics is not None:
        m = m.model_copy(update={"server": server_state(server_metrics, window_start, window_end, max_num_seqs)})
    return diagnose(m, shape=shape, budget_bytes=budget_bytes, policy=policy,
                    expected_output_tokens=expected_output_tokens, thresholds=thresholds,
                    budget_tokens=budget_tokens, step_model=step_model, unit=unit)


# --------------------------------------------------------------------------- the server's own metrics (no admitted)

SERVER_KV_FULL = 0.9  # KV-cache use at or above this at p95: memory is full (AIPerf reads > 0.9 as a capacity limit)
SERVER_QUEUE_SHARE = 0.5  # a request waiting in at least half the window's scrapes: the queue persists
SERVER_AT_CEILING = 0.8  # running at its ceiling in at least this share of the scrapes with a queue
SERVER_BATCH_FULL = 0.5  # running at its ceiling in at least half the scrapes: a full batch
SERVER_NO_QUEUE = 0.1  # a request waiting in under a tenth of the scrapes: no queue
SERVER = "server "  # the prefix of a measurement the server's metrics gave


def server_rules(state: ServerState, tpot_growth: Evidence, th: Thresholds) -> list[RuleCheck]:
    """Return the rules the server's own metrics decide, in precedence order (kv_memory, decode, queueing).

    For records without admitted times, which cannot split TTFT into queue wait and prefill:

    * kv_memory: KV-cache use p95 >= 0.9 with preemptions in the window (or, with none, with the queue
      persisting: admission waits for memory);
    * decode: a full batch (running at >= 90% of its ceiling in at least half the scrapes), no queue
      (a request waiting in under a tenth of them) and TPOT growing with load (the records' rule);
    * queueing: a request waiting in at least half the scrapes while running sits at its ceiling (in at
      least 80% of those), and the KV cache not full: a cap on running requests, not memory.

    Each condition quotes the metric and its value. ``th`` is the records' thresholds (TPOT growth's).
    """
    n = state.scrapes
    kv_name, wait_name, run_name = state.kv_metric, state.waiting_metric, state.running_metric
    e_kv = _ev(f"{SERVER}{kv_name} p95", state.kv_usage_p95, ">=", SERVER_KV_FULL,
               f"KV cache {fmt_percent(state.kv_usage_p95)} in use at p95 (max {fmt_percent(state.kv_usage_max)})")
    e_kv_room = _ev(f"{SERVER}{kv_name} p95", state.kv_usage_p95, "<", SERVER_KV_FULL,
                    f"KV cache {fmt_percent(state.kv_usage_p95)} in use at p95: memory is not what caps the batch")
    e_pre = _ev(f"{SERVER}{state.preemptions_metric} increase", state.preemptions, ">", 0,
                f"{fmt(state.preemptions, 3)} requests preempted in the window")
    e_queue = _ev(f"{SERVER}{wait_name}: share of scrapes with one waiting", state.waiting_share, ">=",
                  SERVER_QUEUE_SHARE, f"requests waiting in {fmt_percent(state.waiting_share)} of {n} scrapes (mean "
                                      f"{fmt(state.waiting_mean, 3)}, max {fmt(state.waiting_max, 3)})")
    e_ceiling = _ev(f"{SERVER}{run_name}: share at its ceiling while one waits", state.full_while_waiting, ">=",
                    SERVER_AT_CEILING, f"running at its ceiling of {fmt(state.running_max, 3)} in "
                                       f"{fmt_percent(state.full_while_waiting)} of the scrapes with a queue")
    e_full = _ev(f"{SERVER}{run_name}: share of scrapes at its ceiling", state.running_full_share, ">=",
                 SERVER_BATCH_FULL, f"batch at its ceiling of {fmt(state.running_max, 3)} in "
                                    f"{fmt_percent(state.running_full_share)} of {n} scrapes "
                                    f"(mean {fmt(state.running_mean, 3)})")
    e_no_queue = _ev(f"{SERVER}{wait_name}: share of scrapes with one waiting", state.waiting_share, "<",
                     SERVER_NO_QUEUE, f"requests waiting in only {fmt_percent(state.waiting_share)} of {n} scrapes")
    kv_rule = [e_kv, e_pre if e_pre.crossed or not e_queue.crossed else e_queue]
    checks = [(kv_rule, "kv_memory"), ([e_full, e_no_queue, tpot_growth], "decode"),
              ([e_queue, e_ceiling] + ([e_kv_room] if e_kv_room.crossed is not None else []), "queueing")]
    return [RuleCheck(limit=limit, holds=all(e.crossed for e in conds), conditions=conds)  # type: ignore[arg-type]
            for conds, limit in checks]


def _by_server(rule: RuleCheck) -> bool:
    """Return whether a rule is one of :func:`server_rules` (its conditions quote the server's metrics)."""
    return any(c.measurement.startswith(SERVER) for c in rule.conditions)


def _told_by_server(v: Verdict, winner: RuleCheck) -> None:
    """Say, in place, that the server's metrics decided the verdict: summary, what cannot be told, the experiment."""
    s = v.measurements.server
    assert s is not None
    said = "; ".join(c.note for c in winner.conditions if c.crossed)
    words = LIMIT_WORDS[v.limit]
    v.summary = f"{words[0].upper() + words[1:]}, from the server's own metrics: {said}."
    v.explanation += " The records have no admitted times; the server's metrics decided."
    v.explanation_words += " The records have no admitted times; the server's metrics decided."
    v.cannot_tell = ["the records have no admitted times, so TTFT is not split into queue wait and prefill; the "
                     "server's metrics told the limits apart instead (the evidence quotes them)",
                     *v.cannot_tell[1:]]
    ceiling = fmt(s.running_max, 3)
    if v.limit == "kv_memory":
        v.experiment = Experiment(
            action="Rerun at the same arrival rate with more KV memory (a higher --gpu-memory-utilization, an fp8 "
                   "KV cache, shorter outputs) or fewer running requests (vLLM --max-num-seqs).",
            confirm=f"{s.kv_metric} stays below {SERVER_KV_FULL:g}, {s.preemptions_metric} stops rising and the "
                    "queue drains.",
            refute=f"KV use falls but {s.waiting_metric} stays up with running at {ceiling}: a cap on running "
                   "requests binds (queueing).")
    elif v.limit == "queueing":
        v.experiment = Experiment(
            action=f"Raise the server's cap on running requests above {ceiling} (vLLM --max-num-seqs, SGLang "
                   "--max-running-requests), keeping the arrival rate.",
            confirm=f"{s.running_metric} rises above {ceiling}, {s.waiting_metric} drains and TTFT p95 falls.",
            refute=f"{s.running_metric} stays at {ceiling}: the cap is elsewhere (KV memory, or the scheduler's "
                   "token budget).")
    else:
        v.experiment = Experiment(
            action=f"Cap running requests at half of {ceiling} (or halve the arrival rate).",
            confirm="TPOT falls back toward its unloaded value.",
            refute="TPOT stays where it is: decode speed is not bound by the batch.")
