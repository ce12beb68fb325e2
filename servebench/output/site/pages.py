"""Build the site's pages as HTML text from runs already read: the index, one page per run, sweeps.

Pure: runs and options in, ``{relative path: HTML}`` out. Metrics come from ``summary.build_report``;
figures from ``servebench.output.figures``; the KV and diagnosis section from :mod:`.kvview`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servebench import __version__
from servebench.analysis.contract import CONTRACT_FIELDS, CONTRACT_LABELS
from servebench.analysis.server_metrics import attach
from servebench.analysis.summary import SLO, Distribution, PrefixCacheReport, ReasoningReport, Report, build_report
from servebench.formatting import NO_DATA, fmt
from servebench.output.figures import records as rfig
from servebench.output.figures.server_metrics import server_timeline_figure
from servebench.output.site.html import Markup, figure, join, key_values, nested, note, page, section, table, tag
from servebench.output.site.inputs import RunInput
from servebench.output.site.kvview import KvOptions, KvView, kv_section, kv_view
from servebench.output.site.retries import fairness_section, logical_section
from servebench.output.site.server_metrics import server_metrics_section
from servebench.output.site.tokens import token_section
from servebench.output.site.trace import trace_page
from servebench.output.terminal import fmt_window
from servebench.records.extra_columns import extra_columns_note, slice_by
from servebench.records.steps import parse_columns
from servebench.records.table import STATUSES, RecordTable

SECTION_TITLES: tuple[tuple[str, str], ...] = (
    ("warnings", "warnings"), ("summary", "summary"), ("outcomes", "outcomes"), ("work", "work"),
    ("percentiles", "percentiles"), ("reasoning", "reasoning"), ("prefix_cache", "prefix cache"), ("cdfs", "CDFs"), ("tokens", "token timing"), ("timeline", "concurrency"), ("stages", "stages"), ("server_metrics", "server metrics"),
    ("steps", "step trace"), ("slices", "slices"), ("logical", "retries"), ("fairness", "fairness"), ("kv", "KV and diagnosis"), ("metadata", "run metadata"),
    ("quality", "data quality"),
)


class SiteOptions(BaseModel):
    """What the site shows besides the records: title, SLO limits, a model shape for KV."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field("servebench report", description="Shown on every page (escaped).")
    slo: SLO | None = None
    kv: KvOptions | None = None
    slice_by: str | None = Field(None, description="Break each run down by this column instead of 'slice'.")
    generated_at: str | None = Field(None, description="Timestamp text for the index; None leaves it out.")


@dataclass
class RunView:
    """One run with its computed report, KV view and page file name."""

    run: RunInput
    page: str
    report: Report | None = None
    kv: KvView | None = None
    table: RecordTable | None = None  # the run's records, sliced as the options say
    figures: list[tuple[str, go.Figure]] = field(default_factory=list)


def slug(text: str, max_len: int = 40) -> str:
    """Return a file-name-safe slug (lowercase ASCII letters, digits, dashes).

    >>> slug("My run: <b>A</b>.jsonl")
    'my-run-b-a-b-jsonl'
    """
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:max_len].strip("-") or "run"


def compute_views(runs: Sequence[RunInput], options: SiteOptions) -> list[RunView]:
    """Compute the report and KV view of every record run; sweeps are kept as read."""
    views = []
    for i, run in enumerate(runs, start=1):
        prefix = run.kind if run.kind in ("sweep", "trace") else "run"
        view = RunView(run=run, page=f"{prefix}-{i:02d}-{slug(run.name)}.html")
        if run.table is not None:
            assert run.window_start is not None and run.window_end is not None
            view.table = run.table if options.slice_by is None else slice_by(run.table, options.slice_by)
            view.report = attach(build_report(view.table, run.window_start, run.window_end, options.slo),
                                 run.server_metrics)
            view.kv = kv_view(run, view.report, options.kv)
        views.append(view)
    return views


# --------------------------------------------------------------------------- pieces


