"""Comparing record sets (contract, outcomes, CI overlap) and exports with several runs."""

from __future__ import annotations

import copy
import json

from conftest import REPO, SAMPLE_DATA

from servebench.analysis.compare import contract_table, outcome_table, overlap_table
from servebench.analysis.multirun import runs_table
from servebench.analysis.summary import build_report
from servebench.records.loaders import load_table


def _report(name: str):
    table, ws, we = load_table(SAMPLE_DATA / name)
    return build_report(table, ws, we)


def test_contract_side_by_side_with_differences_and_outcomes_that_add_up() -> None:
    reports = {"sample": _report("requests_sample.csv"), "r1_r4": _report("r1_r4.json")}
    t = contract_table(reports).set_index("field")
    assert t.loc["Requests", "sample"] == "3,000" and t.loc["Requests", "r1_r4"] == "4"
    assert t.loc["Successes", "Δ r1_r4"] == "-2,699 (-100%)"
    o = outcome_table(reports).set_index("run")
    assert (o[["Completed", "Failed", "Timed out", "Cancelled", "Rejected"]].sum(axis=1) == o["Offered"]).all()
    hints = overlap_table(reports)
    assert len(hints) == 9 and set(hints["run"]) == {"r1_r4"}


def test_a_run_against_itself_overlaps_everywhere() -> None:
    r = _report("requests_sample.csv")
    hints = overlap_table({"a": r, "b": r})
    assert set(hints["95% intervals"]) == {"intervals overlap: may be noise"}
    assert set(hints["change"]) == {"same"}


def test_export_with_several_benchmarks_is_one_row_per_run(tmp_path) -> None:
    doc = json.loads((REPO / "tests" / "data" / "importers" / "guidellm-0.8.1-errors.json").read_text())
    second = copy.deepcopy(doc["benchmarks"][0])
    second["config"]["strategy"]["rate"] = 8.0
    doc["benchmarks"].append(second)
    frame = runs_table(json.dumps(doc).encode(), "two.json")
    assert list(frame["rate (req/s)"]) == [4.0, 8.0]
    assert frame["run"].tolist() == ["run 0: constant at 4 req/s", "run 1: constant at 8 req/s"]
    assert (frame["requests"] == 41).all()  # its rate curve: test_figures_vegalite_summary.py


def test_shares_read_as_percents_as_on_summary() -> None:
    """Compare showed the non-success fraction as 0.09967 where Summary says 9.97%."""
    reports = {"sample": _report("requests_sample.csv"), "r1_r4": _report("r1_r4.json")}
    t = contract_table(reports).set_index("field")
    assert t.loc["Non-success fraction", "sample"] == "9.97%" and t.loc["Non-success fraction", "r1_r4"] == "50%"
    assert t.loc["Non-success fraction", "Δ r1_r4"] == "+40 pp (+402%)"
    o = outcome_table(reports).set_index("run")
    assert o.loc["sample", "Non-success"] == "9.97%"


def _with_latency_p95(report, value: float):
    """Return ``report`` with its latency p95 replaced (and its interval open), as a failure-aware p95 can be."""
    dist = report.latency_s
    pcts = [p.model_copy(update={"value": value, "ci_low": None, "ci_high": None}) if p.q == 95 else p
            for p in dist.percentiles]
    return report.model_copy(update={"latency_s": dist.model_copy(update={"percentiles": pcts})})


def test_an_infinite_or_undefined_value_reads_as_the_one_formatter_writes_it() -> None:
    """Compare's own formatter printed 'inf', '+inf (+inf%)' and 'nan'; fmt writes '∞' and '—'."""
    base = _report("requests_sample.csv")
    reports = {"base": base, "inf": _with_latency_p95(base, float("inf")), "nan": _with_latency_p95(base, float("nan"))}
    rows = overlap_table(reports)
    p95 = rows[rows["metric"] == "Latency p95"].set_index("run")
    assert p95.loc["inf", "this run (s)"] == "∞" and p95.loc["inf", "change"] == "+∞"
    assert p95.loc["nan", "this run (s)"] == "—" and p95.loc["nan", "change"] == "—"
    assert not rows.drop(columns=["metric", "run", "95% intervals"]).map(
        lambda text: "inf" in text or "nan" in text).any().any()
