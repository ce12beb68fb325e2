"""The load generator against small FastAPI servers on free loopback ports."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from asgi_server import serve_in_background
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from faulty_server import FaultyServer, faulty_run
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import build_report
from servebench.errors import ConfigError
from servebench.load.client import LoadError, normalize_url, parse_sse_line
from servebench.load.generator import (
    HttpOutcome,
    LoadConfig,
    generator_stats,
    plan_requests,
    request_body,
    run_load_sync,
    to_record,
    to_send_row,
)
from servebench.records.schema import TimingRecord, parse_objects
from servebench.records.stream_chunks import chunk_parts
from servebench.records.table import STATUSES, validate


class FakeState:
    """What a fake server saw: request count, and streams the client walked away from."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.disconnects = 0
        self.bodies: list[dict] = []
        self.client_ports: set[int] = set()

    def next(self, body: dict, port: int | None = None) -> int:
        with self.lock:
            self.requests += 1
            self.bodies.append(body)
            if port is not None:
                self.client_ports.add(port)
            return self.requests


def fake_app(state: FakeState, token_delay_s: float = 0.0, reply: Callable[[int], int] = lambda n: 200,
             chunks_per_token: int = 1, linger_s: float = 0.0) -> FastAPI:
    """Return an OpenAI-like server: ``reply(n)`` picks the HTTP status of the n-th request.

    ``linger_s`` keeps a stream open that long after ``[DONE]`` (a comment line then ends it).
    """
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    async def handle(request: Request, chat: bool) -> object:
        body = await request.json()
        n = state.next(body, request.client.port if request.client else None)
        code = reply(n)
        if code != 200:
            return JSONResponse({"error": {"message": f"busy {n}", "code": code}}, status_code=code)
        out = int(body["max_tokens"])
        prompt = len(body["messages"][0]["content"].split()) if chat else len(body["prompt"].split())
        if not body.get("stream"):
            msg = {"message": {"role": "assistant", "content": " x" * out}} if chat else {"text": " x" * out}
            return {"choices": [{"index": 0, "finish_reason": "length", **msg}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}}

        async def events():
            try:
                for i in range(out):
                    if token_delay_s:
                        await asyncio.sleep(token_delay_s)
                    if (i + 1) % chunks_per_token and i != out - 1:
                        continue  # this token goes out with the next chunk
                    piece = " x" * (i % chunks_per_token + 1)
                    choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                    if i == out - 1:
                        choice["finish_reason"] = "length"
                    yield f"data: {json.dumps({'choices': [choice]})}\n\n"
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage = {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}
                    yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                yield "data: [DONE]\n\n"
                if linger_s:
                    await asyncio.sleep(linger_s)
                    yield ": bye\n\n"
            except (asyncio.CancelledError, GeneratorExit):
                with state.lock:
                    state.disconnects += 1
                raise

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> object:
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> object:
        return await handle(request, chat=True)

    return app


def make_plan(n: int, rate: float = 200.0, prompt_words: int = 5, out: int = 4, seed: int = 1):
    rng = np.random.default_rng(seed)
    times = np.arange(n) / rate
    return plan_requests(times, [prompt_words] * n, [out] * n, rng)


def table_of(outcomes: list[HttpOutcome]):
    rows = parse_objects([to_record(o) for o in outcomes], "load", strict_keys=True)
    starts = [o.intended_s for o in outcomes]
    ends = [o.end_s for o in outcomes]
    ws, we = min(starts), max(ends)
    return validate(rows, ws, we), ws, we


# --------------------------------------------------------------------------- pure parts


def test_parse_sse_line_kinds():
    assert parse_sse_line('data: {"choices": []}') == {"choices": []}
    assert parse_sse_line("data:[DONE]") == "done"
    assert parse_sse_line("") is None and parse_sse_line("event: x") is None and parse_sse_line(": ping") is None
    with pytest.raises(ValueError, match="malformed SSE data"):
        parse_sse_line("data: {nope")
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_sse_line("data: [1, 2]")


def test_chunk_parts_reads_completion_and_chat_chunks():
    assert chunk_parts({"choices": [{"text": " a"}]}) == (" a", "")
    assert chunk_parts({"choices": [{"delta": {"content": "b"}}]}) == ("b", "")
    assert chunk_parts({"choices": [{"delta": {"role": "assistant"}}]}) == ("", "")
    assert chunk_parts({"choices": [], "usage": {"completion_tokens": 3}}) == ("", "")
    assert chunk_parts({"choices": [{"delta": {"reasoning_content": "hm"}}]}) == ("", "hm")
    assert chunk_parts({"choices": [{"delta": {"reasoning": "hm", "content": None}}]}) == ("", "hm")
    assert chunk_parts({"choices": [{"message": {"reasoning": "r", "content": "c"}}]}) == ("c", "r")


