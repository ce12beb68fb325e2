"""The step trace: one row per engine step, the same columns from the simulator and the torch engine.

Both sides write :data:`COLUMNS`, in that order, under those names; a column one side cannot fill is
null there (the simulator has no ``compute_start_s`` or ``compute_s``). Every reader goes through
:func:`parse_steps`, which also reads the names older traces used (:data:`OLD_NAMES`), so files
written before the one schema still fit, chart and calibrate.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from servebench.errors import ConfigError, InputFormatError
from servebench.records.rows import read_rows, rows_from_bytes

LANES: tuple[str, ...] = ("step", "decode", "prefill")


@dataclass(frozen=True)
class StepColumn:
    """One column of the step trace: its name (with its unit), kind and meaning."""

    name: str
    kind: Literal["float", "int", "lane"]
    description: str


COLUMNS: tuple[StepColumn, ...] = (
    StepColumn("start_s", "float", "when the step started, s on the records' clock"),
    StepColumn("duration_s", "float", "the step's cycle, s: from its planning to the next step's planning, "
                                      "bookkeeping included (a row of several steps: their total)"),
    StepColumn("steps", "int", "engine steps the row stands for: 1, or more for the simulator's run of "
                               "identical decode steps (then kv_tokens_read is the first step's)"),
    StepColumn("lane", "lane", "'step' (one lane), or 'decode' / 'prefill' when the simulator prefills "
                               "whole prompts on a lane of their own (prefill rows have no step base)"),
    StepColumn("running", "int", "running sequences: the simulator counts them after the step's admissions, "
                                 "the engine once the step is done"),
    StepColumn("waiting", "int", "waiting requests, at the same moment as running"),
    StepColumn("admitted", "int", "requests admitted by the step's plan"),
    StepColumn("preempted", "int", "sequences preempted by the step's plan"),
    StepColumn("prefill_seqs", "int", "sequences with a prompt chunk in the step"),
    StepColumn("prefill_tokens", "int", "prompt tokens the step computes"),
    StepColumn("decode_seqs", "int", "sequences decoding one token in the step"),
    StepColumn("kv_tokens_read", "int", "context tokens the decoding sequences attend over (the step model's KV term)"),
    StepColumn("kv_tokens_used", "int", "the scheduler's KV accounting (reserved for outputs, or whole blocks), "
                                        "at the same moment as running"),
    StepColumn("kv_tokens_held", "int", "KV tokens actually computed and stored: the simulator's before the step, "
                                        "the engine's physical cache after it"),
    StepColumn("compute_start_s", "float", "when the model started computing, s (engine only: null when simulated)"),
    StepColumn("compute_s", "float", "the model's share of duration_s, s; tokens are emitted at "
                                     "compute_start_s + compute_s (engine only: null when simulated)"),
)
NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
_KIND = {c.name: c.kind for c in COLUMNS}
OLD_NAMES: dict[str, str] = {
    "time": "start_s", "duration": "duration_s", "active": "running",  # the simulator's, before the one schema
    "start": "start_s", "kv_tokens": "kv_tokens_read", "compute_start": "compute_start_s",  # the engine's
    "time_s": "start_s",  # hand-made traces the report drew before
}


@dataclass(frozen=True)
class StepRow:
    """One step as the torch engine times it: when it started, how long it took, and what it computed.

    ``duration_s`` runs from this step's planning to the next step's planning when the engine
    went straight on (else to the end of its own iteration): the cycle the simulator models as
    one step, scheduling and bookkeeping included. ``compute_s`` is the model's share of it, from
    ``compute_start_s``; tokens are emitted at ``compute_start_s + compute_s``, before the step's bookkeeping.
    (The simulator builds the trace's columns directly, as :class:`StepTrace`.)
    """

    start_s: float
    duration_s: float
    compute_s: float
    prefill_tokens: int
    decode_seqs: int
    kv_tokens_read: int  # context tokens read by the decoding sequences (the step model's KV term)
    kv_tokens_used: int  # scheduler's KV accounting after the step (reserved or in whole blocks)
    kv_tokens_held: int  # tokens stored in the physical cache after the step
    running: int
    waiting: int
    preempted: int
    prefill_seqs: int = 0  # sequences with a prompt chunk in this step (per-sequence set-up in the step model)
    admitted: int = 0  # requests admitted by this step's plan
    compute_start_s: float | None = None  # when the model started computing (after planning and set-up)
    steps: int = 1
    lane: str = "step"


@dataclass(frozen=True)
class StepTrace:
    """A step trace as columns, one per :data:`COLUMNS` entry; None is a column null throughout.

    Integer columns are int64 arrays, or float64 with NaN where some rows are null; ``lane`` holds
    int8 indices into :data:`LANES` (-1 for null). A simulation's counts are int32 where every one fits
    (half the memory: a million requests make 2.8 million rows); arithmetic that may pass 2**31 converts
    first (readers here take floats), and files hold them as int64.
    """

    start_s: np.ndarray | None = None
    duration_s: np.ndarray | None = None
    steps: np.ndarray | None = None
    lane: np.ndarray | None = None
    running: np.ndarray | None = None
    waiting: np.ndarray | None = None
    admitted: np.ndarray | None = None
    preempted: np.ndarray | None = None
    prefill_seqs: np.ndarray | None = None
    prefill_tokens: np.ndarray | None = None
    decode_seqs: np.ndarray | None = None
    kv_tokens_read: np.ndarray | None = None
    kv_tokens_used: np.ndarray | None = None
    kv_tokens_held: np.ndarray | None = None
    compute_start_s: np.ndarray | None = None
    compute_s: np.ndarray | None = None

    def __len__(self) -> int:
        return next((int(a.size) for a in (getattr(self, n) for n in NAMES) if a is not None), 0)

    def has(self, name: str) -> bool:
        """Return whether column ``name`` holds a value in every row (and the trace has rows)."""
        a = getattr(self, name)
        return a is not None and a.size > 0 and (a.dtype.kind != "f" or not bool(np.isnan(a).any())) \
            and (name != "lane" or not bool((a < 0).any()))

    def columns(self) -> dict[str, list[Any]]:
        """Return every schema column as a plain list (``lane`` as names, null as None), for JSON, CSV or a DataFrame."""
        n = len(self)
        out: dict[str, list[Any]] = {}
        for c in COLUMNS:
            a = getattr(self, c.name)
            if a is None:
                out[c.name] = [None] * n
            elif c.kind == "lane":
                out[c.name] = [LANES[i] if i >= 0 else None for i in a.tolist()]
            elif a.dtype.kind == "f" and (c.kind == "int" or bool(np.isnan(a).any())):
                out[c.name] = [None if v != v else (int(v) if c.kind == "int" else v) for v in a.tolist()]
            else:
                out[c.name] = a.tolist()
        return out

    def to_rows(self) -> list[dict[str, Any]]:
        """Return the trace as row dicts with every schema column, in schema order."""
        cols = self.columns()
        return [dict(zip(NAMES, vals)) for vals in zip(*(cols[n] for n in NAMES))]

    def rows(self, lo: int, hi: int) -> "StepTrace":
        """Return rows ``lo .. hi-1`` (views of these columns, nothing copied)."""
        return StepTrace(**{n: None if (a := getattr(self, n)) is None else a[lo:hi] for n in NAMES})

    def to_arrow(self) -> pa.Table:
        """Return every schema column, in order, as a typed Arrow table (null where a value is absent)."""
        n = len(self)
        cols: dict[str, pa.Array] = {}
        for c in COLUMNS:
            a = getattr(self, c.name)
            typ = pa.string() if c.kind == "lane" else pa.int64() if c.kind == "int" else pa.float64()
            if a is None:
                cols[c.name] = pa.nulls(n, typ)
            elif c.kind == "lane":
                cols[c.name] = pa.DictionaryArray.from_arrays(pa.array(a.astype(np.int32), mask=a < 0),
                                                              pa.array(LANES)).cast(typ)
            elif a.dtype.kind == "f" and c.kind == "int":
                null = np.isnan(a)
                cols[c.name] = pa.array(np.where(null, 0, a).astype(np.int64), mask=null)
            else:
                cols[c.name] = pa.array(a, typ, mask=np.isnan(a) if a.dtype.kind == "f" else None)
        return pa.table(cols)


def from_step_rows(rows: Sequence[StepRow]) -> StepTrace:
    """Return the engine's rows as a trace (its columns typed as the schema says)."""
    return parse_steps([asdict(r) for r in rows], "engine steps")


def as_trace(data: StepTrace | Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]],
             source: str = "step trace") -> StepTrace:
    """Return ``data`` as a trace: a trace as it is, rows or a mapping of columns through :func:`parse_steps`."""
    if isinstance(data, StepTrace):
        return data
    if isinstance(data, Mapping):
        return parse_columns(data, source)
    return parse_steps(data, source)


