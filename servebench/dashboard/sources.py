"""The record sets the dashboard holds: their bytes and origin, how each is read, and the validated view on screen.

Also the pure decisions behind the sidebar's picker: which shipped files are samples, which held set to fall back
to when one goes, which uploads are record sets and which the server's metrics, which window a set opens on.
No Streamlit here: ``pages/_shared.py`` keeps these in ``st.session_state`` and draws the widgets.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.dashboard.server_view import is_server_metrics_file
from servebench.dashboard.windows import shared_clock, window_text
from servebench.dashboard.wording import s_to_ms
from servebench.records.importers import ImportOptions
from servebench.records.loaders import LoadedRecords
from servebench.records.server_samples import ServerSamples
from servebench.records.table import RecordTable
from servebench.records.window_zoom import TrimmedRecords

RECORD_SUFFIXES = (".csv", ".json", ".jsonl", ".ndjson", ".parquet", ".pq")
SERVER_TOKEN_FORMATS = ("aiperf",)  # exports whose importer takes tokens="server" (the CLI's aiperf:tokens=server)


@dataclass(frozen=True)
class RecordSource:
    """A record file's bytes and where they came from ("sample", "upload" or "timing run")."""

    name: str
    data: bytes
    origin: str
    digest: str
    metadata: dict[str, Any] | None = None  # a timing run's metadata.json
    steps: list[dict[str, Any]] | None = None  # a timing run's step trace

    @classmethod
    def of(cls, name: str, data: bytes, origin: str, *, metadata: dict[str, Any] | None = None,
           steps: list[dict[str, Any]] | None = None, digest: str | None = None) -> "RecordSource":
        """Return the source of ``data``; ``digest``, when known already, spares hashing the bytes again."""
        return cls(name, data, origin, hashlib.sha256(data).hexdigest()[:16] if digest is None else digest,
                   metadata, steps)


@dataclass(frozen=True)
class ReadAs:
    """How a record set is read: the format picked (or auto) and, for another tool's export, its import options."""

    fmt: str = "auto"
    options: ImportOptions | None = None

    @property
    def key(self) -> str:
        """Return a text key for caches and widget keys (just the format when there are no options)."""
        return self.fmt if self.options is None else f"{self.fmt}:{self.options}"


@dataclass(frozen=True)
class Dataset:
    """The validated records on screen, the window they were validated over, and what the reader said."""

    source: RecordSource
    loaded: LoadedRecords
    table: RecordTable
    window_start: float
    window_end: float
    key: str = ""  # the file's digest and how it was read: the cache key of anything built from it
    zoom: TrimmedRecords | None = None  # what the window kept and left out
    read_as: ReadAs = ReadAs()
    origin_s: float = 0.0  # the first request's start on the file's clock: times are shown from it
    server: ServerSamples | None = None  # the server's own metrics, scraped during the run (uploaded with it)
    server_name: str | None = None

    @property
    def unavailable(self) -> frozenset[str]:
        """Return the metrics the importer said this file cannot give (no timestamps on a shared clock)."""
        return frozenset(self.loaded.metadata.get("unavailable_metrics") or [])

    @property
    def shared_clock(self) -> bool:
        """Return whether the records share one clock (llmperf's, each on its own from 0 s, do not)."""
        return shared_clock(self.unavailable)

    def window_text(self) -> str:
        """Say the window in seconds from the first request, with its clock time (or that there is none)."""
        return window_text(self.window_start, self.window_end, self.origin_s, shared=self.shared_clock)