def test_request_body_asks_for_usage_and_names_the_model():
    plan = make_plan(1, out=7)
    body = request_body(LoadConfig(url="http://127.0.0.1:1", api="chat"), "m", plan[0])
    assert body["model"] == "m" and body["max_tokens"] == 7 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and body["ignore_eos"] is True
    assert body["messages"][0]["content"] == plan[0].prompt
    plain = request_body(LoadConfig(url="http://127.0.0.1:1", stream=False, ignore_eos=False), "m", plan[0])
    assert "stream_options" not in plain and "ignore_eos" not in plain and plain["prompt"] == plan[0].prompt


def test_plan_requests_checks_lengths_and_order():
    rng = np.random.default_rng(0)
    plan = plan_requests([0.0, 0.5], [3, 4], [2, 2], rng, slices=["a", "b"])
    assert [p.request_id for p in plan] == ["req-000000", "req-000001"]
    assert len(plan[1].prompt.split()) == 4 and plan[1].slice == "b"
    with pytest.raises(ConfigError, match="sorted"):
        plan_requests([1.0, 0.5], [3, 3], [2, 2], rng)
    with pytest.raises(ConfigError, match="output length 0"):
        plan_requests([0.0], [3], [0], rng)
    with pytest.raises(ConfigError, match="2 arrival times but 1 prompt"):
        plan_requests([0.0, 1.0], [3], [2, 2], rng)


def test_plan_prompts_are_seeded():
    a = make_plan(3, seed=7)
    b = make_plan(3, seed=7)
    c = make_plan(3, seed=8)
    assert [p.prompt for p in a] == [p.prompt for p in b] != [p.prompt for p in c]


def test_normalize_url():
    assert normalize_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    with pytest.raises(ConfigError, match="must start with http"):
        normalize_url("127.0.0.1:8000")


@pytest.mark.parametrize("status", STATUSES)
def test_every_outcome_is_a_valid_canonical_record(status):
    o = HttpOutcome(request_id="r", intended_s=1.0, status=status, sent_s=1.01, end_s=2.0)
    if status == "success":
        o.first_token_s, o.output_tokens = 1.5, 3
    else:
        o.error = "why"
    rec = to_record(o)
    TimingRecord.model_validate(rec)
    assert rec["start"] == 1.0 and "sent_s" not in rec
    assert to_send_row(o)["lag_s"] == pytest.approx(0.01)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(STATUSES), min_size=1, max_size=40), st.integers(0, 5))
def test_generator_stats_conserve_counts(statuses, unsent):
    outs = [HttpOutcome(request_id=str(i), intended_s=float(i), status=s, sent_s=float(i) + 0.001 * (i % 3),
                    end_s=float(i) + 1) for i, s in enumerate(statuses)]
    stats = generator_stats(outs, "open", len(outs) + unsent, 8, 3, 0)
    assert stats.offered == len(outs) and stats.not_sent_duration_limit == unsent
    assert stats.completed + stats.failed + stats.timed_out + stats.cancelled + stats.rejected == stats.offered
    assert stats.accepted == stats.offered - stats.rejected
    assert stats.schedule_lag_s.n == len(outs) and stats.schedule_lag_s.max_s == pytest.approx(
        0.002 if len(outs) > 2 else 0.001 * (len(outs) - 1))


# --------------------------------------------------------------------------- against servers


def test_open_loop_against_a_streaming_server():
    state = FakeState()
    with serve_in_background(fake_app(state)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=10), make_plan(12, out=5))
    assert result.model == "fake-model"
    assert [o.status for o in result.outcomes] == ["success"] * 12
    for o in result.outcomes:
        assert o.output_tokens == 5 and o.output_tokens_source == "usage" and o.prompt_tokens == 5
        assert len(o.chunk_times_s) == 5 and o.token_level_chunks is True
        assert o.intended_s <= o.sent_s <= o.first_token_s == o.chunk_times_s[0] <= o.chunk_times_s[-1] <= o.end_s
    s = result.stats
    assert (s.offered, s.accepted, s.completed, s.rejected, s.sent) == (12, 12, 12, 0, 12)
    assert s.schedule_lag_s.n == 12 and s.schedule_lag_s.p50_s >= 0
    assert all(b["stream_options"] == {"include_usage": True} for b in state.bodies)
    table, ws, we = table_of(result.outcomes)
    report = build_report(table, ws, we)
    assert report.completed == 12 and report.summary["successes"] == 12