def parse_steps(rows: Sequence[Mapping[str, Any]], source: str) -> StepTrace:
    """Read trace rows (objects) under the schema's names or the old ones; errors name source, row and column.

    Other columns are ignored. A column given under both its name and an old one must agree row by row.
    """
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping):
            raise InputFormatError(f"{source}: row {i}: expected an object, got {type(row).__name__}")
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    return parse_columns({k: [r.get(k) for r in rows] for k in keys}, source, n=len(rows))


def parse_columns(data: Mapping[str, Sequence[Any]], source: str, n: int | None = None) -> StepTrace:
    """Read a mapping of columns (schema names or old ones) as a trace; see :func:`parse_steps`."""
    lengths = {len(v) for v in data.values()}
    if len(lengths) > 1:
        raise InputFormatError(f"{source}: columns of different lengths ({', '.join(map(str, sorted(lengths)))})")
    n = n if n is not None else (lengths.pop() if lengths else 0)
    known = [k for k in data if k in _KIND or k in OLD_NAMES]
    if n and not known:
        raise InputFormatError(f"{source}: no step-trace columns; expected some of {', '.join(NAMES)}")
    out: dict[str, np.ndarray | None] = {}
    first_key: dict[str, str] = {}
    for key in known:
        name = key if key in _KIND else OLD_NAMES[key]
        column = _column(list(data[key]), key, _KIND[name], source)
        if name in out:
            column = _merge(out[name], column, _KIND[name], (first_key[name], key), source)
        out[name] = column
        first_key.setdefault(name, key)
    return StepTrace(**out)


