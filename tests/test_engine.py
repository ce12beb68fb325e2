"""The torch engine on the CPU with the tiny preset: model, KV cache, step execution, real-time loop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from servebench.errors import ConfigError, ServebenchError  # noqa: E402
from servebench.serving.engine.executor import ComputePlan, Executor  # noqa: E402
from servebench.serving.engine.kvcache import KVCacheFullError, PagedKVCache  # noqa: E402
from servebench.serving.engine.model import PRESETS, Decoder, ModelConfig, preset  # noqa: E402

torch.set_num_threads(1)  # the machine is shared; two threads thrash under load
TINY = preset("tiny")


@pytest.fixture(scope="module")
def model() -> Decoder:
    return Decoder(TINY, seed=7)


def _prompt(seed: int, n: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY.vocab, (n,), generator=gen).tolist()


def _executor(model: Decoder, capacity_tokens: int = 4096) -> Executor:
    return Executor(model, PagedKVCache(TINY, capacity_tokens, block_size=16))


def _run_alone(model: Decoder, prompt: list[int], new_tokens: int) -> tuple[list[int], list[torch.Tensor]]:
    """Prefill in one chunk, then decode one token per step; return tokens and each step's logits."""
    ex = _executor(model)
    ex.add("a", prompt, new_tokens)
    res = ex.execute(ComputePlan(prefill=(("a", len(prompt)),)), keep_logits=True)
    logits = [res.logits["a"]]
    while not ex.sequences["a"].done:
        res = ex.execute(ComputePlan(decode=("a",)), keep_logits=True)
        logits.append(res.logits["a"])
    return ex.sequences["a"].tokens[len(prompt):], logits


# --------------------------------------------------------------------------- model


def test_presets_are_consistent_and_count_parameters() -> None:
    c = PRESETS["llama-3.1-8b"]
    assert 7.9e9 < c.param_count < 8.1e9  # Llama-3.1-8B has 8.03B parameters
    assert 1.2e9 < PRESETS["llama-3.2-1b"].param_count < 1.3e9  # 1.24B, tied embeddings
    assert c.kv_bytes_per_token(2) == 131_072  # the spec's worked example
    assert sum(p.numel() for p in Decoder(TINY).parameters()) == TINY.param_count


def test_bad_shape_and_unknown_preset_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="multiple of kv_heads"):
        ModelConfig("x", layers=1, hidden=8, heads=3, kv_heads=2, head_dim=4, ffn=8, vocab=8, max_positions=8)
    with pytest.raises(ConfigError, match="unknown model preset 'nope'"):
        preset("nope")


def test_same_seed_same_weights_other_seed_other_weights() -> None:
    a, b, c = Decoder(TINY, seed=3), Decoder(TINY, seed=3), Decoder(TINY, seed=4)
    assert torch.equal(a.wqkv[0], b.wqkv[0])
    assert not torch.equal(a.wqkv[0], c.wqkv[0])


def test_cached_decode_matches_full_recompute(model: Decoder) -> None:
    prompt = _prompt(1, 23)
    tokens, logits = _run_alone(model, prompt, 12)
    full = model.forward_full(torch.tensor(prompt + tokens))
    for i, step_logits in enumerate(logits):
        ref = full[len(prompt) - 1 + i]
        assert torch.allclose(step_logits, ref, atol=1e-4, rtol=0), f"step {i}: {(step_logits - ref).abs().max()}"
    assert tokens == full.argmax(-1)[len(prompt) - 1:-1].tolist()