def test_chat_and_non_streaming_modes():
    state = FakeState()
    with serve_in_background(fake_app(state)) as url:
        chat = run_load_sync(LoadConfig(url=url + "/v1", api="chat"), make_plan(3, out=3))
        whole = run_load_sync(LoadConfig(url=url, stream=False, model="given"), make_plan(3, out=3))
    assert [o.status for o in chat.outcomes] == ["success"] * 3
    assert all(o.output_tokens == 3 and len(o.chunk_times_s) == 3 for o in chat.outcomes)
    assert [o.status for o in whole.outcomes] == ["success"] * 3 and whole.model == "given"
    assert all(o.first_token_s == o.end_s and o.chunk_times_s == [] for o in whole.outcomes)
    assert state.bodies[-1]["model"] == "given"


def test_chunks_that_carry_several_tokens_are_not_token_level():
    state = FakeState()
    with serve_in_background(fake_app(state, chunks_per_token=2)) as url:
        result = run_load_sync(LoadConfig(url=url), make_plan(2, out=4))
    assert all(o.status == "success" and o.output_tokens == 4 and len(o.chunk_times_s) == 2
               and o.token_level_chunks is False for o in result.outcomes)


def test_503_and_429_become_rejected_records_that_the_summary_counts():
    state = FakeState()
    reply = lambda n: 503 if n % 3 == 0 else (429 if n % 5 == 0 else 200)  # noqa: E731
    with serve_in_background(fake_app(state, reply=reply)) as url:
        result = run_load_sync(LoadConfig(url=url), make_plan(15))
    rejected = [o for o in result.outcomes if o.status == "rejected"]
    assert len(rejected) == 7  # n = 3, 6, 9, 12, 15 (503) and 5, 10 (429)
    assert {o.http_status for o in rejected} == {503, 429}
    assert all(o.error.startswith(("HTTP 503: busy", "HTTP 429: busy")) for o in rejected)
    assert result.stats.rejected == 7 and result.stats.accepted == 8 and result.stats.completed == 8
    table, ws, we = table_of(result.outcomes)
    report = build_report(table, ws, we)
    assert report.rejected == 7 and report.by_status["rejected"] == 7
    assert report.summary["non_success_fraction"] == pytest.approx(7 / 15)


def test_other_http_errors_are_failures_with_the_status():
    state = FakeState()
    with serve_in_background(fake_app(state, reply=lambda n: 500 if n == 2 else 200)) as url:
        result = run_load_sync(LoadConfig(url=url), make_plan(3))
    failed = [o for o in result.outcomes if o.status == "failed"]
    assert len(failed) == 1 and failed[0].error == "HTTP 500: busy 2" and failed[0].http_status == 500


def test_client_deadline_times_out_and_the_server_sees_the_disconnect():
    state = FakeState()
    with serve_in_background(fake_app(state, token_delay_s=0.1)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=0.35), make_plan(4, out=50))
        for _ in range(300):  # bounded wait for the server to notice the closed connections
            if state.disconnects >= 4:
                break
            time.sleep(0.01)
    assert [o.status for o in result.outcomes] == ["timeout"] * 4
    for o in result.outcomes:
        assert o.end_s - o.intended_s >= 0.35
        assert 1 <= o.output_tokens < 50 and o.output_tokens_source == "chunks"  # wasted work is kept
        assert o.error == "deadline 0.35 s passed while streaming"
    assert state.disconnects == 4
    assert result.stats.timed_out == 4


def test_duration_limit_cancels_in_flight_and_sends_no_later_arrival():
    state = FakeState()
    rng = np.random.default_rng(3)
    plan = plan_requests([0.0, 0.01, 5.0], [3] * 3, [40] * 3, rng)
    with serve_in_background(fake_app(state, token_delay_s=0.05)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=30, duration_s=0.3), plan)
    assert [o.status for o in result.outcomes] == ["cancelled"] * 2
    assert result.stats.offered == 2 and result.stats.not_sent_duration_limit == 1 and result.stats.planned == 3
    assert all("duration limit" in o.error for o in result.outcomes)


def test_schedule_lag_is_measured_when_generator_slots_run_out():
    state = FakeState()
    plan = plan_requests([0.0, 0.0, 0.0], [3] * 3, [4] * 3, np.random.default_rng(0))
    with serve_in_background(fake_app(state, token_delay_s=0.05)) as url:
        result = run_load_sync(LoadConfig(url=url, max_in_flight=1), plan)
    lags = sorted(o.lag_s for o in result.outcomes)
    assert all(o.status == "success" for o in result.outcomes)
    assert lags[1] >= 0.2 and lags[2] >= 0.4  # each waited for 4 tokens x 0.05 s per earlier request
    s = result.stats
    assert s.peak_in_flight == 1 and s.waited_for_slot == 2 and s.max_in_flight == 1
    assert s.schedule_lag_s.max_s == pytest.approx(lags[2]) and s.lag_warning is not None