def _column(values: list[Any], key: str, kind: str, source: str) -> np.ndarray | None:
    """Return one column as an array, or None when every row is null; refuse values of the wrong kind."""
    if all(v is None for v in values):
        return None
    if kind == "lane":
        codes = np.full(len(values), -1, dtype=np.int8)
        for i, v in enumerate(values):
            if v is None:
                continue
            if v not in LANES:
                raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {v!r} is not one of {', '.join(LANES)}")
            codes[i] = LANES.index(v)
        return codes
    nulls = False
    for i, v in enumerate(values):
        if v is None:
            nulls = True
            continue
        if type(v) is not int and type(v) is not float and not isinstance(v, (np.integer, np.floating)):
            raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {v!r} is not a number")
        if not math.isfinite(v):
            raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {v!r} is not a finite number")
        if kind == "int" and (v < 0 or v != int(v)):
            raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {v!r} is not a whole number of 0 or more")
    if kind == "int" and not nulls:
        return np.asarray(values, dtype=np.int64)
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def _merge(first: np.ndarray | None, second: np.ndarray | None, kind: str, keys: tuple[str, str],
           source: str) -> np.ndarray | None:
    """Join a column given under two names: each row's value from whichever has it; where both do, they must agree."""
    if first is None or second is None:
        return second if first is None else first
    a, b = first.astype(np.float64), second.astype(np.float64)
    if kind == "lane":  # -1 is null
        a[first < 0], b[second < 0] = math.nan, math.nan
    differ = ~np.isnan(a) & ~np.isnan(b) & (a != b)
    if differ.any():
        i = int(np.argmax(differ))
        raise InputFormatError(f"{source}: row {i + 1}: columns '{keys[0]}' ({a[i]:g}) and '{keys[1]}' ({b[i]:g}) "
                               "differ; they name the same column")
    joined = np.where(np.isnan(a), b, a)
    if kind == "lane":
        return np.nan_to_num(joined, nan=-1).astype(np.int8)
    if kind == "int" and not np.isnan(joined).any():
        return joined.astype(np.int64)
    return joined


def read_steps(path: str | Path) -> StepTrace:
    """Read a step trace file (JSONL, JSON, CSV or Parquet) written by simulate, run, or by an older servebench."""
    p = Path(path)
    if p.suffix.lower() in (".parquet", ".pq"):
        return _read_parquet(p)
    return parse_steps(read_rows(p), str(p))


