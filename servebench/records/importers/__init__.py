"""Read other benchmark tools' exports as canonical timing records.

One module per tool. Each has ``sniff(doc) -> bool``, ``import_document(doc, source, options)`` (one run) and
``import_runs(doc, source, options)`` (every run in the file). This package finds the right one
(``detect``), parses the file once, and passes the user's options:

* ``run``: which run of a multi-run file (GuideLLM ``benchmarks[]``, GenAI-Perf ``experiments[]``,
  vLLM ``--append-result`` lines); default the first, with a warning naming how many there are.
* ``outside_window``: ``mark`` (default) labels requests outside the tool's measured window with slice
  ``warmup`` / ``cooldown``; ``drop`` leaves them out.

Code passes them as an :class:`ImportOptions`; the CLI's ``--format`` writes them into the format name
(``guidellm:run=1,outside_window=drop``), which :func:`parse_format` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servebench.errors import InputFormatError
from servebench.records.importers import aiperf, genai_perf, guidellm, llmperf, vllm
from servebench.records.importers.common import (
    OUTSIDE_WINDOW_CHOICES,
    Document,
    ImportOptions,
    decode_text,
    parse_document,
    try_parse_document,
)
from servebench.records.loaded import LoadedRecords

__all__ = ["FORMATS", "IMPORTERS", "ImportOptions", "Importer", "detect", "import_bytes", "import_runs",
           "parse_format"]


@dataclass(frozen=True)
class Importer:
    """One foreign format: how to recognise it and how to import one run or all of them."""

    name: str
    tool: str
    sniff: Callable[[Document], bool]
    import_document: Callable[[Document, str, ImportOptions], LoadedRecords]
    import_runs: Callable[[Document, str, ImportOptions], list[LoadedRecords]]


IMPORTERS: dict[str, Importer] = {
    m.FORMAT: Importer(m.FORMAT, m.TOOL, m.sniff, m.import_document, m.import_runs)
    for m in (guidellm, vllm, aiperf, genai_perf, llmperf)
}
FORMATS: tuple[str, ...] = tuple(IMPORTERS)
ALIASES: dict[str, str] = {"genai_perf": "genai-perf", "genaiperf": "genai-perf", "ray-llmperf": "llmperf",
                           "vllm-bench": "vllm", "benchmark_serving": "vllm"}


def parse_format(fmt: str) -> tuple[str, ImportOptions]:
    """Split ``name[:key=value,...]`` into the importer name and its options.

    >>> parse_format("guidellm:run=1,outside_window=drop")
    ('guidellm', ImportOptions(run=1, outside_window='drop', tokens='client'))
    """
    name, _, opts = fmt.partition(":")
    name = ALIASES.get(name.strip().lower(), name.strip().lower())
    run: int | None = None
    outside = "mark"
    tokens = "client"
    for part in filter(None, (p.strip() for p in opts.split(","))):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq:
            raise InputFormatError(f"format option {part!r} must look like key=value (run=N, outside_window=drop)")
        if key == "run":
            if not value.isdigit():
                raise InputFormatError(f"format option run={value!r} must be a run number (0, 1, ...)")
            run = int(value)
        elif key == "outside_window":
            if value not in OUTSIDE_WINDOW_CHOICES:
                raise InputFormatError(f"format option outside_window={value!r} must be one of "
                                       f"{', '.join(OUTSIDE_WINDOW_CHOICES)}")
            outside = value
        elif key == "tokens":
            if value not in ("client", "server"):
                raise InputFormatError(f"format option tokens={value!r} must be client or server")
            tokens = value
        else:
            raise InputFormatError(f"unknown format option {key!r}; expected run, outside_window or tokens")
    return name, ImportOptions(run=run, outside_window=outside, tokens=tokens)  # type: ignore[arg-type]


def _sniff_document(doc: Document) -> str | None:
    for imp in IMPORTERS.values():
        if imp.sniff(doc):
            return imp.name
    return None


def detect(data: bytes, name: str) -> str | None:
    """Return the name of the foreign format ``data`` is written in, or None if no importer recognises it."""
    doc = try_parse_document(data, name)
    if doc is not None:
        return _sniff_document(doc)
    try:
        head = decode_text(data[:4096], name) if len(data) <= 4096 else data[:4096].decode("utf-8", "ignore")
    except InputFormatError:
        return None
    return guidellm.FORMAT if guidellm.sniff_csv(head.lstrip("\ufeff")) else None


def _resolve(data: bytes, name: str, fmt: str) -> tuple[Importer, Document, ImportOptions]:
    base, options = parse_format(fmt)
    if base == "auto":
        found = detect(data, name)
        if found is None:
            raise InputFormatError(f"{name}: not an export servebench can import; known formats: "
                                   f"{', '.join(FORMATS)}")
        base = found
    if base not in IMPORTERS:
        raise InputFormatError(f"{name}: unknown format {base!r}; expected one of csv, json, jsonl, parquet "
                               f"(servebench records) or {', '.join(FORMATS)} (other tools' exports)")
    if base == guidellm.FORMAT and try_parse_document(data, name) is None:
        head = decode_text(data, name)
        if guidellm.sniff_csv(head.lstrip("\ufeff")):
            raise guidellm.csv_error(name)
    doc = parse_document(data, name)
    imp = IMPORTERS[base]
    if not imp.sniff(doc):
        raise InputFormatError(f"{name}: does not look like a {imp.tool} export ({_expected(base)})")
    return imp, doc, options


def _expected(base: str) -> str:
    return {
        "guidellm": "expected an object with 'benchmarks' holding 'requests'",
        "vllm": "expected an object with per-request arrays such as 'ttfts', 'input_lens', 'errors'",
        "aiperf": "expected profile_export.jsonl lines with 'metadata' and 'metrics'",
        "genai-perf": "expected profile_export.json with 'experiments' holding 'requests'",
        "llmperf": "expected *_individual_responses.json: an array of objects with 'end_to_end_latency_s'",
    }[base]


def import_bytes(data: bytes, name: str, fmt: str = "auto", options: ImportOptions | None = None) -> LoadedRecords:
    """Import one run of a foreign export (a format name or ``auto``).

    ``options``, when given, replace any the format name carries (``name:run=N,...``, the CLI's spelling).
    """
    imp, doc, parsed = _resolve(data, name, fmt)
    return imp.import_document(doc, name, parsed if options is None else options)


def import_runs(data: bytes, name: str, fmt: str = "auto", options: ImportOptions | None = None) -> list[LoadedRecords]:
    """Import every run in a foreign export, one LoadedRecords each (a single-run file gives a list of one).

    ``options`` as for :func:`import_bytes`; their ``run`` is ignored (every run is imported).
    """
    imp, doc, parsed = _resolve(data, name, fmt)
    return imp.import_runs(doc, name, parsed if options is None else options)
