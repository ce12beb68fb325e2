"""servebench's own record files as a trace, so a measured run can be replayed.

Any file or run folder ``servebench summarize`` reads as canonical records (CSV, JSON, JSONL, Parquet) and
checks by the same rules: ``start`` is the arrival, ``prompt_tokens`` (required here: a replay needs each
prompt's length) and ``output_tokens`` the lengths, ``cached_prompt_tokens`` what the server's prefix cache
served where known. A non-success is a failed request; one without ``output_tokens`` has 0. No block hashes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servebench.errors import InputFormatError
from servebench.records.loaders import load_table
from servebench.records.schema import SUCCESS
from servebench.records.traces.common import Trace, finish, first_index

FORMAT = "records"


def read(path: Path) -> Trace:
    """Read a record file or run folder as a trace (its requests by ``start``)."""
    table, _, _ = load_table(path, fmt="auto")
    source = table.source or path.name
    missing = first_index(table.prompt_tokens < 0)
    if missing is not None:
        raise InputFormatError(f"{source}: row {missing + 1}, field 'prompt_tokens': missing (a trace needs "
                               "every request's prompt length)")
    cached = table.cached_prompt_tokens if table.has_cached_prompt_tokens else None
    return finish(source, FORMAT, np.asarray(table.start, dtype=np.float64), table.prompt_tokens,
                  np.maximum(table.output_tokens, 0), failed=table.status != SUCCESS, cached=cached)
