"""The retry-storm and tenant-fairness experiments: one overload under several client/server policies.

Every variant keeps the scenario's seed, workload, server and step model; only the client policy
(``client``), shedding (``server.admission``) or the scheduling rule changes, so the arrivals are
the same and the differences come from the policy alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from servebench.analysis.summary import SLO, Report, build_report
from servebench.records.table import RecordTable
from servebench.serving.retry import BackoffSpec, ClientSpec
from servebench.serving.scenario import Scenario, with_client, with_server
from servebench.serving.scheduler import AdmissionSpec
from servebench.serving.simulate import simulate

NO_RETRY = "no retry"
IMMEDIATE = "immediate retries"
BACKOFF_SHED = "backoff + shedding"


@dataclass(frozen=True)
class PolicyRun:
    """One variant: its label, scenario, records and report."""

    label: str
    scenario: Scenario
    records: RecordTable
    report: Report

    def row(self) -> dict[str, object]:
        """Return the numbers the comparison table shows for this variant."""
        r, lg = self.report, self.report.logical
        window_s = r.window_s
        good = r.slo.good_requests if r.slo is not None else r.completed
        return {
            "policy": self.label,
            "logical requests": lg.logical_requests if lg else r.offered,
            "attempts": lg.attempts if lg else r.offered,
            "amplification": lg.amplification if lg else 1.0,
            "logical success fraction": lg.success_fraction if lg else r.completed / r.offered,
            "goodput, req/s": good / window_s,
            "timed out": r.timed_out,
            "rejected": r.rejected,
            "wasted output tokens": r.wasted_output_tokens,
            "user latency p95, s": lg.user_latency_s.at(95) if lg else r.failure_aware_latency_s.at(95),
        }


def retry_policies(scenario: Scenario) -> dict[str, Scenario]:
    """Return the scenario under three policies: no retry; immediate retries; bounded backoff with shedding.

    The immediate policy keeps the scenario's ``client`` deadline and sends up to 4 attempts with no
    wait; backoff + shedding sends up to 3, waits 1 s doubling to at most 8 s (full jitter), and the
    server rejects what waited 2 s (or the scenario's own ``max_queue_wait_s``).
    """
    deadline = scenario.client.deadline_s if scenario.client is not None else None
    admission = scenario.server.admission
    wait = admission.max_queue_wait_s if admission and admission.max_queue_wait_s else 2.0
    plain = with_server(scenario, admission=None)
    shedding = with_server(scenario, admission=AdmissionSpec(max_queue_wait_s=wait))
    return {
        NO_RETRY: with_client(plain, ClientSpec(max_attempts=1, deadline_s=deadline)),
        IMMEDIATE: with_client(plain, ClientSpec(max_attempts=4, deadline_s=deadline, backoff=BackoffSpec(base_s=0.0))),
        BACKOFF_SHED: with_client(shedding, ClientSpec(
            max_attempts=3, deadline_s=deadline, backoff=BackoffSpec(base_s=1.0, multiplier=2.0, max_s=8.0))),
    }


def scheduling_variants(scenario: Scenario) -> dict[str, Scenario]:
    """Return the scenario under ``fcfs`` and ``fair`` scheduling (its tenants and limits as given)."""
    return {name: with_server(scenario, scheduling=name) for name in ("fcfs", "fair")}


def run_variants(variants: dict[str, Scenario], slo: SLO | None = None) -> list[PolicyRun]:
    """Simulate each variant (no token times: nothing here reads them) and report it."""
    out = []
    for label, sc in variants.items():
        result = simulate(sc, token_times=False)
        report = build_report(result.records, result.window_start_s, max(result.window_end_s, 1e-9), slo)
        out.append(PolicyRun(label, sc, result.records, report))
    return out