class _Figures:
    """Number figures on one page and turn them into embeds."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count = 0

    def __call__(self, fig: go.Figure | None, caption: object | None = None) -> Markup:
        if fig is None:
            return Markup("")
        self.count += 1
        return figure(f"{self.prefix}-{self.count}", fig.to_json(), caption=caption)


UNAVAILABLE = "not available"


def unavailable(run: RunInput) -> set[str]:
    """Return the metrics an importer said the file cannot give (``metadata['unavailable_metrics']``)."""
    names = (run.metadata or {}).get("unavailable_metrics") or []
    return {str(n) for n in names} if isinstance(names, list) else set()


def _kind(run: RunInput) -> str:
    canonical = (None, "csv", "json", "jsonl", "parquet")
    return run.kind if run.format in canonical else f"{run.kind} ({str(run.format).split(':')[0]} export)"


def _value(report: Report, key: str, missing: set[str]) -> object:
    return UNAVAILABLE if key in missing else report.summary[key]


def _contract_rows(reports: Sequence[Report], missing: Sequence[set[str]] | None = None) -> list[list[object]]:
    gone = list(missing) if missing is not None else [set() for _ in reports]
    return [[CONTRACT_LABELS[k][0], *[_value(r, k, m) for r, m in zip(reports, gone)]] for k in CONTRACT_FIELDS]


def share(x: float) -> str:
    """Format a share of the window as a percentage, keeping tiny shares visible.

    >>> share(0.7791), share(0.0002158), share(0.0)
    ('77.9%', 'under 0.1%', '0.0%')
    """
    return "under 0.1%" if 0 < x < 0.0005 else f"{x:.1%}"


def _qs(d: Distribution) -> dict[float, float | None]:
    return {p.q: p.value for p in d.percentiles}


def _ci(p: Any) -> str:
    if p.value is None:
        return NO_DATA
    return f"{fmt(p.value)} [{fmt(p.ci_low)}, {fmt(p.ci_high)}]"


def _distribution_table(rows: dict[str, Distribution | None], caption: str) -> Markup:
    present = {k: d for k, d in rows.items() if d is not None}
    if not present:
        return Markup("")
    qs = [p.q for p in next(iter(present.values())).percentiles]
    headers = ["metric", "n", *[f"p{q:g} [95% CI]" for q in qs], "max", "mean"]
    body = [[name, d.n, *[_ci(p) for p in d.percentiles], d.max, d.mean] for name, d in present.items()]
    return table(headers, body, caption=caption)


def prefix_cache_section(pc: PrefixCacheReport) -> Markup:
    """Return the prefix-cache section: hit rate, what it saved, TTFT and prefill with and without a hit."""
    rate = NO_DATA if pc.token_hit_rate is None else share(pc.token_hit_rate)
    saved = NO_DATA if pc.estimated_prefill_saved_s is None else f"{fmt(pc.estimated_prefill_saved_s)} s"
    per_token = NO_DATA if pc.prefill_s_per_prompt_token is None else f"{fmt(pc.prefill_s_per_prompt_token)} s"
    return section("Prefix cache", key_values([
        ("requests that say (cached_prompt_tokens)", pc.requests), ("prompt tokens", pc.prompt_tokens),
        ("served from the cache", pc.cached_prompt_tokens), ("token hit rate (cached / prompt)", rate),
        ("requests with a hit", pc.requests_with_hit),
        ("prefill per computed prompt token (requests without a hit)", per_token),
        ("estimated prefill saved (cached tokens x that)", saved)]),
        _distribution_table({"TTFT with a hit, s": pc.ttft_hit_s, "TTFT without, s": pc.ttft_miss_s,
                             "prefill with a hit, s": pc.prefill_hit_s, "prefill without, s": pc.prefill_miss_s},
                            "Successful requests with and without a prefix-cache hit"),
        tag("p", "A hit skips recomputing the prompt's cached part: it shortens prefill and TTFT, not the time "
                 "to generate the answer (TPOT).", class_="muted"),
        id_="prefix_cache")


def reasoning_section(rs: ReasoningReport) -> Markup:
    """Return the reasoning section: a reasoning model's thinking before its answer, and its reasoning tokens."""
    return section("Reasoning", key_values([
        ("successes with a first answer token", rs.requests),
        ("reasoning tokens (of those that say)", rs.reasoning_tokens), ("of output tokens", rs.output_tokens),
        ("reasoning share of the output", NO_DATA if rs.reasoning_token_share is None
         else share(rs.reasoning_token_share))]),
        _distribution_table({"TTFA (first answer token), s": rs.ttfa_s if rs.requests else None,
                             "thinking (first answer - first token), s": rs.reasoning_s if rs.requests else None},
                            "Successful requests with a first answer token"),
        tag("p", "A reasoning model streams its thinking before its answer: TTFT is its first token of either kind, "
                 "TTFA its first answer token.", class_="muted"),
        id_="reasoning")


