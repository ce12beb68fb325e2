"""Shared fixtures: the spec's R1 to R4 records and small named record sets."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # so tests can `import browser`
# every test runs the Python it reads, not a compiled build of it (servebench.serving.native; child processes inherit
# this); tests/test_native.py compares the two
os.environ["SERVEBENCH_NATIVE"] = "0"

REPO = Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO / "sample_data"


@pytest.fixture
def r1_r4() -> list[dict]:
    """The spec's fixture, summarized over the window 0 to 10 s."""
    return [
        {"start": 0, "first_token": 0.5, "end": 2.5, "status": "success", "output_tokens": 9},
        {"start": 1, "first_token": 1.25, "end": 1.25, "status": "success", "output_tokens": 1},
        {"start": 2, "end": 7, "status": "timeout"},
        {"start": 3, "end": 3, "status": "rejected"},
    ]


@pytest.fixture(scope="session")
def saturated_sweep():
    """Profile B past saturation: timeouts from 1.5 req/s, so failure-aware p95 latency is infinite there."""
    from servebench.analysis.summary import SLO
    from servebench.serving.scenario import load_scenario
    from servebench.serving.sweep import sweep

    return sweep(load_scenario(SAMPLE_DATA / "scenarios" / "profile_b.yaml"), [0.5, 1, 1.5, 3], slo=SLO(ttft_s=5),
                 requests=120, search=True)


def two_slot_scenario(name: str, seed: int, num_requests: int):
    """Two slots, 1-second requests: capacity near 2 req/s; few requests, so a point takes milliseconds."""
    from servebench.serving.scenario import parse_scenario

    return parse_scenario({
        "name": name, "seed": seed,
        "server": {"kv_budget_tokens": 240, "timeout_s": 10},
        "step_model": {"base_s": 0.05},
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 1}, "num_requests": num_requests,
                     "classes": [{"prompt": {"value": 100}, "output": {"value": 20}}]},
    })


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run a command as the console script does (one-line errors, exit 2); return its exit code, stdout, stderr."""
    from servebench.cli.core import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@contextmanager
def openai_client(server_url: str) -> Iterator[Any]:
    """The openai client of a local server: no retries, a minute's timeout, no proxy from the environment."""
    import httpx
    import openai
    c = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0, timeout=60,
                      http_client=httpx.Client(trust_env=False))
    try:
        yield c
    finally:
        c.close()


def burstgpt_csv(path: Path, rows: list[tuple[float, str, int, int]]) -> Path:
    """Write a BurstGPT-format trace: (timestamp s, model, request tokens, response tokens) a row (0: failed)."""
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    lines += [f"{t:g},{model},{req},{resp},{req + resp},Conversation log" for t, model, req, resp in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test engine, server, process or app by what it starts, and the measured SLOW ones slow (tests/tiers.py)."""
    from tiers import SLOW, tiers_of

    for item in items:
        func = getattr(item, "function", None)
        if func is None:  # a doctest
            continue
        if item.nodeid.split("[")[0] in SLOW:
            item.add_marker("slow")
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        fixtures = [d.func for name in getattr(item, "fixturenames", ()) for d in defs.get(name, ())]
        for tier in sorted(tiers_of(func, fixtures)):
            item.add_marker(tier)
