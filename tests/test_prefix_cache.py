"""Prefix caching: the shared cache, the scheduler's KV accounting with shared blocks, and simulations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from accounting import check_accounting
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import build_report
from servebench.errors import ConfigError
from servebench.serving.prefix_cache import PrefixCache, SegmentPrompt, TokenPrompt, segment_id, segment_tokens
from servebench.serving.scenario import parse_scenario
from servebench.serving.scheduler import Request, Scheduler, SchedulerConfig
from servebench.serving.simulate import simulate
from servebench.serving.workload import generate_workload

BS = 16


# ---------------------------------------------------------------- the cache


def test_cache_reuses_longest_run_and_evicts_least_recently_released() -> None:
    cache = PrefixCache()
    for k in (1, 2, 3):
        assert cache.insert(k)
    assert not cache.insert(2)  # cached already: nothing changes
    assert cache.match([1, 2, 9, 3]) == 2
    assert cache.match([1, 2, 3], limit=1) == 1
    cache.release([1, 2, 3])  # last first: 3 is the least recent
    assert cache.num_evictable == 3
    cache.acquire([1])  # reused: off the evictable list
    assert cache.num_evictable == 2 and cache.refs(1) == 1
    assert cache.evict(1) == [(3, None)]
    assert cache.match([1, 2, 3]) == 2
    cache.release([1])
    assert [k for k, _ in cache.evict(2)] == [2, 1]
    assert cache.num_cached == 0
    with pytest.raises(ValueError):
        cache.evict(1)


def test_token_and_segment_keys_share_exactly_the_common_full_blocks() -> None:
    doc = segment_id(3, 1, 0, 0)
    a = SegmentPrompt(((doc, 40), (segment_id(1, 1, 0), 30)))
    b = SegmentPrompt(((doc, 40), (segment_id(1, 1, 1), 30)))
    ka, kb = a.block_keys(BS), b.block_keys(BS)
    assert len(ka) == 70 // BS
    assert ka[:2] == kb[:2] and ka[2] != kb[2]  # block 2 holds the document's tail and each question's head
    ta, tb = TokenPrompt(tuple(a.token_ids(1000))), TokenPrompt(tuple(b.token_ids(1000)))
    assert ta.num_tokens == 70
    kta, ktb = ta.block_keys(BS), tb.block_keys(BS)
    assert kta[:2] == ktb[:2] and kta[2] != ktb[2]  # the same sharing from the token ids
    assert segment_tokens(doc, 40, 1000).tolist() == a.token_ids(1000)[:40]


# ---------------------------------------------------------------- the scheduler


def _drain(sched: Scheduler, now: float = 0.0) -> list:
    """Run the scheduler step by step until it is idle; return the outcomes."""
    out = []
    while sched.has_work:
        plan = sched.step(now)
        now += 1.0
        out += sched.on_step_done(plan, now)
        check_accounting(sched)
    return out


@pytest.mark.parametrize("policy", ["paged", "reserve"])
def test_second_request_prefills_only_what_the_cache_lacks(policy: str) -> None:
    doc = (segment_id(9), 100)
    sched = Scheduler(SchedulerConfig(kv_budget_tokens=1024, policy=policy, prefix_caching=True))
    sched.add_request(Request("a", 0.0, 120, 4, 4, content=SegmentPrompt((doc, (segment_id(1), 20)))), 0.0)
    first = _drain(sched)
    assert first[0].cached_prompt_tokens == 0
    sched.add_request(Request("b", 10.0, 120, 4, 4, content=SegmentPrompt((doc, (segment_id(2), 20)))), 10.0)
    plan = sched.step(10.0)
    assert plan.cached == {"b": 96} and plan.prefill == [("b", 24)]  # 6 full document blocks reused
    check_accounting(sched)
    done = sched.on_step_done(plan, 11.0) + _drain(sched, 11.0)
    assert done[-1].cached_prompt_tokens == 96
    assert done[-1].to_record()["cached_prompt_tokens"] == 96


def test_identical_prompt_still_computes_its_last_token() -> None:
    same = SegmentPrompt(((segment_id(4), 64),))
    sched = Scheduler(SchedulerConfig(kv_budget_tokens=1024, policy="paged", prefix_caching=True))
    sched.add_request(Request("a", 0.0, 64, 2, 2, content=same), 0.0)
    _drain(sched)
    sched.add_request(Request("b", 5.0, 64, 2, 2, content=same), 5.0)
    plan = sched.step(5.0)
    assert plan.cached == {"b": 48} and plan.prefill == [("b", 16)]  # the last block is recomputed for its logits


def test_caching_off_reports_no_cached_tokens() -> None:
    sched = Scheduler(SchedulerConfig(kv_budget_tokens=1024))
    sched.add_request(Request("a", 0.0, 64, 2, 2, content=SegmentPrompt(((segment_id(4), 64),))), 0.0)
    out = _drain(sched)
    assert out[0].cached_prompt_tokens is None and "cached_prompt_tokens" not in out[0].to_record()


def test_eviction_frees_unheld_blocks_least_recent_first() -> None:
    # 8 blocks in all; each prompt of 64 tokens caches 4 blocks
    sched = Scheduler(SchedulerConfig(kv_budget_tokens=8 * BS, policy="paged", prefix_caching=True))
    prompts = [SegmentPrompt(((segment_id(50 + i), 64),)) for i in range(3)]
    for i, p in enumerate(prompts):
        sched.add_request(Request(str(i), float(i), 64, 1, 1, content=p), float(i))
        _drain(sched, float(i))
    assert sched.evictions == 4  # the third prompt needed the first one's blocks
    sched.add_request(Request("again0", 9.0, 64, 1, 1, content=prompts[0]), 9.0)
    assert sched.step(9.0).cached == {"again0": 0}
    sched = Scheduler(SchedulerConfig(kv_budget_tokens=8 * BS, policy="paged", prefix_caching=True))
    for i, p in enumerate(prompts[:2]):
        sched.add_request(Request(str(i), float(i), 64, 1, 1, content=p), float(i))
        _drain(sched, float(i))
    sched.add_request(Request("again1", 9.0, 64, 1, 1, content=prompts[1]), 9.0)
    plan = sched.step(9.0)
    assert plan.cached == {"again1": 48}  # its own blocks were the most recent: still cached
    assert sched.evictions == 1  # its recomputed last block took the least recent one (prompt 0's tail)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(["paged", "reserve"]), budget_blocks=st.integers(8, 40),
       groups=st.integers(1, 4), prefix=st.integers(0, 80), own=st.lists(st.integers(1, 40), min_size=1,
                                                                         max_size=14),
       outputs=st.integers(1, 12), batch=st.sampled_from([None, 24, 64]), seed=st.integers(0, 2**16))
def test_kv_never_over_budget_and_refcounts_consistent(policy: str, budget_blocks: int, groups: int, prefix: int,
                                                       own: list[int], outputs: int, batch: int | None,
                                                       seed: int) -> None:
    rng = np.random.default_rng(seed)
    sched = Scheduler(SchedulerConfig(kv_budget_tokens=budget_blocks * BS, policy=policy, prefix_caching=True,
                                      max_num_batched_tokens=batch, max_num_seqs=6))
    pending = []
    for i, n in enumerate(own):
        segs = ((segment_id(7, int(rng.integers(groups))), prefix),) if prefix else ()
        content = SegmentPrompt(segs + ((segment_id(8, i), n),))
        pending.append(Request(str(i), float(i // 3), prefix + n, outputs, int(rng.integers(1, outputs + 1)),
                               content=content))
    now, ended = 0.0, 0
    while pending or sched.has_work:
        while pending and pending[0].arrival_s <= now:
            if sched.add_request(pending.pop(0), now) is not None:
                ended += 1
        plan = sched.step(now)
        check_accounting(sched)
        ended += len(plan.ended)
        if rng.random() < 0.1 and sched.num_running:  # a client gives up mid-run
            victim = str(rng.choice([r for r, _ in plan.prefill] + plan.decode or ["none"]))
            ended += sched.cancel(victim, now) is not None
        now += 0.5
        ended += len(sched.on_step_done(plan, now))
        check_accounting(sched)
    assert ended == len(own)
    assert sched.kv_tokens_used == 0 and sched.kv_tokens_held == 0  # every cached block is unheld at the end


# ---------------------------------------------------------------- simulations


def _scenario(*, caching: bool, shared: bool = True, budget_tokens: int = 40_000, groups: int = 4,
              rate: float = 2.0, n: int = 400, lane: str = "shared") -> dict:
    cls = {"name": "rag", "prompt": {"kind": "fixed", "value": 1600},
           "output": {"kind": "lognormal", "median": 80, "sigma": 0.4, "min_tokens": 8, "max_tokens": 200},
           "max_output_tokens": 200}
    if shared:
        cls["shared_prefix"] = {"tokens": 1500, "groups": groups}
    return {"name": "pc", "seed": 3,
            "server": {"policy": "paged", "kv_budget_tokens": budget_tokens, "max_num_seqs": 64,
                       "max_num_batched_tokens": 2048, "prefix_caching": caching, "prefill_lane": lane},
            "step_model": {"base_s": 0.01, "per_prefill_token_s": 0.0001, "per_decode_seq_s": 0.0002},
            "workload": {"arrival": {"kind": "poisson", "rate_rps": rate}, "num_requests": n, "classes": [cls]}}


def _report(data: dict):
    result = simulate(parse_scenario(data))
    return result, build_report(result.records, result.window_start_s, result.window_end_s)


@pytest.mark.parametrize("lane", ["shared", "separate"])
def test_shared_prefix_hits_what_the_workload_allows_and_cuts_ttft_not_tpot(lane: str) -> None:
    on, rep_on = _report(_scenario(caching=True, lane=lane))
    off, rep_off = _report(_scenario(caching=False, lane=lane))
    assert on.status_counts()["success"] == off.status_counts()["success"] == 400
    pc = rep_on.prefix_cache
    assert pc is not None and rep_off.prefix_cache is None
    allowed = (1500 // BS) * BS / 1600  # full blocks of the shared document
    assert allowed - 0.02 < pc.token_hit_rate <= allowed
    assert pc.requests_with_hit >= 400 - 12  # misses: only requests admitted before their document was cached
    assert rep_on.ttft_s.at(50) < 0.5 * rep_off.ttft_s.at(50)
    tpot_on, tpot_off = rep_on.request_tpot_s.at(50), rep_off.request_tpot_s.at(50)
    if lane == "separate":  # decode steps never carry prefill: caching leaves TPOT as it was
        assert tpot_on == pytest.approx(tpot_off, rel=0.02)
    else:  # fewer prompt tokens share the decoders' steps: TPOT can only improve
        assert tpot_on <= tpot_off
    assert pc.ttft_hit_s.at(50) < pc.ttft_miss_s.at(50)
    assert pc.estimated_prefill_saved_s is not None and pc.estimated_prefill_saved_s > 0
    # the same workload: identical arrivals, prompts and output lengths
    assert on.records.start.tolist() == off.records.start.tolist()
    assert on.records.prompt_tokens.tolist() == off.records.prompt_tokens.tolist()


def test_cold_prompts_never_hit() -> None:
    result, rep = _report(_scenario(caching=True, shared=False, n=150))
    assert rep.prefix_cache is not None
    assert rep.prefix_cache.token_hit_rate == 0 and rep.prefix_cache.requests_with_hit == 0
    assert rep.prefix_cache.ttft_hit_s.n == 0 and rep.prefix_cache.ttft_hit_s.at(50) is None


def test_cache_smaller_than_the_working_set_evicts_and_hits_less() -> None:
    # 12 documents of 1,500 tokens (18,000 tokens) do not fit a 6,000-token cache beside the running requests
    small, rep_small = _report(_scenario(caching=True, budget_tokens=6000, groups=12, n=300, rate=1.0))
    big, rep_big = _report(_scenario(caching=True, budget_tokens=40_000, groups=12, n=300, rate=1.0))
    assert small.prefix_evictions > big.prefix_evictions  # the big cache evicts only questions' blocks
    assert rep_big.prefix_cache.token_hit_rate > 0.85
    assert rep_small.prefix_cache.token_hit_rate < rep_big.prefix_cache.token_hit_rate - 0.2


def test_conversation_turns_follow_the_previous_answer_and_reuse_the_history() -> None:
    data = _scenario(caching=True, shared=False, n=60, rate=0.5)
    cls = data["workload"]["classes"][0]
    cls["prompt"] = {"kind": "fixed", "value": 100}
    cls["conversation"] = {"turns": 3, "think_s": 2.0}
    sc = parse_scenario(data)
    wl = generate_workload(sc.workload, sc.rng())
    prev = wl.prev_turn
    assert prev is not None and (prev >= 0).sum() == 40
    i = int(np.flatnonzero(prev >= 0)[0])
    p = int(prev[i])
    assert wl.prompt_tokens[i] == wl.prompt_tokens[p] + wl.output_tokens[p] + 100
    result, rep = _report(data)
    recs = result.records
    assert recs.start[i] == pytest.approx(recs.end[p] + 2.0)
    assert recs.cached_prompt_tokens[i] == (int(wl.prompt_tokens[p]) // BS) * BS  # the previous prompt, in blocks
    assert rep.prefix_cache.token_hit_rate > 0.4


def test_prompt_shorter_than_its_shared_prefix_is_refused() -> None:
    data = _scenario(caching=True)
    data["workload"]["classes"][0]["prompt"] = {"kind": "uniform", "low": 1000, "high": 2000}
    with pytest.raises(ConfigError, match="at least 1500 tokens"):
        parse_scenario(data)


# ---------------------------------------------------------------- records and importers


def test_records_take_cached_prompt_tokens_up_to_the_prompt(tmp_path) -> None:
    from servebench.errors import RecordValidationError
    from servebench.records.loaders import load_table

    path = tmp_path / "r.csv"
    path.write_text("start,end,first_token,status,output_tokens,prompt_tokens,cached_prompt_tokens\n"
                    "0,1,0.5,success,3,100,96\n0,1,,failed,0,50,\n", encoding="utf-8")
    table, _, _ = load_table(path)
    assert table.cached_prompt_tokens.tolist() == [96, -1]
    assert table.to_dicts()[0]["cached_prompt_tokens"] == 96 and "cached_prompt_tokens" not in table.to_dicts()[1]
    path.write_text("start,end,status,prompt_tokens,cached_prompt_tokens\n0,1,failed,50,51\n", encoding="utf-8")
    with pytest.raises(RecordValidationError, match=r"row 1, field 'cached_prompt_tokens': Invalid cached prompt "
                                                    r"tokens: '51' must be between 0 and prompt_tokens 50"):
        load_table(path)


def test_genai_perf_export_carries_the_usage_cached_tokens() -> None:
    from pathlib import Path

    from servebench.records.importers import import_bytes
    from servebench.records.loaders import to_table

    raw = (Path(__file__).parent / "data" / "importers" / "genai-perf-profile_export.json").read_text()
    old = '\\"usage\\":{\\"prompt_tokens\\":12,'
    assert old in raw
    raw = raw.replace(old, '\\"usage\\":{\\"prompt_tokens_details\\":{\\"cached_tokens\\":8},\\"prompt_tokens\\":12,')
    table, ws, we = to_table(import_bytes(raw.encode(), "g.json", "genai-perf"))
    row = table.to_dicts()[0]
    assert (row["prompt_tokens"], row["cached_prompt_tokens"]) == (12, 8)
    assert build_report(table, ws, we).prefix_cache.token_hit_rate is not None


def test_html_report_and_summarize_json_show_the_prefix_cache(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from servebench.cli.core import app
    from servebench.output.site import RunInput, build_site
    from servebench.records.loaders import write_records

    result = simulate(parse_scenario(_scenario(caching=True, n=60)))
    path = tmp_path / "records.jsonl"
    write_records(result.records, path)
    out = CliRunner().invoke(app, ["summarize", str(path), "--json"])
    assert out.exit_code == 0, out.output
    pc = json.loads(out.stdout)["prefix_cache"]
    assert set(pc) >= {"prompt_tokens", "cached_prompt_tokens", "token_hit_rate", "requests_with_hit", "ttft_hit_s",
                       "ttft_miss_s", "estimated_prefill_saved_s"}
    assert pc["ttft_hit_s"]["percentiles"][0]["q"] == 50 and pc["token_hit_rate"] > 0.8
    text = CliRunner().invoke(app, ["summarize", str(path)]).output
    assert "Prefix cache" in text and "token hit rate" in text
    run = RunInput(name="sim", path=str(path), kind="records", table=result.records,
                   window_start=result.window_start_s, window_end=result.window_end_s)
    html = next(v.decode() for k, v in build_site([run]).items() if k.startswith("run-"))
    assert '<section id="prefix_cache">' in html and "token hit rate (cached / prompt)" in html
    off = simulate(parse_scenario(_scenario(caching=False, n=20)))
    write_records(off.records, path)
    assert json.loads(CliRunner().invoke(app, ["summarize", str(path), "--json"]).stdout)["prefix_cache"] is None


# ---------------------------------------------------------------- the dashboard


def test_cache_experiment_shows_both_runs_and_reveals_the_answer() -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/cache.py").run()
    assert not at.exception
    labels = {m.label: m.value for m in at.metric}
    assert labels["Token hit rate"].endswith("%") and labels["Best the workload allows"] == "80%"
    at.number_input(key="cache_quiz_ttft").set_value(-60.0)
    at.button(key="cache_quiz_reveal").click().run()
    assert not at.exception
    assert any("TTFT p50" in s.value and "TPOT p50" in s.value for s in at.success)
    at.radio(key="cache_workload").set_value("cold").run()
    assert not at.exception
    cold = {m.label: m.value for m in at.metric}
    assert cold["Best the workload allows"] == "0%"
    assert float(cold["Token hit rate"].rstrip("%")) < 1  # only preempted requests finding their own blocks


def test_kv_calculator_shows_concurrency_with_the_prefix_held_once() -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/kv.py").run()
    assert not at.exception
    labels = {m.label: m.value for m in at.metric}
    assert labels["Max concurrent sequences, prefix per request"] == "8"
    assert labels["Max concurrent sequences, prefix held once"] == "58"


def test_diagnosis_names_prefix_caching_when_prefill_dominates_and_prompts_share() -> None:
    from servebench.analysis.diagnosis import diagnose_records

    # prefill-heavy: long prompts, light load, caching on shows how much the prompts share
    data = _scenario(caching=True, rate=0.5, n=120)
    result = simulate(parse_scenario(data))
    verdict = diagnose_records(result.records, result.window_start_s, result.window_end_s)
    assert verdict.measurements.shared_prefix_share > 0.8
    assert verdict.prefill_share_of_ttft > 0.5
    assert "prefix caching" in verdict.experiment.action
    cold = simulate(parse_scenario(_scenario(caching=True, shared=False, rate=0.5, n=120)))
    other = diagnose_records(cold.records, cold.window_start_s, cold.window_end_s)
    assert "Turn prefix caching on" not in other.experiment.action  # nothing shared: not the experiment


def test_a_folder_of_record_files_keeps_cached_prompt_tokens(tmp_path) -> None:
    from servebench.records.loaders import write_records
    from servebench.records.recordset import find_parts, read_set, table_of_set

    result = simulate(parse_scenario(_scenario(caching=True, n=40)))
    write_records(result.records.take(np.arange(20)), tmp_path / "a.jsonl")
    write_records(result.records.take(np.arange(20, 40)), tmp_path / "b.jsonl")
    table = table_of_set(read_set(find_parts(tmp_path)), "set")[0]
    assert sorted(table.cached_prompt_tokens.tolist()) == sorted(result.records.cached_prompt_tokens.tolist())


def test_cache_experiment_leads_with_one_sentence_and_shows_times_in_ms() -> None:
    """The page answers first ('cuts TTFT p50 by 73%'), and its times read in milliseconds, not 0.0141 s."""
    from streamlit.testing.v1 import AppTest

    from servebench.output.figures.markdown_table import markdown_tables

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/cache.py").run()
    assert not at.exception
    lead = at.success[0].value
    m = {m.label: m.value for m in at.metric}
    assert lead.startswith(f"**Prefix caching serves {m['Token hit rate']} of prompt tokens from the cache, cuts "
                           "TTFT p50 by ")
    assert f"to {m['TTFT p50 with caching']})" in lead and m["TTFT p50 with caching"].endswith(" ms")
    table = next(t for t in markdown_tables(x.value for x in at.markdown) if "metric" in t.columns)
    assert "TTFT p50, ms" in set(table["metric"]) and not any(str(x).endswith(", s") for x in table["metric"])
    row = table.set_index("metric").loc["TTFT p50, ms", "caching on"]
    assert f"{row} ms" == m["TTFT p50 with caching"]