def _slo_rows(report: Report, missing: frozenset[str] | set[str] = frozenset()) -> list[tuple[object, object]]:
    s = report.slo
    if s is None:
        return []
    if "slo.goodput_requests_per_second" in missing:
        return [("good requests", s.good_requests), ("attainment (of all requests)", s.attainment),
                ("goodput", UNAVAILABLE)]
    limits = ", ".join(f"{k} <= {fmt(v)} s" for k, v in s.slo.model_dump(exclude_none=True).items())
    return [("SLO", limits), ("good requests", s.good_requests), ("attainment (of all requests)", s.attainment),
            ("goodput, requests/s", s.goodput_requests_per_second),
            ("goodput, output tokens/s", s.goodput_output_tokens_per_second)]


def _example_records(run: RunInput, limit: int = 10) -> Markup:
    """Return the slowest successes and the first non-successes, with their IDs and causes."""
    t = run.table
    assert t is not None
    ok = np.flatnonzero(t.is_success)
    bad = np.flatnonzero(~t.is_success)
    latency = t.end - t.start
    slow = ok[np.argsort(-latency[ok], kind="stable")[:limit]]
    first_bad = bad[np.argsort(t.start[bad], kind="stable")[:limit]]
    headers = ["request_id", "slice", "status", "start, s", "latency, s", "TTFT, s", "output tokens", "error"]

    def rows(idx: np.ndarray) -> list[list[object]]:
        out = []
        for i in idx:
            ttft = t.first_token[i] - t.start[i]
            out.append([t.request_id[i] if t.request_id[i] is not None else "-",
                        t.slice[i] if t.slice[i] is not None else "-", STATUSES[int(t.status[i])],
                        float(t.start[i]), float(latency[i]), float(ttft) if np.isfinite(ttft) else None,
                        int(t.output_tokens[i]) if t.output_tokens[i] >= 0 else None,
                        t.error[i] if t.error[i] is not None else "-"])
        return out
    parts = []
    if slow.size:
        parts.append(table(headers, rows(slow), caption=f"Slowest {slow.size} successful requests"))
    if first_bad.size:
        parts.append(table(headers, rows(first_bad), caption=f"First {first_bad.size} non-success requests"))
    return join(parts)


def _warnings(run: RunInput) -> Markup:
    if not run.warnings:
        return Markup("")
    items = join(tag("li", w) for w in run.warnings)
    return section("Importer warnings", note("The import could not carry everything over:", "warn"),
                   tag("ul", items, class_="warnings"), id_="warnings")


# --------------------------------------------------------------------------- pages