def _read_parquet(path: Path) -> StepTrace:
    """Read a Parquet step trace column by column (no Python object per value), with the same checks and names."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputFormatError(f"{path}: not a readable Parquet file ({exc})") from None
    source = str(path)
    data: dict[str, np.ndarray | None] = {}
    first_key: dict[str, str] = {}
    for key in table.column_names:
        name = key if key in _KIND else OLD_NAMES.get(key)
        if name is None:
            continue
        column = _arrow_column(table.column(key), key, _KIND[name], source)
        data[name] = _merge(data[name], column, _KIND[name], (first_key[name], key), source) if name in data else column
        first_key.setdefault(name, key)
    if table.num_rows and not data:
        raise InputFormatError(f"{source}: no step-trace columns; expected some of {', '.join(NAMES)}")
    return StepTrace(**data)


def _arrow_column(arr: pa.ChunkedArray, key: str, kind: str, source: str) -> np.ndarray | None:
    """Return one Parquet column as :func:`_column` would the same values (None when every row is null)."""
    if arr.null_count == len(arr):
        return None
    typ = arr.type
    if kind == "lane":
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_dictionary(typ)):
            raise InputFormatError(f"{source}: column '{key}' is {typ}; expected one of {', '.join(LANES)}")
        values = np.asarray(arr.cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
        codes = np.full(values.size, -1, dtype=np.int8)
        for code, lane in enumerate(LANES):
            codes[values == lane] = code
        bad = (codes < 0) & (values != None)  # noqa: E711  (element-wise: null rows stay -1)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {values[i]!r} is not one of {', '.join(LANES)}")
        return codes
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        i = int(np.argmax(~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)))
        raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {arr[i].as_py()!r} is not a number")
    a = np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)  # null -> NaN
    null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    bad = ~null & ~np.isfinite(a)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {float(a[i])!r} is not a finite number")
    if kind == "int":
        bad = ~null & ((a < 0) | (a != np.floor(a)))
        if bad.any():
            i = int(np.argmax(bad))
            raise InputFormatError(f"{source}: row {i + 1}, column '{key}': {arr[i].as_py()!r} is not a whole number "
                                   "of 0 or more")
        if not null.any():
            return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
    return a


def steps_from_bytes(data: bytes, name: str) -> StepTrace:
    """Read an uploaded step trace (CSV by its suffix, else JSONL or JSON)."""
    return parse_steps(rows_from_bytes(data, name), name)


def encode_steps(trace: StepTrace, fmt: Literal["jsonl", "csv"]) -> str:
    """Return the trace as JSONL (null as ``null``) or CSV (null as an empty cell), every schema column in order."""
    cols = trace.columns()
    rows = zip(*(cols[n] for n in NAMES))
    if fmt == "csv":
        import io
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(NAMES)
        w.writerows(["" if v is None else v for v in row] for row in rows)
        return buf.getvalue()
    if fmt == "jsonl":
        return "".join(json.dumps(dict(zip(NAMES, row))) + "\n" for row in rows)
    raise ConfigError(f"step trace format {fmt!r}: expected jsonl or csv")


WRITE_ROWS = 1 << 18  # rows of a Parquet trace made into Arrow (int32 counts cast to int64) and written at once: the
# whole of a million requests' 2.8 million rows at once held 430 MB more, parts of 262,144 rows 120 MB


def write_steps(trace: StepTrace | Sequence[StepRow], path: str | Path) -> None:
    """Write a step trace as CSV (a ``.csv`` path), Parquet (``.parquet``) or JSONL (any other)."""
    if not isinstance(trace, StepTrace):
        trace = from_step_rows(trace)
    p = Path(path)
    if p.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq
        n = len(trace)
        if n <= WRITE_ROWS:
            pq.write_table(trace.to_arrow(), p)
            return
        first = trace.rows(0, WRITE_ROWS).to_arrow()
        with pq.ParquetWriter(p, first.schema) as writer:  # a part at a time: no Arrow copy of every column at once
            writer.write_table(first)
            del first
            for lo in range(WRITE_ROWS, n, WRITE_ROWS):
                writer.write_table(trace.rows(lo, lo + WRITE_ROWS).to_arrow())
        return
    p.write_text(encode_steps(trace, "csv" if p.suffix.lower() == ".csv" else "jsonl"), encoding="utf-8")
