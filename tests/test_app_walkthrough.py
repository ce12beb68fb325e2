"""The guided A/B walk-through ends on the knee it talks about: profiles A and B swept over load, on the page."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest
from vega_charts import drawn_charts

from servebench.analysis.diagnosis import ProfileTable, diagnose_table
from servebench.dashboard.walkthrough_sweeps import LOAD_FACTORS, profile_sweeps, run_profile_sweep
from servebench.output.figures.markdown_table import markdown_tables

REPO = Path(__file__).resolve().parent.parent


def _verdicts():
    table = ProfileTable.model_validate(json.loads((REPO / "sample_data" / "profiles_ab.json").read_text()))
    return diagnose_table(table)


def _revealed() -> AppTest:
    """Return the Diagnosis page with its walk-through revealed to the end."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/diagnosis.py").run()
    for n in range(1, 6):
        at.button(key=f"wt_reveal_{n}").click().run()
    assert not at.exception
    return at


def test_each_profile_is_swept_around_the_rate_its_limit_binds_at_and_shows_a_knee() -> None:
    plans = profile_sweeps(_verdicts(), REPO / "sample_data" / "scenarios")
    assert [(p.profile, p.scenario.name) for p in plans] == [("A", "profile_a"), ("B", "profile_b")]
    for plan in plans:
        assert len(plan.loads) == len(LOAD_FACTORS) and min(plan.loads) < plan.binds_at_rps < max(plan.loads)
        result = run_profile_sweep(plan)
        assert result.knee_load is not None  # the knee the walk-through talks about lies within the loads swept
        assert 0.5 * plan.binds_at_rps <= result.knee_load <= 1.25 * plan.binds_at_rps


def test_a_profile_without_a_scenario_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "profile_b.yaml").write_text((REPO / "sample_data" / "scenarios" / "profile_b.yaml").read_text())
    assert [p.profile for p in profile_sweeps(_verdicts(), tmp_path)] == ["B"]


def test_the_walkthrough_ends_with_the_sweep_charts_of_a_and_b() -> None:
    at = _revealed()
    assert at.subheader[-1].value == "The knee: each profile swept over load"  # the last thing on the page
    answers = [m.value for m in at.markdown if m.value.startswith("**Profile ")]
    assert [a.split(":")[0] for a in answers] == ["**Profile A** (profile_a)", "**Profile B** (profile_b)"]
    assert all("One server takes up to" in a and "latency climbs steeply" in a for a in answers)
    charts = {title: spec for title, (spec, _) in drawn_charts(at).items() if "against offered load" in title}
    assert sorted(charts) == ["profile_a: TTFT against offered load", "profile_b: TTFT against offered load"]
    for spec in charts.values():
        labels = [layer["data"]["values"][0]["label"] for layer in spec["layer"]
                  if layer["mark"]["type"] == "text" and "values" in layer.get("data", {})
                  and "label" in layer["data"]["values"][0]]
        assert any(label.startswith("knee ") and label.endswith(" req/s") for label in labels), labels


def test_the_first_steps_answers_name_the_limits_in_words_not_keys() -> None:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/diagnosis.py").run()
    choice = next(s for s in at.selectbox if s.key.startswith("wt_"))
    assert "KV memory" in [choice.format_func(o) for o in choice.options] or "KV memory" in choice.options
    choice.set_value(choice.options[0]).run()
    at.button(key="wt_reveal_1").click().run()
    assert not at.exception
    shown = " ".join(str(md.value) for md in at.markdown)
    assert "KV memory" in shown and "kv_memory" not in shown  # the engineer view is off: no field keys


def _page_text(at: AppTest) -> str:
    return " ".join(str(e.value) for kind in ("markdown", "info", "success", "warning", "caption")
                    for e in getattr(at, kind))


def test_the_walkthrough_reads_times_in_ms_rates_in_the_singular_and_measurements_in_words() -> None:
    """Issue 36: the walk-through said 'TTFT p95 0.26 s' and 'Measured at 1 requests/s' beside ms inputs, and its
    measurements table showed the JSON's names (queue_wait_p50_s)."""
    at = _revealed()
    text = _page_text(at)
    assert "TTFT p95 260 ms" in text and "Prefill takes 150 ms p50 (250 ms p95)" in text
    assert "TTFT p95 10,300 ms over its 2,000 ms objective" in text and "Measured at 1 request/s" in text
    assert "0.26 s" not in text and "10.3 s" not in text and "1 requests/s" not in text
    measurements = next(f for f in markdown_tables(m.value for m in at.markdown) if "A" in f.columns)
    assert list(measurements.columns) == ["measurement", "A", "B"]
    assert not [name for name in measurements["measurement"] if "_" in name]
    assert measurements.set_index("measurement").loc["TTFT p95 (ms)"].tolist() == ["260", "10,300"]
    # (the engineer view's 'field' column of the JSON's names is test_dashboard_verdict_tables': AppTest runs a page
    # without app.py, which draws the toggle)