def test_requests_that_never_reach_the_wire_are_warned_about_not_hidden_from_lag():
    plan = plan_requests([0.0, 0.0], [3] * 2, [10] * 2, np.random.default_rng(0))
    with serve_in_background(fake_app(FakeState(), token_delay_s=0.05)) as url:
        result = run_load_sync(LoadConfig(url=url, max_in_flight=1, deadline_s=0.2), plan)
    assert [o.status for o in result.outcomes] == ["timeout"] * 2
    assert sorted(o.sent_s is None for o in result.outcomes) == [False, True]
    s = result.stats
    assert s.sent == 1 and s.schedule_lag_s.n == 1
    assert "1 requests never reached the wire" in s.lag_warning


def test_an_answer_complete_at_done_stays_a_success_when_the_body_lingers_past_the_deadline():
    plan = plan_requests([0.0], [3], [4], np.random.default_rng(0))
    with serve_in_background(fake_app(FakeState(), linger_s=1.5)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=1.0), plan)
    (o,) = result.outcomes
    assert (o.status, o.output_tokens, o.error) == ("success", 4, None)
    assert o.end_s - o.intended_s < 1.0  # the end is [DONE], not the close of the body


def test_closed_loop_users_never_exceed_their_number():
    state = FakeState()
    with serve_in_background(fake_app(state, token_delay_s=0.01)) as url:
        result = run_load_sync(LoadConfig(url=url, users=2), make_plan(6, out=3))
    assert result.stats.mode == "closed" and result.stats.offered == 6 and result.stats.completed == 6
    assert result.stats.peak_in_flight <= 2
    assert len({o.request_id for o in result.outcomes}) == 6


def test_unreachable_server():
    with serve_in_background(FastAPI()) as url:
        pass  # the port is free again once the server stopped
    with pytest.raises(LoadError, match="cannot reach the server"):
        run_load_sync(LoadConfig(url=url), make_plan(1))
    result = run_load_sync(LoadConfig(url=url, model="m"), make_plan(2))
    assert [o.status for o in result.outcomes] == ["failed"] * 2
    assert all(o.error.startswith("ConnectError") and o.sent_s is not None for o in result.outcomes)


# --------------------------------------------------------------------------- the CLI


