"""A trace as a scenario's workload: exact replay, the window, and its prefix blocks driving the simulated cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE_DATA, burstgpt_csv, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import build_report
from servebench.analysis.trace_stats import prefix_stats
from servebench.errors import ConfigError
from servebench.records.traces import read_trace
from servebench.serving.scenario import load_scenario, parse_scenario
from servebench.serving.simulate import simulate
from servebench.serving.trace_replay import TraceBlocks, block_prompts
from servebench.serving.workload import WorkloadSpec, draw_workload

TRACES = SAMPLE_DATA / "traces"
MOONCAKE = TRACES / "mooncake_conversation_300.jsonl"
AZURE = TRACES / "azure_code_2023_300.csv"
FAST_STEPS = {"base_s": 0.002, "per_prefill_token_s": 1e-6, "per_decode_seq_s": 1e-4}  # a prefill of 10k tokens: 12 ms


def chat_trace(path: Path, *, seed: int, sessions: int, docs: int, whole_blocks: bool = False) -> Path:
    """Write a Mooncake-format trace of chats: each opens with one of ``docs`` shared documents (Zipf-popular),
    and each turn resends the history (its full blocks keep their IDs) plus a new message.

    With ``whole_blocks`` every prompt is a whole number of 512-token blocks (no partial last block).
    """
    rng = np.random.default_rng(seed)
    next_id = 0

    def new(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    documents = [new(int(rng.integers(2, 7))) for _ in range(docs)]
    rows = []
    for _ in range(sessions):
        full = list(documents[min(int(rng.zipf(1.5)) - 1, docs - 1)])
        length, t = len(full) * 512, float(rng.uniform(0, 300))
        for _ in range(int(rng.integers(1, 7))):
            length += 512 * int(rng.integers(1, 4)) if whole_blocks else int(rng.integers(50, 1500))
            ids = full + new(-(-length // 512) - len(full))
            out = int(rng.integers(20, 400))
            rows.append({"timestamp": int(t * 1000), "input_length": length, "output_length": out, "hash_ids": ids})
            full = ids[:length // 512]
            length += 0 if whole_blocks else out
            t += float(rng.uniform(5, 40))
    rows.sort(key=lambda r: r["timestamp"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def replay(path: Path, *, budget: int = 10_000_000, caching: bool = True, **trace: object) -> dict:
    return {"name": "replay", "server": {"kv_budget_tokens": budget, "prefix_caching": caching, "max_num_seqs": 64},
            "step_model": FAST_STEPS, "workload": {"trace": {"path": str(path), **trace}}}


def simulated_hit_rate(doc: dict) -> float | None:
    result = simulate(parse_scenario(doc))
    assert result.status_counts()["success"] == len(result.records)
    cache = build_report(result.records, result.window_start_s, result.window_end_s).prefix_cache
    return None if cache is None else cache.token_hit_rate


# --- exact replay ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [MOONCAKE, AZURE])
def test_records_keep_the_traces_arrival_times_and_lengths_exactly(path: Path) -> None:
    trace = read_trace(path)
    records = simulate(parse_scenario(replay(path, caching=False))).records
    assert records.start.tolist() == trace.arrival_s.tolist()
    assert records.prompt_tokens.tolist() == trace.prompt_tokens.tolist()
    assert records.output_tokens.tolist() == trace.output_tokens.tolist()


def test_speedup_divides_the_arrival_times_of_the_window() -> None:
    trace = read_trace(MOONCAKE)
    doc = replay(MOONCAKE, caching=False, speedup=4.0, start_s=30.0, duration_s=40.0)
    drawn = draw_workload(parse_scenario(doc).workload, np.random.default_rng(0)).requests
    inside = (trace.arrival_s >= 30.0) & (trace.arrival_s < 70.0)
    assert drawn.arrival_s.tolist() == ((trace.arrival_s[inside] - 30.0) / 4.0).tolist()
    assert drawn.trace_row.tolist() == trace.row[inside].tolist()
    assert drawn.output_tokens.tolist() == trace.output_tokens[inside].tolist()
    records = simulate(parse_scenario(doc)).records
    assert records.start.tolist() == drawn.arrival_s.tolist()


def test_max_requests_and_the_workloads_own_limits_cut_the_window() -> None:
    spec = WorkloadSpec.model_validate({"trace": {"path": str(MOONCAKE), "max_requests": 50}})
    assert len(draw_workload(spec, np.random.default_rng(0)).requests) == 50
    fewer = spec.model_copy(update={"num_requests": 20})
    assert len(draw_workload(fewer, np.random.default_rng(0)).requests) == 20
    early = spec.model_copy(update={"duration_s": 10.0})
    times = draw_workload(early, np.random.default_rng(0)).requests.arrival_s
    assert times.max() < 10.0 and len(times) == int(np.count_nonzero(read_trace(MOONCAKE).arrival_s[:50] < 10.0))


def test_requests_without_output_are_left_out(tmp_path: Path) -> None:
    path = burstgpt_csv(tmp_path / "burst.csv", [(5, "ChatGPT", 100, 20), (6, "ChatGPT", 300, 0), (8, "GPT-4", 50, 7)])
    drawn = draw_workload(WorkloadSpec.model_validate({"trace": {"path": str(path)}}), np.random.default_rng(0))
    assert drawn.requests.trace_row.tolist() == [1, 3]
    assert drawn.requests.arrival_s.tolist() == [0.0, 3.0]


def test_simulate_says_how_many_requests_of_the_trace_it_left_out(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = burstgpt_csv(tmp_path / "burst.csv", [(5, "ChatGPT", 100, 20), (6, "ChatGPT", 300, 0),
                                                 (7, "ChatGPT", 30, 0), (8, "GPT-4", 50, 7)])
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(replay(path, caching=False)))
    code, out, err = run_cli(capsys, "simulate", str(scenario), "-o", str(tmp_path / "out"), "--json")
    assert code == 0, err
    note = "2 requests of the window left out: 0 output tokens cannot be replayed"
    assert note in err and any(note in n for n in json.loads(out)["simulation"]["notes"])


# --- the scenario file ----------------------------------------------------------------------------------------

def test_a_scenario_file_names_its_trace_relative_to_itself(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.jsonl").write_bytes(MOONCAKE.read_bytes())
    scenario = tmp_path / "s.yaml"
    scenario.write_text("server: {kv_budget_tokens: 100000}\nstep_model: {base_s: 0.01}\n"
                        "workload:\n  trace: {path: traces/t.jsonl, max_requests: 5}\n")
    sc = load_scenario(scenario)
    assert Path(sc.workload.trace.path) == tmp_path / "traces" / "t.jsonl"
    assert len(simulate(sc).records) == 5


@pytest.mark.parametrize("workload, words", [
    ({"trace": {"path": str(MOONCAKE)}, "classes": [{"prompt": {"value": 1}, "output": {"value": 1}}]},
     "field 'workload': Value error, a trace gives the arrivals and lengths: leave out 'classes'"),
    ({"trace": {"path": str(MOONCAKE)}, "arrival": {"rate_rps": 1}}, "leave out 'arrival'"),
    ({"trace": {"path": str(MOONCAKE), "speedup": 0}}, "field 'workload.trace.speedup': Input should be greater"),
    ({"trace": {"path": str(MOONCAKE), "format": "csv"}}, "unknown trace format 'csv'"),
    ({"trace": {"path": "nowhere.jsonl"}}, "nowhere.jsonl: cannot read the trace (No such file"),
    ({"trace": {"path": str(MOONCAKE), "start_s": 5000.0}}, "no requests in the window replayed"),
    ({}, "give 'classes' (at least one request class) or a 'trace' to replay"),
])
def test_a_bad_trace_workload_is_one_line(tmp_path: Path, workload: dict, words: str) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"server": {"kv_budget_tokens": 1000}, "step_model": {}, "workload": workload}))
    with pytest.raises(ConfigError) as err:
        load_scenario(scenario)
    assert str(err.value).startswith(str(scenario)) and words in str(err.value) and "\n" not in str(err.value)


def test_a_bad_line_in_the_trace_is_named_with_the_scenario(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(MOONCAKE.read_text().splitlines()[0] + '\n{"timestamp": 5, "input_length": "9", '
                     '"output_length": 3}\n')
    scenario = tmp_path / "s.yaml"
    scenario.write_text("server: {kv_budget_tokens: 1000}\nstep_model: {}\nworkload: {trace: {path: t.jsonl}}\n")
    with pytest.raises(ConfigError, match=r"s\.yaml, workload\.trace: t\.jsonl: line 2, field 'input_length': "
                                          r"\"9\" is not a token count"):
        load_scenario(scenario)


# --- prefix blocks as prompt content ---------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=6), st.lists(st.integers(0, 3), min_size=0, max_size=6),
       st.integers(0, 40), st.integers(0, 40), st.sampled_from([1, 3, 4, 5, 8, 16]))
def test_prompts_share_exactly_the_tokens_their_leading_block_ids_share(ids_a: list[int], ids_b: list[int],
                                                                         prompt_a: int, prompt_b: int,
                                                                         block: int) -> None:
    size = 8  # trace block; block IDs are prefix hashes: an ID names its block and every block before it
    ids_a = [sum(ids_a[:j + 1]) * 10 + j for j in range(len(ids_a))]
    ids_b = [sum(ids_b[:j + 1]) * 10 + j for j in range(len(ids_b))]
    blocks = TraceBlocks(np.array([0, len(ids_a), len(ids_a) + len(ids_b)]), np.array(ids_a + ids_b, dtype=np.int64),
                         size)
    a, b = block_prompts(blocks, np.array([prompt_a, prompt_b]), np.array([1, 2]))
    assert a.num_tokens == prompt_a and b.num_tokens == prompt_b
    shared = 0  # tokens both prompts hold in leading blocks of equal ID
    for j, (x, y) in enumerate(zip(ids_a, ids_b)):
        in_a, in_b = min(size, prompt_a - j * size), min(size, prompt_b - j * size)
        if x != y or in_a <= 0 or in_b <= 0:
            break
        shared += min(in_a, in_b)
        if in_a != in_b:
            break
    keys_a, keys_b = a.block_keys(block), b.block_keys(block)
    equal = next((i for i, (x, y) in enumerate(zip(keys_a, keys_b)) if x != y), min(len(keys_a), len(keys_b)))
    assert equal == shared // block


def test_a_budget_above_the_traces_blocks_serves_the_reusable_share() -> None:
    share = prefix_stats(read_trace(MOONCAKE)).reusable_token_share
    assert simulated_hit_rate(replay(MOONCAKE)) == pytest.approx(share, abs=0.01)


def test_a_chat_trace_reuses_what_an_unbounded_cache_would(tmp_path: Path) -> None:
    path = chat_trace(tmp_path / "chat.jsonl", seed=3, sessions=80, docs=6)
    share = prefix_stats(read_trace(path)).reusable_token_share
    assert share > 0.7  # a trace where reuse matters
    assert simulated_hit_rate(replay(path)) == pytest.approx(share, abs=0.01)


def test_a_trace_without_block_hashes_replays_without_reuse() -> None:
    assert simulated_hit_rate(replay(AZURE)) == 0.0


@pytest.mark.parametrize("whole_blocks, below, above", [(True, 0.01, 0.01), (False, 0.01, 0.05)])
def test_a_small_budget_falls_as_the_traces_lru_replay_says(tmp_path: Path, whole_blocks: bool, below: float,
                                                            above: float) -> None:
    path = chat_trace(tmp_path / "chat.jsonl", seed=11, sessions=150, docs=10, whole_blocks=whole_blocks)
    budgets = (12_000, 24_000, 48_000, 100_000)
    lru = [h.token_hit_rate for h in prefix_stats(read_trace(path), budgets).hit_rate_by_capacity]
    simulated = [simulated_hit_rate(replay(path, budget=b)) for b in budgets]
    assert simulated == sorted(simulated) and simulated[0] < simulated[-1] - 0.2
    for lru_rate, sim_rate in zip(lru, simulated):
        assert lru_rate - below <= sim_rate <= lru_rate + above


def test_simulated_records_keep_each_requests_row_in_the_trace(tmp_path: Path) -> None:
    from servebench.records.loaders import load_table
    from servebench.records.rundir import write_run
    trace = read_trace(MOONCAKE)
    doc = replay(MOONCAKE, caching=False, start_s=30.0, duration_s=40.0)
    result = simulate(parse_scenario(doc))
    inside = (trace.arrival_s >= 30.0) & (trace.arrival_s < 70.0)
    rows = result.records.extra["trace_row"].to_pylist()
    assert rows == trace.row[inside].tolist() and rows[0] > 1  # the window starts inside the file
    for fmt in ("jsonl", "parquet"):  # written and read back as the extra column a measured run has
        write_run(tmp_path / fmt, result.records, records_format=fmt)
        assert load_table(tmp_path / fmt)[0].extra["trace_row"].to_pylist() == rows
    drawn = load_scenario(SAMPLE_DATA / "scenarios" / "profile_a.yaml")
    assert "trace_row" not in simulate(drawn).records.extra  # a drawn workload has no trace rows


@pytest.mark.parametrize("workload, says", [
    ({"trace": {"path": str(SAMPLE_DATA / "traces" / "mooncake_conversation_300.jsonl")}},
     "replays a trace, whose arrivals are its own; set the trace's speedup in the scenario"),
    ({"arrival": None, "closed_loop": {"users": 2}, "num_requests": 10,
      "classes": [{"prompt": {"value": 10}, "output": {"value": 5}}]},
     "is closed loop (its users send as they finish); set workload.closed_loop.users"),
])
def test_simulate_rate_on_a_scenario_without_a_rate_names_simulates_own_way(
        workload: dict, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`simulate --rate` on a closed-loop or trace scenario answered with the sweep's flags ('sweep --concurrency,
    not --rates')."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"server": {"kv_budget_tokens": 50_000}, "step_model": {"base_s": 0.01},
                                "workload": workload}), encoding="utf-8")
    code, _, err = run_cli(capsys, "simulate", str(path), "--rate", "2", "-o", str(tmp_path / "out"))
    assert code == 2 and says in err and "--rates" not in err and len(err.strip().splitlines()) == 1
