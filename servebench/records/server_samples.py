"""A server's Prometheus samples beside a run's records: ``server_metrics.parquet`` in a run folder.

One row per sample a scrape read, every metric kept (known or not):

============  =======  ======================================================================
``t_s``       float64  when the scrape was answered, s on the records' clock (a load run: since
                       its origin t0, as a record's ``start``; an AIPerf import: Unix epoch s)
``endpoint``  string   the URL scraped
``metric``    string   the sample's name as exposed (``vllm:num_preemptions_total``,
                       ``vllm:time_to_first_token_seconds_bucket``)
``family``    string   its metric family (``vllm:num_preemptions``,
                       ``vllm:time_to_first_token_seconds``): the parser's name, without
                       ``_total`` or a histogram's suffix
``type``      string   the family's TYPE: counter, gauge, histogram, summary, info, ... or unknown
``labels``    string   the sample's labels as one JSON object, keys sorted (``{}`` for none)
``value``     float64  the sample's value
============  =======  ======================================================================

AIPerf's own export of the same scrapes (``server_metrics_export.parquet``, its schema 1.0) is read
into the same samples by :func:`read_aiperf_parquet`; its aggregated ``server_metrics_export.json``
(schema 1.0: statistics per series, with time slices when it was asked for them) by
:func:`read_aiperf_json`, as far as it places values in time.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servebench.errors import InputFormatError

if TYPE_CHECKING:
    import pyarrow as pa

COLUMNS: tuple[str, ...] = ("t_s", "endpoint", "metric", "family", "type", "labels", "value")
AIPERF_FILE = "server_metrics_export.parquet"  # AIPerf's default name for the same scrapes
AIPERF_JSON = "server_metrics_export.json"  # AIPerf's aggregated statistics of them (its default export, with a CSV)
AIPERF_FIXED = ("endpoint_url", "metric_name", "metric_type", "unit", "description", "timestamp_ns",
                "value", "sum", "count", "bucket_le", "bucket_count")


@dataclass(frozen=True)
class Series:
    """One time series: a sample name with one set of labels, from one endpoint."""

    endpoint: str
    metric: str
    family: str
    type: str
    labels: tuple[tuple[str, str], ...]

    def label(self, name: str) -> str | None:
        """Return one label's value, or None when the series has no such label."""
        return next((v for k, v in self.labels if k == name), None)


