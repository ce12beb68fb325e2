"""``servebench load --trace``: a trace's requests at their times, with their lengths and shared blocks' text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE_DATA, burstgpt_csv, run_cli

from servebench.analysis.summary import build_report
from servebench.analysis.trace_stats import prefix_stats
from servebench.load.generator import workload_plan
from servebench.records.loaders import load_table
from servebench.records.traces import read_trace
from servebench.serving.scenario import parse_scenario
from servebench.serving.scheduler import SchedulerConfig
from servebench.serving.simulate import simulate
from servebench.serving.workload import WorkloadSpec

MOONCAKE = SAMPLE_DATA / "traces" / "mooncake_conversation_300.jsonl"
KV_BUDGET_TOKENS = 65_536


def short_chat_trace(path: Path, *, seed: int = 5, sessions: int = 14) -> Path:
    """Write a Mooncake-format trace of short chats (prompts under 1,900 tokens, outputs of 2-6: the tiny model's
    2,048 positions): each opens with one of three one-block documents; each turn resends the history's full
    blocks under their IDs plus a new message. Sessions start 1.5 s apart, turns 2 s apart."""
    rng = np.random.default_rng(seed)
    documents = [[0], [1], [2]]
    next_id = 3
    rows = []
    for s in range(sessions):
        full = list(documents[int(rng.integers(0, 3))])
        length, t = 512, 1.5 * s
        while True:
            length += int(rng.integers(100, 400))
            if length > 1900:
                break
            ids = full + list(range(next_id, next_id + -(-length // 512) - len(full)))
            next_id += len(ids) - len(full)
            out = int(rng.integers(2, 7))
            rows.append({"timestamp": int(t * 1000), "input_length": length, "output_length": out, "hash_ids": ids})
            full, length, t = ids[:length // 512], length + out, t + 2.0
    rows.sort(key=lambda r: r["timestamp"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_requests_sharing_a_block_id_share_exactly_its_words(tmp_path: Path) -> None:
    path = short_chat_trace(tmp_path / "chat.jsonl")
    trace = read_trace(path)
    plan = workload_plan(WorkloadSpec.model_validate({"trace": {"path": str(path)}}), np.random.default_rng(0))
    assert [r.trace_row for r in plan] == trace.row.tolist()
    assert [r.prompt_words for r in plan] == trace.prompt_tokens.tolist()
    assert [r.max_tokens for r in plan] == trace.output_tokens.tolist()
    assert [r.intended_s for r in plan] == trace.arrival_s.tolist()
    words = [r.prompt.split() for r in plan]
    assert [len(w) for w in words] == trace.prompt_tokens.tolist()
    ids = [trace.hash_values[trace.hash_offsets[i]:trace.hash_offsets[i + 1]].tolist() for i in range(len(trace))]
    checked = 0
    for i in range(len(plan)):
        for j in range(i):
            for k, (a, b) in enumerate(zip(ids[i], ids[j])):
                block_i, block_j = words[i][512 * k:512 * (k + 1)], words[j][512 * k:512 * (k + 1)]
                if a == b and len(block_i) == len(block_j) == 512:
                    assert block_i == block_j
                    checked += 1
                elif a != b:
                    assert block_i[:len(block_j)] != block_j[:len(block_i)]  # another ID: other text
    assert checked > 10


def test_a_trace_without_blocks_sends_prompts_of_their_lengths() -> None:
    plan = workload_plan(WorkloadSpec.model_validate({"trace": {"path": str(SAMPLE_DATA / "traces" /
                                                                            "azure_code_2023_300.csv"),
                                                                "speedup": 2.0, "max_requests": 20}}),
                         np.random.default_rng(0))
    trace = read_trace(SAMPLE_DATA / "traces" / "azure_code_2023_300.csv")
    assert [len(r.prompt.split()) for r in plan] == trace.prompt_tokens[:20].tolist()
    assert [r.intended_s for r in plan] == (trace.arrival_s[:20] / 2.0).tolist()


def test_serve_engine_caches_what_the_trace_reuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from asgi_server import serve_in_background

    from servebench.serving.engine.http_api import create_app
    from servebench.serving.engine.service import EngineService

    path = short_chat_trace(tmp_path / "chat.jsonl")
    trace = read_trace(path)
    share = prefix_stats(trace).reusable_token_share
    assert 0.3 < share < 0.8 and len(trace) >= 30
    scheduler = SchedulerConfig(kv_budget_tokens=KV_BUDGET_TOKENS, max_num_seqs=16, max_waiting=64, policy="paged",
                                prefix_caching=True)
    service = EngineService("tiny", scheduler=scheduler, device="cpu", threads=1, warmup_steps=1)
    out = tmp_path / "run"
    with serve_in_background(create_app(service)) as url:
        code, stdout, err = run_cli(capsys, "load", url, "--trace", str(path), "--speedup", "6", "--deadline", "20",
                                 "--no-server-metrics", "-o", str(out), "--json")
    assert code == 0, err
    table, _, _ = load_table(out)
    assert table.status.tolist() == [0] * len(trace)  # every request succeeded
    order = np.argsort(table.start, kind="stable")
    rows = np.asarray(table.extra["trace_row"])[order]
    assert rows.tolist() == trace.row.tolist()
    assert table.start[order].tolist() == (trace.arrival_s / 6).tolist()  # each at its trace time, sped up
    assert table.prompt_tokens[order].tolist() == trace.prompt_tokens.tolist()  # one word, one token
    assert table.output_tokens[order].tolist() == trace.output_tokens.tolist()  # max_tokens with ignore_eos
    measured = json.loads(stdout)["prefix_cache"]["token_hit_rate"]
    doc = {"server": {"kv_budget_tokens": KV_BUDGET_TOKENS, "prefix_caching": True, "max_num_seqs": 16},
           "step_model": {"base_s": 0.002, "per_prefill_token_s": 1e-5},
           "workload": {"trace": {"path": str(path), "speedup": 6.0}}}
    sim = simulate(parse_scenario(doc))
    simulated = build_report(sim.records, sim.window_start_s, sim.window_end_s).prefix_cache.token_hit_rate
    assert measured == pytest.approx(share, abs=0.03)
    assert measured == pytest.approx(simulated, abs=0.03)


@pytest.mark.parametrize("args, words", [
    (("--trace", str(MOONCAKE), "--rate", "2"), "--trace gives the arrivals and lengths: leave out --rate"),
    (("--trace", str(MOONCAKE), "--sweep", "1,2"), "leave out --sweep"),
    (("--speedup", "2", "--rate", "1"), "--speedup go with --trace FILE"),
    (("--max-requests", "5", "--rate", "1"), "--max-requests go with --trace FILE"),
    (("--trace", str(MOONCAKE), "--speedup", "0"), "--speedup: Input should be greater than 0"),
    (("--trace", str(MOONCAKE), "--trace-format", "csv"), "--trace-format: Value error, unknown trace format"),
    (("--trace", "nowhere.jsonl"), "nowhere.jsonl: cannot read the trace"),
])
def test_trace_options_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           args: tuple[str, ...], words: str) -> None:
    code, _, err = run_cli(capsys, "load", "http://127.0.0.1:9", "-o", str(tmp_path / "o"), *args)
    assert code == 2 and words in err and err.strip().count("\n") == 0, err


def test_load_says_how_many_requests_of_the_trace_it_left_out(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from reasoning_server import ReasoningServer
    path = burstgpt_csv(tmp_path / "burst.csv", [(0, "ChatGPT", 20, 3), (0.1, "ChatGPT", 30, 0), (0.2, "GPT-4", 10, 3)])
    with ReasoningServer(reasoning=(0,), answer=3, prefill_s=0.0, gap_s=0.0) as url:
        code, out, err = run_cli(capsys, "load", url + "/v1", "--trace", str(path), "--model", "m", "--api", "chat",
                                 "--no-server-metrics", "-o", str(tmp_path / "run"), "--json")
    assert code == 0, err
    assert "1 request of the window left out: 0 output tokens cannot be replayed" in err
    assert json.loads(out)["summary"]["requests"] == 2