def run_page(view: RunView, options: SiteOptions) -> str:
    """Return the HTML page of one record run."""
    run, report = view.run, view.report
    assert report is not None and run.table is not None
    figs = _Figures("fig")
    t = view.table if view.table is not None else run.table
    head = key_values([
        ("kind", _kind(run)), ("source", run.path), ("files", ", ".join(run.files) or "-"),
        ("format", run.format or "-"),
        ("window", fmt_window(report.window_start, report.window_end)),
    ])
    extra = extra_columns_note(t.extra)
    parts: list[object] = [head, _warnings(run), note(extra, "info") if extra else Markup("")]
    missing = unavailable(run)
    summary_rows = [[CONTRACT_LABELS[k][0], _value(report, k, missing)] for k in CONTRACT_FIELDS]
    parts.append(section(
        "Summary", table(["field (spec contract)", "value"], summary_rows),
        key_values(_slo_rows(report, missing), caption="Goodput under the SLO") if report.slo else
        tag("p", "No SLO given (report --slo-ttft/--slo-tpot/--slo-latency to see goodput).", class_="muted"),
        id_="summary"))
    outcome = key_values([("offered", report.offered), ("accepted (offered - rejected)", report.accepted),
                          ("completed (success)", report.completed), ("rejected", report.rejected),
                          ("timed out", report.timed_out)])
    causes = table(["cause", "requests"], list(report.by_cause.items())) if report.by_cause else \
        tag("p", "Every request succeeded.", class_="muted")
    parts.append(section(
        "Outcomes", tag("div", join([tag("div", join([outcome, figs(rfig.status_figure(report.by_status))])),
                                     tag("div", join([causes, figs(rfig.cause_figure(report.by_cause))]))]),
                        class_="grid2"), id_="outcomes"))
    parts.append(section("Work", key_values([
        ("output tokens generated (all requests)", report.total_output_tokens),
        ("by successful requests", report.successful_output_tokens),
        ("wasted (by non-success requests)", report.wasted_output_tokens),
        ("prompt tokens", report.total_prompt_tokens)]), id_="work"))
    parts.append(section(
        "Percentiles",
        _distribution_table({"latency, s": report.latency_s, "TTFT, s": report.ttft_s,
                             "TTFA (first answer token), s": report.reasoning.ttfa_s
                             if report.reasoning is not None and report.reasoning.requests else None,
                             "request TPOT, s": report.request_tpot_s, "queue wait, s": report.queue_wait_s,
                             "prefill, s": report.prefill_s}, "Successful requests (nearest rank)"),
        _distribution_table({"latency, s": report.failure_aware_latency_s, "TTFT, s": report.failure_aware_ttft_s},
                            "Failure-aware: every non-success counts as +infinity"),
        id_="percentiles"))
    if report.reasoning is not None:
        parts.append(reasoning_section(report.reasoning))
    if report.prefix_cache is not None:
        parts.append(prefix_cache_section(report.prefix_cache))
    if report.logical is not None:
        parts.append(logical_section(report.logical))
    if report.fairness is not None:
        parts.append(fairness_section(report.fairness))
    cdfs = rfig.record_cdfs(t)
    parts.append(section("Distributions", tag("div", join(figs(f) for f in cdfs.values()), class_="grid2"),
                         id_="cdfs"))
    if report.itl_s is not None:
        parts.append(token_section(report, t, figs))
    ins = report.in_service
    conc = [("peak active (start to end)", report.active_requests.peak),
            ("share of the window at that peak", share(report.active_requests.share_of_window_at_peak))]
    if ins is not None:
        conc += [("peak in service (admitted to end)", ins.peak),
                 ("share of the window at that peak ", share(ins.share_of_window_at_peak))]
    assert run.window_start is not None and run.window_end is not None
    if "active_requests" in missing:
        parts.append(section("Concurrency", note("This file has no timestamps on a shared clock, so requests "
                                                 "active over time cannot be known.", "warn"), id_="timeline"))
    else:
        parts.append(section("Concurrency", key_values(conc),
                             figs(rfig.timeline_figure(t, run.window_start, run.window_end)), id_="timeline"))
    stage = rfig.stage_figure(t)
    parts.append(section("Stages", figs(stage) if stage is not None else
                         tag("p", "No admission times: queue wait and prefill cannot be separated.", class_="muted"),
                         id_="stages"))
    if report.server_metrics is not None:
        chart = figs(server_timeline_figure(t, run.server_metrics, run.window_start, run.window_end))
        parts.append(server_metrics_section(report.server_metrics, chart))
    if run.steps:
        parts.append(section("Step trace", figs(step_figure(run)), id_="steps"))
    if report.slices:
        names = list(report.slices)
        parts.append(section("Slices" if options.slice_by is None else f"Slices by {options.slice_by}",
                             table(["field", *names],
                                   _contract_rows(list(report.slices.values()))), id_="slices"))
    parts.append(kv_section(view.kv))
    if run.metadata:
        origin = ("What was measured, as frozen beside the records (metadata.json)."
                  if run.kind in ("timing run", "load run") else "What the reader or importer recorded about this file.")
        parts.append(section("Run metadata" if run.kind in ("timing run", "load run") else "Metadata",
                             tag("p", origin, class_="muted"), nested(run.metadata), id_="metadata"))
    quality = [("duplicate request IDs", report.duplicate_request_ids),
               ("records without a request ID", report.records_without_request_id)]
    if report.duplicate_request_id_examples:
        quality.append(("duplicated, e.g.", ", ".join(report.duplicate_request_id_examples)))
    parts.append(section("Data quality", key_values(quality), _example_records(run), id_="quality"))
    body = join(parts)
    toc = [tag("a", title, href=f"#{sid}") for sid, title in SECTION_TITLES if f'<section id="{sid}">' in body]
    return page(run.name, join([parts[0], tag("p", join(toc, " · "), class_="toc"), *parts[1:]]),
                site_title=options.title)