@dataclass
class ServerSamples:
    """Samples as columns: each row's series (an index into ``series``), time and value, in scrape order."""

    series: list[Series] = field(default_factory=list)
    series_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    t_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    value: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _rows: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.t_s.size)

    def of(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return one series' times and values, in time order (rows grouped by series once, on first use)."""
        if self._rows is None:
            order = np.lexsort((self.t_s, self.series_index))  # by series, then by time
            self._rows = order, np.searchsorted(self.series_index[order], np.arange(len(self.series) + 1))
        order, bounds = self._rows
        rows = order[bounds[k]:bounds[k + 1]]
        return self.t_s[rows], self.value[rows]

    def shifted(self, by_s: float) -> "ServerSamples":
        """Return the samples with every time moved by ``by_s`` (onto another clock's origin)."""
        return ServerSamples(self.series, self.series_index, self.t_s + by_s, self.value)


class SampleLog:
    """Samples gathered scrape by scrape, kept compactly (a series is stored once, a sample in 24 bytes)."""

    def __init__(self) -> None:
        self._ids: dict[Series, int] = {}
        self._series: list[Series] = []
        self._index = array("q")
        self._t = array("d")
        self._value = array("d")

    def add(self, t_s: float, series: Series, value: float) -> None:
        """Keep one sample of ``series`` at ``t_s``."""
        k = self._ids.get(series)
        if k is None:
            k = self._ids[series] = len(self._series)
            self._series.append(series)
        self._index.append(k)
        self._t.append(t_s)
        self._value.append(value)

    def __len__(self) -> int:
        return len(self._t)

    def samples(self, shift_s: float = 0.0) -> ServerSamples:
        """Return what was gathered, each time moved by ``shift_s``."""
        return ServerSamples(list(self._series), np.frombuffer(self._index, dtype=np.int64).copy(),
                             np.frombuffer(self._t, dtype=np.float64) + shift_s,
                             np.frombuffer(self._value, dtype=np.float64).copy())


def labels_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Return labels as a sorted tuple of pairs (hashable; the order the file's JSON uses)."""
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def write_samples(path: str | Path, samples: ServerSamples) -> Path:
    """Write samples as Parquet (strings dictionary-encoded: a series' names and labels cost once)."""
    import pyarrow as pa  # here, not at the top: the scraper's process needs this module without Arrow
    import pyarrow.parquet as pq

    p = Path(path)
    idx = samples.series_index
    strings = {
        "endpoint": [s.endpoint for s in samples.series], "metric": [s.metric for s in samples.series],
        "family": [s.family for s in samples.series], "type": [s.type for s in samples.series],
        "labels": [json.dumps(dict(s.labels), sort_keys=True) for s in samples.series],
    }
    codes = pa.array(idx.astype(np.int32), type=pa.int32())
    columns = {"t_s": pa.array(samples.t_s, type=pa.float64())}
    for name, values in strings.items():
        columns[name] = pa.DictionaryArray.from_arrays(codes, pa.array(values, type=pa.string()))
    columns["value"] = pa.array(samples.value, type=pa.float64())
    pq.write_table(pa.table(columns), p)
    return p


def read_samples(path: str | Path) -> ServerSamples:
    """Read ``server_metrics.parquet`` (as :func:`write_samples` writes it); refuse another layout by name."""
    import pyarrow as pa

    table = _read_parquet(path)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise InputFormatError(f"{path}: not a server-metrics file: no column {', '.join(repr(c) for c in missing)}")
    t = _floats(table, "t_s", path)
    value = _floats(table, "value", path, allow_nan=True)
    codes, words = [], []
    for name in ("endpoint", "metric", "family", "type", "labels"):
        col = table.column(name).combine_chunks()
        if not pa.types.is_dictionary(col.type):
            col = col.dictionary_encode()
        if col.null_count or not (pa.types.is_string(col.type.value_type) or pa.types.is_large_string(col.type.value_type)):
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0]) if col.null_count else 0
            raise InputFormatError(f"{path}: row {row + 1}, field '{name}': expected text")
        codes.append(col.indices.to_numpy().astype(np.int64))
        words.append(col.dictionary.to_pylist())
    if math.prod(max(len(w), 1) for w in words) < 2**62:  # one integer per row names its five strings
        combined = np.zeros(table.num_rows, dtype=np.int64)
        for c, w in zip(codes, words):
            combined = combined * max(len(w), 1) + c
        _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_index=True, return_inverse=True)
    by_first = np.argsort(first)  # series in the order the file first names them
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(by_first.size)
    index = rank[inverse.reshape(-1)]
    series = [Series(*(words[j][codes[j][row]] for j in range(4)),  # type: ignore[call-arg]
                     labels_key(_labels(words[4][codes[4][row]], path, int(row))))
              for row in first[by_first].tolist()]
    return ServerSamples(series, index, t, value)


def read_aiperf_parquet(path: str | Path) -> ServerSamples:
    """Read AIPerf's ``server_metrics_export.parquet`` (schema 1.0) as samples on the Unix epoch clock, s.

    Its counters and histograms hold deltas from a reference scrape before profiling, which differ from
    the raw counts by a constant per series, so increases, rates and the quantiles of a window's
    histogram come out the same. A histogram row becomes its ``_bucket`` (with ``le``), ``_sum`` and
    ``_count`` samples as a scrape exposes them; every label column is kept as a label.
    """
    table = _read_parquet(path)
    missing = [c for c in ("endpoint_url", "metric_name", "metric_type", "timestamp_ns") if c not in table.column_names]
    if missing:
        raise InputFormatError(f"{path}: not an AIPerf server-metrics export: no column "
                               f"{', '.join(repr(c) for c in missing)}")
    cols = {c: table.column(c).to_pylist() for c in table.column_names}
    label_names = [c for c in table.column_names if c not in AIPERF_FIXED]
    log = SampleLog()
    n = table.num_rows
    for row in range(n):
        ns = cols["timestamp_ns"][row]
        if not isinstance(ns, int) or isinstance(ns, bool):
            raise InputFormatError(f"{path}: row {row + 1}, field 'timestamp_ns': expected an integer, got {ns!r}")
        t = ns / 1e9
        family, kind = cols["metric_name"][row], cols["metric_type"][row]
        endpoint = cols["endpoint_url"][row]
        labels = {k: cols[k][row] for k in label_names if cols[k][row] is not None}
        for metric, extra, value in _aiperf_samples(family, kind, cols, row):
            log.add(t, Series(str(endpoint), metric, str(family), str(kind), labels_key({**labels, **extra})),
                    _finite_or_nan(value, path, row))
    return log.samples()


