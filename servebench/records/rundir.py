"""The run folder: the files ``run``, ``load`` and ``simulate`` write, and ``summarize`` and ``report`` read.

============================  ==================================================================================
``records.*``                 the records; a reader takes the first of :data:`RECORD_FILES` present
``steps.*``                   the step trace (:mod:`servebench.records.steps`); first of :data:`STEP_FILES`
``metadata.json``             the run metadata of a timing or load run: what was measured (``kind`` says which)
``sends.jsonl``               a load run's sends: actual send time and lag per request
``server_metrics.parquet``    a load run's scrapes of the server's Prometheus metrics (:data:`SERVER_METRICS`)
``summary.json``              ``servebench simulate``'s summary (its ``simulation`` part describes the run)
``scenario.yaml``             a scenario put beside a simulation's files (first of :data:`SCENARIO_FILES`)
============================  ==================================================================================

A sweep's folder holds ``sweep.json`` and ``sweep.csv`` (the first two of :data:`SWEEP_FILES`, written by
:func:`write_sweep`); a measured sweep's (``servebench load --sweep``) also its ``metadata.json`` and one run
folder per rate (``rate_<r>``, :func:`rate_folder`). ``servebench validate-sweep``'s folder holds
``validate_sweep.json`` (:data:`VALIDATION`, :func:`write_validation` and :func:`read_validation`), its HTML
overlay (:data:`VALIDATION_REPORT`) and one run folder per measured rate (:func:`rate_folder`). Records are read by
:func:`servebench.records.loaders.read_path`, which asks :func:`records_file` here, so every command reads
the same file of a folder; this module reads and writes the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel

from servebench.errors import ConfigError, InputFormatError
from servebench.records.rows import read_rows
from servebench.records.server_samples import (
    AIPERF_FILE,
    AIPERF_JSON,
    ServerSamples,
    read_aiperf_json,
    read_aiperf_parquet,
    read_samples,
    write_samples,
)
from servebench.records.steps import StepRow, StepTrace, read_steps, write_steps
from servebench.records.table import RecordTable
from servebench.records.token_times import TIMES_TYPE, TokenRuns

RECORD_FILES: tuple[str, ...] = ("records.jsonl", "records.parquet", "records.csv", "records.json")
STEP_FILES: tuple[str, ...] = ("steps.jsonl", "steps.parquet", "steps.csv", "steps.json",
                               "step_trace.jsonl", "step_trace.csv", "trace.jsonl")  # the last three: older names
RECORDS = RECORD_FILES[0]  # what servebench writes (records.parquet past PARQUET_FROM_RECORDS, see write_run)
STEPS = STEP_FILES[0]
PARQUET_FROM_RECORDS = 10_000  # "auto" writes records and steps as Parquet from this many records on
FileFormat = Literal["auto", "jsonl", "csv", "parquet"]
METADATA = "metadata.json"
SENDS = "sends.jsonl"
SERVER_METRICS = "server_metrics.parquet"
SUMMARY = "summary.json"
SCENARIO_FILES: tuple[str, ...] = ("scenario.yaml", "scenario.yml", "scenario.json")
SWEEP_FILES: tuple[str, ...] = ("sweep.json", "sweep.csv", "sweep_points.json", "sweep_points.csv",
                                "points.json", "points.csv")
SWEEP, SWEEP_CSV = SWEEP_FILES[0], SWEEP_FILES[1]  # what servebench writes (the rest: other tools' names, read)
VALIDATION = "validate_sweep.json"  # validate-sweep's result, beside VALIDATION_REPORT and a run folder per rate
VALIDATION_REPORT = "validate_sweep.html"  # its measured-vs-simulated overlay (a plotly page)


def find_file(folder: Path, names: Sequence[str]) -> Path | None:
    """Return the first of ``names`` that is a file in ``folder``, or None."""
    return next((folder / n for n in names if (folder / n).is_file()), None)


def is_run_folder(path: str | Path) -> bool:
    """Return whether ``path`` is a folder holding one of :data:`RECORD_FILES`."""
    p = Path(path)
    return p.is_dir() and find_file(p, RECORD_FILES) is not None


def records_file(folder: str | Path) -> Path:
    """Return the record file of a run folder: the first of :data:`RECORD_FILES` present."""
    p = Path(folder)
    found = find_file(p, RECORD_FILES)
    if found is None:
        raise InputFormatError(f"{p}: a folder without {' or '.join(RECORD_FILES)}")
    return found


def read_trace(path: str | Path) -> StepTrace:
    """Read a step-trace file, or the step trace of a run folder (the first of :data:`STEP_FILES` present)."""
    p = Path(path)
    if p.is_dir():
        found = find_file(p, STEP_FILES)
        if found is None:
            raise InputFormatError(f"{p}: a folder without {' or '.join(STEP_FILES)}")
        p = found
    if not p.is_file():
        raise InputFormatError(f"{p}: no such file")
    return read_steps(p)


def read_metadata(path: Path) -> dict[str, Any]:
    """Read ``metadata.json`` (the run metadata); it must be one JSON object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise InputFormatError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise InputFormatError(f"{path}: expected a JSON object (the run metadata)")
    return doc


