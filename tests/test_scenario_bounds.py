"""Hostile scenario files: every count bounded by what a run can use, strict types, no key twice, finite numbers."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import SAMPLE_DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.errors import ConfigError
from servebench.serving.scenario import load_scenario, parse_scenario, with_request_count
from servebench.serving.sweep import sweep
from servebench.serving.workload import (
    LARGE_GROUPS,
    MAX_GENERATED,
    LengthSpec,
    SharedPrefixSpec,
    WorkloadSpec,
    draw_workload,
)

BASE = {
    "name": "hostile", "seed": 1,
    "server": {"policy": "paged", "kv_budget_tokens": 65536, "max_num_seqs": 64, "chunked_prefill": True},
    "step_model": {"base_s": 0.01, "per_prefill_token_s": 1e-5, "per_decode_seq_s": 1e-4},
    "workload": {"arrival": {"kind": "poisson", "rate_rps": 2.0}, "num_requests": 600,
                 "classes": [{"name": "chat", "prompt": {"kind": "fixed", "value": 200},
                              "output": {"kind": "fixed", "value": 20}}]},
}


def edited(**paths: object) -> dict:
    """Return BASE with dotted paths set (a value of None removes the key)."""
    doc = copy.deepcopy(BASE)
    for path, value in paths.items():
        *head, last = path.split("__")
        node = doc
        for part in head:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is None:
            node.pop(last)
        else:
            node[last] = value
    return doc


def refused(doc: dict, *needles: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_scenario(doc, "s.yaml")
    text = str(info.value)
    assert "\n" not in text and text.startswith("s.yaml")
    for needle in needles:
        assert needle in text, text
    return text


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize("groups", [10**12, 200_000_000])
def test_more_shared_prefix_groups_than_a_run_can_use_is_one_line(groups):
    doc = edited(workload__classes__0__shared_prefix={"tokens": 10, "groups": groups})
    refused(doc, "workload.classes.0.shared_prefix.groups", f"got {groups}", f"{MAX_GENERATED}")


def test_many_groups_cost_memory_for_the_requests_only():
    """5M groups for 600 requests: the draw held a weight and a CDF entry per group (80 MB); now a few blocks."""
    for zipf in (None, 1.0):
        spec = WorkloadSpec.model_validate(edited(
            workload__classes__0__shared_prefix={"tokens": 10, "groups": 5_000_000, "zipf": zipf})["workload"])
        tracemalloc.start()
        drawn = draw_workload(spec, np.random.default_rng(0))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(drawn) == 600 and peak < 30e6, peak
        assert 0 <= drawn.requests.prefix_group.min() and drawn.requests.prefix_group.max() < 5_000_000


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.one_of(st.none(), st.floats(0.3, 2.5)), st.integers(0, 2**32), st.integers(1, 3))
def test_a_large_group_draw_is_the_same_distribution_as_choice(zipf, seed, extra):
    """Above LARGE_GROUPS the inverse CDF, block by block, places the same uniforms where rng.choice would."""
    spec = SharedPrefixSpec(tokens=1, groups=LARGE_GROUPS * extra + 7, zipf=zipf)
    ours = spec.draw(2000, np.random.default_rng(seed))
    theirs = np.random.default_rng(seed).choice(spec.groups, size=2000, p=spec.group_weights())
    assert (ours == theirs).mean() >= 0.999


def test_request_and_user_counts_are_bounded_in_the_file_and_on_the_command_line():
    closed = edited(workload__arrival=None, workload__closed_loop={"users": 4}, workload__num_requests=10**12)
    refused(closed, "workload.num_requests")
    refused(edited(workload__arrival=None, workload__closed_loop={"users": 10**12}), "workload.closed_loop.users")
    refused(edited(workload__classes__0__conversation={"turns": 10**12}), "conversation.turns")
    with pytest.raises(ConfigError, match="at most 10,000,000"):
        with_request_count(parse_scenario(BASE), 10**12)
    many = edited(workload__classes=[BASE["workload"]["classes"][0]] * 10_001)
    refused(many, "workload.classes")


def test_lengths_are_bounded_and_a_wild_lognormal_never_wraps_negative():
    refused(edited(workload__classes__0__prompt={"kind": "fixed", "value": 10**15}), "prompt.value")
    wild = LengthSpec(kind="lognormal", median=100, sigma=500)
    drawn = wild.draw(1000, np.random.default_rng(0))
    assert drawn.min() >= 1 and drawn.max() <= 100_000_000


def test_weights_near_the_float_maximum_keep_their_ratio():
    two = [dict(BASE["workload"]["classes"][0], name=n, weight=1e308) for n in ("a", "b")]
    spec = WorkloadSpec.model_validate(edited(workload__classes=two)["workload"])
    share = (draw_workload(spec, np.random.default_rng(0)).requests.class_index == 0).mean()
    assert 0.4 < share < 0.6


# --------------------------------------------------------------------------- times


@pytest.mark.parametrize("rate", [1e-300, 1e-7])
def test_a_rate_that_spreads_the_run_past_float_precision_is_refused(rate):
    refused(edited(workload__arrival={"kind": "poisson", "rate_rps": rate}), "rate_rps", "give a rate of at least")


def test_sweep_refuses_such_a_rate_before_simulating_anything():
    with pytest.raises(ConfigError, match=r"rate 1e-300 requests/s: .*past 1e\+09 s"):
        sweep(parse_scenario(BASE), [1e-300, 1.0], requests=100)


def test_sweep_cli_rates_1e_300_is_one_line_and_fast(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    res = subprocess.run([sys.executable, "-m", "servebench", "sweep", str(path), "-o", str(tmp_path / "out"),
                          "--rates", "1e-300"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "1e-300" in res.stderr
    assert not (tmp_path / "out" / "sweep.json").exists()


@pytest.mark.parametrize("path,value", [("workload__arrival", {"kind": "poisson", "rate_rps": float("inf")}),
                                        ("server__timeout_s", float("nan")), ("workload__duration_s", 1e300)])
def test_times_are_finite_and_bounded(path, value):
    refused(edited(**{path: value}), path.split("__")[1])


# --------------------------------------------------------------------------- types and keys


@pytest.mark.parametrize("path,value,says", [
    ("server__chunked_prefill", "yes", "valid boolean, got 'yes'"),
    ("server__max_num_seqs", True, "valid integer, got True"),
    ("workload__num_requests", 600.0, "valid integer, got 600.0"),
    ("workload__arrival", {"kind": "poisson", "rate_rps": "2"}, "valid number, got '2'"),
])
def test_nothing_is_coerced(path, value, says):
    refused(edited(**{path: value}), says)


def test_a_retrying_client_takes_a_whole_number_of_attempts():
    refused(edited(client={"max_attempts": True}), "client.max_attempts", "got True")


def test_lists_still_fill_tuple_fields_and_every_sample_scenario_loads():
    doc = edited(step_model={"base_s": 0.01, "noise_factors": [0.9, 1.1], "arrival_lags_s": [0.001]},
                 server={"policy": "paged", "max_num_seqs": 8, "kv_budget_gib": 1,
                         "model": {"layers": 2, "kv_heads": 2, "head_dim": 64,
                                   "sliding_window": 64, "layer_pattern": ["local", "global"]}})
    sc = parse_scenario(doc)
    assert sc.step_model.noise_factors == (0.9, 1.1) and sc.server.model.layer_pattern == ("local", "global")
    for path in sorted((SAMPLE_DATA / "scenarios").glob("*.yaml")):
        load_scenario(path)


def test_a_key_given_twice_is_refused_in_yaml_and_json(tmp_path: Path):
    text = yaml.safe_dump(BASE).replace("name: hostile\n", "name: hostile\nseed: 3\n", 1)
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"s.yaml, line \d+: key 'seed' appears twice in one mapping \(first on"):
        load_scenario(tmp_path / "s.yaml")
    body = json.dumps(BASE)
    (tmp_path / "s.json").write_text(body[:-1] + ', "seed": 9}')
    with pytest.raises(ConfigError, match="s.json: key 'seed' appears twice"):
        load_scenario(tmp_path / "s.json")
    merged = "base: &b {policy: paged, kv_budget_tokens: 64}\n" + yaml.safe_dump(BASE).replace(
        "server:\n", "server:\n  <<: *b\n", 1)
    (tmp_path / "m.yaml").write_text(merged.replace("base: &b", "x-base: &b"))
    with pytest.raises(ConfigError, match="x-base"):  # a merge key may be overridden; the unknown key is refused
        load_scenario(tmp_path / "m.yaml")


def test_yaml_aliases_that_repeat_a_list_cost_nothing_to_check():
    bomb = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
    for i in range(1, 12):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]\n"
    doc = yaml.safe_load(bomb)
    with pytest.raises(ConfigError, match="field 'a'"):  # refused as an unknown field, at once
        parse_scenario({**BASE, **doc}, "s.yaml")


def test_tenants_are_bounded_as_classes_are():
    tenants = {f"t{i}": {"max_running": 1} for i in range(10_001)}
    refused(edited(server={**BASE["server"], "tenants": tenants}), "server.tenants")


def test_the_planner_simulates_at_most_a_runs_worth_of_requests():
    from servebench.analysis.summary import SLO
    from servebench.capacity.model_presets import get_preset
    from servebench.planning import PlanRequest, Workload
    with pytest.raises(ValueError, match="requests_per_simulation"):
        PlanRequest(model=get_preset("llama-3.1-8b"), workload=Workload.fixed(10, 10), slo=SLO(ttft_s=1.0),
                    requests_per_simulation=10**12)


def test_load_reads_its_workload_file_as_strictly_as_a_scenario(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from servebench.cli import main
    path = tmp_path / "w.yaml"
    path.write_text("classes:\n  - {name: a, prompt: {value: 10}, output: {value: 5}}\n"
                    "classes:\n  - {name: b, prompt: {value: 10}, output: {value: 5}}\n")
    with pytest.raises(SystemExit) as stop:
        main(["load", "http://127.0.0.1:9/v1", "--workload", str(path), "--requests", "1", "-o", str(tmp_path / "out")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "w.yaml, line 3: key 'classes' appears twice in one mapping" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before anything was sent or written