def _aiperf_samples(family: str, kind: str, cols: Mapping[str, list[object]],
                    row: int) -> Iterable[tuple[str, dict[str, str], object]]:
    """Return the scrape samples one AIPerf row stands for: (sample name, added labels, value)."""
    def get(name: str) -> object:
        return cols[name][row] if name in cols else None

    if kind != "histogram":
        yield (f"{family}_total" if kind == "counter" and not family.endswith("_total") else family), {}, get("value")
        return
    le = get("bucket_le")
    if le is not None:
        yield f"{family}_bucket", {"le": str(le)}, get("bucket_count")
    if str(le) in ("+Inf", "None") or le is None:  # sum and count repeat on every bucket row: take them once
        yield f"{family}_sum", {}, get("sum")
        yield f"{family}_count", {}, get("count")


def read_aiperf_json(path: str | Path) -> ServerSamples:
    """Read AIPerf's aggregated ``server_metrics_export.json`` (schema 1.0) as samples on the Unix epoch clock, s.

    It holds statistics, not scrapes, so only what it places in time becomes samples:

    * with time slices (``--slice-duration``), a counter's running total at each slice's edges (0 at
      the first slice's start), a histogram's running bucket counts, sum and count the same way, and a
      gauge's slice mean at the slice's middle (so a window's max and p95 of it are over slice means);
    * without them, a counter's total and a histogram's buckets, sum and count as two samples, 0 at
      the endpoint's first fetch and the total at its last (``summary.endpoint_info``); a gauge's
      statistics say nothing of when, and it is left out.

    Increases, rates and the window quantiles of a histogram over whole slices are then what the
    scrapes would give (counters and histograms are deltas over the collection period, a constant
    offset per series from the raw counts). A file that is not this export is one line naming the field.
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFormatError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFormatError(f"{path}: cannot read as JSON ({exc})") from None
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(metrics, dict) or not isinstance(doc.get("summary", {}), dict):
        raise InputFormatError(f"{path}: not an AIPerf server-metrics JSON export: no 'metrics' object")
    info = (doc.get("summary") or {}).get("endpoint_info") or {}
    log = SampleLog()
    for family, metric in metrics.items():
        where = f"metrics[{family!r}]"
        if not isinstance(metric, dict) or not isinstance(metric.get("series"), list):
            raise InputFormatError(f"{path}: {where}: expected an object with a 'series' list")
        kind = str(metric.get("type") or "unknown")
        for j, series in enumerate(metric["series"]):
            _json_series(log, str(family), kind, series, info, path, f"{where}.series[{j}]")
    return log.samples()


def _json_series(log: SampleLog, family: str, kind: str, series: object, info: Mapping[str, object],
                 path: str | Path, where: str) -> None:
    """Add one series of AIPerf's JSON export to ``log`` as the samples it places in time."""
    if not isinstance(series, dict):
        raise InputFormatError(f"{path}: {where}: expected an object")
    endpoint = str(series.get("endpoint_url") or "")
    labels = series.get("labels") or {}
    if not isinstance(labels, dict):
        raise InputFormatError(f"{path}: {where}.labels: expected an object")
    labels = {str(k): str(v) for k, v in labels.items()}
    stats = series.get("stats") or {}
    slices = series.get("timeslices")
    if slices is not None and not isinstance(slices, list):
        raise InputFormatError(f"{path}: {where}.timeslices: expected a list")

    def add(t_s: float, metric: str, value: object, extra: Mapping[str, str] = {}) -> None:
        log.add(t_s, Series(endpoint, metric, family, kind, labels_key({**labels, **extra})),
                _json_number(value, path, where))

    name = f"{family}_total" if kind == "counter" and not family.endswith("_total") else family
    if slices:
        edges = [_slice_edges(sl, path, f"{where}.timeslices[{i}]") for i, sl in enumerate(slices)]
        if kind == "counter":
            total = 0.0
            add(edges[0][0], name, 0.0)
            for (_, end), sl in zip(edges, slices):
                if sl.get("total") is None:
                    raise InputFormatError(f"{path}: {where}.timeslices: a counter's slice has no 'total'")
                total += _json_number(sl["total"], path, where)
                add(end, name, total)
        elif kind == "histogram":
            _json_histogram(add, family, [(end, sl) for (_, end), sl in zip(edges, slices)], edges[0][0], path, where)
        else:
            for (start, end), sl in zip(edges, slices):
                add((start + end) / 2, name, sl.get("avg"))
        return
    span = info.get(endpoint) if isinstance(info, dict) else None
    first, last = (span.get("first_fetch_ns"), span.get("last_fetch_ns")) if isinstance(span, dict) else (None, None)
    if kind not in ("counter", "histogram") or not (_is_int(first) and _is_int(last) and last > first):  # type: ignore[operator]
        return  # a gauge's statistics, or totals with no collection period to place them on
    start, end = first / 1e9, last / 1e9  # type: ignore[operator]
    if kind == "counter":
        add(start, name, 0.0)
        add(end, name, stats.get("total", 0.0) if isinstance(stats, dict) else None)
    else:
        whole = {"count": stats.get("count", 0), "sum": stats.get("sum", 0.0), "buckets": series.get("buckets")}
        _json_histogram(add, family, [(end, whole)], start, path, where)


