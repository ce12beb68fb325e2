"""The report's disaggregated section: how requests spread over prefill and decode instances, and the KV transfers.

Records of a disaggregated fleet (``servebench.serving.disagg``) carry ``prefill_replica``,
``decode_replica`` (null when the request never reached one) and ``kv_transfer_s`` (a prefill's end
to its KV's arrival on the decode instance, link wait included; null without a transfer). The section
counts each instance's requests, the load imbalance of each kind (the busiest instance's requests
over the mean of those named), and the nearest-rank p50, p95 and the maximum of the transfer times.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, Field

from servebench.analysis.percentiles import percentile
from servebench.records.table import RecordTable

PREFILL_COLUMN, DECODE_COLUMN, TRANSFER_COLUMN = "prefill_replica", "decode_replica", "kv_transfer_s"


class DisaggReport(BaseModel):
    """Requests across prefill and decode instances (the records' ``prefill_replica`` and ``decode_replica``)."""

    prefill_requests: dict[str, int] = Field(description="Records per prefill instance, in the order of their names.")
    decode_requests: dict[str, int] = Field(description="Records per decode instance (those that reached one).")
    prefill_load_imbalance: float = Field(description="The busiest prefill instance's requests / the mean (1: even).")
    decode_load_imbalance: float | None = Field(description="The same over decode instances; None when none was reached.")
    transfers: int = Field(description="Records whose prompt's KV crossed to a decode instance.")
    kv_transfer_p50_s: float | None = Field(description="Nearest-rank p50 of kv_transfer_s; None without transfers.")
    kv_transfer_p95_s: float | None = Field(description="Nearest-rank p95 of kv_transfer_s; None without transfers.")
    kv_transfer_max_s: float | None = Field(description="The longest kv_transfer_s; None without transfers.")


def _counts(column: Any) -> dict[str, int]:
    """Return each named value's records, numbers before names, nulls left out."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    counts = Counter(v for v in arr.to_pylist() if v is not None)
    return {str(k): counts[k] for k in sorted(counts, key=lambda v: (isinstance(v, str), v))}


def _imbalance(counts: dict[str, int]) -> float | None:
    values = list(counts.values())
    return max(values) * len(values) / sum(values) if values else None


def disagg_report(table: RecordTable) -> DisaggReport | None:
    """Return the disaggregated section, or None when no record names its prefill instance."""
    column = table.extra.get(PREFILL_COLUMN)
    if column is None or column.null_count == len(column):
        return None
    prefill = _counts(column)
    decode = _counts(table.extra[DECODE_COLUMN]) if DECODE_COLUMN in table.extra else {}
    transfer = table.extra.get(TRANSFER_COLUMN)
    values = np.zeros(0)
    if transfer is not None:
        arr = transfer.combine_chunks() if isinstance(transfer, pa.ChunkedArray) else transfer
        values = np.array([v for v in arr.to_pylist() if isinstance(v, (int, float))], dtype=np.float64)
    return DisaggReport(prefill_requests=prefill, decode_requests=decode,
                        prefill_load_imbalance=max(prefill.values()) * len(prefill) / sum(prefill.values()),
                        decode_load_imbalance=_imbalance(decode),
                        transfers=int(values.size), kv_transfer_p50_s=percentile(values, 50),
                        kv_transfer_p95_s=percentile(values, 95),
                        kv_transfer_max_s=float(values.max()) if values.size else None)
