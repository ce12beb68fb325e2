"""Experiments that compare two server configurations on the same workload, seed and arrivals."""

from __future__ import annotations

from dataclasses import dataclass

from servebench.analysis.summary import Report, build_report
from servebench.records.table import RecordTable
from servebench.serving.scenario import Scenario, with_server
from servebench.serving.simulate import simulate


@dataclass(frozen=True)
class PrefillSide:
    """One side of the chunked-vs-whole prefill comparison: its scenario, its records and their report."""

    label: str
    scenario: Scenario
    records: RecordTable
    report: Report


def prefill_variants(scenario: Scenario) -> tuple[Scenario, Scenario]:
    """Return the scenario with chunked prefill (as given, or a 512-token step budget) and with whole prompts.

    The whole-prompt twin has no per-step token budget either, so a long prompt is computed in one
    step; everything else (seed, workload, KV, step model) is the same.
    """
    budget = scenario.server.max_num_batched_tokens or 512
    chunked = with_server(scenario, chunked_prefill=True, max_num_batched_tokens=budget)
    whole = with_server(scenario, chunked_prefill=False, max_num_batched_tokens=None)
    return chunked, whole


def compare_prefill(scenario: Scenario) -> tuple[PrefillSide, PrefillSide]:
    """Simulate both prefill variants of ``scenario`` (same seed) and report each: (chunked, whole)."""
    sides = []
    for label, variant in zip(("chunked prefill", "whole-prompt prefill"), prefill_variants(scenario)):
        result = simulate(variant)
        sides.append(PrefillSide(label, variant, result.records,
                                 build_report(result.records, result.window_start_s, result.window_end_s)))
    return sides[0], sides[1]
