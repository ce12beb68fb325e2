"""The sender process keeps the open-loop schedule whatever the generator's parsing does; warm-up; TTFT both ways."""

from __future__ import annotations

import json
import time

import h11
import numpy as np
import pytest
from asgi_server import serve_in_background
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from test_loadgen import FakeState, fake_app, make_plan

from servebench.load import client as client_module
from servebench.load import handoff as handoff_module
from servebench.load import sender as wire
from servebench.load.generator import (
    LoadConfig,
    plan_requests,
    run_load_sync,
    sender_plan,
    uses_sender,
)

BLOCK_S = 2.0  # how long the first answer's parsing holds the generator's event loop


def blocking_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the first answer's parsing hold the generator's event loop (a synchronous sleep) for BLOCK_S."""
    real = client_module.read_answer
    blocked = []

    async def slow(resp, out, now, stream):  # type: ignore[no-untyped-def]
        if not blocked:
            blocked.append(True)
            time.sleep(BLOCK_S)  # noqa: ASYNC251  (on purpose: nothing else runs in this process's loop meanwhile)
        await real(resp, out, now, stream)
    monkeypatch.setattr(client_module, "read_answer", slow)
    monkeypatch.setattr(handoff_module, "read_answer", slow)


@pytest.mark.parametrize("sender", ["process", "loop"])
def test_sends_never_wait_on_stream_parsing(monkeypatch, sender):
    """While parsing holds the generator's loop for 2 s, the sender process still sends at the intended times.

    The plan's last request is due at 0.6 s, well inside the block, so with the sender process every send is
    stamped before the loop is free again (a bound of 1.2 s, not a timing measurement); the event loop itself
    (``--sender loop``) sends those due after the first answer only after the block, which shows the test can fail.
    """
    blocking_parser(monkeypatch)
    plan = plan_requests([0.0, 0.3, 0.4, 0.5, 0.6], [3] * 5, [4] * 5, np.random.default_rng(0))
    with serve_in_background(fake_app(FakeState())) as url:
        result = run_load_sync(LoadConfig(url=url, sender=sender, deadline_s=10), plan)
    assert [o.status for o in result.outcomes] == ["success"] * 5
    assert result.stats.sender == sender
    late = [o.request_id for o in result.outcomes if o.sent_s > 1.2]
    if sender == "process":
        assert late == []  # every request went out while the parser held the loop
        # the generator's stall shows in TTFT from the intended send, not in the send lag
        assert result.stats.schedule_lag_s.max_s < 0.6
        assert result.stats.ttft.from_intended_s.p99_s > BLOCK_S - 0.5
    else:
        ids = [o.request_id for o in result.outcomes]
        assert late and late == ids[-len(late):]  # those due after the first answer arrived waited for the block


def test_the_sender_reuses_connections_the_server_keeps_alive():
    state = FakeState()
    with serve_in_background(fake_app(state)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=10), make_plan(30, rate=60.0))
    assert [o.status for o in result.outcomes] == ["success"] * 30 and result.stats.sender == "process"
    assert len(state.client_ports) < 30  # handed back after each answer, written on again


def test_the_sender_keeps_the_connection_limit():
    """With one connection and a slow stream, later requests wait for it, and one past its deadline is never sent."""
    state = FakeState()
    plan = plan_requests([0.0, 0.0, 0.0], [3] * 3, [4] * 3, np.random.default_rng(0))
    with serve_in_background(fake_app(state, token_delay_s=0.05)) as url:
        result = run_load_sync(LoadConfig(url=url, max_in_flight=1, deadline_s=0.5), plan)
    sent = sorted(o.sent_s for o in result.outcomes if o.sent_s is not None)
    assert result.stats.peak_in_flight == 1 and result.stats.waited_for_slot == 2
    assert len(sent) >= 2 and sent[1] - sent[0] >= 0.2  # the second went when the first's 4 x 50 ms stream ended
    unsent = [o for o in result.outcomes if o.sent_s is None]
    assert all(o.status == "timeout" and "waiting for a generator connection slot" in o.error for o in unsent)


def test_which_runs_use_the_sender():
    from servebench.serving.retry import ClientSpec

    assert uses_sender(LoadConfig(url="http://127.0.0.1:1"))
    assert not uses_sender(LoadConfig(url="https://example.test"))  # a TLS session cannot move between processes
    assert not uses_sender(LoadConfig(url="http://127.0.0.1:1", users=2))
    assert not uses_sender(LoadConfig(url="http://127.0.0.1:1", client=ClientSpec(max_attempts=2)))
    assert not uses_sender(LoadConfig(url="http://127.0.0.1:1", sender="loop"))


def test_the_sender_plan_stops_at_the_duration_limit_and_gives_up_at_each_limit():
    plan = plan_requests([0.0, 0.2, 0.49999999999999994, 0.7], [2] * 4, [2] * 4, np.random.default_rng(0),
                         deadline_s=[None, 0.1, None, None], cancel_after_s=[0.05, np.nan, np.nan, np.nan])
    items = list(sender_plan(LoadConfig(url="http://h:1", deadline_s=3, duration_s=0.5), "m", plan, {}))
    assert [(i, due, give_up) for i, due, give_up, _ in items] == [(0, 0.0, 0.05), (1, 0.2, pytest.approx(0.3))]
    body = items[0][3].split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["model"] == "m" and items[0][3].startswith(b"POST /v1/completions HTTP/1.1\r\n")


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e6), st.binary(max_size=300)),
                max_size=20))
def test_the_plan_file_reads_back_what_was_written(tmp_path_factory, items):
    path = str(tmp_path_factory.mktemp("plan") / "plan.bin")
    rows = [(k, due, give_up, payload) for k, (due, give_up, payload) in enumerate(items)]
    wire.write_plan(path, iter(rows))
    assert list(wire.read_plan(path)) == rows


def test_a_request_the_sender_writes_is_one_a_server_reads():
    raw = handoff_module.request_bytes("http://127.0.0.1:9/v1/chat/completions", b'{"a": 1}',
                                       {"Authorization": "Bearer k"})
    server = h11.Connection(h11.SERVER)
    server.receive_data(raw)
    req, data, end = server.next_event(), server.next_event(), server.next_event()
    assert (req.method, req.target) == (b"POST", b"/v1/chat/completions")
    assert dict(req.headers)[b"authorization"] == b"Bearer k" and dict(req.headers)[b"host"] == b"127.0.0.1:9"
    assert data.data == b'{"a": 1}' and isinstance(end, h11.EndOfMessage)


def test_warmup_requests_are_sent_first_and_never_records(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    state = FakeState()
    out = tmp_path / "w"
    with serve_in_background(fake_app(state)) as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "50", "--requests", "4", "--warmup-requests", "3",
                                     "--output-tokens", "2", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    gen = json.loads(r.output)["generator"]
    assert state.requests == 7 and gen["offered"] == 4  # 3 untimed, then the 4 planned
    assert gen["warmup"]["requests"] == 3 and gen["warmup"]["succeeded"] == 3
    assert not any(w.startswith("warm-up") for w in gen["warnings"])
    assert len((out / "records.jsonl").read_text().splitlines()) == 4
    assert gen["ttft"]["from_intended_s"]["n"] == 4 and gen["sender"] == "process"


def test_a_warmup_that_fails_is_a_warning_not_an_error(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    state = FakeState()
    with serve_in_background(fake_app(state, reply=lambda n: 503 if n == 1 else 200)) as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "50", "--requests", "2", "--warmup-requests", "2",
                                     "--output-tokens", "2", "-o", str(tmp_path / "w"), "--json"])
    assert r.exit_code == 0, r.output
    gen = json.loads(r.output)["generator"]
    assert gen["warmup"]["succeeded"] == 1 and gen["offered"] == 2 and gen["completed"] == 2
    assert any(w.startswith("warm-up: 1 of 2 untimed requests did not succeed (first: HTTP 503") for w in gen["warnings"])


def test_the_sender_option_is_checked(tmp_path, capsys):
    code, _, err = run_cli(capsys, "load", "http://127.0.0.1:9", "--rate", "1", "--sender", "thread",
                           "-o", str(tmp_path / "x"))
    assert code == 2 and "--sender 'thread': expected process or loop" in err and "Traceback" not in err


def test_workers_warm_up_once_from_the_coordinator(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    state = FakeState()
    with serve_in_background(fake_app(state)) as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "50", "--requests", "4", "--workers", "2",
                                     "--warmup-requests", "3", "--output-tokens", "2", "-o", str(tmp_path / "w"),
                                     "--json"])
    assert r.exit_code == 0, r.output
    gen = json.loads(r.output)["generator"]
    assert state.requests == 7 and gen["offered"] == 4 and gen["warmup"]["succeeded"] == 3


def test_the_table_shows_ttft_both_ways_beside_the_lag(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli.core import app

    with serve_in_background(fake_app(FakeState())) as url:
        r = CliRunner().invoke(app, ["load", url, "--rate", "50", "--requests", "3", "--output-tokens", "2",
                                     "--no-server-metrics", "-o", str(tmp_path / "t")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    lag = next(i for i, line in enumerate(lines) if "schedule lag p50 / p99 / max" in line)
    assert "schedule kept by" in lines[lag + 1] and "sender process" in lines[lag + 1]
    assert "TTFT from the intended send p50 / p95 / p99" in lines[lag + 2]
    assert "TTFT from the actual send p50 / p95 / p99" in lines[lag + 3]
    meta = json.loads((tmp_path / "t" / "metadata.json").read_text())
    ttft = meta["generator"]["ttft"]
    assert ttft["from_intended_s"]["n"] == ttft["from_sent_s"]["n"] == 3
    assert ttft["from_sent_s"]["p99_s"] <= ttft["from_intended_s"]["p99_s"]  # sent at or after the intended time