def test_batched_sequences_of_different_lengths_match_their_unbatched_runs(model: Decoder) -> None:
    lengths = [1, 5, 16, 17, 40]
    prompts = {f"s{i}": _prompt(10 + i, n) for i, n in enumerate(lengths)}
    alone = {sid: _run_alone(model, p, 8) for sid, p in prompts.items()}
    ex = _executor(model)
    for sid, p in prompts.items():
        ex.add(sid, p, 8)
    # staggered: two prefill now (one chunked), the rest join while the first ones decode
    got: dict[str, list[torch.Tensor]] = {sid: [] for sid in prompts}

    def step(plan: ComputePlan) -> None:
        res = ex.execute(plan, keep_logits=True)
        for sid, lg in (res.logits or {}).items():
            got[sid].append(lg)

    step(ComputePlan(prefill=(("s0", 1), ("s4", 30))))
    step(ComputePlan(prefill=(("s4", 10), ("s1", 5)), decode=("s0",)))
    step(ComputePlan(prefill=(("s2", 16), ("s3", 17)), decode=("s0", "s1", "s4")))
    while any(not s.done for s in ex.sequences.values()):
        step(ComputePlan(decode=tuple(sid for sid, s in ex.sequences.items() if not s.done)))
    for sid, (tokens, logits) in alone.items():
        assert ex.sequences[sid].tokens[len(prompts[sid]):] == tokens, sid
        assert len(got[sid]) == len(logits)
        for a, b in zip(got[sid], logits):
            assert torch.allclose(a, b, atol=1e-4, rtol=0), sid
        full = model.forward_full(torch.tensor(prompts[sid] + tokens))  # and both equal a full recompute
        for i, a in enumerate(got[sid]):
            assert torch.allclose(a, full[len(prompts[sid]) - 1 + i], atol=1e-4, rtol=0), (sid, i)


def test_chunked_prefill_matches_one_chunk(model: Decoder) -> None:
    prompt = _prompt(2, 50)
    ex = _executor(model)
    ex.add("a", prompt, 1)
    for n in (7, 16, 20):
        assert ex.execute(ComputePlan(prefill=(("a", n),))).emitted == {}
    res = ex.execute(ComputePlan(prefill=(("a", 7),)), keep_logits=True)
    ref = model.forward_full(torch.tensor(prompt))[-1]
    assert torch.allclose(res.logits["a"], ref, atol=1e-4, rtol=0)


def test_preempted_sequence_recomputes_to_the_same_tokens(model: Decoder) -> None:
    prompt = _prompt(3, 9)
    tokens, _ = _run_alone(model, prompt, 10)
    ex = _executor(model)
    ex.add("a", prompt, 10)
    ex.execute(ComputePlan(prefill=(("a", 9),)))
    for _ in range(4):
        ex.execute(ComputePlan(decode=("a",)))
    assert ex.preempt("a") == 13 and ex.cache.used_tokens == 0
    ex.execute(ComputePlan(prefill=(("a", ex.sequences["a"].pending),)))
    while not ex.sequences["a"].done:
        ex.execute(ComputePlan(decode=("a",)))
    assert ex.sequences["a"].tokens[9:] == tokens


# --------------------------------------------------------------------------- KV cache


def test_kv_cache_blocks_are_taken_as_tokens_grow_and_all_returned() -> None:
    cache = PagedKVCache(TINY, 64, block_size=16)
    assert cache.num_blocks == 4 and cache.capacity_tokens == 64
    s = cache.extend("a", 17)
    assert s.tolist()[:2] == [0, 1] and cache.used_blocks == 2
    cache.extend("b", 16)
    cache.extend("a", 32)
    assert cache.used_blocks == 3 and cache.used_tokens == 48
    with pytest.raises(KVCacheFullError, match="needs 2 more KV blocks"):
        cache.extend("b", 48)
    assert cache.length("b") == 16  # nothing changed
    assert cache.free("a") == 32 and cache.free("b") == 16 and cache.free("zzz") == 0
    assert cache.used_tokens == 0 and cache.free_blocks == 4


def test_slots_follow_the_block_table() -> None:
    cache = PagedKVCache(TINY, 64, block_size=4)
    cache.extend("a", 3)
    cache.extend("b", 5)
    cache.extend("a", 6)
    assert cache.slots("a", 0, 6).tolist() == [0, 1, 2, 3, 12, 13]  # b took blocks 1 and 2
    with pytest.raises(ServebenchError, match="not all stored"):
        cache.slots("a", 0, 7)


