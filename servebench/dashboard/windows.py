"""How the dashboard shows a record set's window: seconds from its first request, and the clock time of that request.

GuideLLM and AIPerf files carry Unix epoch seconds (1795947574.931): as written they hide the window's
length in their tenth digit. The dashboard shows every time relative to the first request's start,
names the wall-clock time it began, and says so when a file has no times on one clock at all (llmperf:
each request on its own clock from 0 s), rather than showing a window that was never measured.
"""

from __future__ import annotations

from collections.abc import Collection

from servebench.formatting import fmt
from servebench.output.terminal import epoch_utc

NO_CLOCK = "the file has no timestamps on one clock (each request is on its own, from 0 s)"


def shared_clock(unavailable: Collection[str]) -> bool:
    """Return whether the records share one clock: an importer lists ``window_s`` as unavailable when not.

    >>> shared_clock([]), shared_clock(["window_s", "active_requests"])
    (True, False)
    """
    return "window_s" not in unavailable


def seconds(value_s: float) -> str:
    """Format a time in seconds to the millisecond, with thousands separators.

    >>> seconds(0.0), seconds(10.10843), seconds(3600.5), seconds(-0.25)
    ('0', '10.108', '3,600.5', '-0.25')
    """
    text = f"{value_s:,.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def window_text(window_start_s: float, window_end_s: float, origin_s: float, *, shared: bool = True) -> str:
    """Say a window in seconds from the first request (``origin_s``), with that request's clock time.

    >>> window_text(1795947574.9312, 1795947585.0396, 1795947574.9312)
    'window 0 to 10.108 s from the first request (sent 2026-11-29 10:19:34.931 UTC)'
    >>> window_text(1.0, 7.0, 0.0)
    'window 1 to 7 s from the first request'
    >>> window_text(0.0, 1.3773, 0.0, shared=False)
    'no window: the file has no timestamps on one clock (each request is on its own, from 0 s)'
    """
    if not shared:
        return f"no window: {NO_CLOCK}"
    text = f"window {seconds(window_start_s - origin_s)} to {seconds(window_end_s - origin_s)} s from the first " \
           "request"
    utc = epoch_utc(origin_s)
    return text if utc is None else f"{text} (sent {utc})"


def span_text(origin_s: float, last_end_s: float, requests: int) -> str:
    """Say when the data begins and how long it spans, in the sidebar's words.

    >>> print(span_text(1795947574.9312, 1795947585.0396, 41))  # doctest: +NORMALIZE_WHITESPACE
    The first of 41 requests was sent at 2026-11-29 10:19:34.931 UTC (1795947574.931 s on the file's clock);
    the last ended 10.108 s later.
    >>> span_text(0.0, 614.792, 3000)
    'The data spans 614.792 s from the first of 3,000 requests.'
    """
    length = seconds(last_end_s - origin_s)
    utc = epoch_utc(origin_s)
    if utc is None:
        return f"The data spans {length} s from the first of {fmt(requests)} requests."
    return (f"The first of {fmt(requests)} requests was sent at {utc} ({origin_s:.3f} s on the file's clock); "
            f"the last ended {length} s later.")
