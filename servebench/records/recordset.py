"""A record set: a folder or glob of record files (Parquet parts, CSV, JSONL) read as one set of records.

Exported traces usually come as many Parquet parts, often under hive folders (``gpu=a/part-0.parquet``):
each ``key=value`` folder becomes a text column of its records, usable with ``--slice-by key``. Errors
name the part (its path inside the set), the row inside that part and the field.

In memory, every part is read and validated by the one-file readers and the tables are joined; the
same report out of core is ``servebench.analysis.duckdb_engine``. :func:`choose_engine` picks between them
from the parts' sizes and the memory servebench allows itself.
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from servebench.errors import ConfigError, InputFormatError
from servebench.records.loaders import LoadedRecords, read_bytes
from servebench.records.rundir import is_run_folder, records_file
from servebench.records.schema import ParsedRows, canonical_name, shown
from servebench.records.table import RecordTable, validate
from servebench.records.textcolumns import text_array

PART_SUFFIXES = (".parquet", ".pq", ".csv", ".jsonl", ".ndjson", ".json")
_GLOB_CHARS = re.compile(r"[*?\[]")
ENGINES = ("auto", "memory", "duckdb")


@dataclass(frozen=True)
class Part:
    """One file of a record set: where it is, how errors name it, and its hive ``key=value`` folders."""

    path: Path
    name: str
    partition: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RecordSet:
    """The parts of one record set, in the order their rows count (sorted by name)."""

    source: str
    parts: tuple[Part, ...]

    @property
    def partition_keys(self) -> tuple[str, ...]:
        """The hive partition keys, in order of first appearance."""
        return tuple(dict.fromkeys(k for part in self.parts for k, _ in part.partition))

    @property
    def total_bytes(self) -> int:
        return sum(p.path.stat().st_size for p in self.parts)


def is_record_set(path: str | Path) -> bool:
    """Whether PATH names several record files: a glob, or a folder that is not a run folder.

    >>> is_record_set("traces/*.parquet"), is_record_set("records.csv")
    (True, False)
    """
    text = str(path)
    if _GLOB_CHARS.search(text) and not Path(text).exists():
        return True
    p = Path(text)
    return p.is_dir() and not is_run_folder(p)


def find_parts(path: str | Path) -> RecordSet:
    """Return the record files of a folder (searched recursively) or a glob, sorted by their path.

    Hidden files and names starting with ``_`` (``_SUCCESS``, ``_metadata``) are skipped, as Spark
    and Hive writers expect. A single file is a set of one part named by its file name.
    """
    text = str(path)
    p = Path(text)
    if is_run_folder(p):  # a folder written by run, load or simulate: its records file
        p = records_file(p)
    if p.is_file():
        return RecordSet(p.name, (Part(p, p.name),))
    if p.is_dir():
        root = p
        found = [f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in PART_SUFFIXES]
    elif _GLOB_CHARS.search(text):
        root = Path(_glob_root(text))
        found = [Path(f) for f in glob.glob(text, recursive=True) if Path(f).is_file()]
    else:
        raise InputFormatError(f"{text}: no such file or folder")
    parts = []
    for f in found:
        rel = f.relative_to(root) if f.is_relative_to(root) else Path(f.name)
        if any(piece.startswith((".", "_")) for piece in rel.parts):
            continue
        parts.append(Part(f, rel.as_posix(), _partition(rel)))
    if not parts:
        raise InputFormatError(f"{text}: no record files (looked for {', '.join(PART_SUFFIXES)})")
    parts.sort(key=lambda part: part.name)
    return RecordSet(text, tuple(parts))


def _glob_root(pattern: str) -> str:
    """Return the folder a glob starts from: its longest leading part without wildcards."""
    head = []
    for piece in Path(pattern).parts:
        if _GLOB_CHARS.search(piece):
            break
        head.append(piece)
    return str(Path(*head)) if head else "."


def _partition(rel: Path) -> tuple[tuple[str, str], ...]:
    """Return the hive ``key=value`` pairs of a part's folders (``gpu=a/part-0.parquet``: gpu is 'a')."""
    pairs = []
    for piece in rel.parts[:-1]:
        key, eq, value = piece.partition("=")
        if eq and key:
            if canonical_name(key) is not None:
                raise InputFormatError(f"{rel.as_posix()}: the folder {piece!r} would set the record field "
                                       f"{key!r}; a partition folder must name a column the schema does not know")
            pairs.append((key, value))
    return tuple(pairs)


# --------------------------------------------------------------------------- reading parts


def read_part(part: Part, fmt: str = "auto") -> LoadedRecords:
    """Read one part with the one-file readers; errors name the part by its path inside the set."""
    suffix = part.path.suffix.lower()
    try:
        if fmt == "parquet" or (fmt == "auto" and suffix in (".parquet", ".pq")):
            from servebench.records.loaders import parse_parquet
            with pa.memory_map(str(part.path)) as mapped:
                rows = parse_parquet(mapped, part.name)
            loaded = LoadedRecords(rows, "parquet", list(rows.notes))  # as the one-file reader words its notes
        else:
            loaded = read_bytes(part.path.read_bytes(), part.name, fmt)
    except OSError as exc:
        raise InputFormatError(f"{part.name}: cannot read ({exc.strerror or exc})") from None
    return _with_partition(loaded, part)


