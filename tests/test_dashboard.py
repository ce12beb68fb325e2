"""servebench.dashboard: the decisions pages make beyond layout (runs to compare, windows, fcfs against fair)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servebench.analysis.summary import SLO, build_report
from servebench.dashboard.fairness import shift_headline, shift_table, tenant_shifts
from servebench.dashboard.runs import baseline_first, comparable
from servebench.dashboard.windows import seconds, shared_clock, span_text, window_text
from servebench.records.loaders import read_bytes, to_table


def _report(ttft_by_tenant: dict[str, list[float]], slo: SLO | None = None):
    """Report on requests one second apart, each tenant's with the given TTFTs (every one succeeds)."""
    recs, t = [], 0.0
    for tenant, ttfts in ttft_by_tenant.items():
        for ttft in ttfts:
            recs.append({"start": t, "first_token": t + ttft, "end": t + ttft + 1.0, "status": "success",
                         "output_tokens": 10, "slice": tenant})
            t += 1.0
    table, ws, we = to_table(read_bytes(json.dumps(recs).encode(), "tenants.json"))
    return build_report(table, ws, we, slo)


def test_fair_scheduling_moves_waiting_from_the_light_tenant_and_says_so() -> None:
    before = _report({"batch": [10.0] * 8, "chat": [12.0] * 2})
    after = _report({"batch": [11.0] * 8, "chat": [2.0] * 2})
    shifts = tenant_shifts(before, after)
    assert [s.tenant for s in shifts] == ["batch", "chat"]
    chat = shifts[1]
    assert chat.ttft_p95_s == (12.0, 2.0) and chat.ttft_p50_s == (12.0, 2.0)
    assert chat.goodput_share == (0.2, 0.2) and chat.slo_attainment == (None, None)
    jain = (before.fairness.jain_index, after.fairness.jain_index)
    text = shift_headline(shifts, ("fcfs", "fair"), jain, None)
    assert text.startswith("Under fair instead of fcfs, chat's TTFT p95 goes from 12 s to 2 s (-83%), and batch's "
                           "TTFT p95 goes from 10 s to 11 s (+10%).")
    assert "goodput share and Jain's index" in text and "are the same" in text
    table = shift_table(shifts, ("fcfs", "fair")).set_index(["tenant", "measure"])
    assert list(table.columns) == ["fcfs", "fair", "change"]
    assert table.loc[("chat", "TTFT p95 (s)"), "change"] == "-10 (-83%)"
    assert table.loc[("chat", "goodput share"), "fcfs"] == "20%"
    assert table.loc[("chat", "goodput share"), "change"] == "same"
    assert table.loc[("chat", "within the TTFT objective"), "fair"] == "—"


def test_with_an_objective_goodput_and_jain_show_the_difference() -> None:
    slo = SLO(ttft_s=5.0)
    before = _report({"batch": [1.0] * 8, "chat": [12.0] * 2}, slo)
    after = _report({"batch": [1.0] * 8, "chat": [2.0] * 2}, slo)
    shifts = tenant_shifts(before, after)
    jain = (before.fairness.jain_index, after.fairness.jain_index)
    assert jain[0] < jain[1]
    text = shift_headline(shifts, ("fcfs", "fair"), jain, 5.0)
    assert "Within the 5 s TTFT objective: chat 0% to 100%; batch 100% to 100%" in text
    assert "are the same" not in text


def test_no_tenants_no_comparison() -> None:
    r = _report({"a": [1.0]})  # one slice: no fairness section
    assert r.fairness is None and tenant_shifts(r, r) == []
    assert shift_headline([], ("fcfs", "fair"), (None, None), None) == "The runs have no tenants to compare."


@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), st.sampled_from(["sample", "upload", "timing run"]),
                       max_size=8), st.booleans())
def test_compare_offers_samples_only_when_nothing_else_is_held_or_asked(origins: dict[str, str],
                                                                          with_samples: bool) -> None:
    offered = comparable(origins, with_samples=with_samples)
    own = [k for k, o in origins.items() if o != "sample"]
    assert offered[:len(own)] == own  # the user's own, in the order opened, first
    samples = [k for k in offered if origins[k] == "sample"]
    assert samples == ([] if own and not with_samples else [k for k, o in origins.items() if o == "sample"])
    for baseline in offered:
        ordered = baseline_first(offered, baseline)
        assert ordered[0] == baseline and sorted(ordered) == sorted(offered)


def test_baseline_must_be_chosen() -> None:
    with pytest.raises(ValueError, match="not among the runs chosen"):
        baseline_first(["a"], "b")


@given(st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e5, allow_nan=False))
def test_a_window_reads_from_the_first_request_whatever_the_clock(offset_s: float, length_s: float) -> None:
    for origin in (0.0, 1795947574.9312):
        start = origin + offset_s  # on an epoch clock the offset is what float64 keeps of it: 0.0005 can read 0.00049996
        text = window_text(start, start + length_s, origin)
        assert text.startswith(f"window {seconds(start - origin)} to ")
        assert "1795947574" not in text  # the epoch is named as a clock time, never as a window end
    assert "2026-11-29 10:19:34.931 UTC" in span_text(1795947574.9312, 1795947585.0, 10)


def test_a_file_without_a_shared_clock_has_no_window() -> None:
    assert not shared_clock(["window_s"]) and shared_clock([])
    assert window_text(0.0, 1.3773, 0.0, shared=False).startswith("no window: the file has no timestamps")


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=6))
def test_an_slo_typed_in_ms_is_the_float_typed_in_seconds(whole: int, decimals: int) -> None:
    """The Load sweep and Retries pages take TTFT and TPOT limits in ms; the library takes seconds. A limit typed
    in ms (up to six decimals) reaches it as the very float the same limit typed in seconds gave (2.51 / 1000 did not)."""
    from decimal import Decimal

    from servebench.dashboard.wording import ms_to_s

    typed_ms = Decimal(whole).scaleb(-decimals)  # e.g. 12.5 ms
    assert ms_to_s(float(typed_ms)) == float(str(typed_ms.scaleb(-3)))


def test_the_chart_code_to_fetch_is_found_in_the_installed_streamlit_or_not_at_all(tmp_path) -> None:
    """The preload names the chart modules of this Streamlit build (STEM.HASH.js), or none where a build lacks one
    or has two of a stem: a wrong name would fetch code Streamlit never uses."""
    from pathlib import Path

    import streamlit

    from servebench.dashboard.chart_code import CHUNK_STEMS, chart_chunks, preload_script

    installed = chart_chunks(Path(streamlit.__file__).parent / "static" / "static" / "js")
    assert installed is not None and [n.split(".")[0] for n in installed] == list(CHUNK_STEMS)
    assert all(f'"{name}"' in preload_script(installed) for name in installed)
    for stem in CHUNK_STEMS:
        (tmp_path / f"{stem}.abc123.js").write_text("")
    (tmp_path / "embed.abc123.js.map").write_text("")  # not a module
    assert chart_chunks(tmp_path) == [f"{stem}.abc123.js" for stem in CHUNK_STEMS]
    (tmp_path / "embed.def456.js").write_text("")  # two builds' files: which one Streamlit imports is unknown
    assert chart_chunks(tmp_path) is None
    (tmp_path / "embed.def456.js").unlink()
    (tmp_path / "vega-interpreter.abc123.js").unlink()
    assert chart_chunks(tmp_path) is None
