"""The tables Diagnosis shows under a verdict, and the profile table it reads: data in, frames (text cells) out.

Every number goes through ``fmt``; a condition that could not be measured says so rather than "no".
Pure: the page (``pages/diagnosis.py``) lays these out as Markdown tables.
"""

from __future__ import annotations

import pandas as pd
from pydantic import ValidationError

from servebench.analysis.diagnosis import ProfileTable, Verdict
from servebench.errors import InputFormatError
from servebench.formatting import fmt
from servebench.output.plain import validation_text

CROSSED = {True: "yes", False: "no", None: "not measured"}


def evidence_frame(v: Verdict) -> pd.DataFrame:
    """Return each measurement of the verdict against its rule's threshold, with whether it crossed it."""
    return pd.DataFrame([{"measurement": e.measurement, "value": fmt(e.value), "rule": e.rule,
                          "threshold": fmt(e.threshold), "crossed": CROSSED[e.crossed], "note": e.note}
                         for e in v.evidence])


def rules_frame(v: Verdict) -> pd.DataFrame:
    """Return every rule in precedence order: whether it holds, and each condition with its outcome."""
    return pd.DataFrame([{"limit": r.limit, "holds": "yes" if r.holds else "no",
                          "conditions": "; ".join(f"{c.measurement} {c.rule} {fmt(c.threshold)}: {CROSSED[c.crossed]}"
                                                  for c in r.conditions)} for r in v.rules])


def bindings_frame(v: Verdict) -> pd.DataFrame:
    """Return where each limit binds as load grows: the rate, the requests in service there, and how it was found."""
    return pd.DataFrame([{"limit": b.limit, "rate (requests/s)": fmt(b.rate_per_s), "in service": fmt(b.in_service),
                          "× the measured rate": fmt(b.headroom), "how": b.basis} for b in v.bindings])


def bindings_heading(v: Verdict) -> str:
    """Return the line above the bindings table: which limit binds first, or that none was estimated (Markdown)."""
    first = v.first_to_bind
    if first is None:
        said = " (none estimated from this data)."
    elif v.headline is not None and v.headline.standing == "at_limit":
        said = f": **{first.limit}** binds at the measured load."
    else:
        said = f": **{first.limit}** first."
    return "**Where each limit binds as load grows**" + said


def read_profile_table(name: str, data: bytes) -> ProfileTable:
    """Read a profile table (JSON like sample_data/profiles_ab.json); a bad one raises InputFormatError, one plain
    sentence per problem naming the file."""
    try:
        return ProfileTable.model_validate_json(data)
    except ValidationError as exc:  # malformed JSON too
        raise InputFormatError(validation_text(name, "a profile table", exc)) from None


def profiles_frame(table: ProfileTable) -> pd.DataFrame:
    """Return the measurements one profile per column, as the spec prints them."""
    frame = pd.DataFrame([p.model_dump(exclude_none=True) for p in table.profiles]).set_index("name").T
    return frame.map(fmt).rename_axis("measurement").reset_index()
