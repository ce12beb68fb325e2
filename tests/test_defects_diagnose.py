"""``servebench diagnose`` prints each profile's one-sentence headline first in the terminal, as --json carries it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"


@pytest.mark.parametrize("name", ["profiles_ab.json", "requests_sample.csv"])
def test_the_headline_comes_first_under_each_profile(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, err = run_cli(capsys, "diagnose", str(SAMPLE / name), "--json")
    assert code == 0, err
    headlines = {p: v["headline"]["text"] for p, v in json.loads(out)["profiles"].items()}
    code, out, err = run_cli(capsys, "diagnose", str(SAMPLE / name))
    assert code == 0, err
    text = " ".join(out.split())  # the terminal wraps long lines
    for profile, headline in headlines.items():
        heading = next(line for line in out.splitlines() if f" {profile}: limit = " in line)
        section = text[text.index(heading.strip()) + len(heading.strip()):]
        # first under the profile's rule: before its summary line and every table
        assert section.lstrip().startswith(f"answer: {' '.join(headline.split())}"), section[:300]


def test_a_condition_that_cannot_be_checked_reads_no_data(capsys: pytest.CaptureFixture[str]) -> None:
    # without a model shape the KV limit is unknown: 'peak_active / max_concurrent_sequences' cannot be checked
    code, out, err = run_cli(capsys, "diagnose", str(SAMPLE / "requests_sample.csv"), "--json")
    assert code == 0, err
    rules = json.loads(out)["profiles"]["requests_sample.csv"]["rules"]
    unknown = [c for r in rules for c in r["conditions"] if c["crossed"] is None]
    assert unknown  # the case under test
    code, out, err = run_cli(capsys, "diagnose", str(SAMPLE / "requests_sample.csv"))
    assert code == 0, err
    text = " ".join(out.split())
    assert "max_concurrent_sequences >= 1: —" in text and ": -;" not in text and not text.count(": - ")