def test_step_that_does_not_fit_raises_and_changes_nothing(model: Decoder) -> None:
    ex = _executor(model, capacity_tokens=32)
    ex.add("a", _prompt(4, 20), 4)
    ex.add("b", _prompt(5, 20), 4)
    with pytest.raises(KVCacheFullError):
        ex.execute(ComputePlan(prefill=(("a", 20), ("b", 20))))
    assert ex.cache.used_tokens == 0 and ex.sequences["a"].computed == 0


def test_executor_rejects_bad_plans(model: Decoder) -> None:
    ex = _executor(model)
    ex.add("a", _prompt(6, 4), 2)
    with pytest.raises(ServebenchError, match="expected 1"):
        ex.execute(ComputePlan(decode=("a",)))
    with pytest.raises(ServebenchError, match="cannot compute 5 tokens"):
        ex.execute(ComputePlan(prefill=(("a", 5),)))
    with pytest.raises(ServebenchError, match="not in the engine"):
        ex.execute(ComputePlan(decode=("zz",)))
    with pytest.raises(ServebenchError, match="already in the engine"):
        ex.add("a", [1], 1)


# --------------------------------------------------------------------------- real-time loop

import threading  # noqa: E402
from collections import Counter  # noqa: E402

from servebench.records.schema import parse_objects  # noqa: E402
from servebench.records.table import validate  # noqa: E402
from servebench.serving.engine.loop import EngineLoop, cache_capacity_tokens  # noqa: E402
from servebench.serving.engine.runner import run_workload  # noqa: E402
from servebench.serving.engine.service import EngineService, RequestRejected  # noqa: E402
from servebench.serving.scheduler import Request, SchedulerConfig  # noqa: E402
from servebench.serving.workload import ArrivalSpec, ClassSpec, ClosedLoopSpec, LengthSpec, WorkloadSpec  # noqa: E402


def _workload(n: int, rate_rps: float, prompt: tuple[int, int] = (8, 64), output: tuple[int, int] = (4, 24),
              kind: str = "poisson") -> WorkloadSpec:
    return WorkloadSpec(arrival=ArrivalSpec(kind=kind, rate_rps=rate_rps), num_requests=n, classes=[
        ClassSpec(name="short", prompt=LengthSpec(kind="uniform", low=prompt[0], high=prompt[1]),
                  output=LengthSpec(kind="uniform", low=output[0], high=output[1]))])


def _check_run_records(records: list[dict], n: int) -> Counter:
    assert len(records) == n
    assert len({r["request_id"] for r in records}) == n  # exactly one terminal record per request
    validate(parse_objects(records, "run"), 0.0, max(r["end"] for r in records) + 1)
    return Counter(r["status"] for r in records)


def test_every_request_ends_in_one_record_and_kv_returns_to_zero(model: Decoder) -> None:
    seen_kv: list[int] = []
    cfg = SchedulerConfig(kv_budget_tokens=512, policy="paged", max_num_seqs=8, max_num_batched_tokens=64)
    run = run_workload(model, cfg, _workload(30, 200.0), seed=3, warmup_steps=1,
                       on_step=lambda row: seen_kv.append(row.kv_tokens_held))
    counts = _check_run_records(run.records, 30)
    assert counts["success"] == 30
    assert run.steps and max(s.decode_seqs for s in run.steps) > 1  # sequences were batched
    assert max(seen_kv) <= cache_capacity_tokens(cfg)
    assert run.steps[-1].kv_tokens_held == 0 and run.steps[-1].kv_tokens_used == 0
    assert run.end_state["kv_tokens_held"] == 0 and run.end_state["kv_tokens_used"] == 0
    for r in run.records:
        assert r["start"] <= r["admitted"] <= r["first_token"] <= r["end"]