def record_files(folder: Path) -> list[str]:
    """Return the record files shipped in ``folder`` by name (the profile tables beside them are not records)."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in RECORD_SUFFIXES
                  and not p.name.startswith("profiles"))


def scenario_files(folder: Path) -> list[str]:
    """Return the scenario files (YAML) in ``folder`` by name."""
    return sorted(p.name for p in folder.glob("*.y*ml"))


@dataclass(frozen=True)
class Uploads:
    """What the uploader holds now: the record sets, the server-metrics files, and the first record set not yet held."""

    records: dict[str, RecordSource]
    scrapes: list[RecordSource]
    newest: RecordSource | None


def upload_sources(files: Sequence[tuple[str, str, bytes]], digests: dict[str, str]) -> list[RecordSource]:
    """Return uploaded (file id, name, bytes) as record sources, hashing only the files not hashed before.

    The uploader hands every file it holds to each change, and a file keeps its id (a new upload of the same
    bytes gets a new one), so ``digests`` (file id -> digest) spares hashing the held ones again: with three
    100,000-record uploads held, each upload hashed 22 MB. ``digests`` is kept to the ids given.

    >>> digests = {}
    >>> [s.digest for s in upload_sources([("id-a", "a.csv", b"1")], digests)] == [digests["id-a"]]
    True
    >>> upload_sources([("id-b", "b.csv", b"2")], digests)[0].digest == digests["id-b"], list(digests)
    (True, ['id-b'])
    """
    sources = [RecordSource.of(name, data, "upload", digest=digests.get(file_id)) for file_id, name, data in files]
    digests.clear()
    digests.update((file_id, src.digest) for (file_id, _, _), src in zip(files, sources))
    return sources


def sort_uploads(files: Iterable[RecordSource], held: Mapping[str, RecordSource],
                 fresh: Collection[int] | None = None) -> Uploads:
    """Split uploaded files (:func:`upload_sources`) into record sets and server metrics; name the newest record set.

    The newest is the last of the ``fresh`` files (their positions: added since the uploader last changed), even
    when its bytes are held already under another name, so a second bad file names itself; without ``fresh``, the
    last record set not in ``held``.

    >>> up = sort_uploads(upload_sources([("1", "a.csv", b"1"), ("2", "server_metrics.parquet", b"2"),
    ...                                   ("3", "b.csv", b"3")], {}), {})
    >>> [s.name for s in up.records.values()], [s.name for s in up.scrapes], up.newest.name
    (['a.csv', 'b.csv'], ['server_metrics.parquet'], 'b.csv')
    >>> held = {up.newest.digest: up.newest}
    >>> both = upload_sources([("3", "b.csv", b"3"), ("4", "copy of b.csv", b"3")], {})
    >>> sort_uploads(both, held, fresh={1}).newest.name
    'copy of b.csv'
    >>> print(sort_uploads(both, held, fresh=set()).newest)
    None
    """
    records: dict[str, RecordSource] = {}
    scrapes: list[RecordSource] = []
    newest = None
    for i, src in enumerate(files):
        if is_server_metrics_file(src.name):
            scrapes.append(src)
            continue
        records[src.digest] = src
        if (src.digest not in held) if fresh is None else (i in fresh):
            newest = src
    return Uploads(records, scrapes, newest)


def fallback_source(held: Mapping[str, RecordSource], last_good: RecordSource | None,
                    default: RecordSource) -> RecordSource:
    """Return the record set to show when the one on screen went: the last good one if still held (or a sample),
    else the newest held, else ``default``.

    >>> a, b, d = (RecordSource.of(n, n.encode(), "upload") for n in ("a", "b", "d"))
    >>> fallback_source({a.digest: a, b.digest: b}, a, d).name, fallback_source({b.digest: b}, a, d).name
    ('a', 'b')
    >>> fallback_source({}, None, d).name
    'd'
    """
    if last_good is not None and (last_good.digest in held or last_good.origin == "sample"):
        return last_good
    if held:
        return list(held.values())[-1]
    return default


def attach_scrapes(attached: dict[str, RecordSource], scrapes: list[RecordSource],
                   current: RecordSource | None) -> None:
    """Keep in ``attached`` (record digest -> scrapes) the server-metrics files still uploaded; a new one joins
    ``current``, the record set on screen (or uploaded with it).

    >>> r = RecordSource.of("r.csv", b"r", "upload")
    >>> m = RecordSource.of("server_metrics.parquet", b"m", "upload")
    >>> attached = {}
    >>> attach_scrapes(attached, [m], r); attached[r.digest].name
    'server_metrics.parquet'
    >>> attach_scrapes(attached, [], r); attached
    {}
    """
    uploaded = {s.digest for s in scrapes}
    for digest, scrape in list(attached.items()):
        if scrape.digest not in uploaded:  # removed with its x
            del attached[digest]
    kept = {s.digest for s in attached.values()}
    for scrape in scrapes:
        if scrape.digest not in kept and current is not None:
            attached[current.digest] = scrape


def query_float(params: Mapping[str, str], name: str) -> float | None:
    """Return a URL parameter as a number, or None when it is absent or not a number.

    >>> query_float({"ws": "1.5"}, "ws"), query_float({"ws": "x"}, "ws"), query_float({}, "ws")
    (1.5, None, None)
    """
    try:
        return float(params[name]) if name in params else None
    except ValueError:
        return None


def query_limit(params: Mapping[str, str], name: str, seconds_name: str | None = None) -> float | None:
    """Return an SLO limit a URL gives: ``name`` as written, else ``seconds_name`` (in seconds) in ms.

    ``seconds_name`` is the parameter a link made while the limit was typed in seconds carries, so an older link
    still opens with its limit. None (no limit) when absent, not a number, infinite or not above zero.

    >>> query_limit({"slo_ttft_ms": "400"}, "slo_ttft_ms", "slo_ttft")
    400.0
    >>> query_limit({"slo_ttft": "0.4"}, "slo_ttft_ms", "slo_ttft")  # an older link, in seconds
    400.0
    >>> query_limit({"slo_latency": "-1"}, "slo_latency"), query_limit({"slo_latency": "nan"}, "slo_latency")
    (None, None)
    """
    value = query_float(params, name)
    if value is None and seconds_name is not None:
        value = s_to_ms(query_float(params, seconds_name))
    return value if value is not None and math.isfinite(value) and value > 0 else None


def import_read_as(fmt: str, run: int | None, drop: bool, server_tokens: bool) -> ReadAs | None:
    """Return how to read another tool's export again with the sidebar's options, or None when none is set.

    >>> import_read_as("aiperf", None, False, False) is None
    True
    >>> import_read_as("aiperf", None, True, True).options.tokens
    'server'
    """
    if run is None and not drop and not server_tokens:
        return None
    return ReadAs(fmt, ImportOptions(run=run, outside_window="drop" if drop else "mark",
                                     tokens="server" if server_tokens else "client"))
