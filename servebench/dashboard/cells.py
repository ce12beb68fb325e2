"""Table cells for people: a share as a percent, every other number through the one formatter.

A table whose rows or columns mix counts, seconds and fractions (the retry storm's, the cache
experiment's) names each by its label; a label that says fraction, share, hit rate or attainment is
a share (Retries showed 0.413 where Summary says 41.3 %, Cache 0.792 where its metric says 79.2 %).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from servebench.formatting import fmt, fmt_share

SHARE_WORDS = ("fraction", "share", "hit rate", "attainment")


def is_share(label: str) -> bool:
    """Return whether a column or row label names a share (a fraction shown as a percent).

    >>> is_share("logical success fraction"), is_share("token hit rate"), is_share("goodput, req/s")
    (True, True, False)
    """
    return any(word in label.lower() for word in SHARE_WORDS)


def cell(label: str, value: Any) -> str:
    """Format one value by its label: a share as a percent, anything else with fmt (no data: —).

    >>> cell("token hit rate", 0.792), cell("attempts", 12600), cell("amplification", 1.0), cell("x", None)
    ('79.2%', '12,600', '1', '—')
    """
    if is_share(label) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt_share(float(value))
    return fmt(value)


def by_row(rows: Iterable[dict[str, Any]], key: str) -> pd.DataFrame:
    """Return rows turned on their side: one column per row (named by its ``key`` value), one row per measure.

    A table of three policies and nine measures fits a page as nine rows of three; as three rows of ten
    columns it runs off a 1,400 px window. Each cell is formatted by its measure's label.

    >>> by_row([{"policy": "a", "attempts": 12600, "success fraction": 0.413}], "policy").to_dict("records")
    [{'measure': 'attempts', 'a': '12,600'}, {'measure': 'success fraction', 'a': '41.3%'}]
    """
    rows = list(rows)
    measures = [k for k in (rows[0] if rows else {}) if k != key]
    return pd.DataFrame([{"measure": m, **{str(r[key]): cell(m, r.get(m)) for r in rows}} for m in measures])


def in_ms(label: str, value: Any) -> tuple[str, Any]:
    """Return a row labelled in seconds (', s' or ' (s)') relabelled and scaled to milliseconds; others as given.

    TTFT, TPOT and ITL are tens to hundreds of milliseconds, where seconds read 0.0297.

    >>> in_ms("TTFT p50, s", 0.0297), in_ms("Latency (s)", None), in_ms("completed", 400)
    (('TTFT p50, ms', 29.7), ('Latency (ms)', None), ('completed', 400))
    """
    for suffix, shown in ((", s", ", ms"), (" (s)", " (ms)")):
        if label.endswith(suffix):
            return label[: -len(suffix)] + shown, None if value is None else value * 1000
    return label, value