def _with_partition(loaded: LoadedRecords, part: Part) -> LoadedRecords:
    """Add the part's hive partition values to its rows as text columns."""
    if not part.partition:
        return loaded
    rows = loaded.rows
    clash = [k for k, _ in part.partition if k in rows.extra]
    if clash:
        raise InputFormatError(f"{part.name}: the column {clash[0]!r} is also a partition folder; rename one")
    extra = {**rows.extra, **{k: pa.array([v] * rows.n, pa.string()) for k, v in part.partition}}
    rows = ParsedRows(rows.n, rows.columns, rows.not_object, rows.source, extra, rows.notes)
    return LoadedRecords(rows, loaded.format, loaded.warnings, loaded.metadata)


def read_set(record_set: RecordSet, fmt: str = "auto",
             progress: Callable[[str], None] | None = None) -> list[LoadedRecords]:
    """Read every part into memory, in order."""
    out = []
    for i, part in enumerate(record_set.parts, start=1):
        if progress is not None:
            progress(f"reading {i:,} of {len(record_set.parts):,} parts")
        out.append(read_part(part, fmt))
    return out


def set_warnings(loaded: Sequence[LoadedRecords], names: Sequence[str]) -> list[str]:
    """Return each part's warnings, prefixed with the part's name when there are several parts."""
    if len(loaded) == 1:
        return list(loaded[0].warnings)
    return [f"{name}: {w}" for part, name in zip(loaded, names) for w in part.warnings]


def default_set_window(columns: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float] | None:
    """Return [min finite start, max finite end] over all parts, or None when no part has both."""
    lo, hi = math.inf, -math.inf
    for start, end in columns:
        fs, fe = start[np.isfinite(start)], end[np.isfinite(end)]
        if fs.size:
            lo = min(lo, float(fs.min()))
        if fe.size:
            hi = max(hi, float(fe.max()))
    return None if lo == math.inf or hi == -math.inf else (lo, hi)


def check_set_window(ws: float, we: float, source: str) -> None:
    """Raise unless the window is finite with end after start (as ``loaders.to_table`` does)."""
    if not (math.isfinite(ws) and math.isfinite(we) and we > ws):
        from servebench.errors import RecordValidationError
        raise RecordValidationError(
            f"Invalid observation window: start {shown(ws)} and end {shown(we)} must be finite, end after start",
            source=source, rule="Invalid observation window")


def table_of_set(loaded: Sequence[LoadedRecords], source: str, window_start: float | None = None,
                 window_end: float | None = None) -> tuple[RecordTable, float, float]:
    """Validate every part over one window (default: the whole set's) and join them into one table.

    The first bad row is the first in part order, named by its part, as if the parts were one file.
    """
    rows = [part.rows for part in loaded]
    ws, we = window_start, window_end
    if ws is None or we is None:
        found = default_set_window((r.columns["start"].values, r.columns["end"].values) for r in rows)
        if found is None:  # no finite start or end anywhere: every row is bad, the first says why
            _raise_first(rows, -math.inf, math.inf)
        assert found is not None
        ws = found[0] if ws is None else ws
        we = found[1] if we is None else we
        if not (we > ws):
            _raise_first(rows, -math.inf, math.inf)
    check_set_window(ws, we, source)
    tables = [validate(r, ws, we) for r in rows]
    return concat_tables(tables, source), float(ws), float(we)


def _raise_first(rows: Sequence[ParsedRows], ws: float, we: float) -> None:
    for r in rows:
        validate(r, ws, we)


def concat_tables(tables: Sequence[RecordTable], source: str) -> RecordTable:
    """Join validated tables into one, extra columns matched by name (absent where a part lacks one)."""
    if len(tables) == 1:
        return tables[0] if tables[0].source == source else tables[0].with_columns(source=source)
    numeric = {name: np.concatenate([getattr(t, name) for t in tables]) for name in
               ("start", "end", "status", "first_token", "output_tokens", "admitted", "prompt_tokens",
                "cached_prompt_tokens", "attempt", "first_answer_token", "reasoning_tokens")}

    def text(attr: str) -> pa.Array:
        return pa.concat_arrays([text_array(getattr(t, attr)) for t in tables])

    def lists(attr: str, value_type: pa.DataType) -> pa.Array | None:  # token_times, token_counts
        if all(getattr(t, attr) is None for t in tables):
            return None
        typ = pa.list_(value_type)
        return pa.concat_arrays([pa.nulls(len(t), typ) if getattr(t, attr) is None else getattr(t, attr).cast(typ)
                                 for t in tables])

    names = extra_names(list(t.extra) for t in tables)
    extra = {name: _concat_extra([t.extra.get(name) for t in tables], [len(t) for t in tables]) for name in names}
    return RecordTable.from_columns(request_id=text("request_id_arrow"), slice=text("slice_arrow"),
                                    error=text("error_arrow"), logical_id=text("logical_id_arrow"), source=source,
                                    extra=extra, token_times=lists("token_times", pa.float64()),
                                    token_counts=lists("token_counts", pa.int64()), **numeric)


