"""Write sample_data/requests_sample.csv from the simulator, so every number in it hangs together.

The scenario is sample_data/scenarios/sample_day.yaml. After simulating, a seeded 2% of successes are
marked failed ("malformed JSON output": a fast wrong answer is not capacity) with their tokens kept as
wasted work, and request IDs and error causes are filled in. Run from the repo root:

    python scripts/make_sample_data.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servebench.records.loaders import write_records
from servebench.records.table import STATUSES, SUCCESS
from servebench.serving.scenario import load_scenario
from servebench.serving.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "sample_data" / "scenarios" / "sample_day.yaml"
OUT = ROOT / "sample_data" / "requests_sample.csv"
MALFORMED_SHARE = 0.02


def main() -> None:
    scenario = load_scenario(SCENARIO)
    table = simulate(scenario).records
    rng = np.random.default_rng(scenario.seed + 1)
    status = table.status.copy()
    error = table.error.copy()
    malformed = (status == SUCCESS) & (rng.random(len(table)) < MALFORMED_SHARE)
    status[malformed] = STATUSES.index("failed")
    error[malformed] = "malformed JSON output"
    first_token = np.where(malformed, np.nan, table.first_token)
    ids = np.array([f"req-{i:05d}" for i in range(len(table))], dtype=object)
    # microseconds are plenty; rounding is monotonic, so start <= admitted <= first_token <= end holds
    times = {name: np.round(getattr(table, name), 6) for name in ("start", "admitted", "end")}
    sample = table.with_columns(**times, first_token=np.round(first_token, 6), status=status, error=error,
                                request_id=ids, source=OUT.name)
    write_records(sample, OUT)
    counts = {name: int((status == i).sum()) for i, name in enumerate(STATUSES)}
    print(f"wrote {len(sample)} records to {OUT}: {counts}")


if __name__ == "__main__":
    main()
