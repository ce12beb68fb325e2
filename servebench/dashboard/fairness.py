"""Two scheduling rules on the same arrivals, tenant by tenant: what changes (who waits) and what cannot.

Without an objective every request of the two-tenant demo completes under both rules, so each
tenant's goodput share and Jain's index over goodput are the same (82 % / 18 %, 0.706): fair
scheduling changes who waits, not who is served. The comparison therefore leads with each tenant's
TTFT, and with a TTFT objective its goodput (requests within the objective) shows the difference too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from servebench.analysis.compare import difference
from servebench.analysis.summary import Report
from servebench.dashboard.wording import unit_scale
from servebench.formatting import fmt, fmt_share


@dataclass(frozen=True)
class TenantShift:
    """One tenant's numbers under the baseline rule and under the other (None where not measured)."""

    tenant: str
    ttft_p50_s: tuple[float | None, float | None]
    ttft_p95_s: tuple[float | None, float | None]
    slo_attainment: tuple[float | None, float | None]
    goodput_share: tuple[float | None, float | None]


def tenant_shifts(before: Report, after: Report) -> list[TenantShift]:
    """Return each tenant's shift from ``before`` to ``after`` (the tenants both reports' fairness sections name)."""
    if before.fairness is None or after.fairness is None:
        return []
    shifts = []
    for name, b in before.fairness.slices.items():
        a = after.fairness.slices.get(name)
        if a is None:
            continue
        p50 = tuple(r.slices[name].ttft_s.at(50) if name in r.slices else None for r in (before, after))
        shifts.append(TenantShift(name, p50, (b.ttft_p95_s, a.ttft_p95_s),  # type: ignore[arg-type]
                                  (b.slo_attainment, a.slo_attainment), (b.goodput_share, a.goodput_share)))
    return shifts


def _scaled(pair: tuple[float | None, float | None], scale: float) -> tuple[float | None, float | None]:
    return tuple(None if v is None else v * scale for v in pair)  # type: ignore[return-value]


def shift_table(shifts: list[TenantShift], labels: tuple[str, str], unit: str = "s") -> pd.DataFrame:
    """Return a row per tenant and measure (TTFT p95 and p50 in ``unit``, ms or s; share within the objective, goodput
    share): its value under each rule and the change (narrow enough for a 1,400 px page)."""
    first, second = labels
    scale = unit_scale(unit)
    rows = []
    for s in shifts:
        for measure, (a, b), share in ((f"TTFT p95 ({unit})", _scaled(s.ttft_p95_s, scale), False),
                                       (f"TTFT p50 ({unit})", _scaled(s.ttft_p50_s, scale), False),
                                       ("within the TTFT objective", s.slo_attainment, True),
                                       ("goodput share", s.goodput_share, True)):
            rows.append({"tenant": s.tenant, "measure": measure, first: fmt_share(a) if share else fmt(a),
                         second: fmt_share(b) if share else fmt(b), "change": difference(a, b, share=share)})
    return pd.DataFrame(rows)


def _same(a: float | None, b: float | None) -> bool:
    """Return whether two shares are equal but for float rounding (or both missing)."""
    return a == b or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))


def _ratio_text(before: float | None, after: float | None) -> str:
    return "" if before is None or after is None or not before else f" ({(after - before) / before:+.0%})"


def shift_headline(shifts: list[TenantShift], labels: tuple[str, str], jain: tuple[float | None, float | None],
                   ttft_objective_s: float | None, unit: str = "s") -> str:
    """Say in a sentence or two what the second rule changes, tenant by tenant, and what stays (times in ``unit``).

    The tenant whose TTFT p95 falls most leads; goodput share and Jain's index follow, said to be
    equal when they are (every request completes: the rule moves waiting, not service).
    """
    scale = unit_scale(unit)
    if not shifts:
        return "The runs have no tenants to compare."
    first, second = labels

    def fall(s: TenantShift) -> float:
        b, a = s.ttft_p95_s
        return (b - a) if b is not None and a is not None else float("-inf")

    ordered = sorted(shifts, key=fall, reverse=True)
    parts = [f"{s.tenant}'s TTFT p95 goes from {fmt(_scaled(s.ttft_p95_s, scale)[0])} {unit} to "
             f"{fmt(_scaled(s.ttft_p95_s, scale)[1])} {unit}"
             f"{_ratio_text(*s.ttft_p95_s)}" for s in ordered]
    text = f"Under {second} instead of {first}, " + ", and ".join(parts) + "."
    shares_same = all(_same(*s.goodput_share) for s in shifts) and _same(*jain)
    if ttft_objective_s is None:
        if shares_same:
            text += (f" Every request completes under both rules, so each tenant's goodput share and Jain's index "
                     f"({fmt(jain[0], 3)}) are the same: fair scheduling changes who waits, not who is served. Set "
                     "a TTFT objective to count only requests served in time.")
        return text
    within = "; ".join(f"{s.tenant} {fmt_share(s.slo_attainment[0])} to {fmt_share(s.slo_attainment[1])}"
                       for s in ordered)
    return (text + f" Within the {fmt(ttft_objective_s * scale)} {unit} TTFT objective: {within}; Jain's index over goodput "
            f"goes from {fmt(jain[0], 3)} to {fmt(jain[1], 3)} (1 = served in proportion to weight).")
