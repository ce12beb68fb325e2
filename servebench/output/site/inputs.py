"""Read the runs a report shows: record files, timing-run and simulation folders, sweep outputs.

This is the report's only file-reading edge. A folder is recognised by the files in it (their names and
the order a folder is probed in are ``servebench.records.rundir``'s, the same for every command):

=====================  ===============================================================
``records.*``          a record set (JSONL, JSON, CSV or Parquet); with ``metadata.json``
                       it is a timing run (its run metadata; a load run or a
                       simulation when its ``kind`` says so), with a step trace and no
                       metadata a simulation
``steps.*``            the step trace of a timing run or simulation (optional), read by
                       ``servebench.records.steps`` under the one schema (older column names too)
``summary.json``       ``servebench simulate``'s summary: its ``simulation`` part is shown
``sweep.json|csv``     a sweep: one row per offered-load point (any folder without records
                       whose JSON or CSV holds a list of points with a rate or concurrency)
=====================  ===============================================================

A file whose columns are a public trace's (Mooncake, Azure, BurstGPT: ``servebench.records.traces``)
is a trace, shown as ``trace stats`` sees it, not as records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servebench.errors import InputFormatError, RecordValidationError
from servebench.records import rundir
from servebench.records.loaders import LoadedRecords, read_path, to_table
from servebench.records.rows import read_rows
from servebench.records.rundir import METADATA, RECORD_FILES, SWEEP_FILES, find_file
from servebench.records.server_samples import AIPERF_FILE, ServerSamples
from servebench.records.table import RecordTable
from servebench.records.traces import FORMATS as TRACE_FORMATS
from servebench.records.traces import Trace, detect_format, read_trace

SWEEP_KEYS = ("rate", "rate_per_s", "offered_rate", "offered_rate_per_s", "arrival_rate", "concurrency",
              "users", "offered_load")
KINDS = ("records", "timing run", "load run", "simulation", "sweep", "trace")
TRACE_SNIFF_BYTES = 1 << 16  # enough of a file to read its first line's columns


@dataclass
class RunInput:
    """One run as read from disk, before any report is computed."""

    name: str
    path: str
    kind: str
    table: RecordTable | None = None
    window_start: float | None = None
    window_end: float | None = None
    format: str | None = None
    warnings: list[str] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    steps: list[dict[str, Any]] | None = None  # rows under the step-trace schema's names
    sweep_points: list[dict[str, Any]] | None = None
    sweep_document: Any = None
    files: list[str] = field(default_factory=list)
    server_metrics: ServerSamples | None = None  # a load run's scrapes of the server (rundir.SERVER_METRICS)
    trace: Trace | None = None  # a public trace (kind 'trace'), read by servebench.records.traces


def _read_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON object (a scenario or metadata file)."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputFormatError(f"{path}: not valid YAML or JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InputFormatError(f"{path}: expected an object at the top level")
    return doc


def _looks_like_sweep(rows: list[dict[str, Any]]) -> bool:
    if not rows or not isinstance(rows[0], dict):
        return False
    first = rows[0]
    return any(k in first for k in SWEEP_KEYS) or ("load" in first and "offered" in first)  # servebench sweep


def _is_sweep_file(p: Path) -> bool:
    try:
        return _looks_like_sweep(read_rows(p))
    except (InputFormatError, UnicodeDecodeError):
        return False


def _sweep_file(folder: Path) -> Path | None:
    found = find_file(folder, SWEEP_FILES)
    if found is not None:
        return found
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() in (".json", ".csv") and p.is_file() and p.name != METADATA \
                and _is_sweep_file(p):
            return p
    return None


def _load_sweep(sweep: Path, folder: Path, name: str, path: Path) -> RunInput:
    """Read a sweep's points (and the folder's metadata.json, if any) as one run."""
    rows, doc = rundir.read_sweep(sweep)
    meta_path = find_file(folder, (METADATA,))
    meta = rundir.read_metadata(meta_path) if meta_path is not None else None
    files = [sweep.name] + ([meta_path.name] if meta_path is not None else [])
    return RunInput(name=name, path=str(path), kind="sweep",
                    sweep_points=rows, sweep_document=doc, metadata=meta,
                    files=files)


def kind_from_metadata(meta: dict[str, Any], default: str) -> str:
    """Return the run's kind as its metadata names it ('servebench load' is a load run), else ``default``.

    >>> kind_from_metadata({"kind": "servebench load"}, "timing run"), kind_from_metadata({}, "timing run")
    ('load run', 'timing run')
    """
    kind = str(meta.get("kind", "")).lower()
    if "simulat" in kind:
        return "simulation"
    if "load" in kind:
        return "load run"
    if "sweep" in kind:
        return "sweep"
    return default


def load_records(path: Path, name: str, kind: str = "records", fmt: str = "auto",
                 window_start: float | None = None, window_end: float | None = None) -> RunInput:
    """Read and validate one record file (canonical or another tool's export)."""
    return _records_run(read_path(path, fmt), name, path, kind, window_start, window_end)


def _records_run(loaded: LoadedRecords, name: str, path: Path, kind: str, window_start: float | None,
                 window_end: float | None) -> RunInput:
    table, ws, we = to_table(loaded, window_start, window_end)
    return RunInput(name=name, path=str(path), kind=kind, table=table, window_start=ws, window_end=we,
                    format=loaded.format, warnings=list(loaded.warnings),
                    metadata=dict(loaded.metadata) or None, files=[path.name])


def load_runs(path: str | Path, fmt: str = "auto", window_start: float | None = None,
              window_end: float | None = None) -> list[RunInput]:
    """Read one RUN argument as every run it holds: each benchmark of a multi-run export becomes its own run.

    GuideLLM ``benchmarks[]``, GenAI-Perf ``experiments[]`` and vLLM ``--append-result`` lines are compared
    side by side; a format naming ``run=N`` keeps that one run. Anything else is :func:`load_run`.
    """
    p = Path(path)
    base, _, options = fmt.partition(":")
    if p.is_file() and "run=" not in options and base not in ("csv", "json", "jsonl", "parquet"):
        from servebench.records.importers import detect, import_runs

        data = p.read_bytes()
        foreign = detect(data, p.name) if base == "auto" else base
        if foreign is not None:
            runs = import_runs(data, p.name, f"{foreign}:{options}" if options else foreign)
            if len(runs) > 1:
                return [_records_run(loaded, f"{p.name} [run {i}]", p, "records", window_start, window_end)
                        for i, loaded in enumerate(runs)]
    return [load_run(p, fmt, window_start, window_end)]


def load_run(path: str | Path, fmt: str = "auto", window_start: float | None = None,
             window_end: float | None = None) -> RunInput:
    """Read one RUN argument: a record file or a folder written by run, simulate or sweep."""
    p = Path(path)
    if p.is_file():
        if p.name.lower() in SWEEP_FILES:  # the file `servebench sweep` says it wrote
            return _load_sweep(p, p.parent, p.parent.resolve().name or p.name, p)
        trace = _public_trace(p, fmt)
        if trace is not None:
            return RunInput(name=p.name, path=str(p), kind="trace", format=trace.format, trace=trace)
        try:
            run = load_records(p, p.name, "records", fmt, window_start, window_end)
        except (InputFormatError, RecordValidationError):
            if p.suffix.lower() in (".json", ".csv") and fmt == "auto" and _is_sweep_file(p):
                return _load_sweep(p, p.parent, p.stem, p)
            raise
        run.server_metrics = rundir.server_samples(p)  # AIPerf's scrapes beside its export, or a run folder's
        return run
    if not p.is_dir():
        raise InputFormatError(f"{p}: no such file or folder")
    name = p.resolve().name or str(p)
    if rundir.is_run_folder(p):
        folder = rundir.read_folder(p)
        meta, steps = folder.metadata, folder.steps
        kind = "timing run" if meta is not None else "simulation" if steps is not None else "records"
        run = load_records(folder.records_path, name, kind, fmt, window_start, window_end)
        run.path = str(p)
        if meta is not None:
            run.metadata = {**(run.metadata or {}), **meta}
            run.kind = kind_from_metadata(meta, run.kind)
            run.files.append(METADATA)
        if meta is None and folder.summary_path is not None:
            sim = _read_mapping(folder.summary_path).get("simulation")  # servebench simulate's own summary
            if isinstance(sim, dict):
                run.metadata = {**(run.metadata or {}), "simulation": sim}
                run.kind = "simulation"
                run.files.append(folder.summary_path.name)
        if meta is None and folder.scenario_path is not None:
            run.metadata = {**(run.metadata or {}), "scenario": _read_mapping(folder.scenario_path)}
            run.files.append(folder.scenario_path.name)
        if steps is not None and folder.steps_path is not None:
            run.steps = steps.to_rows()
            run.files.append(folder.steps_path.name)
        run.server_metrics = rundir.server_samples(p)
        if run.server_metrics is not None:
            run.files.append(rundir.SERVER_METRICS if (p / rundir.SERVER_METRICS).is_file() else AIPERF_FILE)
        return run
    sweep = _sweep_file(p)
    if sweep is not None:
        return _load_sweep(sweep, p, name, p)
    raise InputFormatError(
        f"{p}: found no records ({', '.join(RECORD_FILES)}) and no sweep output ({', '.join(SWEEP_FILES)}); "
        "give a record file, or a folder written by servebench run, simulate or sweep")


def _public_trace(p: Path, fmt: str) -> Trace | None:
    """Return a file as a public trace when its format is named so, or its columns are one's; else None."""
    if fmt in TRACE_FORMATS and fmt != "records":
        return read_trace(p, fmt)
    if fmt != "auto":
        return None
    with p.open("rb") as f:
        head = f.read(TRACE_SNIFF_BYTES)
    try:
        found = detect_format(p, head)
    except InputFormatError:
        return None
    return None if found == "records" else read_trace(p, found)


def unique_names(runs: list[RunInput]) -> None:
    """Give runs that share a display name a suffix (' (2)', ' (3)', ...), in place."""
    seen: dict[str, int] = {}
    for run in runs:
        count = seen.get(run.name, 0) + 1
        seen[run.name] = count
        if count > 1:
            run.name = f"{run.name} ({count})"