def sweep_page(view: RunView, options: SiteOptions) -> str:
    """Return the HTML page of a sweep: its charts (from ``figures.sweep`` when present) and its points."""
    run = view.run
    figs = _Figures("fig")
    points = run.sweep_points or []
    parts: list[object] = [key_values([("kind", run.kind), ("source", run.path), ("files", ", ".join(run.files)),
                                       ("points", len(points))])]
    charts = sweep_figures(run)
    if charts:
        parts.append(section("Charts", join(figs(f) for f in charts), id_="charts"))
    else:
        parts.append(note("No sweep chart could be drawn from these points.", "warn"))
    doc = run.sweep_document
    if isinstance(doc, dict):
        settings = {k: v for k, v in doc.items() if not isinstance(v, list)}
        if settings:
            parts.append(section("Settings and capacity", nested(settings), id_="settings"))
    if points:
        flat = [_flat(p) for p in points]
        cols = list(dict.fromkeys(k for p in flat for k in p))
        parts.append(section("Points", tag("div", table(cols, [[p.get(c) for c in cols] for p in flat], cls="grid wide"),
                                           class_="scroll"), id_="points"))
    if run.metadata:
        parts.append(section("Run metadata", nested(run.metadata), id_="metadata"))
    return page(run.name, join(parts), site_title=options.title)


def sweep_figures(run: RunInput) -> list[go.Figure]:
    """Return the sweep's charts: ``figures.sweep`` on a ``sweep.json`` it can read, else a generic chart."""
    doc = run.sweep_document
    if isinstance(doc, dict):
        try:
            from servebench.output.figures import sweep as sweep_fig
            from servebench.serving.sweep import SweepResult
            result = SweepResult.model_validate(doc)
        except (ImportError, ValidationError):
            pass
        else:
            return [sweep_fig.latency_vs_load(result), sweep_fig.outcomes_vs_load(result)]
    fig = rfig.points_figure(run.sweep_points or [])
    return [fig] if fig is not None else []


def step_figure(run: RunInput) -> go.Figure | None:
    """Return the step trace chart: ``figures.sweep.trace_over_time`` when the columns fit, else a generic one."""
    steps = run.steps or []
    if not steps:
        return None
    trace = parse_columns({k: [r.get(k) for r in steps] for k in TRACE_CHART_COLUMNS}, run.name)
    if all(trace.has(k) for k in TRACE_CHART_COLUMNS[:4]):  # kv_tokens_held: drawn when present
        from servebench.output.figures.sweep import trace_over_time
        budget = _budget_tokens(run.metadata or {})
        return trace_over_time(trace, budget, title=f"Engine over time ({len(steps)} trace rows)")
    return rfig.step_trace_figure(steps)


TRACE_CHART_COLUMNS = ("start_s", "running", "waiting", "kv_tokens_used", "kv_tokens_held")


def _budget_tokens(meta: dict[str, Any]) -> int | None:
    for key in ("kv", "simulation"):
        sub = meta.get(key)
        if isinstance(sub, dict) and isinstance(sub.get("kv_budget_tokens"), int):
            return int(sub["kv_budget_tokens"])
    return None


def _flat(point: dict[str, Any]) -> dict[str, Any]:
    """Flatten one level of nested objects (``ttft_s: {p95: ...}`` becomes ``ttft_s p95``)."""
    out: dict[str, Any] = {}
    for k, v in point.items():
        if isinstance(v, dict):
            out.update({f"{k} {sub}": x for sub, x in v.items() if not isinstance(x, (dict, list))})
        elif not isinstance(v, list):
            out[k] = v
    return out


