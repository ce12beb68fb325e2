"""The server-metrics section for people: its known signals and its histograms beside the client's times."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from servebench.analysis.server_metrics import ServerMetricsReport
from servebench.formatting import NO_DATA, fmt
from servebench.output.safetext import safe_markup

MEASURES = {"ttft": "TTFT", "e2e": "latency (end to end)", "queue_time": "queue time", "itl": "inter-token latency",
            "prefill_time": "prefill", "decode_time": "decode", "tpot": "time per token"}


def signal_rows(section: ServerMetricsReport) -> list[list[str]]:
    """Return one row per known signal: metric, what it means (unit), and its window's statistics in words."""
    rows = []
    for s in section.signals:
        if s.kind == "counter":
            value = (NO_DATA if s.increase is None else
                     f"+{fmt(s.increase)} ({fmt(s.rate_per_s)}/s)")
        else:
            value = f"mean {fmt(s.mean)}, p95 {fmt(s.p95)}, max {fmt(s.max)}"
        rows.append([s.family, f"{s.meaning} ({s.unit})", value])
    return rows


def histogram_rows(section: ServerMetricsReport) -> list[list[str]]:
    """Return one row per server histogram: measure, observations, server p50/p95/p99, the bucket p95 fell in
    (the estimate's resolution) and the client's p50/p95/p99, in ms."""
    def ms(values: dict[str, float | None] | None, q: str) -> str:
        v = None if values is None else values.get(q)
        return NO_DATA if v is None else fmt(v * 1e3)

    def bucket(h: object) -> str:
        lower, upper = getattr(h, "bucket_s")["p95"]
        return f"({NO_DATA if lower is None else fmt(lower * 1e3)}, {'+inf' if upper is None else fmt(upper * 1e3)}]"

    return [[f"{MEASURES.get(h.role, h.role)} ({h.family})", f"{h.count:,}",
             " / ".join(ms(h.quantiles_s, q) for q in ("p50", "p95", "p99")), bucket(h),
             " / ".join(ms(h.client_s, q) for q in ("p50", "p95", "p99")) if h.client_s else NO_DATA]
            for h in section.histograms]


def print_server_metrics(console: Console, section: ServerMetricsReport) -> None:
    """Print the server's own metrics over the window: its signals, then its histograms beside the client's times."""
    where = ", ".join(section.endpoints)
    console.print(f"[bold]Server metrics[/] ({', '.join(section.servers) or 'no known names'}; {section.scrapes} "
                  f"scrapes of {safe_markup(where)} in the window; {section.families} metric families, "
                  f"{section.unknown_families} not in servebench's table kept in the file)")
    if section.signals:
        t = Table(title="Server signals over the window")
        for col in ("metric", "meaning (unit)", "over the window"):
            t.add_column(col)
        for row in signal_rows(section):
            t.add_row(*(safe_markup(x) for x in row))
        console.print(t)
    if section.histograms:
        t = Table(title="Server histograms beside the client's times (ms; bucket-interpolated on the server)")
        for col in ("measure", "observations", "server p50 / p95 / p99", "server p95's bucket",
                    "client p50 / p95 / p99"):
            t.add_column(col, justify="right" if col != "measure" else "left")
        for row in histogram_rows(section):
            t.add_row(*(safe_markup(x) for x in row))
        console.print(t)
        console.print(f"[cyan]note:[/] {safe_markup(section.note)}")