def test_reserve_policy_and_closed_loop_users(model: Decoder) -> None:
    cfg = SchedulerConfig(kv_budget_tokens=400, policy="reserve", max_num_seqs=4)
    wl = WorkloadSpec(closed_loop=ClosedLoopSpec(users=3, think_s=0.0), num_requests=12, classes=[
        ClassSpec(prompt=LengthSpec(kind="fixed", value=20), output=LengthSpec(kind="fixed", value=6))])
    run = run_workload(model, cfg, wl, seed=1, warmup_steps=0)
    assert _check_run_records(run.records, 12)["success"] == 12
    assert all(r["output_tokens"] == 6 for r in run.records)
    assert run.end_state["kv_tokens_held"] == 0 and run.end_state["kv_tokens_used"] == 0


def test_short_deadline_produces_timeouts_with_wasted_tokens_kept(model: Decoder) -> None:
    cfg = SchedulerConfig(kv_budget_tokens=4096, policy="paged", max_num_seqs=4, timeout_s=0.001)
    run = run_workload(model, cfg, _workload(6, 1000.0, output=(300, 300)), seed=2, warmup_steps=0)
    counts = _check_run_records(run.records, 6)
    assert counts["timeout"] == 6  # 300 decode steps cannot fit in a millisecond
    assert all(r["error"] == "deadline_exceeded" for r in run.records)
    assert run.end_state["kv_tokens_held"] == 0 and run.end_state["kv_tokens_used"] == 0


def test_full_queue_produces_rejections(model: Decoder) -> None:
    cfg = SchedulerConfig(kv_budget_tokens=4096, policy="reserve", max_num_seqs=1, max_waiting=1)
    run = run_workload(model, cfg, _workload(12, 1e6, output=(60, 60), kind="constant"), seed=4, warmup_steps=0)
    counts = _check_run_records(run.records, 12)
    assert counts["rejected"] >= 5 and counts["success"] >= 1
    assert counts["rejected"] + counts["success"] == 12
    rejected = [r for r in run.records if r["status"] == "rejected"]
    assert all(r["error"] == "queue_full" and "admitted" not in r for r in rejected)


def test_loop_cancel_frees_kv_and_ends_once(model: Decoder) -> None:
    loop = EngineLoop(model, SchedulerConfig(kv_budget_tokens=1024, policy="paged"))
    outcomes = []

    class Keep:
        def on_token(self, token_id: int, time_s: float) -> None:
            pass

        def on_outcome(self, outcome) -> None:
            outcomes.append(outcome)

    assert loop.submit(Request("a", loop.clock(), 40, 50), listener=Keep()) is None
    assert loop.submit(Request("b", loop.clock(), 30, 50), listener=Keep()) is None
    for _ in range(3):
        loop.run_once()
    assert loop.snapshot()["kv_tokens_held"] > 0
    assert loop.cancel("a").status == "cancelled"
    assert loop.cancel("a") is None
    while loop.live_requests:
        loop.run_once()
    snap = loop.snapshot()
    assert snap["kv_tokens_held"] == 0 and snap["kv_tokens_used"] == 0
    assert sorted((o.request_id, o.status) for o in outcomes) == [("a", "cancelled"), ("b", "success")]


def test_loop_rejects_requests_that_cannot_run(model: Decoder) -> None:
    loop = EngineLoop(model, SchedulerConfig(kv_budget_tokens=64, policy="reserve"))
    assert loop.submit(Request("big", 0.0, 60, 10)).error == "kv_exceeds_budget"
    with pytest.raises(ConfigError, match="max_positions|positions"):
        loop.submit(Request("long", 0.0, 2000, 100))
    with pytest.raises(ConfigError, match="prompt ids"):
        loop.submit(Request("x", 0.0, 2, 1), prompt_ids=[1])


