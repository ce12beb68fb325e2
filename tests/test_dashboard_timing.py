"""A timing run on its own thread (servebench.dashboard.timing): it reports progress, and a stop ends it early
with what ran kept: live requests cancelled as stopped_by_user, unsent ones never offered."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from servebench.dashboard.timing import BackgroundRun
from servebench.serving.engine.runner import ERR_STOPPED
from servebench.serving.scenario import load_scenario, with_request_count

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "sample_data" / "scenarios" / "tiny_cpu.yaml"


@pytest.mark.slow
def test_a_stopped_run_keeps_what_ran_and_says_it_was_stopped() -> None:
    scenario = with_request_count(load_scenario(TINY), 400)  # far more than ends before the stop
    job = BackgroundRun(scenario, model="tiny", device="cpu", threads=1, max_wall_s=120.0).start()
    deadline = time.monotonic() + 60
    while job.ended < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.ended >= 2 and not job.done
    job.stop()
    assert job.wait(30) and job.error is None and job.stopping
    meta, folder, records = job.result()
    rows = [json.loads(line) for line in records.decode().splitlines()]
    assert 2 <= len(rows) < 400  # what ran, no more
    assert len(rows) == meta["run"]["records"] == len(folder.records)
    stopped = [r for r in rows if r.get("error") == ERR_STOPPED]
    assert all(r["status"] == "cancelled" for r in stopped)
    assert any("stopped by the user after" in note for note in meta["run"]["notes"]), meta["run"]
    assert not job._folder.exists()  # the temporary folder went with the result


def test_a_run_that_cannot_start_reports_its_error_not_a_traceback() -> None:
    job = BackgroundRun(with_request_count(load_scenario(TINY), 2), model="no-such-model", device="cpu").start()
    assert job.wait(30) and job.meta is None
    assert "no-such-model" in str(job.error)
    job.discard()
