"""The one number formatter for people, at the bottom of the layers so that every layer can use it.

Every number a person reads (analysis sentences, terminal tables, figures, the HTML site, the dashboard)
goes through :func:`fmt` or one of its share forms, so the same value reads the same everywhere:
a missing value (None) or an undefined one (NaN) is :data:`NO_DATA`, never ``0``, ``nan`` or a dash
that reads as a minus sign, and an infinity is ``∞``, never ``inf``. Imports nothing from servebench.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

NO_DATA = "—"  # a value that is missing (None) or undefined (NaN): never shown as 0 or as a dash that reads as minus


def fmt(value: Any, digits: int = 4) -> str:
    """Format a number for people, by one rule everywhere.

    None and NaN are ``—`` (no data; never 0), +/-infinity ``∞`` / ``-∞`` (a failure-aware percentile
    that lands on a failed request), integers get thousands separators, floats ``digits`` significant
    digits (from 1,000 up: whole numbers with separators), booleans True/False, anything else ``str``.

    >>> fmt(None), fmt(float("nan")), fmt(float("inf")), fmt(-float("inf"))
    ('—', '—', '∞', '-∞')
    >>> fmt(3000), fmt(0.2), fmt(1234.5678), fmt(0.000123456), fmt(True), fmt("n/a")
    ('3,000', '0.2', '1,235', '0.0001235', 'True', 'n/a')
    """
    if value is None:
        return NO_DATA
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return NO_DATA
        if math.isinf(v):
            return "∞" if v > 0 else "-∞"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    return str(value)


def fmt_count(count: int, noun: str, plural: str | None = None) -> str:
    """Format a count with its noun, singular for one (``plural`` defaults to the noun plus ``s``).

    >>> fmt_count(1, "replica"), fmt_count(4, "replica"), fmt_count(12000, "request"), fmt_count(0, "try", "tries")
    ('1 replica', '4 replicas', '12,000 requests', '0 tries')
    """
    return f"{fmt(int(count))} {noun if count == 1 else plural or noun + 's'}"


def fmt_share(value: float | None) -> str:
    """Format a fraction as a percentage to three significant digits; None is ``—``.

    >>> fmt_share(0.5), fmt_share(0.000971), fmt_share(None)
    ('50%', '0.0971%', '—')
    """
    if value is None or math.isnan(value):
        return NO_DATA
    return f"{value * 100:.3g}%"


def fmt_share_of(part: int | float, whole: int | float) -> str | None:
    """Format part / whole as a percentage; None when part is 0 or whole is 0 (nothing to show).

    >>> fmt_share_of(46333, 353746), fmt_share_of(0, 10), fmt_share_of(3, 0)
    ('13.1%', None, None)
    """
    if not part or not whole:
        return None
    return fmt_share(part / whole)


def fmt_percent(value: float | None, decimals: int = 0) -> str:
    """Format a fraction as a percentage with fixed ``decimals`` (:func:`fmt_share` gives significant digits).

    For a sentence that reads better rounded ("queue wait is 95% of TTFT p95"); None and NaN are ``—``.

    >>> fmt_percent(0.953), fmt_percent(0.0012), fmt_percent(1.0), fmt_percent(0.9531, 1), fmt_percent(None)
    ('95%', '0%', '100%', '95.3%', '—')
    """
    if value is None or math.isnan(value):
        return NO_DATA
    if math.isinf(value):
        return fmt(value)
    return f"{value:.{decimals}%}"


def fmt_seconds(value: Any, digits: int = 3) -> str:
    """Format a time in seconds as :func:`fmt` does, followed by ``s``; a missing value is ``—`` alone.

    >>> fmt_seconds(0.01234), fmt_seconds(2.5), fmt_seconds(1234.5), fmt_seconds(None), fmt_seconds(float("nan"))
    ('0.0123 s', '2.5 s', '1,234 s', '—', '—')
    """
    text = fmt(value, digits)
    return text if text == NO_DATA else f"{text} s"


def fmt_time(value_s: Any, unit: str = "s", digits: int = 3) -> str:
    """Format a time given in seconds in ``unit``, 's' (as :func:`fmt_seconds`) or 'ms'; a missing value is ``—``.

    >>> fmt_time(0.26), fmt_time(0.26, "ms"), fmt_time(10.3, "ms"), fmt_time(0.031, "ms"), fmt_time(None, "ms")
    ('0.26 s', '260 ms', '10,300 ms', '31 ms', '—')
    """
    if unit == "s":
        return fmt_seconds(value_s, digits)
    text = fmt(None if value_s is None else float(value_s) * 1000, digits)
    return text if text == NO_DATA else f"{text} ms"


def fmt_rate(rate: float | None, noun: str = "request", digits: int = 3) -> str:
    """Format a rate per second with its noun, singular when it reads 1 (``1 request/s``, ``0.5 requests/s``).

    >>> fmt_rate(1.0), fmt_rate(8.8235), fmt_rate(0.99), fmt_rate(1.0004), fmt_rate(None)
    ('1 request/s', '8.82 requests/s', '0.99 requests/s', '1 request/s', '—')
    """
    text = fmt(None if rate is None else float(rate), digits)
    return text if text == NO_DATA else f"{text} {noun if text == '1' else noun + 's'}/s"