def test_service_streams_the_same_tokens_as_the_executor_and_cancels() -> None:
    with EngineService("tiny", seed=7, device="cpu", scheduler=SchedulerConfig(
            kv_budget_tokens=1600, policy="paged", max_num_seqs=4, max_waiting=2), warmup_steps=0) as svc:
        prompt = _prompt(20, 12)
        handle = svc.submit(prompt, max_tokens=6)
        events = list(handle)
        outcome = handle.result(timeout=30)
        assert outcome.status == "success" and outcome.output_tokens == 6
        assert [e.token_id for e in events] == _run_alone(svc.model, prompt, 6)[0]
        assert all(outcome.first_token <= e.time_s <= outcome.end for e in events)
        long = svc.submit(30, max_tokens=1500)
        first = long.next_event(timeout=30)
        assert first.token_id >= 0
        assert long.cancel().status == "cancelled"
        assert long.result(timeout=5).status == "cancelled"
        for _ in range(500):  # the engine thread frees it before its next step
            if svc.stats()["kv_tokens_held"] == 0:
                break
            threading.Event().wait(0.01)
        assert svc.stats()["kv_tokens_held"] == 0 and svc.stats()["kv_tokens_used"] == 0
        with pytest.raises(RequestRejected, match="kv_exceeds_budget"):
            svc.submit(600, max_tokens=1440)
    assert svc.stats()["running"] == 0


# --------------------------------------------------------------------------- CLI: run and validate

import json  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from servebench.analysis.contract import CONTRACT_FIELDS  # noqa: E402
from servebench.cli.core import app, main  # noqa: E402
from servebench.records.steps import NAMES as STEP_COLUMNS  # noqa: E402

SCENARIO = """
name: cli_test
seed: 5
server: {policy: reserve, kv_budget_tokens: 3000, max_num_seqs: 8, max_num_batched_tokens: 256,
         max_waiting: 16, timeout_s: 20}
step_model: {base_s: 0.001}
workload:
  arrival: {kind: poisson, rate_rps: 100}
  num_requests: 24
  classes:
    - {name: a, prompt: {kind: uniform, low: 8, high: 120}, output: {kind: uniform, low: 4, high: 20}}
"""


def test_run_writes_records_trace_and_run_metadata_then_validate_compares(tmp_path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "run"
    torch.set_num_threads(2)
    try:
        res = CliRunner().invoke(app, ["run", str(scenario), "-o", str(out), "--json"])
        assert torch.get_num_threads() == 2  # the run used 1 thread and gave the caller its own count back
    finally:
        torch.set_num_threads(1)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert tuple(doc["summary"]) == CONTRACT_FIELDS and doc["summary"]["requests"] == 24
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 24 and all("admitted" in r or r["status"] == "rejected" for r in records)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert steps and list(steps[0]) == list(STEP_COLUMNS)  # the one step-trace schema, in its order
    assert sum(s["prefill_tokens"] for s in steps) >= sum(r["prompt_tokens"] for r in records if "admitted" in r)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["model"]["parameters"] == TINY.param_count and meta["model"]["kv_heads"] == TINY.kv_heads
    assert meta["runtime"]["dtype"] == "float32" and meta["runtime"]["threads"] == 1
    assert meta["runtime"]["torch_version"] == torch.__version__ and meta["runtime"]["device_name"]
    assert meta["kv"]["policy"] == "reserve" and meta["kv"]["kv_budget_tokens"] == 3000
    assert meta["kv"]["bytes_per_token"] == TINY.kv_bytes_per_token(4)
    assert meta["seed"] == 5 and meta["deadline_s"] == 20
    assert meta["arrival_pattern"] == "open loop: poisson arrivals at 100 requests/s"
    assert meta["workload"]["classes"][0]["name"] == "a"
    assert "git_commit" in meta and meta["servebench_version"]
    res = CliRunner().invoke(app, ["validate", str(out), "--json", "--allow-poor-fit"])  # 24 requests: a small fit
    assert res.exit_code == 0, res.output
    val = json.loads(res.stdout)
    assert [(c["metric"], c["q"]) for c in val["comparisons"]] == [
        (m, q) for m in ("ttft", "tpot", "latency") for q in (50, 95)]
    assert val["fit"]["steps"] == len(steps)
    assert sum(val["simulated_status"].values()) == 24
    res = CliRunner().invoke(app, ["validate", str(out), "--allow-poor-fit"])
    assert res.exit_code == 0 and "Measured vs simulated" in res.stdout


def test_execute_run_takes_a_scenario_object_no_file(tmp_path) -> None:
    import yaml

    from servebench.serving.engine.readback import read_run
    from servebench.serving.engine.timing_run import execute_run
    from servebench.serving.scenario import parse_scenario, with_request_count

    scenario = with_request_count(parse_scenario(yaml.safe_load(SCENARIO), "inline"), 6)
    out = tmp_path / "run"
    meta = execute_run(scenario, out, scenario_source="mine.yaml", warmup_steps=0)
    assert meta["scenario_source"] == "mine.yaml" and meta["run"]["offered_requests"] == 6
    assert meta["scenario"]["workload"]["num_requests"] == 6
    folder = read_run(out)
    assert len(folder.records) == 6 and folder.scenario == scenario
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        execute_run(scenario, tmp_path / "file")
    with pytest.raises(ConfigError, match="at least 1"):
        with_request_count(scenario, 0)


def test_validate_of_a_folder_that_is_not_a_run_exits_2(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(tmp_path)])
    assert exc.value.code == 2
    assert "missing records.jsonl" in capsys.readouterr().err