def _json_histogram(add: Callable[..., None], family: str, slices: list[tuple[float, Mapping[str, object]]],
                    start: float, path: str | Path, where: str) -> None:
    """Add a histogram's running ``_bucket``, ``_sum`` and ``_count`` from per-slice deltas (0 at ``start``)."""
    bounds = [le for _, sl in slices if isinstance(sl.get("buckets"), dict) for le in sl["buckets"]]  # type: ignore[union-attr]
    keep_buckets = all(isinstance(sl.get("buckets"), dict) for _, sl in slices)  # null buckets: a counter reset
    bounds = list(dict.fromkeys(bounds)) if keep_buckets else []
    running = dict.fromkeys(bounds, 0.0)
    count = total = 0.0

    def emit(t_s: float) -> None:
        for le in bounds:
            add(t_s, f"{family}_bucket", running[le], {"le": str(le)})
        add(t_s, f"{family}_sum", total)
        add(t_s, f"{family}_count", count)

    emit(start)
    for end, sl in slices:
        count += _json_number(sl.get("count", 0), path, where)
        total += _json_number(sl.get("sum", 0.0), path, where)
        for le in bounds:
            running[le] += _json_number(sl["buckets"].get(le, 0), path, f"{where}.buckets[{le!r}]")  # type: ignore[union-attr]
        emit(end)


def _slice_edges(sl: object, path: str | Path, where: str) -> tuple[float, float]:
    if not isinstance(sl, dict) or not _is_int(sl.get("start_ns")) or not _is_int(sl.get("end_ns")) \
            or not sl["end_ns"] > sl["start_ns"]:
        raise InputFormatError(f"{path}: {where}: expected integer 'start_ns' before 'end_ns'")
    return sl["start_ns"] / 1e9, sl["end_ns"] / 1e9


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _json_number(value: object, path: str | Path, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputFormatError(f"{path}: {where}: a value must be a number, got {value!r}")
    return float(value)


def _finite_or_nan(value: object, path: str | Path, row: int) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputFormatError(f"{path}: row {row + 1}: a value must be a number, got {value!r}")
    return float(value)


def _read_parquet(path: str | Path) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except FileNotFoundError:
        raise InputFormatError(f"{path}: no such file") from None
    except (OSError, pa.ArrowException) as exc:
        raise InputFormatError(f"{path}: cannot read as Parquet ({exc})") from None


def _floats(table: pa.Table, name: str, path: str | Path, allow_nan: bool = False) -> np.ndarray:
    """Return a numeric column as float64; times must be finite, a value may be NaN or infinite (Prometheus)."""
    import pyarrow as pa

    col = table.column(name)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise InputFormatError(f"{path}: column '{name}' must be numbers, not {col.type}")
    if col.null_count:
        raise InputFormatError(f"{path}: column '{name}' has {col.null_count} empty values")
    out = col.to_numpy().astype(np.float64)
    bad = np.zeros(out.size, dtype=bool) if allow_nan else ~np.isfinite(out)  # a value may be NaN or +Inf
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputFormatError(f"{path}: row {row + 1}, field '{name}': {out[row]} is not a finite number")
    return out


def _labels(text: str, path: str | Path, row: int) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise InputFormatError(f"{path}: row {row + 1}, field 'labels': expected a JSON object of text values")
    return doc
