"""The Load sweep page on a scenario that replays a trace: swept by its speedup, no mix to edit, no error."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from servebench.dashboard.sweep_form import load_axis, replay_caption
from servebench.serving.scenario import load_scenario, scenario_from_bytes

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")
TRACE = REPO / "sample_data" / "traces" / "azure_conv_2023_300.csv"
REPLAY = f"""
name: replay
server: {{kv_budget_tokens: 200000, block_size_tokens: 16}}
step_model: {{base_s: 0.01, per_prefill_token_s: 0.00005, per_decode_seq_s: 0.0002}}
workload:
  trace: {{path: {TRACE}, speedup: 2}}
"""


def test_a_trace_is_swept_by_its_speedup_around_its_own() -> None:
    replay = scenario_from_bytes(REPLAY.encode(), "replay.yaml")
    axis = load_axis(replay)
    assert axis.mode == "speedup" and axis.label.startswith("Trace speedups")
    assert [float(x) for x in axis.default_loads.split(",")] == [0.5, 1.4, 2.3, 3.2, 4.1, 5.0]  # 0.25x-2.5x of 2
    caption = replay_caption(replay)
    assert caption is not None and "azure_conv_2023_300.csv" in caption and "300 requests" in caption
    drawn = load_scenario(REPO / "sample_data" / "scenarios" / "profile_b.yaml")
    assert load_axis(drawn).mode == "rate" and replay_caption(drawn) is None


def test_the_sweep_page_sweeps_an_uploaded_trace_scenario() -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("pages/sweep.py").run()
    at.file_uploader(key="scenario_upload").set_value(("replay.yaml", REPLAY.encode(), "application/yaml")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.text_input(key="loads").label.startswith("Trace speedups")
    assert not [d for d in at.dataframe if d.key and d.key.startswith("sweep_mix")]  # the trace gives the requests
    assert any("azure_conv_2023_300.csv gives every request" in m.value for m in at.markdown)
    at.text_input(key="loads").set_value("0.5, 2, 8")
    at.number_input(key="sweep_requests").set_value(100)
    at.button(key="run_sweep").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    result = at.session_state["sweep_result"][1]
    assert result.mode == "speedup" and {0.5, 2.0, 8.0} <= {p.load for p in result.points}
    assert all(p.offered == 100 for p in result.points)  # the trace's first 100 requests at every speedup
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Usable capacity"].endswith(" x") and "Knee (x)" in metrics