def extra_names(per_part: Iterable[Iterable[str]]) -> list[str]:
    """Return the extra columns of all parts, in order of first appearance."""
    return list(dict.fromkeys(name for names in per_part for name in names))


def _concat_extra(arrays: list[Any], lengths: list[int]) -> pa.Array:
    """Join one extra column's parts; types are widened (int to float), or all become text if they differ."""
    typed = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays if a is not None]
    typed = [a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in typed]
    null_type = typed[0].type if typed else pa.string()
    filled = [pa.nulls(n, null_type) if a is None else None for a, n in zip(arrays, lengths)]
    it = iter(typed)
    parts = [f if f is not None else next(it) for f in filled]
    try:
        return pa.concat_tables([pa.table({"c": p}) for p in parts], promote_options="permissive") \
            .column("c").combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.concat_arrays([p.cast(pa.string()) for p in parts])


# --------------------------------------------------------------------------- which engine


# the in-memory report's peak, measured (benchmarks/summary.py): 0.57 GB at 1M Parquet rows, 2.14 GB at 10M;
# the fixed part is the interpreter, numpy and pyarrow with their buffers
BASE_BYTES = 400 * 10**6
BYTES_PER_PARQUET_ROW = 200
TEXT_BYTES_FACTOR = {"csv": 6, "jsonl": 20, "json": 20}  # peak memory per byte of file, parsed in Python


def memory_budget_bytes(memory_limit: str | None) -> int:
    """Return the memory servebench allows itself: ``--memory-limit``, else half of physical memory."""
    if memory_limit is not None:
        return parse_size(memory_limit)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


MAX_MEMORY_BYTES = 2**60  # 1 EiB: more than any machine holds; DuckDB's setting refuses far larger values


def parse_size(text: str) -> int:
    """Return a size such as ``4GB``, ``512MiB`` or ``2.5 GB`` in bytes: at least 1 byte, at most 1 EiB.

    >>> parse_size("4GB"), parse_size("512MiB"), parse_size("1000")
    (4000000000, 536870912, 1000)
    """
    m = _SIZE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"--memory-limit {text!r}: expected a size such as 4GB or 512MiB")
    size = Fraction(m.group(1)) * _UNITS[(m.group(2) or "B").upper()]  # exact: no float rounds 26 digits
    if size > MAX_MEMORY_BYTES:
        raise ConfigError(f"--memory-limit {text!r}: too large; at most 1048576TiB (1 EiB, 2**60 bytes)")
    if size < 1:
        raise ConfigError(f"--memory-limit {text!r}: less than one byte; expected a size such as 4GB or 512MiB")
    return int(size)


def estimate_memory_bytes(record_set: RecordSet) -> int:
    """Estimate the in-memory report's peak: Parquet by row count (footers only), text by file size."""
    import pyarrow.parquet as pq
    total = BASE_BYTES
    for part in record_set.parts:
        suffix = part.path.suffix.lower()
        if suffix in (".parquet", ".pq"):
            try:
                total += pq.read_metadata(part.path).num_rows * BYTES_PER_PARQUET_ROW
                continue
            except (pa.ArrowException, OSError):
                pass
        fmt = "csv" if suffix == ".csv" else "json" if suffix == ".json" else "jsonl"
        total += part.path.stat().st_size * TEXT_BYTES_FACTOR[fmt]
    return total


def choose_engine(engine: str, record_set: RecordSet, memory_limit: str | None) -> tuple[str, str | None]:
    """Return the engine to use and, when chosen automatically for size, one line saying why."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    budget = memory_budget_bytes(memory_limit)
    if engine != "auto":
        return engine, None
    need = estimate_memory_bytes(record_set)
    if need <= budget:
        return "memory", None
    why = "--memory-limit" if memory_limit else "half of this machine's memory"
    return "duckdb", (f"these records would need about {_size(need)} in memory, more than the {_size(budget)} "
                      f"servebench allows itself ({why}); summarizing them out of core with DuckDB "
                      "(--engine memory to insist)")


def _size(n_bytes: int) -> str:
    """Return a byte count for people: ``_size(3 * 10**7)`` is '30 MB'.

    >>> _size(3 * 10**7), _size(25 * 10**8)
    ('30 MB', '2.5 GB')
    """
    return f"{n_bytes / 1e9:.1f} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:.0f} MB"


# --------------------------------------------------------------------------- the summary, either engine


@dataclass
class SetSummary:
    """A report with what reading found: warnings, unavailable metrics, extra columns, the engine used."""

    report: Any
    warnings: list[str]
    unavailable_metrics: list[str]
    extra_columns: list[str]
    engine: str
    engine_note: str | None = None
    notes: list[str] = field(default_factory=list)


__all__ = ["ENGINES", "Part", "RecordSet", "SetSummary", "choose_engine", "estimate_memory_bytes", "find_parts",
           "is_record_set", "memory_budget_bytes", "parse_size", "read_part", "read_set", "table_of_set"]