def test_validation_fits_the_trace_the_runner_writes() -> None:
    from servebench.serving.engine.validation import fit_trace
    rows = [{"start": i * 0.01, "duration_s": 0.001 + 1e-5 * p + 2e-4 * d, "prefill_tokens": p, "decode_seqs": d,
             "kv_tokens": 10 * d} for i, (p, d) in enumerate([(0, 1), (100, 0), (0, 5), (50, 3), (0, 8), (200, 2)])]
    model = fit_trace(rows).model
    assert model.base_s == pytest.approx(0.001, abs=1e-9)
    assert model.per_prefill_token_s == pytest.approx(1e-5, rel=1e-6)
    with pytest.raises(ConfigError, match="empty"):
        fit_trace([])


def test_paged_preemption_recomputes_and_every_request_still_succeeds(model: Decoder) -> None:
    # 8 blocks of 16 tokens: four 20-token prompts fit, their outputs do not, so the newest is preempted
    cfg = SchedulerConfig(kv_budget_tokens=128, policy="paged", max_num_seqs=4)
    wl = WorkloadSpec(arrival=ArrivalSpec(kind="constant", rate_rps=1e6), num_requests=4, classes=[
        ClassSpec(prompt=LengthSpec(kind="fixed", value=20), output=LengthSpec(kind="fixed", value=40))])
    run = run_workload(model, cfg, wl, seed=6, warmup_steps=0)
    assert _check_run_records(run.records, 4)["success"] == 4
    assert sum(s.preempted for s in run.steps) >= 1
    assert max(s.kv_tokens_held for s in run.steps) <= 128
    assert run.end_state["kv_tokens_held"] == 0


def test_clients_that_give_up_are_cancelled_and_free_their_kv(model: Decoder) -> None:
    from servebench.serving.engine.runner import run_scenario
    from servebench.serving.scenario import parse_scenario
    scenario = parse_scenario({
        "seed": 2, "server": {"policy": "paged", "kv_budget_tokens": 2048, "max_num_seqs": 4},
        "step_model": {"base_s": 0.001}, "cancel": {"probability": 1.0, "after_s": 0.002},
        "workload": {"arrival": {"kind": "constant", "rate_rps": 500}, "num_requests": 6,
                     "classes": [{"prompt": {"kind": "fixed", "value": 30}, "output": {"kind": "fixed", "value": 400}}]}})
    run = run_scenario(model, scenario, warmup_steps=0)
    counts = _check_run_records(run.records, 6)
    assert counts["cancelled"] == 6  # 400 decode steps cannot fit in a few milliseconds
    assert all(r["error"] == "cancelled" for r in run.records)
    assert run.end_state["kv_tokens_held"] == 0 and run.end_state["kv_tokens_used"] == 0


