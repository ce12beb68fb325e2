"""Summarize a record file or a record set (a folder or glob of parts) with either engine into the full report.

In memory is the default; DuckDB (``servebench.analysis.duckdb_engine``) computes the same report out of
core when asked, or when the set would not fit in the memory servebench allows itself. Should the DuckDB
engine not compute some field of the report, it refuses when asked by name, and the automatic choice
stays in memory with a note saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from servebench.analysis.retries import read_tenant_weights
from servebench.analysis.server_metrics import attach
from servebench.analysis.summary import build_report
from servebench.errors import InputFormatError
from servebench.records.extra_columns import slice_by
from servebench.records.loaders import read_path, to_table
from servebench.records.recordset import (
    SetSummary,
    choose_engine,
    find_parts,
    is_record_set,
    parse_size,
    read_set,
    set_warnings,
    table_of_set,
)
from servebench.records.rundir import server_samples


def summarize_path(path: str | Path, fmt: str = "auto", window_start: float | None = None,
                   window_end: float | None = None, slo: Any = None, slice_column: str | None = None,
                   engine: str = "auto", memory_limit: str | None = None,
                   progress: Callable[[str], None] = lambda _: None, warmup_s: float | None = None) -> SetSummary:
    """Summarize a record file or set, in memory or with DuckDB (``engine``), into the full report.

    ``warmup_s`` reports the window's first seconds as the slice ``cold``; a run folder's tenant
    weights (its scenario's ``server.tenants``) weigh the fairness section.
    """
    if memory_limit is not None:  # refused by either engine, before any reading
        parse_size(memory_limit)
    single = not is_record_set(path)
    record_set = None if single and engine == "memory" else find_parts(path)
    chosen, note = choose_engine(engine, record_set, memory_limit) if record_set is not None else ("memory", None)
    weights = read_tenant_weights(path) if single else None
    if chosen == "duckdb":
        from servebench.analysis.duckdb_engine import EngineRefused, summarize_set  # imports duckdb: only when chosen
        try:
            done = summarize_set(record_set, fmt, window_start, window_end, slo,  # type: ignore[arg-type]
                                 slice_column, memory_limit, progress, engine_note=note, weights=weights,
                                 warmup_s=warmup_s)
            samples, problem = _server_samples(path, single)
            attach(done.report, samples)
            done.warnings.extend(problem)
            return done
        except EngineRefused as refused:  # asked for by name, the refusal is the error; chosen for size, memory
            if engine == "duckdb":
                raise
            why = str(refused).removeprefix("--engine duckdb: ").removesuffix("; use --engine memory")
            chosen, note = "memory", f"{str(note).split(';')[0]}; but {why}: summarizing them in memory instead"
    if single:  # one file (or a run folder's): the one-file reader, as ever
        progress(f"reading {Path(path).name}")
        loaded = [read_path(path, fmt)]
        source = loaded[0].rows.source or Path(path).name
    else:
        assert record_set is not None
        loaded = read_set(record_set, fmt, progress)
        source = record_set.source
    progress(f"validating {sum(part.rows.n for part in loaded):,} records")
    if single:
        table, ws, we = to_table(loaded[0], window_start, window_end)
    else:
        table, ws, we = table_of_set(loaded, source, window_start, window_end)
    if slice_column is not None:
        table = slice_by(table, slice_column)
    names = [p.name for p in record_set.parts] if record_set is not None and not single else [source]
    unavailable = list(dict.fromkeys(m for part in loaded for m in part.metadata.get("unavailable_metrics") or []))
    warnings = set_warnings(loaded, names)
    del loaded  # the parsed rows and Arrow columns behind them: the report needs only the table
    pa.default_memory_pool().release_unused()
    progress(f"summarizing {len(table):,} records")
    report = build_report(table, ws, we, slo, weights=weights, warmup_s=warmup_s)
    samples, problem = _server_samples(path, single)
    attach(report, samples)  # a load run's scrapes of the server, if kept
    return SetSummary(report, warnings + report.warnings() + problem, unavailable, list(table.extra), "memory", note)


def _server_samples(path: str | Path, single: bool) -> tuple[Any, list[str]]:
    """Return the server metrics kept with one file or run folder (None for a record set) and a warning if unreadable."""
    if not single:
        return None, []
    try:
        return server_samples(path), []
    except InputFormatError as exc:
        return None, [f"server metrics not read: {exc}"]


__all__ = ["SetSummary", "summarize_path"]
