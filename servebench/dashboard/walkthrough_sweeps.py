"""The guided A/B walk-through's last picture: each profile's scenario swept over load, around where its limit binds.

The walk-through (``servebench.analysis.walkthrough``) ends on the knee: "as the number in service approaches
how many requests the server can hold at once, waits rise sharply", and says at what rate each profile's limit
binds. Its last step shows that knee rather than pointing to the Load sweep page: the profile's shipped
scenario (``profile_a.yaml`` for profile A) is simulated at ``LOAD_FACTORS`` times the rate the diagnosis says
its limit binds at, with the Load sweep page's default SLO (TTFT within 5 s for 95% of requests). Two sweeps of
eight points of 300 requests take under a second of CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servebench.analysis.diagnosis import Verdict
from servebench.analysis.summary import SLO
from servebench.serving.scenario import Scenario, load_scenario
from servebench.serving.sweep import SweepResult, sweep

LOAD_FACTORS = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5)  # of the rate the limit binds at: the knee mid-chart
REQUESTS_PER_POINT = 300
SWEEP_SLO = SLO(ttft_s=5.0)  # the Load sweep page's default
SWEEP_SLO_TARGET = 0.95
PROFILE_SWEEP_NOTE = ("Each profile's scenario simulated at a quarter to one and a half times the rate the diagnosis "
                      f"says its limit binds at, {REQUESTS_PER_POINT} requests a load. The knee is the lowest load "
                      "whose p95 TTFT or latency is over twice the lowest load's: past it the queue grows while the "
                      "server holds all it can. The Load sweep page runs the same sweeps with any settings.")


@dataclass(frozen=True)
class ProfileSweep:
    """What to simulate for one profile: its scenario and the loads around the rate its limit binds at."""

    profile: str
    scenario: Scenario
    binds_at_rps: float
    loads: tuple[float, ...]


def sweep_loads(binds_at_rps: float) -> tuple[float, ...]:
    """Return the offered loads of a profile's sweep, to three significant digits.

    >>> sweep_loads(1.0856)
    (0.271, 0.543, 0.814, 0.977, 1.09, 1.19, 1.36, 1.63)
    """
    return tuple(float(f"{binds_at_rps * f:.3g}") for f in LOAD_FACTORS)


def profile_sweeps(verdicts: Sequence[Verdict], scenarios_dir: Path) -> list[ProfileSweep]:
    """Return the sweep of each profile that has a scenario (``profile_<name>.yaml``) and a rate its limit binds at."""
    out = []
    for v in verdicts:
        path = scenarios_dir / f"profile_{v.profile.lower()}.yaml"
        rate = v.first_to_bind.rate_per_s if v.first_to_bind is not None else None
        if path.is_file() and rate:
            out.append(ProfileSweep(v.profile, load_scenario(path), rate, sweep_loads(rate)))
    return out


def run_profile_sweep(plan: ProfileSweep) -> SweepResult:
    """Simulate one profile's sweep (the grid only: the knee is read off it)."""
    return sweep(plan.scenario, list(plan.loads), slo=SWEEP_SLO, slo_target=SWEEP_SLO_TARGET,
                 requests=REQUESTS_PER_POINT, search=False)