def index_page(views: Sequence[RunView], options: SiteOptions) -> str:
    """Return the index: every record run side by side, then the sweeps."""
    figs = _Figures("fig")
    record_views = [v for v in views if v.report is not None]
    sweeps = [v for v in views if v.run.kind == "sweep"]
    traces = [v for v in views if v.run.kind == "trace"]
    intro = f"{len(record_views)} record run{'s' if len(record_views) != 1 else ''}"
    if sweeps:
        intro += f", {len(sweeps)} sweep{'s' if len(sweeps) != 1 else ''}"
    if traces:
        intro += f", {len(traces)} trace{'s' if len(traces) != 1 else ''}"
    intro += f". servebench {__version__}"
    if options.generated_at:
        intro += f", {options.generated_at}"
    intro += ". This folder works offline: open index.html from disk, or zip it and send it."
    parts: list[object] = [tag("p", intro, class_="muted")]
    if record_views:
        reports = [v.report for v in record_views if v.report is not None]
        header = ["", *[tag("a", v.run.name, href=v.page) for v in record_views]]
        gone = [unavailable(v.run) for v in record_views]

        def per_run(key: str, values: list[object]) -> list[object]:
            return [UNAVAILABLE if key in m else x for x, m in zip(values, gone)]

        rows: list[list[object]] = [
            ["kind", *[_kind(v.run) for v in record_views]],
            ["window, s", *per_run("window_s", [fmt(r.window_s) for r in reports])]]
        rows += _contract_rows(reports, gone)
        rows += [["rejected", *[r.rejected for r in reports]], ["timed out", *[r.timed_out for r in reports]],
                 ["wasted output tokens", *[r.wasted_output_tokens for r in reports]],
                 ["peak active (share of window)", *per_run("active_requests", [
                     f"{r.active_requests.peak} ({share(r.active_requests.share_of_window_at_peak)})" for r in reports])]]
        if options.slo is not None and options.slo.any:
            rows += [["SLO attainment", *[r.slo.attainment if r.slo else None for r in reports]],
                     ["goodput, requests/s", *per_run("slo.goodput_requests_per_second", [
                         r.slo.goodput_requests_per_second if r.slo else None for r in reports])],
                     ["goodput, output tokens/s", *per_run("slo.goodput_output_tokens_per_second", [
                         r.slo.goodput_output_tokens_per_second if r.slo else None for r in reports])]]
        if any(r.itl_s is not None for r in reports):  # token timing, where the records have token_times
            rows += [["ITL p99, s", *[fmt(r.itl_s.at(99) if r.itl_s else None) for r in reports]],
                     ["longest stall p95, s", *[fmt(r.max_stall_s.at(95) if r.max_stall_s else None) for r in reports]],
                     ["requests stalled", *[share(r.stalls.share) if r.stalls and r.stalls.share is not None
                                            else NO_DATA for r in reports]]]
        rows.append(["diagnosis", *[tag("span", v.kv.verdict, class_="verdict") if v.kv and v.kv.verdict else "-"
                                    for v in record_views]])
        rows.append(["importer warnings", *[len(v.run.warnings) for v in record_views]])
        parts.append(section("Runs side by side", table(header, rows), id_="runs"))
        comp = rfig.comparison_figure({
            v.run.name: {"latency": _qs(v.report.latency_s), "ttft": _qs(v.report.ttft_s),
                         "tpot": _qs(v.report.request_tpot_s)}
            for v in record_views if v.report is not None})
        parts.append(figs(comp, caption="Successful requests only; see each run's page for the failure-aware view."))
        if not (options.slo is not None and options.slo.any):
            parts.append(tag("p", "No SLO given: goodput is not shown (--slo-ttft, --slo-tpot, --slo-latency).",
                             class_="muted"))
    if traces:
        parts.append(section("Traces", tag("ul", join(tag("li", join([tag("a", v.run.name, href=v.page),
                                                                       f" ({len(v.run.trace or []):,} requests)"]))
                                                      for v in traces)), id_="traces"))
    if sweeps:
        items = join(tag("li", join([tag("a", v.run.name, href=v.page), f" ({len(v.run.sweep_points or [])} points)"]))
                     for v in sweeps)
        parts.append(section("Sweeps", tag("ul", items), id_="sweeps"))
        for v in sweeps:
            for fig in sweep_figures(v.run)[:1]:
                parts.append(tag("h3", v.run.name))
                parts.append(figs(fig))
    return page(options.title, join(parts), site_title=options.title)


def build_pages(runs: Sequence[RunInput], options: SiteOptions) -> dict[str, str]:
    """Return every page of the site, keyed by its path relative to the site folder."""
    views = compute_views(runs, options)
    pages = {"index.html": index_page(views, options)}
    for v in views:
        if v.run.kind == "trace" and v.run.trace is not None:
            pages[v.page] = trace_page(v.run.name, v.run.path, v.run.trace, options.title, _Figures("fig"))
        else:
            pages[v.page] = sweep_page(v, options) if v.run.kind == "sweep" else run_page(v, options)
    return pages
