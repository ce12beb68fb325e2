"""``servebench trace``: public traffic traces (Mooncake, Azure, BurstGPT) and servebench's own records."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from servebench.cli.core import app, console, emit_json
from servebench.formatting import fmt, fmt_share
from servebench.output.safetext import safe_markup

trace_app = typer.Typer(help="Read production traces: what their traffic asks of a server.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")


@trace_app.command("stats")
def stats(
    file: Path = typer.Argument(..., help="A trace: Mooncake JSONL, Azure LLM inference CSV (2023 or 2024), "
                                "BurstGPT CSV, or servebench records (a file or a run folder)."),
    format: str = typer.Option("auto", "--format", help="auto (from the file's columns), mooncake, azure, "
                               "burstgpt or records."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """What a trace asks of a server: requests, rate and busiest minute, token lengths, prefix reuse."""
    from servebench.analysis.trace_stats import PEAK_WINDOW_S, trace_stats
    from servebench.records.traces import read_trace

    trace = read_trace(file, format)
    result = trace_stats(trace)
    notes = list(trace.warnings)
    if trace.failed is not None and trace.failed.any():
        notes.append(f"{int(trace.failed.sum()):,} of {len(trace):,} requests failed; they stay in every figure "
                     "(the traffic offered)")
    if as_json:
        err = Console(stderr=True)  # stdout stays one JSON object
        for note in notes:
            err.print(f"[cyan]note:[/] {safe_markup(note)}")
        emit_json(result)
        return
    for note in notes:
        console.print(f"[cyan]note:[/] {safe_markup(note)}")
    console.print(f"[bold]{safe_markup(trace.source)}[/]: {trace.format} trace")
    head = Table(show_header=False)
    head.add_row("requests", fmt(result.requests))
    head.add_row("duration, s", fmt(result.duration_s))
    head.add_row("rate, requests/s", fmt(result.rate_rps))
    head.add_row(f"busiest {PEAK_WINDOW_S:.0f} s, requests/s", fmt(result.peak_rate_rps))
    console.print(head)
    tokens = Table(title="tokens per request (nearest rank)")
    for col in ("", "mean", "p50", "p90", "p99", "max"):
        tokens.add_column(col, justify="right" if col else "left")
    for label, t in (("prompt", result.prompt_tokens), ("output", result.output_tokens)):
        tokens.add_row(label, fmt(t.mean), fmt(t.p50), fmt(t.p90), fmt(t.p99), fmt(t.max))
    console.print(tokens)
    if result.prefix is None:
        console.print("no block hashes: the trace says nothing of prefix reuse")
        return
    p = result.prefix
    console.print(f"prefix blocks of {p.block_tokens} tokens: an unbounded cache serves "
                  f"{fmt_share(p.reusable_token_share)} of prompt tokens")
    hits = Table(title="LRU block cache: share of prompt tokens served")
    for col in ("capacity, tokens", "token hit rate", "of an unbounded cache's"):
        hits.add_column(col, justify="right")
    for h in p.hit_rate_by_capacity:
        of_best = None if h.token_hit_rate is None or not p.reusable_token_share else \
            h.token_hit_rate / p.reusable_token_share
        hits.add_row(fmt(h.capacity_tokens), fmt_share(h.token_hit_rate), fmt_share(of_best))
    console.print(hits)