def test_run_time_limit_cancels_live_requests_and_leaves_unsent_ones_out(model: Decoder) -> None:
    cfg = SchedulerConfig(kv_budget_tokens=2048, policy="paged", max_num_seqs=2)
    run = run_workload(model, cfg, _workload(40, 20.0, output=(500, 500)), seed=1, warmup_steps=0, max_wall_s=0.3)
    assert run.offered < 40 and len(run.records) == run.offered
    assert any(r["error"] == "run_time_limit" for r in run.records)
    assert run.notes and "never sent" in run.notes[0]
    assert run.end_state["kv_tokens_held"] == 0


def test_a_kv_cache_larger_than_memory_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="lower the KV budget"):
        PagedKVCache(PRESETS["llama-3.1-8b"], 10**9)
    with pytest.raises(ConfigError, match="pick a smaller preset"):
        Decoder(ModelConfig("huge", layers=1000, hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672,
                            vocab=8, max_positions=8))


# --------------------------------------------------------------------------- process state a run leaves behind


def test_denormal_flushing_is_scoped_and_restores_the_callers_mode() -> None:
    from servebench.serving.engine.model import denormals_flushed, flushing_denormals
    assert not flushing_denormals()
    with denormals_flushed():
        assert flushing_denormals()
    assert not flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        with denormals_flushed():
            pass
        assert flushing_denormals()  # a caller that had it on keeps it on
    finally:
        torch.set_flush_denormal(False)


def test_a_run_that_fails_to_start_leaves_the_collector_unfrozen(model: Decoder) -> None:
    import gc
    assert gc.get_freeze_count() == 0
    with pytest.raises(ConfigError, match="lower the KV budget"):
        run_workload(model, SchedulerConfig(kv_budget_tokens=10**11, policy="paged"), _workload(2, 100.0),
                     warmup_steps=0)
    assert gc.get_freeze_count() == 0
    run_workload(model, SchedulerConfig(kv_budget_tokens=512, policy="paged"), _workload(2, 1000.0), warmup_steps=0)
    assert gc.get_freeze_count() == 0


def test_a_callers_own_gc_freeze_is_left_alone(model: Decoder) -> None:
    import gc

    from servebench.serving.engine.runner import gc_frozen
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_frozen():
            pass
        assert gc.get_freeze_count() >= frozen > 0
    finally:
        gc.unfreeze()


def test_records_start_at_the_intended_arrivals_and_the_lag_is_reported(model: Decoder) -> None:
    import numpy as np

    from servebench.serving.engine.runner import arrival_lag_note
    from servebench.serving.workload import generate_arrivals
    wl = _workload(8, 100.0)
    run = run_workload(model, SchedulerConfig(kv_budget_tokens=2048, policy="paged"), wl, seed=9, warmup_steps=0)
    expected = [s.arrival_s for s in generate_arrivals(wl, np.random.default_rng(9))]
    assert [r["start"] for r in run.records] == expected  # the simulator's arrivals, not when the thread woke
    assert run.arrival_lag_p99_s is not None and 0 <= run.arrival_lag_p99_s <= run.arrival_lag_max_s
    assert sorted(run.send_lags_s) == sorted(r["request_id"] for r in run.records)  # each request's own lag
    assert max(run.send_lags_s.values()) == run.arrival_lag_max_s
    ok = [{"status": "success", "start": 0.0, "first_token": 1.0}]
    assert arrival_lag_note(0.04, 0.05, ok) is None  # under 5% of a 1 s median TTFT
    assert "p99 60 ms" in arrival_lag_note(0.06, 0.07, ok)


def test_run_prints_paths_with_brackets_verbatim(tmp_path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("num_requests: 24", "num_requests: 4"))
    out = tmp_path / "[/x] [bold]"
    res = CliRunner().invoke(app, ["run", str(scenario), "-o", str(out)], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert f"wrote {out}/records.jsonl" in res.stdout
