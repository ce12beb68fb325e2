"""The ``servebench`` command line: each command parses, calls one package function, formats.

Errors that servebench raises on purpose become a one-line message and exit code 2.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from servebench.cli.allocator import no_huge_pages, reuse_freed_memory
from servebench.errors import ServebenchError
from servebench.output.safetext import safe_text

app = typer.Typer(help="Honest LLM-serving benchmarks: summaries, KV memory, diagnosis, simulation, timing runs.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console()


def emit_json(obj: Any) -> None:
    """Print one strict JSON object to stdout: +/-infinity as "Infinity"/"-Infinity", NaN as null.

    Every command's ``--json`` goes through here; the rule lives in ``servebench.output.strict_json``.
    """
    from servebench.output.strict_json import dumps
    typer.echo(dumps(obj, indent=2))


@app.command()
def schema() -> None:
    """Print the JSON Schema of the canonical timing record."""
    from servebench.records.schema import TimingRecord
    emit_json(TimingRecord.model_json_schema(by_alias=False))


def positive_s(value: Optional[float]) -> Optional[float]:
    """Refuse a limit in seconds that is not a positive number (a usage error, exit code 2)."""
    if value is not None and not (value > 0 and value != float("inf")):
        raise typer.BadParameter(f"must be a positive number of seconds, got {value}")
    return value


@app.command()
def summarize(
    file: Path = typer.Argument(..., help="Records: CSV, JSON, JSONL or Parquet (or another tool's export), or a "
                                "folder or quoted glob of them ('traces/*.parquet', hive folders gpu=a/) read as one "
                                "set."),
    window_start: Optional[float] = typer.Option(None, help="Observation window start, s (default: min start)."),
    window_end: Optional[float] = typer.Option(None, help="Observation window end, s (default: max end)."),
    slo_ttft: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on TTFT, s."),
    slo_tpot: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on request TPOT, s."),
    slo_latency: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on latency, s."),
    slo_itl: Optional[float] = typer.Option(None, "--slo-itl", callback=positive_s,
                                            help="SLO on each request's p99 inter-token gap, s (needs token_times)."),
    stall_s: Optional[float] = typer.Option(None, "--stall-s", callback=positive_s,
                                            help="A gap between tokens longer than this is a stall, s "
                                                 "(default: 4x the median inter-token latency)."),
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
    engine: str = typer.Option("auto", "--engine", help="memory, duckdb (out of core, the same report), or auto: "
                               "DuckDB when the records would not fit in the memory servebench allows itself."),
    memory_limit: Optional[str] = typer.Option(None, "--memory-limit", metavar="SIZE",
                                               help="Memory servebench allows itself (4GB, 512MiB; default: half of "
                                                    "this machine's); DuckDB is held to it."),
    warmup_s: Optional[float] = typer.Option(None, "--warmup-s", callback=positive_s,
                                             help="Report the window's first S seconds as the slice 'cold' and the "
                                                  "rest as 'warm' (in place of the records' slices)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Summarize a record file or set: the spec's eight fields, then the full failure-aware report."""
    from servebench.analysis.summary import SLO, build_report
    from servebench.output.terminal import user_text
    from servebench.records.extra_columns import extra_columns_note
    from servebench.records.extra_columns import slice_by as sliced
    from servebench.records.loaders import read_path, to_table

    slo = SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, latency_s=slo_latency, itl_p99_s=slo_itl, stall_s=stall_s)
    if memory_limit is not None:  # a usage error naming the option, whichever engine would run
        from servebench.records.recordset import parse_size
        parse_size(memory_limit)
    if not trim_to_window:
        from servebench.analysis.record_sets import summarize_path
        with Console(stderr=True).status(f"reading {user_text(file.name)}") as status:
            done = summarize_path(str(file), format, window_start, window_end, slo, slice_by, engine, memory_limit,
                                  progress=status.update, warmup_s=warmup_s)
        if done.engine_note:
            Console(stderr=True).print(f"[cyan]note:[/] {user_text(done.engine_note)}")
        _print_summary(done.report, done.warnings, done.unavailable_metrics, done.extra_columns, slice_by,
                       done.notes or [n for n in [extra_columns_note(done.extra_columns)] if n], done.engine, as_json)
        return
    if engine == "duckdb":
        from servebench.errors import ConfigError
        raise ConfigError("--trim-to-window reads one file in memory; it cannot be used with --engine duckdb")
    # a spinner on stderr while large files are read and summarized; stdout stays clean for --json
    with Console(stderr=True).status(f"reading {user_text(file.name)}") as status:
        loaded = read_path(file, format)
        status.update(f"validating {loaded.rows.n:,} records")
        trim_note = None
        if trim_to_window:
            from servebench.records.window_zoom import trim_to_window as trimmed
            kept = trimmed(loaded, window_start, window_end)
            table, ws, we, trim_note = kept.table, kept.window_start, kept.window_end, kept.note()
        else:
            table, ws, we = to_table(loaded, window_start, window_end)
        if slice_by is not None:
            table = sliced(table, slice_by)
        status.update(f"summarizing {len(table):,} records")
        report = build_report(table, ws, we, slo, warmup_s=warmup_s)
    note = extra_columns_note(table.extra)
    unavailable = list(loaded.metadata.get("unavailable_metrics") or [])
    _print_summary(report, [*loaded.warnings, *report.warnings()], unavailable, list(table.extra), slice_by,
                   [n for n in (note, trim_note) if n], "memory", as_json)


def _print_summary(report: Any, warnings: list[str], unavailable: list[str], extra: list[str],
                   slice_by: str | None, notes: list[str], engine: str, as_json: bool) -> None:
    """Print a summary's report as one JSON object, or as warnings, notes and tables for people."""
    from servebench.output.terminal import user_text
    if as_json:
        out = report.model_dump(mode="json")  # emit_json applies the strict JSON rule
        # a metric the file cannot support is "no data" (null), not a number that looks measured
        summary = {k: (None if k in unavailable else v) for k, v in out.pop("summary").items()}
        out = {"summary": summary, **out, "warnings": warnings, "unavailable_metrics": unavailable,
               "slice_by": slice_by, "extra_columns": extra, "notes": notes, "engine": engine}
        emit_json(out)
        return
    from servebench.output.terminal import print_report
    for w in warnings:
        console.print(f"[yellow]warning:[/] {user_text(w)}")
    for n in notes:
        console.print(f"[cyan]note:[/] {user_text(n)}")
    print_report(console, report, frozenset(unavailable), slice_by=slice_by)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI, turning servebench errors into one line on stderr and exit code 2.

    Click's standalone mode handles usage errors (exit 2), Ctrl-C and typer.Exit codes itself.
    """
    reuse_freed_memory()
    no_huge_pages()
    if argv is None:  # this process is the command: what it imported lives as long, and no collection need walk it
        gc.freeze()
    try:
        app(args=argv, prog_name="servebench")
    except ServebenchError as exc:
        typer.echo(f"error: {safe_text(exc)}", err=True)  # user text in it cannot drive the terminal
        sys.exit(2)