def read_settings(folder: str | Path) -> list[dict[str, Any]]:
    """Return the documents that say how a run was set up: its ``metadata.json``, then each scenario file beside it.

    In that order (scenario files in :data:`SCENARIO_FILES` order), each parsed to a mapping (JSON, or YAML for
    ``.yaml``/``.yml``). A file that cannot be read or parsed, or that is not a mapping, is left out: these
    documents only add to a report (a tenant's weight), never stop it. Not a folder: none.
    """
    import yaml

    p = Path(folder)
    if not p.is_dir():
        return []
    docs: list[dict[str, Any]] = []
    for name in (METADATA, *SCENARIO_FILES):
        f = p / name
        if not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
            doc = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    return docs


@dataclass
class RunFolder:
    """A run folder's files, read (the records are read by ``loaders.read_path``, from ``records_path``)."""

    path: Path
    records_path: Path
    steps_path: Path | None = None
    steps: StepTrace | None = None
    metadata_path: Path | None = None
    metadata: dict[str, Any] | None = None
    sends_path: Path | None = None
    summary_path: Path | None = None
    scenario_path: Path | None = None
    files: list[str] = field(default_factory=list)


def read_folder(folder: str | Path, *, require: Sequence[str] = ()) -> RunFolder:
    """Read a run folder's step trace and metadata, and find its other files; ``require`` names files that must be there.

    ``require`` takes ``"steps"``, ``"metadata"`` and ``"sends"``; a folder without one of them is refused
    with the missing file's name.
    """
    p = Path(folder)
    if not p.is_dir():
        raise InputFormatError(f"{p}: not a folder (give the -o folder of servebench run, load or simulate)")
    steps_path, meta_path = find_file(p, STEP_FILES), find_file(p, (METADATA,))
    sends_path = find_file(p, (SENDS,))
    found = {"records": find_file(p, RECORD_FILES), "steps": steps_path, "metadata": meta_path, "sends": sends_path}
    missing = [RECORDS if k == "records" else {"steps": STEPS, "metadata": METADATA, "sends": SENDS}[k]
               for k in ("records", *require) if found[k] is None]
    if missing:
        raise InputFormatError(f"{p}: missing {', '.join(missing)}; is it a folder written by servebench "
                               "run, load or simulate?")
    records_path = records_file(p)
    run = RunFolder(path=p, records_path=records_path, steps_path=steps_path, metadata_path=meta_path,
                    sends_path=sends_path, summary_path=find_file(p, (SUMMARY,)), scenario_path=find_file(p, SCENARIO_FILES),
                    files=[records_path.name])
    if meta_path is not None:
        run.metadata = read_metadata(meta_path)
        run.files.append(meta_path.name)
    if steps_path is not None:
        run.steps = read_steps(steps_path)
        run.files.append(steps_path.name)
    return run


def read_sends(folder: str | Path) -> list[dict[str, Any]]:
    """Read a load run's ``sends.jsonl``: per request, when it was meant to go, when it went, and the lag."""
    path = Path(folder) / SENDS
    if not path.is_file():
        raise InputFormatError(f"{folder}: no {SENDS}; is it a folder written by servebench load?")
    return read_rows(path)


def server_samples(path: str | Path) -> ServerSamples | None:
    """Return the server's metrics kept with a run (None: none were): in a run folder or beside a record file.

    A load run's :data:`SERVER_METRICS`, else AIPerf's ``server_metrics_export.parquet`` (its scrapes of the
    same run, on the epoch clock its records are imported on), else its aggregated ``server_metrics_export.json``.
    """
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    found = find_file(folder, (SERVER_METRICS,))
    if found is not None:
        return read_samples(found)
    aiperf = find_file(folder, (AIPERF_FILE,))
    if aiperf is not None:
        return read_aiperf_parquet(aiperf)
    aggregated = find_file(folder, (AIPERF_JSON,))  # statistics only: what they place in time (read_aiperf_json)
    return read_aiperf_json(aggregated) if aggregated is not None else None


