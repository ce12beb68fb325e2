"""Azure LLM inference traces (Azure/AzurePublicDataset; 2023: the Splitwise paper, 2024: DynamoLLM).

CSV with ``TIMESTAMP`` (a date and time: ``2023-11-16 18:15:46.6805900`` in 2023, with a zone offset such as
``+00:00`` in the 2024 week-long files), ``ContextTokens`` (prompt) and ``GeneratedTokens`` (output). No block
hashes: the trace replays without prefix reuse.
"""

from __future__ import annotations

import csv
import io
import re

import pyarrow as pa

from servebench.records.traces.common import Trace, check_column, csv_blank, finish, read_csv, record_line

FORMAT = "azure"
COLUMNS: tuple[str, ...] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_ZONE = re.compile(r"(Z|[+-]\d\d(:?\d\d)?)$")


def sniff(names: set[str]) -> bool:
    """Return True when a CSV header is an Azure LLM inference trace's."""
    return set(COLUMNS) <= names


def read(data: bytes, source: str) -> Trace:
    """Read an Azure LLM inference trace (2023 or 2024)."""
    stamp = pa.timestamp("ns", "UTC") if _zoned(data) else pa.timestamp("ns")
    table = read_csv(data, source, "an Azure LLM inference trace",
                     {"TIMESTAMP": stamp, "ContextTokens": pa.int64(), "GeneratedTokens": pa.int64()}, {})

    def locate(i: int) -> int:
        return record_line(data, i, header_lines=1, blank=csv_blank)

    times = check_column(table.column("TIMESTAMP").cast(pa.int64()), "TIMESTAMP", count=False, locate=locate,
                         source=source)
    prompt = check_column(table.column("ContextTokens"), "ContextTokens", count=True, locate=locate, source=source)
    output = check_column(table.column("GeneratedTokens"), "GeneratedTokens", count=True, locate=locate,
                          source=source)
    return finish(source, FORMAT, times, prompt, output, units_per_s=1e9)


def _zoned(data: bytes) -> bool:
    """Return True when the first request's TIMESTAMP carries a zone offset (the 2024 files' form)."""
    lines = [ln for ln in data.split(b"\n", 16)[:16] if not csv_blank(ln)]
    if len(lines) < 2:
        return False
    try:
        header, first = csv.reader(io.StringIO(b"\n".join(lines[:2]).decode("utf-8-sig")))
    except (UnicodeDecodeError, ValueError, csv.Error):
        return False
    names = [h.strip() for h in header]
    if "TIMESTAMP" not in names or len(first) != len(names):
        return False
    return bool(_ZONE.search(first[names.index("TIMESTAMP")].strip()))
