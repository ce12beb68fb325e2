"""The load generator's retrying clients against a real local server: Retry-After, deadlines, one record per attempt."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import numpy as np
import pytest
from faulty_server import FaultyServer
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import build_report
from servebench.load.client import parse_retry_after
from servebench.load.generator import LoadConfig, LoadResult, plan_requests, records_table, run_load_sync, to_send_row
from servebench.serving.retry import ERR_CLIENT_DEADLINE, BackoffSpec, ClientSpec


class RetryAfterServer(FaultyServer):
    """Answer the first ``busy`` POSTs with 503 and ``Retry-After: retry_after``, then stream ``chunks`` tokens.

    ``partial`` makes each of the first ``busy`` answers stream that many tokens and drop the connection
    instead (a failure with wasted output). Every POST's arrival (``time.monotonic``) is kept in ``arrivals``.
    """

    def __init__(self, busy: int, retry_after: str | None = "0.2", chunks: int = 3, partial: int = 0) -> None:
        super().__init__("close", chunks=chunks)
        self.busy, self.retry_after, self.partial = busy, retry_after, partial
        self.arrivals: list[float] = []

    async def _answer(self, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        self.arrivals.append(time.monotonic())
        if len(self.arrivals) > self.busy:
            return await self._succeed(writer)
        if self.partial:
            self.fault, self.chunks = "close", self.partial
            return await super()._answer(path, body, writer)  # some tokens, then the connection drops
        payload = json.dumps({"error": {"message": "request rejected: queue_full", "code": "queue_full"}}).encode()
        header = "" if self.retry_after is None else f"Retry-After: {self.retry_after}\r\n"
        writer.write(f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n{header}"
                     f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()
        return True

    async def _succeed(self, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def chunk(text: str) -> bytes:
            data = text.encode()
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"
        for i in range(3):
            writer.write(chunk(f"data: {json.dumps({'choices': [{'index': 0, 'text': f' w{i}'}]})}\n\n"))
        usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}
        writer.write(chunk(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True


def retrying_run(server: RetryAfterServer, client: ClientSpec, n: int = 1, rate: float = 200.0,
                 **config: object) -> LoadResult:
    plan = plan_requests(np.arange(n) / rate, [5] * n, [20] * n, np.random.default_rng(1))
    with server as url:
        return run_load_sync(LoadConfig(url=url, model="m", client=client, **config), plan)  # type: ignore[arg-type]


def by_logical(result: LoadResult) -> dict[str, list]:
    groups: dict[str, list] = defaultdict(list)
    for o in result.outcomes:
        groups[o.logical_id].append(o)
    for rows in groups.values():
        rows.sort(key=lambda o: o.attempt)
    return groups


@pytest.mark.parametrize("retry_after_s, base_s", [(0.2, 0.0), (0.05, 0.25)])
def test_the_generator_waits_at_least_retry_after_and_at_least_its_backoff(retry_after_s: float, base_s: float):
    server = RetryAfterServer(busy=2, retry_after=f"{retry_after_s:g}")
    client = ClientSpec(max_attempts=3, backoff=BackoffSpec(base_s=base_s, jitter="none"))
    result = retrying_run(server, client)
    (attempts,) = by_logical(result).values()
    assert [o.status for o in attempts] == ["rejected", "rejected", "success"]
    assert [o.retry_after_s for o in attempts[:2]] == [retry_after_s] * 2
    wait_s = max(retry_after_s, base_s)  # the shortest of the two waits: the server's, or the first backoff
    for k, (a, b) in enumerate(zip(attempts, attempts[1:]), start=1):
        told_s = max(retry_after_s, base_s * 2 ** (k - 1))
        assert b.intended_s == pytest.approx(a.end_s + told_s)  # the record's start is when it was due
        assert b.sent_s is not None and b.sent_s >= b.intended_s  # and it was not sent earlier
    gaps = np.diff(server.arrivals)  # as the server saw them: never sooner than it asked
    assert len(gaps) == 2 and all(g >= wait_s - 1e-3 for g in gaps)
    assert result.stats.amplification == 3.0 and result.stats.logical_completed == 1


def test_conservation_per_logical_request_and_amplification():
    server = RetryAfterServer(busy=7, retry_after="0.01")
    client = ClientSpec(max_attempts=3, backoff=BackoffSpec(base_s=0.01, max_s=0.05))
    result = retrying_run(server, client, n=5, jitter_seed=3)
    groups = by_logical(result)
    stats = result.stats
    assert len(groups) == 5 and stats.logical_offered == 5 and stats.planned == 5 and stats.not_sent_duration_limit == 0
    assert len({o.request_id for o in result.outcomes}) == len(result.outcomes) == stats.offered == len(server.arrivals)
    assert sum(stats.model_dump()[k] for k in ("completed", "rejected", "failed", "timed_out", "cancelled")) \
        == stats.offered
    for rows in groups.values():
        assert [o.attempt for o in rows] == list(range(1, len(rows) + 1))
        assert all(o.status == "rejected" for o in rows[:-1])  # only a failure is retried
        assert rows[-1].status == "success" or len(rows) == 3  # ... until it succeeds or runs out of attempts
        for a, b in zip(rows, rows[1:]):
            assert b.intended_s >= a.end_s  # attempts of one request never overlap
    successes = sum(rows[-1].status == "success" for rows in groups.values())
    assert stats.logical_completed == successes == stats.completed
    assert stats.amplification == pytest.approx(len(result.outcomes) / 5) and stats.amplification > 1
    table, ws, we = records_table(result.outcomes)
    logical = build_report(table, ws, we).logical
    assert logical is not None and logical.logical_requests == 5 and logical.attempts == len(result.outcomes)
    assert logical.amplification == pytest.approx(stats.amplification)


def test_no_retry_past_the_deadline_and_exactly_one_attempt_without_retries():
    server = RetryAfterServer(busy=3, retry_after="0.5")
    result = retrying_run(server, ClientSpec(max_attempts=4, deadline_s=0.3), n=3)
    assert [o.attempt for o in result.outcomes] == [1, 1, 1]  # waiting as told would end past the deadline
    assert all(o.retry_at_s is None for o in result.outcomes) and result.stats.amplification == 1.0
    server = RetryAfterServer(busy=1, retry_after="0")
    result = retrying_run(server, ClientSpec(max_attempts=1), n=2)
    assert result.stats.amplification == 1.0 and [o.status for o in result.outcomes] == ["rejected", "success"]


def test_the_logical_deadline_cuts_a_live_attempt():
    server = FaultyServer("stall", chunks=2)
    plan = plan_requests([0.0], [5], [20], np.random.default_rng(1))
    with server as url:
        result = run_load_sync(LoadConfig(url=url, model="m", client=ClientSpec(max_attempts=3, deadline_s=0.2)), plan)
    (o,) = result.outcomes
    assert o.status == "timeout" and o.error == ERR_CLIENT_DEADLINE and o.retry_at_s is None
    assert o.output_tokens == 2  # what streamed before the cut stays as wasted output


def test_partial_output_is_wasted_and_never_joined_to_the_retry():
    server = RetryAfterServer(busy=1, partial=4)
    result = retrying_run(server, ClientSpec(max_attempts=2))
    first, second = by_logical(result)["req-000000"]
    assert first.status == "failed" and first.output_tokens == 4  # the dropped stream's tokens, wasted
    assert second.status == "success" and second.output_tokens == 3  # its own answer, not 4 + 3
    assert second.request_id != first.request_id and second.logical_id == first.logical_id == "req-000000"
    table, ws, we = records_table(result.outcomes)
    assert build_report(table, ws, we).logical.partial_then_retry == 1


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=86_400))
def test_retry_after_reads_seconds_and_http_dates(seconds: int):
    now = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    assert parse_retry_after(str(seconds), now) == seconds
    assert parse_retry_after(format_datetime(now + timedelta(seconds=seconds), usegmt=True), now) == seconds
    assert parse_retry_after(format_datetime(now - timedelta(seconds=seconds), usegmt=True), now) == 0.0
    assert parse_retry_after("-1") is None and parse_retry_after("tomorrow") is None


def test_load_command_retries_and_reports_amplification(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app, main

    out = tmp_path / "run"
    with RetryAfterServer(busy=2, retry_after="0.2") as url:  # both first attempts come before either retry
        r = CliRunner().invoke(app, ["load", url, "--rate", "100", "--arrival", "constant", "--requests", "2",
                                     "-o", str(out), "--model", "m",
                                     "--max-attempts", "3", "--backoff-base-s", "0.01", "--jitter", "none",
                                     "--retry-on", "rejected", "--deadline-s", "10", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    gen = doc["generator"]
    assert gen["logical_offered"] == 2 and gen["logical_completed"] == 2 and gen["offered"] == 4
    assert gen["amplification"] == 2.0 and doc["logical"]["amplification"] == 2.0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted((r["logical_id"], r["attempt"]) for r in records) == [
        ("req-000000", 1), ("req-000000", 2), ("req-000001", 1), ("req-000001", 2)]
    with pytest.raises(SystemExit) as exc:
        main(["load", url, "--rate", "1", "-o", str(tmp_path / "x"), "--max-attempts", "2", "--retry-on", "never"])
    assert exc.value.code == 2


# --------------------------------------------------------------------------- a server that asks for days


ABSURD_RETRY_AFTER = [  # (header, what the generator reads, whether the wait is capped)
    ("99999999", 99999999.0, True),
    ("9" * 5000, math.inf, True),  # beyond a float: longer than any wait
    ("Fri, 31 Dec 9999 23:59:59 GMT", None, True),  # an HTTP-date in the far future (read as seconds from now)
    ("-5", None, False),  # unusable: the backoff decides
    ("soon", None, False),
    ("1e400", None, False),  # not delta-seconds (digits only)
    ("Mon, 32 Jan 2020 99:00:00 GMT", None, False),  # a date no calendar holds
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("header, asked, capped", ABSURD_RETRY_AFTER, ids=[h[:20] for h, _, _ in ABSURD_RETRY_AFTER])
def test_a_retry_after_of_days_is_capped_and_the_run_finishes(header: str, asked: float | None, capped: bool):
    server = RetryAfterServer(busy=2, retry_after=header)
    client = ClientSpec(max_attempts=3, backoff=BackoffSpec(base_s=0.01, jitter="none"))
    started = time.monotonic()
    result = retrying_run(server, client, max_retry_wait_s=0.2)
    assert time.monotonic() - started < 20
    (attempts,) = by_logical(result).values()
    assert [o.status for o in attempts] == ["rejected", "rejected", "success"]
    first, second, last = attempts
    assert first.retry_after_text == header[:100]
    if asked is not None:
        assert first.retry_after_s == asked
    else:
        assert (first.retry_after_s is None) != capped  # the date reads as a huge number of seconds
    for k, (a, b) in enumerate(zip(attempts, attempts[1:]), start=1):
        waited_s = 0.2 if capped else 0.01 * 2 ** (k - 1)
        assert b.intended_s == pytest.approx(a.end_s + waited_s)
        assert a.retry_wait_capped is capped
    assert not last.retry_wait_capped and last.retry_at_s is None
    assert result.stats.retry_waits_capped == (2 if capped else 0)
    warned = [w for w in result.stats.warnings if "Retry-After" in w]
    assert bool(warned) is capped
    rows = [to_send_row(o) for o in attempts]
    json.dumps(rows, allow_nan=False)  # the sidecar stays strict JSON, infinity included
    assert rows[0]["retry_after"] == header[:100] and rows[0]["retry_wait_capped"] is capped


def test_the_cap_bounds_a_long_backoff_and_no_retry_outlives_the_deadline():
    server = RetryAfterServer(busy=5, retry_after="99999999")
    client = ClientSpec(max_attempts=5, deadline_s=0.5, backoff=BackoffSpec(base_s=100.0, jitter="none"))
    result = retrying_run(server, client, max_retry_wait_s=0.2)
    (attempts,) = by_logical(result).values()
    assert [a.attempt for a in attempts] == [1, 2, 3]  # at 0.2 s a wait, the fourth would start past 0.5 s
    assert all(b.intended_s == pytest.approx(a.end_s + 0.2) for a, b in zip(attempts, attempts[1:]))
    assert attempts[-1].retry_at_s is None and attempts[-1].intended_s < 0.5


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60) | st.from_regex(r"[0-9 .,:A-Za-z+-]{0,40}", fullmatch=True))
def test_any_retry_after_header_reads_as_a_wait_or_none(header: str):
    seconds = parse_retry_after(header)
    assert seconds is None or seconds >= 0  # never an exception, never a negative wait


@pytest.mark.timeout(60)
def test_load_command_caps_the_wait_and_says_so(tmp_path):
    from typer.main import get_command
    from typer.testing import CliRunner

    from servebench.cli.core import app
    from servebench.load.generator import MAX_RETRY_WAIT_S

    option = next(p for p in get_command(app).commands["load"].params if p.name == "max_retry_wait_s")
    assert option.default == MAX_RETRY_WAIT_S == 60.0
    out = tmp_path / "run"
    with RetryAfterServer(busy=2, retry_after="99999999") as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "100", "--requests", "1", "-o", str(out), "--model", "m",
                                     "--max-attempts", "3", "--max-retry-wait-s", "0.2", "--json"])
    assert r.exit_code == 0, r.output
    gen = json.loads(r.output)["generator"]
    assert gen["retry_waits_capped"] == 2 and gen["logical_completed"] == 1
    assert any("Retry-After" in w and "'99999999'" in w for w in gen["warnings"])
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["max_retry_wait_s"] == 0.2
    sends = [json.loads(line) for line in (out / "sends.jsonl").read_text().splitlines()]
    assert [s["retry_wait_capped"] for s in sends] == [True, True, False]
    r = CliRunner().invoke(app, ["load", url, "--rate", "1", "-o", str(tmp_path / "x"), "--max-retry-wait-s", "inf"])
    assert r.exit_code == 2 and "max-retry-wait-s" in r.output
