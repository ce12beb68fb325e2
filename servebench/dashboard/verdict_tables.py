"""The tables Diagnosis shows under a verdict, and the profile table it reads: data in, frames (text cells) out.

Every number goes through ``fmt``; a condition that could not be measured says so rather than "no". Times read
in the page's unit (ms by default; the verdicts and tables hold seconds), and the profile table's rows in words
with their units, its field names only in the engineer view. Pure: the page (``pages/diagnosis.py``) lays these
out as Markdown tables.
"""

from __future__ import annotations

import pandas as pd
from pydantic import ValidationError

from servebench.analysis.diagnosis import LIMIT_WORDS, Evidence, ProfileTable, Verdict, shown_in_words
from servebench.dashboard.wording import s_to_ms
from servebench.errors import InputFormatError
from servebench.formatting import fmt, fmt_share
from servebench.output.plain import validation_text

CROSSED = {True: "yes", False: "no", None: "not measured"}


def limit_words(limit: str) -> str:
    """Return a limit as a sentence starts it ('KV memory', 'Decode'), not its key.

    >>> limit_words("kv_memory"), limit_words("queueing")
    ('KV memory', 'Queueing')
    """
    words = LIMIT_WORDS.get(limit, limit)
    return words[:1].upper() + words[1:]


def evidence_frame(v: Verdict, unit: str = "s", engineer: bool = False) -> pd.DataFrame:
    """Return each measurement of the verdict against its rule's threshold, with whether it crossed it.

    Measurements read in words, a time in ``unit`` ('s' or 'ms') and a share as a percent; ``engineer`` adds a
    'field' column with the rule's name for it (``queue_share_of_ttft``), as the CLI and the JSON give it.
    """
    rows = []
    for e in v.evidence:
        words, value, threshold = shown_in_words(e, unit)
        rows.append({"measurement": words, **({"field": e.measurement} if engineer else {}), "value": value,
                     "rule": e.rule, "threshold": threshold, "crossed": CROSSED[e.crossed], "note": e.note})
    return pd.DataFrame(rows)


def rules_frame(v: Verdict, unit: str = "s", engineer: bool = False) -> pd.DataFrame:
    """Return every rule in precedence order: whether it holds, and each condition with its outcome, in words (times
    in ``unit``); ``engineer`` adds the limit's key."""
    def said(c: Evidence) -> str:
        words, _, threshold = shown_in_words(c, unit)
        return f"{words} {c.rule} {threshold}: {CROSSED[c.crossed]}"

    return pd.DataFrame([{"limit": limit_words(r.limit), **({"field": r.limit} if engineer else {}),
                          "holds": "yes" if r.holds else "no",
                          "conditions": "; ".join(said(c) for c in r.conditions)} for r in v.rules])


def bindings_frame(v: Verdict, engineer: bool = False) -> pd.DataFrame:
    """Return where each limit binds as load grows: the rate, the requests in service there, and how it was found."""
    return pd.DataFrame([{"limit": limit_words(b.limit), **({"field": b.limit} if engineer else {}),
                          "rate (requests/s)": fmt(b.rate_per_s), "in service": fmt(b.in_service),
                          "× the measured rate": fmt(b.headroom), "how": b.basis} for b in v.bindings])


def bindings_heading(v: Verdict) -> str:
    """Return the line above the bindings table: which limit binds first, or that none was estimated (Markdown)."""
    first = v.first_to_bind
    if first is None:
        said = " (none estimated from this data)."
    elif v.headline is not None and v.headline.standing == "at_limit":
        said = f": **{limit_words(first.limit)}** binds at the measured load."
    else:
        said = f": **{limit_words(first.limit)}** first."
    return "**Where each limit binds as load grows**" + said


def read_profile_table(name: str, data: bytes) -> ProfileTable:
    """Read a profile table (JSON like sample_data/profiles_ab.json); a bad one raises InputFormatError, one plain
    sentence per problem naming the file."""
    try:
        return ProfileTable.model_validate_json(data)
    except ValidationError as exc:  # malformed JSON too
        raise InputFormatError(validation_text(name, "a profile table", exc)) from None


