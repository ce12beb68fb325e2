"""The ``servebench`` command line: each command parses, calls one package function, formats.

Errors that servebench raises on purpose become a one-line message and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from .errors import ServebenchError
from .safetext import safe_text

app = typer.Typer(help="Honest LLM-serving benchmarks: summaries, KV memory, diagnosis, simulation, timing runs.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console()


def emit_json(obj: Any) -> None:
    """Print one strict JSON object to stdout: +/-infinity as "Infinity"/"-Infinity", NaN as null.

    Every command's ``--json`` goes through here; the rule lives in ``servebench.strict_json``.
    """
    from .strict_json import dumps
    typer.echo(dumps(obj, indent=2))


@app.command()
def schema() -> None:
    """Print the JSON Schema of the canonical timing record."""
    from .records import TimingRecord
    emit_json(TimingRecord.model_json_schema(by_alias=False))


@app.command()
def summarize(
    file: Path = typer.Argument(..., help="Records: CSV, JSON, JSONL or Parquet (or another tool's export)."),
    window_start: Optional[float] = typer.Option(None, help="Observation window start, s (default: min start)."),
    window_end: Optional[float] = typer.Option(None, help="Observation window end, s (default: max end)."),
    slo_ttft: Optional[float] = typer.Option(None, help="SLO on TTFT, s."),
    slo_tpot: Optional[float] = typer.Option(None, help="SLO on request TPOT, s."),
    slo_latency: Optional[float] = typer.Option(None, help="SLO on latency, s."),
    format: str = typer.Option("auto", "--format", help="Input format (auto-detected by default): csv, json, jsonl, "
                               "parquet, or another tool's export: guidellm, vllm, genai-perf, aiperf, llmperf "
                               "(options: NAME:run=N,outside_window=drop)."),
    slice_by: Optional[str] = typer.Option(None, "--slice-by", metavar="COLUMN",
                                           help="Break the report down by this column's values instead of "
                                                "'slice': any column the schema does not know (gpu, model)."),
    trim_to_window: bool = typer.Option(False, "--trim-to-window",
                                        help="Keep only the records inside the window and say how many were left "
                                             "out (as the dashboard does), instead of refusing a window that cuts "
                                             "a request."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Summarize a record file: the spec's eight fields, then the full failure-aware report."""
    from .extra_columns import extra_columns_note, slice_by as sliced
    from .loaders import read_path, to_table
    from .render import user_text
    from .summary import SLO, build_report

    # a spinner on stderr while large files are read and summarized; stdout stays clean for --json
    with Console(stderr=True).status(f"reading {user_text(file.name)}") as status:
        loaded = read_path(file, format)
        status.update(f"validating {loaded.rows.n:,} records")
        trim_note = None
        if trim_to_window:
            from .window_zoom import trim_to_window as trimmed
            kept = trimmed(loaded, window_start, window_end)
            table, ws, we, trim_note = kept.table, kept.window_start, kept.window_end, kept.note()
        else:
            table, ws, we = to_table(loaded, window_start, window_end)
        if slice_by is not None:
            table = sliced(table, slice_by)
        status.update(f"summarizing {len(table):,} records")
        report = build_report(table, ws, we, SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, latency_s=slo_latency))
    note = extra_columns_note(table.extra)
    if as_json:
        out = report.model_dump(mode="json")  # emit_json applies the strict JSON rule
        unavailable = list(loaded.metadata.get("unavailable_metrics") or [])
        # a metric the file cannot support is "no data" (null), not a number that looks measured
        summary = {k: (None if k in unavailable else v) for k, v in out.pop("summary").items()}
        out = {"summary": summary, **out, "warnings": loaded.warnings, "unavailable_metrics": unavailable,
               "slice_by": slice_by, "extra_columns": list(table.extra),
               "notes": [n for n in (note, trim_note) if n]}
        emit_json(out)
        return
    from .render import print_report
    for w in loaded.warnings:
        console.print(f"[yellow]warning:[/] {user_text(w)}")
    for n in (note, trim_note):
        if n:
            console.print(f"[cyan]note:[/] {user_text(n)}")
    print_report(console, report, frozenset(loaded.metadata.get("unavailable_metrics") or []), slice_by=slice_by)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI, turning servebench errors into one line on stderr and exit code 2.

    Click's standalone mode handles usage errors (exit 2), Ctrl-C and typer.Exit codes itself.
    """
    try:
        app(args=argv, prog_name="servebench")
    except ServebenchError as exc:
        typer.echo(f"error: {safe_text(exc)}", err=True)  # user text in it cannot drive the terminal
        sys.exit(2)


def _register_commands() -> None:
    """Import every module of ``servebench.commands``; each adds its domain's commands to ``app``."""
    import importlib
    import pkgutil

    from . import commands
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}")


_register_commands()