def _write_parquet_in_parts(path: Path, table: pa.Table, runs: TokenRuns) -> None:
    """Write records with their token times as a list column, expanding the runs one row group at a time."""
    import pyarrow.parquet as pq
    schema = table.schema.append(pa.field("token_times", TIMES_TYPE))
    # token times (a million requests: 370 million) without a dictionary, their bytes split by significance and
    # zstd at level 1: on 300,000 simulated requests half the CPU of Arrow's defaults (dictionary, snappy), a
    # third of the file and a faster read; pyarrow and DuckDB read it
    with pq.ParquetWriter(path, schema, compression="zstd", compression_level=1, use_dictionary=table.column_names,
                          use_byte_stream_split=["token_times.list.element"]) as writer:
        with ThreadPoolExecutor(1) as pool:  # a part is written beside the expansion of the next: two cores' work
            written: Future[None] | None = None
            for lo, hi, times in runs.row_chunks():
                part = table.slice(lo, hi - lo).append_column(schema.field("token_times"), times)
                if written is not None:
                    written.result()
                written = pool.submit(writer.write_table, part)
            if written is not None:
                written.result()


def _arrow_rows(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Return record dicts as an Arrow table with a column for every key any record has (null where absent)."""
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    return pa.table({k: [r.get(k) for r in rows] for k in keys})


def _jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(dict(r)) + "\n" for r in rows)


def formats(records: int, records_format: FileFormat = "auto",
            steps_format: FileFormat = "auto") -> tuple[str, str]:
    """Return the record and step-trace file formats to write for ``records`` records.

    ``auto`` is JSONL (one line a record, readable anywhere) below :data:`PARQUET_FROM_RECORDS` records
    and Parquet (columnar and typed: token times as a list column, a tenth of the size, written and
    read without a Python object per value) from there on.
    """
    if records_format not in ("auto", "jsonl", "parquet"):
        raise ConfigError(f"record file format {records_format!r}: expected auto, jsonl or parquet")
    if steps_format not in ("auto", "jsonl", "csv", "parquet"):
        raise ConfigError(f"step trace format {steps_format!r}: expected auto, jsonl, csv or parquet")
    big = records >= PARQUET_FROM_RECORDS
    return ("parquet" if big else "jsonl") if records_format == "auto" else records_format, \
        ("parquet" if big else "jsonl") if steps_format == "auto" else steps_format


def _replace(folder: Path, written: Path, names: Sequence[str]) -> None:
    """Remove the folder's other files of one role, so that a reader never takes an older run's."""
    for name in names:
        other = folder / name
        if other != written and other.is_file():
            other.unlink()


def write_run(folder: str | Path, records: RecordTable | Sequence[Mapping[str, Any]], *,
              steps: StepTrace | Sequence[StepRow] | None = None, metadata: Mapping[str, Any] | None = None,
              sends: Sequence[Mapping[str, Any]] | None = None,
              steps_format: FileFormat = "jsonl", records_format: FileFormat = "jsonl",
              token_runs: TokenRuns | None = None, server_metrics: ServerSamples | None = None) -> dict[str, Path]:
    """Write a run folder (created if needed): records, and the step trace, metadata and sends given.

    Formats as :func:`formats` chooses (``auto``: by the number of records). ``token_runs`` gives the records'
    token times as runs (a simulation's), written a part of the rows at a time. A record file or step trace
    of another format left there by an earlier run is removed. Returns the files written by role
    (``records``, ``steps``, ``metadata``, ``sends``); simulate's ``summary.json`` is :func:`write_summary`'s.
    ``server_metrics``: a load run's scrapes (:data:`SERVER_METRICS`); without them an earlier run's file is
    removed, so it is never read as this run's.
    """
    d = Path(folder)
    records_fmt, steps_fmt = formats(len(records), records_format, steps_format)
    files = {"records": d / f"records.{records_fmt}"}
    try:
        _make_folder(d)
        if records_fmt == "parquet" and token_runs is not None and isinstance(records, RecordTable):
            _write_parquet_in_parts(files["records"], records.to_arrow(), token_runs)
        elif records_fmt == "parquet":
            import pyarrow.parquet as pq
            pq.write_table(records.to_arrow() if isinstance(records, RecordTable) else _arrow_rows(records),
                           files["records"])
        else:
            if token_runs is not None and isinstance(records, RecordTable):
                records = records.with_columns(token_times=token_runs.expand())
            rows = records.to_dicts() if isinstance(records, RecordTable) else records
            files["records"].write_text(_jsonl(rows), encoding="utf-8")
        _replace(d, files["records"], RECORD_FILES)
        if steps is not None:
            files["steps"] = _write_steps_file(d, steps, steps_fmt)
        if sends is not None:
            files["sends"] = d / SENDS
            files["sends"].write_text(_jsonl(sends), encoding="utf-8")
        if server_metrics is not None:
            files["server_metrics"] = write_samples(d / SERVER_METRICS, server_metrics)
        elif (d / SERVER_METRICS).is_file():
            (d / SERVER_METRICS).unlink()
        if metadata is not None:
            files["metadata"] = _write_metadata(d, metadata)
    except OSError as exc:
        raise ConfigError(f"cannot write the run to {d}: {exc.strerror or exc}") from None
    return files


def _make_folder(d: Path) -> None:
    """Create the output folder ``d`` (and its parents) unless it exists; refuse a file in its place."""
    if d.exists() and not d.is_dir():
        raise ConfigError(f"output {d} exists and is not a folder")
    d.mkdir(parents=True, exist_ok=True)


def write_run_steps(folder: str | Path, steps: StepTrace, records: int, steps_format: FileFormat = "auto") -> Path:
    """Write a run folder's step trace alone, in the format :func:`write_run` would choose for ``records`` records.

    A big simulation writes its trace first and lets it go before the report and the records are made
    (1,000,000 requests: a trace of 2.8 million rows, 310 MB as int64 columns), then calls :func:`write_run`
    without ``steps``.
    """
    d = Path(folder)
    try:
        _make_folder(d)
        return _write_steps_file(d, steps, formats(records, "auto", steps_format)[1])
    except OSError as exc:
        raise ConfigError(f"cannot write the run to {d}: {exc.strerror or exc}") from None


def _write_steps_file(folder: Path, steps: StepTrace | Sequence[StepRow], steps_fmt: str) -> Path:
    path = folder / f"steps.{steps_fmt}"
    write_steps(steps, path)
    _replace(folder, path, STEP_FILES)
    return path


def _write_metadata(folder: Path, metadata: Mapping[str, Any]) -> Path:
    path = folder / METADATA
    path.write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return path


def write_summary(folder: str | Path, summary_json: str) -> Path:
    """Write ``servebench simulate``'s summary (its ``--json`` document, serialized) as :data:`SUMMARY`."""
    path = Path(folder) / SUMMARY
    try:
        path.write_text(summary_json, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the run to {folder}: {exc.strerror or exc}") from None
    return path


def rate_folder(folder: str | Path, rate_rps: float) -> Path:
    """Return the run folder of one rate of a measured sweep: ``rate_<r>`` inside the sweep's folder.

    >>> rate_folder("out", 0.5).as_posix(), rate_folder("out", 4.0).as_posix()
    ('out/rate_0.5', 'out/rate_4')
    """
    return Path(folder) / f"rate_{rate_rps:g}"


def read_sweep(path: str | Path) -> tuple[list[dict[str, Any]], Any]:
    """Read a sweep file (one of :data:`SWEEP_FILES`, or another tool's): its points as rows, and for JSON the
    whole document (a ``SweepResult`` when servebench wrote it; None for CSV)."""
    p = Path(path)
    rows = read_rows(p)
    doc = json.loads(p.read_text(encoding="utf-8-sig")) if p.suffix.lower() == ".json" else None
    return rows, doc


def write_sweep(folder: str | Path, sweep: BaseModel, sweep_csv: str, *,
                metadata: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write a sweep's folder (created if needed): ``sweep.json`` (the result), ``sweep.csv`` and the metadata given.

    ``sweep`` is the :class:`servebench.serving.sweep.SweepResult`, ``sweep_csv`` its points as
    :func:`servebench.serving.sweep.sweep_csv` writes them; a measured sweep gives its ``metadata``
    (the endpoint, the rates and each rate's run folder). Returns the files written by role
    (``sweep``, ``csv``, ``metadata``).
    """
    d = Path(folder)
    try:
        _make_folder(d)
        files = {"sweep": d / SWEEP, "csv": d / SWEEP_CSV}
        files["sweep"].write_text(sweep.model_dump_json(indent=2), encoding="utf-8")
        files["csv"].write_text(sweep_csv, encoding="utf-8")
        if metadata is not None:
            files["metadata"] = _write_metadata(d, metadata)
    except OSError as exc:
        raise ConfigError(f"cannot write the sweep to {d}: {exc.strerror or exc}") from None
    return files


def write_validation(folder: str | Path, result_json: str) -> Path:
    """Write ``servebench validate-sweep``'s result (its ``--json`` document, serialized) as :data:`VALIDATION`.

    The folder is created if needed; the run folder of each rate is :func:`write_run`'s, at :func:`rate_folder`.
    """
    d = Path(folder)
    try:
        _make_folder(d)
        path = d / VALIDATION
        path.write_text(result_json, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the sweep validation to {d}: {exc.strerror or exc}") from None
    return path


def read_validation(path: str | Path) -> Any:
    """Read a validate-sweep result as parsed JSON: :data:`VALIDATION` in a folder, or the file itself.

    What it holds is the caller's to check (``serving.engine.sweep_validation.sweep_validation_doc``).
    """
    p = Path(path)
    file = p / VALIDATION if p.is_dir() else p
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFormatError(f"{file}: not a validate-sweep result ({exc})") from None
