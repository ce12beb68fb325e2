"""The capacity planner: fit, SLO pruning, replicas with the rate, a re-simulated plan, the CLI and the page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner
from vega_charts import drawn_charts

from servebench.analysis.summary import SLO
from servebench.capacity.model_presets import get_preset
from servebench.cli.core import app
from servebench.output.figures.markdown_table import markdown_tables
from servebench.planning import PlanRequest, Workload, evaluate_configurations, plan, planned_point, price
from servebench.planning.planner import cost_curve, plan_document

REPO = Path(__file__).resolve().parent.parent
OPTION_KEYS = {"gpu", "tensor_parallel", "max_num_seqs", "capacity_rps_per_replica", "replicas", "gpus_total",
               "meets_slo", "cost_per_hour_usd", "cost_per_million_output_tokens_usd", "limit", "router", "fleet_verified",
               "replicas_by_division"}
LIMITS = {"kv_memory", "queueing", "prefill", "decode", "throughput", "none"}


def _request(model: str = "llama-3.1-8b", gpus: tuple[str, ...] = ("H100",), tp: tuple[int, ...] = (1,),
             seqs: tuple[int, ...] = (64,), slo: SLO | None = None, prompt: int = 1000, output: int = 100,
             **kw) -> PlanRequest:
    return PlanRequest(model=get_preset(model), workload=Workload.fixed(prompt, output),
                       slo=slo or SLO(ttft_s=1.0, tpot_s=0.05), gpus=list(gpus), tensor_parallel=list(tp),
                       max_num_seqs=list(seqs), requests_per_simulation=120, **kw)


def _strict(text: str) -> dict:
    def refuse(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_70b_fp16_does_not_fit_on_one_80gb_gpu_and_the_plan_says_so() -> None:
    evaluation, result = plan(_request("llama-3.1-70b", gpus=("H100", "A100-80GB")), rate_rps=5)
    assert result.best is None
    assert {(o.gpu, o.meets_slo, o.limit, o.replicas) for o in result.options} == {
        ("H100", False, "kv_memory", None), ("A100-80GB", False, "kv_memory", None)}
    assert all("does not fit" in d.note and not d.fits for d in result.details)
    assert result.details[0].weights_gib_per_gpu == pytest.approx(70.55e9 * 2 / 2**30)
    assert "does not fit on any configuration" in (result.reason or "")
    assert evaluation.simulations == 0


def test_a_config_that_misses_the_slos_unloaded_is_not_simulated() -> None:
    # a 1000-token prompt on one L4 takes far more than 10 ms to prefill
    evaluation, result = plan(_request(gpus=("L4",), slo=SLO(ttft_s=0.01)), rate_rps=1)
    (option,) = result.options
    assert (option.meets_slo, option.limit, option.max_num_seqs, option.capacity_rps_per_replica) == \
        (False, "prefill", None, 0.0)
    assert "misses the SLOs with no load at all" in result.details[0].note
    assert result.details[0].unloaded_ttft_s > 0.01
    assert evaluation.simulations == 0 and evaluation.pruned == 1


def test_doubling_the_rate_about_doubles_the_replicas() -> None:
    evaluation = evaluate_configurations(_request(gpus=("A100-80GB",)))
    (config,) = evaluation.configs
    rate = 8 * config.capacity_rps
    one, two = price(evaluation, rate).best, price(evaluation, 2 * rate).best
    assert one is not None and two is not None
    assert one.replicas >= 8
    assert 1.8 <= two.replicas / one.replicas <= 2.2
    assert two.cost_per_hour_usd / one.cost_per_hour_usd == pytest.approx(two.replicas / one.replicas)
    # the cost per token stays about the same: the same replicas do the work
    assert two.cost_per_million_output_tokens_usd == pytest.approx(one.cost_per_million_output_tokens_usd, rel=0.15)
    curve = cost_curve(evaluation, [rate, 2 * rate])
    assert [c["gpus_total"] for c in curve] == [one.gpus_total, two.gpus_total]


def test_the_cheapest_option_meets_the_slos_when_resimulated_at_its_planned_load() -> None:
    rate = 12.0
    evaluation, result = plan(_request(gpus=("H100", "A100-80GB"), tp=(1, 2), seqs=(16, 64)), rate)
    best = result.best
    assert best is not None and best.meets_slo
    assert best == result.options[0]
    meeting = [o for o in result.options if o.meets_slo]
    assert best.cost_per_hour_usd == min(o.cost_per_hour_usd for o in meeting)
    assert best.gpus_total == best.replicas * best.tensor_parallel
    assert best.limit in LIMITS
    # each replica gets rate / replicas, below its capacity by the headroom; a longer run with a new seed
    point = planned_point(evaluation, best, rate, requests=400, seed=7)
    assert point.load <= best.capacity_rps_per_replica * 0.8 + 1e-9
    assert point.meets_slo, point
    # nothing skipped by the cost bound could have been cheaper
    for s in evaluation.skipped:
        assert s.lowest_cost_per_hour_usd >= best.cost_per_hour_usd


def test_progress_reports_every_candidate() -> None:
    seen: list[tuple[int, int]] = []
    plan(_request(seqs=(16, 64)), 2, progress=lambda done, total, label: seen.append((done, total)))
    assert (2, 2) in seen  # every candidate; then the fleet check counts the options it verifies, to its end
    assert seen[-1][0] == seen[-1][1]


def test_plan_json_has_the_documented_keys_and_is_strict() -> None:
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--rate", "3", "--prompt-tokens", "1000",
                                 "--output-tokens", "100", "--slo-ttft", "1", "--slo-tpot", "0.05", "--gpus", "H100,L4",
                                 "--tp", "1", "--max-num-seqs", "64", "--requests", "120", "--price", "H100=2",
                                 "--json"])
    assert r.exit_code == 0, r.output
    doc = _strict(r.stdout)
    assert {"options", "best", "reason"} <= set(doc)
    assert all(set(o) == OPTION_KEYS for o in doc["options"])
    assert set(doc["best"]) == OPTION_KEYS
    assert doc["best"]["gpu"] == "H100" and doc["best"]["cost_per_hour_usd"] == 2 * doc["best"]["gpus_total"]
    assert doc["details"][0]["price_source"] == "set by the user (now)"
    assert doc["efficiency"]["used"] == {"other accelerators": "defaults"}


def test_plan_with_no_option_gives_null_best_and_the_reason() -> None:
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-70b", "--rate", "1", "--prompt-tokens", "100",
                                 "--output-tokens", "10", "--slo-ttft", "1", "--gpus", "L4", "--tp", "1", "--json"])
    assert r.exit_code == 0, r.output
    doc = _strict(r.stdout)
    assert doc["best"] is None and "does not fit" in doc["reason"]


def test_plan_table_for_people() -> None:
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--rate", "3", "--prompt-tokens", "1000",
                                 "--output-tokens", "100", "--slo-ttft", "1", "--gpus", "H100", "--tp", "1",
                                 "--max-num-seqs", "64", "--requests", "120"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # rich wraps at the terminal width
    assert "best:" in text and "H100" in text and "not a hardware guarantee" in text


@pytest.mark.parametrize("args, message", [
    (["--model", "llama-3.1-8b", "--config", "x.json"], "give the model one way"),
    (["--model", "llama-3.1-8b", "--price", "H100"], "--price 'H100': expected GPU=USD_PER_HOUR"),
    (["--model", "llama-3.1-8b", "--gpus", "TPU"], "unknown GPU 'TPU'"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--model", "llama-3.1-8b", "--tp", "1,x"], "--tp '1,x'"),
    (["--model", "llama-3.1-8b", "--slo-target", "2"], "--slo-target 2: Input should be less than or equal to 1"),
])
def test_plan_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    import subprocess
    import sys

    from servebench.cli.core import main

    base = ["--rate", "1", "--prompt-tokens", "100", "--output-tokens", "10", "--slo-ttft", "1"]
    r = subprocess.run([sys.executable, "-m", "servebench", "plan", *args, *base], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and message in r.stderr, r.stderr
    assert main is not None


def test_plan_calibrated_on_this_cpu_says_which_factors_it_used(tmp_path: Path) -> None:
    from servebench.capacity import Efficiency
    from tests.test_roofline import _fake_run

    run, _ = _fake_run(tmp_path, Efficiency(bandwidth=0.3, compute=0.2, step_overhead_per_layer_s=0, half_batch_tokens=0))
    scenario = REPO / "sample_data" / "scenarios" / "tiny_cpu.yaml"
    r = CliRunner().invoke(app, ["plan", "--config", str(REPO / "sample_data" / "configs" / "llama-3.1-8b.json"),
                                 "--rate", "0.01", "--scenario", str(scenario), "--slo-ttft", "100",
                                 "--gpus", "CPU", "--calibrate", str(run), "--requests", "40",
                                 "--max-num-seqs", "8", "--json"])
    assert r.exit_code == 0, r.output
    doc = _strict(r.stdout)
    assert doc["efficiency"]["used"]["CPU"].startswith("calibrated from")
    assert doc["efficiency"]["calibration"]["efficiency"]["bandwidth"] == pytest.approx(0.3, rel=0.02)
    assert doc["details"][0]["efficiency_source"].startswith("calibrated from")
    assert doc["model"]["parameters"] == pytest.approx(8.03e9, rel=0.01)  # estimated from the config


def test_plan_document_is_strict_json() -> None:
    from servebench.output.strict_json import dumps

    evaluation, result = plan(_request(gpus=("L4",), slo=SLO(ttft_s=0.01)), rate_rps=1)
    assert _strict(dumps(plan_document(evaluation, result)))["best"] is None


def test_planner_page_ranks_options_and_reveals_the_guided_answer() -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/planner.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Capacity planner"
    at.number_input(key="plan_requests").set_value(60)
    at.multiselect(key="plan_gpus").set_value(["H100", "L40S"])
    at.button(key="plan_run").click().run()
    assert not at.exception and not at.error
    lead = at.success[0].value  # the answer in one sentence: replicas of a GPU, its cost per hour
    assert re.fullmatch(r"\*\*\d+ replicas? of (H100|L40S) ×\d, \$[\d,]+\.\d\d/h: \d+ GPUs? serve 10 requests/s "
                        r"within the SLOs \(\$[\d,.]+ per million output tokens\)\.\*\*", lead), lead
    # the options behind it, a Markdown table (a grid cut its long columns off at 1,400 px)
    frame = next(t for t in markdown_tables(m.value for m in at.markdown) if "limit" in t.columns)
    assert {"GPU", "$/hour", "$/M output tokens"} <= set(frame.columns)
    assert set(frame["GPU"]) <= {"H100", "L40S"} and set(frame["limit"]) <= LIMITS
    assert any(m.label == "GPUs in all" for m in at.metric)
    assert any(m.value.startswith("**How each capacity was found**") for m in at.markdown)
    assert not at.get("plotly_chart")  # Vega-Lite: a link straight to the planner never loads plotly.js
    (spec, data), = drawn_charts(at).values()
    assert spec["title"]["text"].startswith("Cost per hour against traffic")
    assert set(data["lines"]["series"]) <= {"H100", "L40S", "cheapest"} and "cheapest" in set(data["lines"]["series"])
    at.number_input(key="plan_quiz_guess").set_value(16)
    at.button(key="plan_quiz_reveal").click().run()
    assert not at.exception
    answer = next(s.value for s in at.success if "The planner's answer" in s.value)
    assert "H100s" in answer and ("off by" in answer or "within 25%" in answer)
    assert any("70.55B parameters x 2 bytes" in i.value for i in at.info)