# A profile table's fields as its rows read, in words with their units ('{t}': the page's time unit), and how each
# value is written: 'time' (seconds, shown in the unit), 'share' (a percent), 'flag' (yes or no), else fmt.
PROFILE_ROWS: dict[str, tuple[str, str]] = {
    "prompt_tokens": ("Prompt tokens (every request)", ""), "requests": ("Requests", ""),
    "timeouts": ("Timeouts", ""), "rejected": ("Rejected at admission", ""), "failures": ("Other failures", ""),
    "queue_wait_p50_s": ("Queue wait p50 ({t}; arrival to admission)", "time"),
    "queue_wait_p95_s": ("Queue wait p95 ({t})", "time"),
    "prefill_p50_s": ("Prefill p50 ({t}; admission to first token)", "time"),
    "prefill_p95_s": ("Prefill p95 ({t})", "time"), "ttft_p50_s": ("TTFT p50 ({t})", "time"),
    "ttft_p95_s": ("TTFT p95 ({t})", "time"), "tpot_p50_s": ("Request TPOT p50 ({t})", "time"),
    "tpot_baseline_s": ("TPOT p50 with few sequences active ({t})", "time"),
    "tpot_high_load_s": ("TPOT p50 with many sequences active ({t})", "time"),
    "peak_active": ("Peak active sequences", ""), "share_at_peak": ("Share of the run at that peak", "share"),
    "mean_in_service": ("Mean requests in service", ""),
    "arrival_rate_per_s": ("Arrival rate (requests/s)", ""), "output_tokens": ("Output tokens per success", ""),
    "output_cap": ("Output cap (tokens)", ""), "deadline_s": ("Deadline (s)", ""), "duration_s": ("Run length (s)", ""),
    "has_admitted": ("Admission times recorded", "flag"), "decode_load": ("Mean in service while decoding", ""),
    "max_num_seqs": ("Cap on running sequences", ""),
    "shared_prefix_share": ("Prompt tokens shared with earlier prompts", "share"),
    "shared_clock": ("Timestamps on one clock", "flag"),
}
UPPER_BOUND_FIELD = "share_at_peak_is_upper_bound"  # not a row: "under 1%" in the share's cell, as the spec prints it


def _cell(kind: str, value: object, unit: str) -> str:
    if kind == "time" and isinstance(value, (int, float)):
        return fmt(s_to_ms(value) if unit == "ms" else value)  # exact: 0.02 s is 20 ms, not 20.000000000000004
    if kind == "share" and isinstance(value, (int, float)):
        return fmt_share(value)
    if kind == "flag":
        return "yes" if value else "no"
    return fmt(value)


def profiles_frame(table: ProfileTable, unit: str = "s", engineer: bool = False) -> pd.DataFrame:
    """Return the measurements one profile per column, as the spec prints them: each row named in words with its
    unit, times in ``unit`` ('s' or 'ms'), shares as percents ('under 1%' where the table gives an upper bound).

    ``engineer``: a 'field' column gives each row's name in the table (``queue_wait_p50_s``), as the JSON spells it.
    A field the table holds that has no words here keeps its name.
    """
    dumped = [p.model_dump(exclude_none=True) for p in table.profiles]
    fields = [f for f in dict.fromkeys(k for d in dumped for k in d) if f not in ("name", UPPER_BOUND_FIELD)]
    rows = []
    for field in fields:
        label, kind = PROFILE_ROWS.get(field, (field, ""))
        row = {"measurement": label.format(t=unit), **({"field": field} if engineer else {})}
        for p, d in zip(table.profiles, dumped):
            cell = _cell(kind, d.get(field), unit) if field in d else fmt(None)
            if field == "share_at_peak" and d.get(UPPER_BOUND_FIELD):
                cell = f"under {cell}"
            row[p.name] = cell
        rows.append(row)
    return pd.DataFrame(rows)
