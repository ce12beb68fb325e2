"""Words for people: tool names, plain error sentences, labels, a glossary.

Numbers are :mod:`servebench.formatting`'s (``fmt`` and its share forms, ``NO_DATA``), at the bottom of the
layers so that analysis can use it too. The CLI and the library keep their exact messages; the dashboard
passes what it shows through here.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from servebench.records.statuses import STATUS_WORDS

# another tool's format name -> how it is written, with its article
TOOL_NAMES: dict[str, tuple[str, str]] = {
    "aiperf": ("an", "AIPerf"), "genai-perf": ("a", "GenAI-Perf"), "guidellm": ("a", "GuideLLM"),
    "vllm": ("a", "vLLM"), "llmperf": ("an", "LLMPerf"),
}


def export_label(fmt: str) -> str:
    """Return 'an AIPerf export' for a format name, or 'servebench records (csv)' for a canonical one.

    >>> export_label("aiperf"), export_label("guidellm"), export_label("csv")
    ('an AIPerf export', 'a GuideLLM export', 'servebench records (CSV)')
    """
    if fmt in TOOL_NAMES:
        article, name = TOOL_NAMES[fmt]
        return f"{article} {name} export"
    return f"servebench records ({fmt.upper()})"


DROP_CONTROL = "turn on 'Leave out warm-up and cool-down requests' under Import options in the sidebar"
SERVER_TOKENS_CONTROL = "'Count the server's output tokens' under Import options in the sidebar"
_CLI_HINTS = (
    (re.compile(r"pass outside_window='drop' \(--format NAME:outside_window=drop\)"), DROP_CONTROL),
    (re.compile(r"--format aiperf:tokens=server"), SERVER_TOKENS_CONTROL),
    (re.compile(r"\(outside_window='drop'\)"), "(warm-up and cool-down left out, as asked in Import options)"),
)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int|uint|bool_?)\d*\(([^()]*)\)")


def for_people(text: str) -> str:
    """Turn CLI syntax in a note into the dashboard control that does it, and numpy reprs into numbers.

    >>> for_people("kept; pass outside_window='drop' (--format NAME:outside_window=drop) to leave them out")
    "kept; turn on 'Leave out warm-up and cool-down requests' under Import options in the sidebar to leave them out"
    >>> for_people("not carried over; --format aiperf:tokens=server counts the server's tokens instead")
    "not carried over; 'Count the server's output tokens' under Import options in the sidebar counts the server's tokens instead"
    >>> for_people("rate np.float64(2.5) is above np.int64(2)")
    'rate 2.5 is above 2'
    """
    for pattern, words in _CLI_HINTS:
        text = pattern.sub(words, text)
    return _NUMPY_SCALAR.sub(r"\1", text)


def _where(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"item {p + 1}")
        else:
            parts.append(f"'{p}'")
    return " > ".join(parts) or "the file"


def validation_sentences(exc: ValidationError, limit: int = 10) -> list[str]:
    """Return one plain sentence per pydantic error: where, what is wrong, the value given (no links)."""
    out = []
    for err in exc.errors(include_url=False)[:limit]:
        where = _where(tuple(err.get("loc", ())))
        msg = str(err.get("msg", "invalid")).replace("Input should be", "should be")
        if err.get("type") == "missing":
            out.append(f"{where} is missing.")
        elif err.get("type") == "json_invalid":
            out.append(f"the file is not valid JSON ({err.get('ctx', {}).get('error', msg)}).")
        else:
            given = err.get("input")
            shown = "" if isinstance(given, (dict, list)) else f" (got {given!r})"
            out.append(f"{where} {msg}{shown}.")
    more = len(exc.errors()) - limit
    if more > 0:
        out.append(f"…and {more} more.")
    return out


def validation_text(name: str, what: str, exc: ValidationError) -> str:
    """Return '<name>: not <what>:' followed by one plain sentence per problem, as lines."""
    lines = validation_sentences(exc)
    return f"{name}: not {what}: " + (lines[0] if len(lines) == 1 else "\n" + "\n".join(f"- {s}" for s in lines))


# snake_case keys of tables -> labels people read
LABELS: dict[str, str] = {
    "slice": "Slice", "requests": "Requests", "successes": "Successes", "non_success_fraction": "Non-success",
    "successful_requests_per_second": "Successful req/s",
    "successful_output_tokens_per_second": "Successful tok/s",
    "success_latency_p95_s": "Latency p95 (s)", "success_ttft_p95_s": "TTFT p95 (s)",
    "success_request_tpot_p95_s": "TPOT p95 (s)", "success_latency_p95_ms": "Latency p95 (ms)",
    "success_ttft_p95_ms": "TTFT p95 (ms)", "success_request_tpot_p95_ms": "TPOT p95 (ms)",
    "slo_attainment": "SLO attainment", "goodput_share": "Goodput share", "ttft_p95_s": "TTFT p95 (s)",
    "ttft_p95_ms": "TTFT p95 (ms)",
    "goodput_requests_per_second": "Goodput (req/s)", "wasted_output_tokens": "Wasted tokens",
    "peak_active": "Peak active", "offered_rate": "Offered (req/s)", "rate": "Offered (req/s)",
    "offered": "Offered", "accepted": "Accepted",
    # a report's count of each status, by the status's one word (records.statuses.STATUS_WORDS)
    "completed": STATUS_WORDS["success"], "timed_out": STATUS_WORDS["timeout"], "rejected": STATUS_WORDS["rejected"],
    "failed": STATUS_WORDS["failed"], "cancelled": STATUS_WORDS["cancelled"],
    "latency_s": "Latency", "ttft_s": "TTFT", "request_tpot_s": "Request TPOT", "queue_wait_s": "Queue wait",
    "prefill_s": "Prefill",
}


def label(key: str) -> str:
    """Return the label for a table key; unknown keys become words ('p95_ttft_s' -> 'P95 ttft (s)').

    >>> label("non_success_fraction"), label("p95_ttft_s"), label("peak_running")
    ('Non-success', 'P95 ttft (s)', 'Peak running')
    """
    if key in LABELS:
        return LABELS[key]
    unit = ""
    for suffix, shown in (("_per_second", " (/s)"), ("_per_s", " (/s)"), ("_s", " (s)"), ("_tokens", " (tokens)")):
        if key.endswith(suffix):
            key, unit = key[: -len(suffix)], shown
            break
    words = key.replace("_", " ").strip()
    return (words[:1].upper() + words[1:] + unit) if words else key


GLOSSARY: dict[str, str] = {
    "TTFT": "Time to first token: from the request's arrival to its first output token. It includes the time "
            "spent waiting in the queue and the prefill.",
    "TPOT": "Time per output token: for one request, (end - first token) / (output tokens - 1), the pace at "
            "which the rest of the answer streams.",
    "Latency": "From arrival to the last token: the whole request as its user waits for it.",
    "Queue wait": "From arrival to admission, when the server starts working on the request. Needs 'admitted' "
                  "times in the records.",
    "Prefill": "From admission to the first token: the server reading the prompt before it can answer.",
    "Goodput": "Requests (or output tokens) per second that succeeded AND met every SLO limit you set; a "
               "failure never counts.",
    "SLO attainment": "The share of all offered requests that succeeded within every limit.",
    "Failure-aware percentile": "A percentile over every request where each non-success counts as infinitely "
                                "slow, so a server that drops load cannot look faster.",
    "Confidence interval": "A 95% range for a percentile from order statistics: if two runs' intervals do not "
                           "overlap, the difference is unlikely to be noise.",
    "Offered / accepted": "Offered: every request that arrived. Accepted: those the server admitted (not "
                          "rejected).",
    "Usable capacity": "The highest offered load at which the SLOs still hold.",
    "Knee": "The load past which latency climbs steeply: the server has run out of headroom.",
}
