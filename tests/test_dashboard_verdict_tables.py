"""servebench.dashboard.verdict_tables: the tables under a Diagnosis verdict, and the profile table it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.analysis import diagnosis
from servebench.dashboard.verdict_tables import (
    bindings_frame,
    bindings_heading,
    evidence_frame,
    profiles_frame,
    read_profile_table,
    rules_frame,
)
from servebench.errors import InputFormatError
from servebench.records.loaders import load_table

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"


@pytest.fixture(scope="module")
def profiles():
    return read_profile_table("profiles_ab.json", (SAMPLE / "profiles_ab.json").read_bytes())


def test_the_spec_profiles_read_one_column_each(profiles) -> None:
    frame = profiles_frame(profiles)
    assert list(frame.columns) == ["measurement", "A", "B"]
    assert frame.set_index("measurement").loc["prompt_tokens", "B"] == "7,800"  # through fmt: separators


def test_a_bad_profile_table_is_one_line_naming_the_file() -> None:
    with pytest.raises(InputFormatError) as err:
        read_profile_table("mine.json", b'{"profiles": [{"name": "A"}]}')
    assert str(err.value).startswith("mine.json")
    with pytest.raises(InputFormatError):
        read_profile_table("broken.json", b"{not json")


def test_the_verdicts_tables_say_what_was_not_measured(profiles) -> None:
    verdicts = diagnosis.diagnose_table(profiles)
    for v in verdicts:
        ev, rules = evidence_frame(v), rules_frame(v)
        assert len(ev) == len(v.evidence) and set(ev["crossed"]) <= {"yes", "no", "not measured"}
        assert list(rules["limit"]) == [r.limit for r in v.rules]
    table, ws, we = load_table(SAMPLE / "requests_sample.csv")
    v = diagnosis.diagnose_records(table, ws, we, name="sample")  # no admitted: some conditions not measured
    assert "not measured" in " ".join(rules_frame(v)["conditions"])
    assert list(bindings_frame(v)["limit"]) == [b.limit for b in v.bindings]
    assert bindings_heading(v).startswith("**Where each limit binds as load grows**")