def test_load_command_writes_the_run_and_prints_the_summary(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    state = FakeState()
    out = tmp_path / "run"
    with serve_in_background(fake_app(state, reply=lambda n: 503 if n == 2 else 200)) as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "100", "--requests", "6", "-o", str(out),
                                     "--output-tokens", "3", "--prompt-tokens", "4", "--seed", "5", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["summary"]["requests"] == 6 and doc["rejected"] == 1 and doc["completed"] == 5
    assert doc["generator"]["offered"] == 6 and doc["generator"]["rejected"] == 1 and doc["model"] == "fake-model"
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["model"] == {"name": "fake-model", "source": "/v1/models"}
    assert meta["endpoint"]["url"] == url and meta["endpoint"]["path"] == "/v1/completions"
    assert meta["arrival_pattern"]["kind"] == "poisson" and meta["arrival_pattern"]["rate_rps"] == 100
    assert meta["seed"] == 5 and meta["deadline_s"] == 30 and meta["servebench_version"]
    assert meta["workload"]["classes"][0]["output"]["value"] == 3
    sends = [json.loads(line) for line in (out / "sends.jsonl").read_text().splitlines()]
    assert len(sends) == 6 and all(s["lag_s"] >= 0 for s in sends)
    from servebench.records.loaders import load_table
    table, _, _ = load_table(out / "records.jsonl")
    assert len(table) == 6 and sorted(table.prompt_tokens.tolist()) == [-1] + [4] * 5  # no usage on a 503
    from servebench.records.rundir import read_folder, read_sends
    folder = read_folder(out, require=("metadata", "sends"))  # the run folder every command reads
    assert folder.metadata == meta and read_sends(out) == sends and folder.steps is None


def test_load_command_closed_loop_and_errors(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app, main

    state = FakeState()
    with serve_in_background(fake_app(state)) as url:
        r = CliRunner().invoke(app, ["load", url, "--users", "2", "--requests", "4", "-o", str(tmp_path / "c"),
                                     "--output-tokens", "2"])
    assert r.exit_code == 0, r.output
    assert "Load generator (closed loop)" in r.output and "completed" in r.output
    meta = json.loads((tmp_path / "c" / "metadata.json").read_text())
    assert meta["arrival_pattern"]["kind"] == "closed_loop" and meta["arrival_pattern"]["users"] == 2
    with pytest.raises(SystemExit) as exc:
        main(["load", url, "-o", str(tmp_path / "x")])  # neither --rate nor --users
    assert exc.value.code == 2


def test_load_sweep_writes_the_simulator_sweep_format(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app
    from servebench.serving.sweep import CSV_SCALARS, SweepPoint, SweepResult

    state = FakeState()
    out = tmp_path / "sweep"
    with serve_in_background(fake_app(state, reply=lambda n: 503 if n > 8 and n % 2 else 200)) as url:
        r = CliRunner().invoke(app, ["load", url, "--sweep", "200,100", "--requests", "6", "-o", str(out),
                                     "--output-tokens", "2", "--slo-latency", "5", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "sweep.json").read_text())
    assert set(doc) == set(SweepResult.model_fields)
    assert [p["load"] for p in doc["points"]] == [100.0, 200.0] and doc["mode"] == "rate"
    for p in doc["points"]:
        assert set(p) == set(SweepPoint.model_fields) and p["offered"] == 6
        assert p["peak_active"] is None and p["max_kv_tokens_used"] is None  # not observable by a client
    first, second = doc["points"]
    assert first["completed"] == 6 and first["meets_slo"] is True and first["latency_s"]["p95"] > 0
    assert second["rejected"] == 2 and second["slo_attainment"] == pytest.approx(4 / 6)  # requests 9 and 11
    assert doc["capacity"]["load"] == 100.0 and doc["capacity"]["upper"] == 200.0
    header = (out / "sweep.csv").read_text().splitlines()[0].split(",")
    assert header[: len(CSV_SCALARS)] == list(CSV_SCALARS)
    assert (out / "rate_100" / "records.jsonl").is_file() and (out / "rate_200" / "metadata.json").is_file()


def test_measured_points_feed_the_sweep_figures():
    from servebench.analysis.summary import SLO
    from servebench.load.generator import measured_point
    from servebench.output.figures.sweep import latency_vs_load, outcomes_vs_load
    from servebench.serving.sweep import Capacity, SweepResult, knee

    def outs(load: float, slow: float) -> list[HttpOutcome]:
        return [HttpOutcome(request_id=f"{load}-{i}", intended_s=i / load, status="success", sent_s=i / load,
                        first_token_s=i / load + 0.1 * slow, end_s=i / load + slow, output_tokens=4)
                for i in range(10)]
    slo = SLO(latency_s=1.0)
    points = [measured_point(outs(1, 0.5), 1.0, slo, 0.95), measured_point(outs(4, 3.0), 4.0, slo, 0.95)]
    assert [p.meets_slo for p in points] == [True, False] and points[1].latency_s["p95"] == pytest.approx(3.0)
    assert points[0].offered_rps == pytest.approx(1.0) and points[0].tpot_s["p50"] == pytest.approx(0.15)
    result = SweepResult(
        scenario="measured", mode="rate", seed=0, requests_per_point=10, slo=slo, slo_target=0.95, points=points,
        capacity=Capacity(load=1.0, upper=4.0, evaluations=0, note="grid"), knee_load=knee(points),
        kv_budget_tokens=None)
    assert result.knee_load == 4.0
    # what a measured sweep writes, it reads back: server-side fields are None, not a fake 0
    again = SweepResult.model_validate_json(result.model_dump_json())
    assert again == result and again.points[0].peak_active is None
    assert len(latency_vs_load(result).data) > 0 and len(outcomes_vs_load(result).data) > 0


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signal_name, exit_code, workers, sent", [
    ("SIGINT", 130, 1, 1), ("SIGTERM", 143, 1, 1), ("SIGTERM", 143, 1, 2), ("SIGTERM", 143, 2, 1),
    ("SIGTERM", 143, 2, 2), ("SIGINT", 130, 2, 1)])
def test_a_stop_signal_keeps_every_outcome_gathered_and_marks_the_run_cut_short(tmp_path, signal_name, exit_code,
                                                                                 workers, sent):
    """Ctrl-C and SIGTERM alike, from one process or worker processes: finished requests, in-flight ones as
    cancelled records, metadata marked interrupted. A repeated SIGTERM does not cut the stopping short."""
    import os
    import signal
    import subprocess
    import sys

    from processes import stop

    state = FakeState()
    out = tmp_path / "run"
    # the first two are refused at once (finished outcomes); three long streams are on the wire when the signal comes
    app = fake_app(state, token_delay_s=0.05, reply=lambda n: 503 if n <= 2 else 200)
    with serve_in_background(app) as url:
        # Ctrl-C's default restored for the command: a suite started in the background (`./dev.sh test &`) runs with
        # SIGINT ignored, which the command inherits and rightly keeps, as a background job ignores the terminal's Ctrl-C
        proc = subprocess.Popen([sys.executable, "-m", "servebench", "load", url, "--rate", "20", "--arrival",
                                 "constant", "--requests", "5", "--output-tokens", "400", "-o", str(out),
                                 "--workers", str(workers)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "120"},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            for _ in range(1200):  # until every request is on the server (bounded: about 60 s)
                if state.requests >= 5 or proc.poll() is not None:
                    break
                time.sleep(0.05)
            time.sleep(0.3)  # a few tokens into each stream
            for _ in range(sent):
                proc.send_signal(getattr(signal, signal_name))  # as a shell's kill, to the command alone
            output = proc.communicate(timeout=30)[0].decode()
        finally:
            stop(proc)
    assert proc.returncode == exit_code, output
    assert f"interrupted ({signal_name})" in output and "wrote the 5 outcomes" in output
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in records) == ["cancelled"] * 3 + ["rejected"] * 2
    assert all(r["error"] == "the generator was stopped" and r["output_tokens"] >= 1
               for r in records if r["status"] == "cancelled")
    assert {r.get("worker") for r in records} == ({None} if workers == 1 else {0, 1})
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["interrupted"] is True and meta["interrupted_by"] == signal_name
    assert meta["generator"]["offered"] == 5 and meta["generator"]["cancelled"] == 3
    sends = [json.loads(line) for line in (out / "sends.jsonl").read_text().splitlines()]
    assert len(sends) == 5 and all(s["sent_s"] is not None for s in sends)


def test_one_user_reuses_one_connection():
    state = FakeState()
    with serve_in_background(fake_app(state)) as url:
        result = run_load_sync(LoadConfig(url=url, users=1), make_plan(4, out=3))
    assert result.stats.completed == 4
    assert len(state.client_ports) == 1  # each body is read past [DONE], so keep-alive works


def test_replay_sends_at_the_recorded_start_times(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    src = tmp_path / "old.jsonl"
    src.write_text("".join(json.dumps({"start": s, "end": s + 1, "status": "timeout"}) + "\n"
                           for s in (10.0, 10.05, 10.2)))
    state = FakeState()
    with serve_in_background(fake_app(state)) as url:
        r = CliRunner().invoke(app, ["load", url, "--replay", str(src), "--requests", "3", "-o", str(tmp_path / "r"),
                                     "--output-tokens", "2", "--json"])
    assert r.exit_code == 0, r.output
    sends = [json.loads(line) for line in (tmp_path / "r" / "sends.jsonl").read_text().splitlines()]
    assert [s["intended_s"] for s in sends] == pytest.approx([0.0, 0.05, 0.2])
    meta = json.loads((tmp_path / "r" / "metadata.json").read_text())
    assert meta["arrival_pattern"]["kind"] == "replay"


# --------------------------------------------------------------------------- a deliberately faulty server


@pytest.mark.parametrize("fault,status,cause", [
    ("error_event", "timeout", "error event: request ended with timeout: deadline_exceeded"),
    ("close", "failed", "RemoteProtocolError"),
    ("garbage", "failed", "malformed SSE data"),
])
def test_tokens_received_before_a_failure_are_wasted_output(fault, status, cause):
    result = faulty_run(fault, chunks=7)
    for o in result.outcomes:
        assert o.status == status and cause in o.error
        assert (o.output_tokens, o.output_tokens_source) == (7, "chunks")  # every chunk before the failure
        assert len(o.chunk_times_s) == 7 and o.first_token_s == o.chunk_times_s[0]
    table, ws, we = table_of(result.outcomes)
    report = build_report(table, ws, we)
    assert report.summary["successes"] == 0 and report.by_status[status] == 2
    assert table.output_tokens.tolist() == [7, 7]  # the records carry the wasted work


def test_tokens_received_before_a_client_timeout_or_a_duration_cancel_are_wasted_output():
    timed = faulty_run("stall", chunks=4, deadline_s=0.5)
    assert [(o.status, o.output_tokens) for o in timed.outcomes] == [("timeout", 4)] * 2
    assert all(o.error == "deadline 0.5 s passed while streaming" for o in timed.outcomes)
    cut = faulty_run("stall", chunks=3, deadline_s=30, duration_s=0.5)
    assert [(o.status, o.output_tokens) for o in cut.outcomes] == [("cancelled", 3)] * 2
    assert all("duration limit" in o.error for o in cut.outcomes)


def test_a_queue_full_503_and_a_504_deadline_get_the_shared_statuses():
    rejected = faulty_run("queue_full")
    assert [(o.status, o.http_status, o.output_tokens) for o in rejected.outcomes] == [("rejected", 503, None)] * 2
    assert rejected.outcomes[0].error == "HTTP 503: request rejected: queue_full"
    late = faulty_run("deadline_504", stream=False)
    assert [o.status for o in late.outcomes] == ["timeout"] * 2
    assert late.stats.rejected == 0 and late.stats.timed_out == 2


def test_an_impossible_usage_count_keeps_what_arrived_and_warns(tmp_path):
    result = faulty_run("lying_usage", chunks=6, out=20)  # usage says 1000 tokens for 6 chunks, max_tokens 20
    for o in result.outcomes:
        assert o.status == "success" and o.output_tokens == 6 and o.output_tokens_source == "chunks"
        assert o.reported_output_tokens == 1000 and "above max_tokens 20" in o.warning
    s = result.stats
    assert s.implausible_usage == 2
    assert any("2 replies reported more output tokens than can have arrived" in w for w in s.warnings)
    row = to_send_row(result.outcomes[0])
    assert row["reported_output_tokens"] == 1000 and row["output_tokens_source"] == "chunks"


@pytest.mark.parametrize("reported,max_tokens,text,expected", [
    (5, 20, " a b c d e", None),                 # plausible: kept
    (21, 20, " x" * 30, "above max_tokens 20"),
    (12, 20, "abc", "above the 3 bytes of text received + 1"),
    (4, 20, "abc", None),                        # 3 one-byte tokens and an end-of-sequence token
])
def test_usage_problem_bounds(reported, max_tokens, text, expected):
    from servebench.load.client import usage_problem
    assert usage_problem(reported, max_tokens, len(text.encode())) == expected


def test_an_impossible_usage_count_is_reported_by_the_cli(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    with FaultyServer("lying_usage", chunks=3) as url:
        r = CliRunner().invoke(app, ["load", url, "--model", "m", "--rate", "100", "--requests", "2",
                                     "--output-tokens", "8", "-o", str(tmp_path / "u")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "warning:" in r.output and "reported more output tokens than can have arrived" in r.output
    meta = json.loads((tmp_path / "u" / "metadata.json").read_text())
    assert meta["generator"]["implausible_usage"] == 2
    records = [json.loads(line) for line in (tmp_path / "u" / "records.jsonl").read_text().splitlines()]
    assert [r["output_tokens"] for r in records] == [3, 3]


def test_duration_cut_counts_the_requests_never_sent(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    out = tmp_path / "d"
    with serve_in_background(fake_app(FakeState())) as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "20", "--arrival", "constant", "--requests", "50",
                                     "--duration", "0.5", "--output-tokens", "2", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    gen = json.loads(r.output)["generator"]
    assert gen["planned"] == 50 and gen["offered"] == 10 and gen["not_sent_duration_limit"] == 40
    assert gen["offered"] + gen["not_sent_duration_limit"] == gen["planned"]  # conservation
    assert any("40 of 50 planned requests never sent" in w for w in gen["warnings"])
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["generator"]["planned"] == 50 and meta["generator"]["not_sent_duration_limit"] == 40
    assert len((out / "records.jsonl").read_text().splitlines()) == 10
    with serve_in_background(fake_app(FakeState())) as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "20", "--arrival", "constant", "--requests", "50",
                                     "--duration", "0.5", "--output-tokens", "2", "-o", str(tmp_path / "t")],
                               env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "40 of 50 planned requests never sent" in r.output


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 40), st.floats(0.05, 5.0), st.floats(1.0, 50.0))
def test_workload_plan_keeps_every_requested_arrival_under_a_duration(requests, duration_s, rate):
    from servebench.load.generator import workload_plan
    from servebench.serving.workload import ArrivalSpec, ClassSpec, LengthSpec, WorkloadSpec

    one = ClassSpec(prompt=LengthSpec(kind="fixed", value=3), output=LengthSpec(kind="fixed", value=2))
    spec = WorkloadSpec(arrival=ArrivalSpec(kind="poisson", rate_rps=rate), classes=[one], num_requests=requests,
                        duration_s=duration_s)
    plan = workload_plan(spec, np.random.default_rng(0))
    assert len(plan) == requests  # the duration ends the run; it does not shrink the plan
    offered = [HttpOutcome(request_id=p.request_id, intended_s=p.intended_s, status="cancelled", end_s=duration_s)
               for p in plan if p.intended_s < duration_s]
    stats = generator_stats(offered, "open", len(plan), 8, 0, 0, duration_s)
    assert stats.offered + stats.not_sent_duration_limit == stats.planned == requests
    assert (stats.not_sent_duration_limit > 0) == any("never sent" in w for w in stats.warnings)


def test_unsent_warning_names_what_stopped_the_run():
    from servebench.load.generator import unsent_warning

    assert unsent_warning(10, 10, 5.0) is None
    assert unsent_warning(100, 20, 5.0).startswith("stopped at the 5 s duration limit: 80 of 100 planned")
    assert unsent_warning(100, 20, 5.0, interrupted=True).startswith("stopped at the interruption: 80 of 100")


# --------------------------------------------------------------------------- clients that give up


def test_a_client_that_gives_up_closes_its_stream_and_its_record_is_cancelled():
    """The scenario's cancel: the client walks away mid-answer; the server sees the disconnect, the record keeps
    the tokens that arrived (wasted work) and ends when the client gave up."""
    state = FakeState()
    plan = plan_requests([0.0, 0.01, 0.02], [3] * 3, [40] * 3, np.random.default_rng(4),
                         cancel_after_s=np.array([0.3, np.nan, 0.25]))
    with serve_in_background(fake_app(state, token_delay_s=0.02)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=30), plan)
        for _ in range(300):  # bounded wait for the server to notice the closed connections
            if state.disconnects >= 2:
                break
            time.sleep(0.01)
    by_id = {o.request_id: o for o in result.outcomes}
    assert [by_id[r.request_id].status for r in plan] == ["cancelled", "success", "cancelled"]
    for req in (plan[0], plan[2]):
        o = by_id[req.request_id]
        assert o.error == f"the client gave up {req.cancel_after_s:.3g} s after the request's arrival"
        assert req.cancel_after_s <= o.end_s - o.intended_s < req.cancel_after_s + 0.2
        assert o.first_token_s is not None and 1 <= o.output_tokens < 40  # what arrived is kept as wasted work
    assert by_id[plan[1].request_id].output_tokens == 40
    assert state.disconnects == 2 and result.stats.cancelled == 2
    table, ws, we = table_of(result.outcomes)
    report = build_report(table, ws, we)
    assert report.by_status["cancelled"] == 2 and report.wasted_output_tokens > 0


def test_no_retry_starts_after_the_client_gave_up():
    from servebench.serving.retry import ClientSpec

    state = FakeState()
    plan = plan_requests([0.0], [3], [4], np.random.default_rng(5), cancel_after_s=np.array([0.5]))
    client = ClientSpec(max_attempts=50, backoff={"base_s": 0.2, "multiplier": 1.0, "jitter": "none"})
    with serve_in_background(fake_app(state, reply=lambda n: 503)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=30, client=client), plan)
    starts = [o.intended_s for o in result.outcomes]
    assert 2 <= len(starts) <= 3 and max(starts) < 0.5  # every 0.2 s until the client's 0.5 s are up, no later
    assert all(o.status == "rejected" for o in result.outcomes) and state.requests == len(starts)


def test_the_load_plan_cancels_what_the_simulator_cancels():
    """One workload draw for both clocks: a seed makes the same clients give up after the same waits."""
    from servebench.load.generator import workload_plan
    from servebench.serving.workload import CancelSpec, WorkloadSpec, draw_workload

    spec = WorkloadSpec.model_validate({"arrival": {"kind": "poisson", "rate_rps": 5}, "num_requests": 200,
                                        "classes": [{"prompt": {"value": 8}, "output": {"value": 4}}]})
    cancel = CancelSpec(probability=0.3, after_s=2.0)
    plan = workload_plan(spec, np.random.default_rng(9), cancel)
    drawn = draw_workload(spec, np.random.default_rng(9), cancel)
    waits = [np.nan if r.cancel_after_s is None else r.cancel_after_s for r in plan]
    np.testing.assert_array_equal(waits, drawn.cancel_after_s)
    assert 30 <= sum(r.cancel_after_s is not None for r in plan) <= 90
    assert [r.intended_s for r in plan] == drawn.requests.arrival_s.tolist()  # the arrivals are the same draw too
    assert all(r.cancel_after_s is None for r in workload_plan(spec, np.random.default_rng(9)))


def test_load_command_takes_its_cancellations_from_options_or_a_scenario(tmp_path, capsys):
    from typer.testing import CliRunner

    from servebench.cli.core import app, main

    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("name: s\nworkload:\n  classes:\n  - prompt: {value: 3}\n    output: {value: 40}\n"
                        "cancel: {probability: 1.0, after_s: 0.1}\n")
    state = FakeState()
    with serve_in_background(fake_app(state, token_delay_s=0.02)) as url:
        by_file = CliRunner().invoke(app, ["load", url, "--rate", "50", "--requests", "4", "-o", str(tmp_path / "f"),
                                           "--workload", str(scenario), "--json"])
        by_option = CliRunner().invoke(app, ["load", url, "--rate", "50", "--requests", "4", "-o",
                                             str(tmp_path / "o"), "--output-tokens", "40", "--cancel-share", "0",
                                             "--cancel-after", "0.1", "--json"])
        with pytest.raises(SystemExit) as half:
            main(["load", url, "--rate", "50", "--requests", "4", "-o", str(tmp_path / "h"), "--cancel-share", "0.5"])
    assert by_file.exit_code == 0, by_file.output
    assert json.loads(by_file.output)["by_status"]["cancelled"] == 4  # every client gives up, mean 0.1 s, at 0.8 s
    meta = json.loads((tmp_path / "f" / "metadata.json").read_text())
    assert meta["cancel"] == {"probability": 1.0, "after_s": 0.1}
    assert by_option.exit_code == 0, by_option.output
    assert json.loads(by_option.output)["completed"] == 4  # a share of 0: nobody gives up
    assert half.value.code == 2 and "--cancel-share and --cancel-after go together" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()  # refused before anything was sent
