"""servebench.dashboard.verdict_tables: the tables under a Diagnosis verdict, and the profile table it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.analysis import diagnosis
from servebench.dashboard.verdict_tables import (
    bindings_frame,
    bindings_heading,
    evidence_frame,
    limit_words,
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
    assert frame.set_index("measurement").loc["Prompt tokens (every request)", "B"] == "7,800"  # fmt: separators


def test_the_measurements_read_in_words_with_units_and_times_in_ms(profiles) -> None:
    """Issue 36: the walk-through's table showed the JSON's names (queue_wait_p50_s) and seconds beside ms inputs."""
    rows = profiles_frame(profiles, "ms").set_index("measurement")
    assert not [name for name in rows.index if "_" in name]  # no snake_case key
    assert rows.loc["Queue wait p95 (ms)"].tolist() == ["20", "8,700"]  # 0.02 s and 8.7 s, exactly
    assert rows.loc["TTFT p95 (ms)"].tolist() == ["260", "10,300"]
    assert rows.loc["Request TPOT p50 (ms)"].tolist() == ["30", "31"]
    assert rows.loc["Share of the run at that peak"].tolist() == ["under 1%", "72%"]  # as the spec prints it
    assert rows.loc["Arrival rate (requests/s)"].tolist() == ["1", "1"]
    assert profiles_frame(profiles, "s").set_index("measurement").loc["TTFT p95 (s)"].tolist() == ["0.26", "10.3"]
    # the engineer view keeps the table's own names beside the words
    engineer = profiles_frame(profiles, "ms", engineer=True)
    assert list(engineer.columns) == ["measurement", "field", "A", "B"]
    assert engineer.set_index("field").loc["queue_wait_p50_s", "measurement"] == "Queue wait p50 (ms; arrival to admission)"


def test_the_evidence_and_rules_read_in_words_times_in_the_unit_asked_and_shares_as_percents(profiles) -> None:
    b = diagnosis.diagnose_table(profiles, "ms")[1]
    ev = evidence_frame(b, "ms").set_index("measurement")
    assert not [name for name in ev.index if "_" in name]  # words, not the rules' keys
    assert ev.loc["TTFT p95", ["value", "threshold"]].tolist() == ["10,300 ms", "2,000 ms"]
    assert ev.loc["Queue wait share of TTFT p95", ["value", "threshold"]].tolist() == ["84.5%", "50%"]
    assert ev.loc["TPOT growth (many active / few)", ["value", "threshold"]].tolist() == ["1.03x", "1.25x"]
    assert "queue wait p95 8,700 ms of TTFT p95 10,300 ms" in ev["note"].tolist()
    conditions = " ".join(rules_frame(b, "ms")["conditions"])
    assert "Queue wait share of TTFT p95 >= 50%: yes" in conditions and "_" not in conditions
    engineer = evidence_frame(b, "ms", engineer=True).set_index("field")  # the keys, for engineers
    assert engineer.loc["ttft_p95_s", "measurement"] == "TTFT p95"
    in_s = evidence_frame(diagnosis.diagnose_table(profiles)[1]).set_index("measurement")
    assert in_s.loc["TTFT p95", ["value", "threshold"]].tolist() == ["10.3 s", "2 s"]
    assert bindings_heading(b) == "**Where each limit binds as load grows**: **KV memory** binds at the measured load."


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
        assert list(rules["limit"]) == [limit_words(r.limit) for r in v.rules]  # in words
        assert list(rules_frame(v, engineer=True)["field"]) == [r.limit for r in v.rules]  # keys for engineers
    table, ws, we = load_table(SAMPLE / "requests_sample.csv")
    v = diagnosis.diagnose_records(table, ws, we, name="sample")  # no admitted: some conditions not measured
    assert "not measured" in " ".join(rules_frame(v)["conditions"])
    assert list(bindings_frame(v)["limit"]) == [limit_words(b.limit) for b in v.bindings]
    assert list(bindings_frame(v, engineer=True)["field"]) == [b.limit for b in v.bindings]
    assert bindings_heading(v).startswith("**Where each limit binds as load grows**")
