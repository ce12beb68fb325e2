"""BurstGPT traces (HPMLL/BurstGPT, KDD 2025): ChatGPT and GPT-4 traffic on Azure.

CSV with ``Timestamp`` (seconds from midnight of the first day), ``Model``, ``Request tokens``, ``Response
tokens``, ``Total tokens`` and ``Log Type``; ``BurstGPT_3`` adds ``Session ID`` and ``Elapsed time``. A
response of 0 tokens is a failed request (the ``BurstGPT_without_fails_*`` files leave them out); it stays in
the trace, marked failed. No block hashes: the trace replays without prefix reuse.
"""

from __future__ import annotations

import pyarrow as pa

from servebench.records.traces.common import Trace, check_column, csv_blank, finish, read_csv, record_line

FORMAT = "burstgpt"
COLUMNS: tuple[str, ...] = ("Timestamp", "Request tokens", "Response tokens")


def sniff(names: set[str]) -> bool:
    """Return True when a CSV header is a BurstGPT trace's."""
    return set(COLUMNS) <= names


def read(data: bytes, source: str) -> Trace:
    """Read a BurstGPT trace, its failures (0 response tokens) marked."""
    table = read_csv(data, source, "a BurstGPT trace",
                     {"Timestamp": pa.float64(), "Request tokens": pa.int64(), "Response tokens": pa.int64()},
                     {"Model": pa.string()})

    def locate(i: int) -> int:
        return record_line(data, i, header_lines=1, blank=csv_blank)

    times = check_column(table.column("Timestamp"), "Timestamp", count=False, locate=locate, source=source)
    prompt = check_column(table.column("Request tokens"), "Request tokens", count=True, locate=locate,
                          source=source)
    output = check_column(table.column("Response tokens"), "Response tokens", count=True, locate=locate,
                          source=source)
    model = None
    if "Model" in table.column_names:
        model = table.column("Model").combine_chunks()
    return finish(source, FORMAT, times, prompt, output, failed=output == 0, model=model)
