"""Scenario files from disk and from an upload's bytes: one parser, one error per problem naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.errors import ConfigError
from servebench.serving.scenario import Scenario, load_scenario, scenario_from_bytes, with_request_count

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios"


def test_upload_bytes_give_the_same_scenario_as_the_file() -> None:
    path = SAMPLES / "profile_b.yaml"
    from_file = load_scenario(path)
    assert scenario_from_bytes(path.read_bytes(), "profile_b.yaml") == from_file
    as_json = json.dumps(yaml.safe_load(path.read_text())).encode()
    assert scenario_from_bytes(as_json, "b.json") == from_file
    assert scenario_from_bytes(b"\xef\xbb\xbf" + path.read_bytes(), "bom.yaml") == from_file  # a BOM is fine


@pytest.mark.parametrize(("data", "name", "message"), [
    (b"\xff\xfe", "s.yaml", "s.yaml: not UTF-8 text (byte 0xff at offset 0)"),
    (b"a: [1,", "s.yaml", "s.yaml: not valid YAML"),
    (b"{'a': 1}", "s.json", "s.json: not valid JSON"),
    (b"- 1\n- 2\n", "s.yaml", "s.yaml: a scenario must be a mapping, got list"),
    (b"", "empty.yaml", "empty.yaml: a scenario must be a mapping, got NoneType"),
    (b"name: x\nseed: -1\n", "s.yaml", "s.yaml, field 'seed'"),
])
def test_a_bad_upload_is_one_config_error_naming_the_file(data: bytes, name: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        scenario_from_bytes(data, name)
    assert str(exc.value).startswith(message)


def test_a_file_on_disk_keeps_its_messages(tmp_path: Path) -> None:
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n")
    with pytest.raises(ConfigError, match=r"list\.yaml: a scenario must be a mapping, got list"):
        load_scenario(bad)
    with pytest.raises(ConfigError, match="cannot read scenario"):
        load_scenario(tmp_path / "missing.yaml")


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)), st.sampled_from(["u.yaml", "u.json"]))
def test_any_bytes_give_a_scenario_or_a_config_error(data: bytes, name: str) -> None:
    try:
        assert isinstance(scenario_from_bytes(data, name), Scenario)
    except ConfigError as exc:
        assert str(exc).startswith(name)


def test_request_count_replaces_a_duration_limit() -> None:
    base = load_scenario(SAMPLES / "profile_b.yaml")
    five = with_request_count(base, 5)
    assert five.workload.num_requests == 5 and five.workload.duration_s is None
    assert five.server == base.server and base.workload.num_requests != 5


def test_scenario_edits_are_validated_as_a_whole() -> None:
    from servebench.capacity.kv import ModelShape
    from servebench.serving.scenario import (
        with_kv_budget_tokens,
        with_max_num_seqs,
        with_mix,
        with_model,
        with_policy,
        with_rate,
    )

    base = load_scenario(SAMPLES / "profile_b.yaml")
    paged = with_policy(with_max_num_seqs(base, 8), "paged")
    assert (paged.server.policy, paged.server.max_num_seqs, base.server.policy) == ("paged", 8, "reserve")
    tokens = with_kv_budget_tokens(base, 4096)
    assert tokens.server.budget_tokens() == 4096 and tokens.server.model is None
    shaped = with_model(tokens, ModelShape(layers=32, kv_heads=8, head_dim=128), 8.0)
    assert shaped.server.budget_tokens() == 65536 and shaped.server.kv_budget_tokens is None  # the spec's 8 GiB
    assert with_rate(base, 2.5).workload.arrival.rate_rps == 2.5
    mixed = with_mix(base, [{"name": "review", "weight": 3, "prompt_tokens": 7800, "output_tokens": 200,
                             "output_cap": None}, {"name": "hint", "weight": 1, "prompt_tokens": 100,
                                                   "output_tokens": 20, "output_cap": 40}])
    assert [(c.name, c.weight, c.prompt.value, c.max_output_tokens) for c in mixed.workload.classes] == [
        ("review", 3, 7800, None), ("hint", 1, 100, 40)]
    with pytest.raises(ConfigError, match=r"with max_num_seqs 0, field 'server.max_num_seqs'"):
        with_max_num_seqs(base, 0)
    with pytest.raises(ConfigError, match="needs at least one class"):
        with_mix(base, [])
    with pytest.raises(ConfigError, match=r"an edited workload mix, field 'workload.classes.0.prompt'.*needs 'value'"):
        with_mix(base, [{"name": "x", "weight": 1, "prompt_tokens": None, "output_tokens": 5}])


def test_an_edit_keeps_a_tenant_class_slice() -> None:
    # a class that names a tenant and no name writes the tenant as its slice; an edit validated as a
    # whole once dumped every default ("name: default") and so wrote "default" instead
    from servebench.serving.scenario import with_policy

    base = load_scenario(SAMPLES / "two_tenants.yaml")
    for edited in (with_policy(base, "paged"), with_request_count(base, 40)):
        assert [c.slice_name for c in edited.workload.classes] == ["batch", "chat"]
        assert edited.server.tenants == base.server.tenants


def test_server_spec_is_the_scheduler_config_with_the_scenario_fields() -> None:
    # one model: the scenario's server states no scheduler field again, and its limits reach the scheduler as given
    from servebench.serving.scenario import ServerSpec
    from servebench.serving.scheduler import SchedulerConfig, TenantLimit

    assert issubclass(ServerSpec, SchedulerConfig)
    own = set(ServerSpec.model_fields) - set(SchedulerConfig.model_fields)
    assert own == {"model", "kv_budget_gib", "prefill_lane"}
    for name, info in SchedulerConfig.model_fields.items():
        if name != "kv_budget_tokens":  # optional in a scenario: a model shape and GiB may give it
            assert repr(ServerSpec.model_fields[name]) == repr(info)  # inherited, not stated again
    sc = load_scenario(SAMPLES / "two_tenants.yaml")
    config = sc.server.scheduler_config()
    assert type(config) is SchedulerConfig and config.tenants["chat"] == TenantLimit(max_running=1, weight=1)
    assert {n: getattr(config, n) for n in SchedulerConfig.model_fields} == \
        {n: getattr(sc.server, n) for n in SchedulerConfig.model_fields}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.fixed_dictionaries({}, optional={
    "policy": st.sampled_from(["reserve", "paged"]), "max_num_seqs": st.integers(1, 64),
    "max_waiting": st.integers(1, 100), "block_size_tokens": st.integers(1, 64), "chunked_prefill": st.booleans(),
    "max_num_batched_tokens": st.integers(1, 4096), "timeout_s": st.floats(0.5, 100), "prefix_caching": st.booleans(),
    "scheduling": st.sampled_from(["fcfs", "fair"]), "admission": st.fixed_dictionaries({"max_queue_wait_s": st.floats(0.1, 9)}),
    "tenants": st.dictionaries(st.sampled_from(["a", "b"]), st.fixed_dictionaries({}, optional={
        "max_running": st.integers(1, 4), "weight": st.floats(0.1, 10)}), max_size=2)}),
    st.integers(64, 100_000))
def test_a_server_reaches_the_scheduler_as_the_file_gives_it(server: dict, budget: int) -> None:
    from servebench.serving.scenario import parse_scenario
    from servebench.serving.scheduler import Scheduler

    doc = {"server": {"kv_budget_tokens": budget, **server}, "step_model": {},
           "workload": {"arrival": {"rate_rps": 1}, "num_requests": 1,
                        "classes": [{"prompt": {"kind": "fixed", "value": 1}, "output": {"kind": "fixed", "value": 1}}]}}
    config = parse_scenario(doc).server.scheduler_config()
    assert config.kv_budget_tokens == budget
    for name, value in server.items():
        got = getattr(config, name)
        assert (got.model_dump(exclude_unset=True) if name == "admission" else
                {k: t.model_dump(exclude_unset=True) for k, t in got.items()} if name == "tenants" else got) == value
    assert config.max_queue_wait_s == server.get("admission", {}).get("max_queue_wait_s")
    Scheduler(config)  # and the scheduler takes it


def test_a_paged_budget_short_of_one_block_is_refused_with_the_file(tmp_path: Path) -> None:
    # the scheduler's own rule, now checked when the scenario is read (it used to surface at the first simulation)
    path = tmp_path / "tiny.yaml"
    doc = yaml.safe_load((SAMPLES / "profile_b.yaml").read_text())
    doc["server"] = {"policy": "paged", "kv_budget_tokens": 8}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert str(err.value) == f"{path}, field 'server': Value error, kv_budget_tokens 8 holds no 16-token block"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.fixed_dictionaries({}, optional={name: st.floats(0, 0.5) for name in (
    "base_s", "per_prefill_token_s", "per_prefill_seq_s", "per_decode_seq_s", "per_kv_token_s", "arrival_lag_s",
    "emit_lead_s", "wake_s")} | {"noise_factors": st.lists(st.floats(0.5, 2), max_size=4).map(tuple)}),
    st.none() | st.tuples(st.floats(0, 5), st.integers(1, 10_000), st.floats(0, 0.1)))
def test_a_step_model_spec_is_the_step_model_with_flat_timings(fields: dict, flat: tuple | None) -> None:
    from servebench.capacity.stepmodel import STEP_COEFFICIENTS, StepModel
    from servebench.serving.scenario import FlatStep, StepModelSpec

    assert set(StepModelSpec.model_fields) - set(StepModel.model_fields) == {"flat"}
    spec = StepModelSpec(**fields, flat=None if flat is None else FlatStep(prefill_s=flat[0], prompt_tokens=flat[1],
                                                                            tpot_s=flat[2]))
    model = spec.to_model()
    assert type(model) is StepModel
    want = StepModel(**fields)
    if flat is not None:  # the coefficients come from the flat timings, everything else as given
        want = want.model_copy(update={n: getattr(StepModel.from_flat(*flat), n) for n in STEP_COEFFICIENTS})
    assert model == want


def test_server_and_client_edits_are_validated_as_a_whole() -> None:
    # the experiments' variants (prefill, scheduling, retries and shedding) edit through the same path as the pages
    from servebench.serving.retry import ClientSpec
    from servebench.serving.scenario import with_client, with_server

    base = load_scenario(SAMPLES / "two_tenants.yaml")
    fair = with_server(base, scheduling="fair", admission={"max_queue_wait_s": 2.0})
    assert (fair.server.scheduling, fair.server.scheduler_config().max_queue_wait_s) == ("fair", 2.0)
    assert with_server(fair, admission=None).server.admission is None
    assert with_client(base, ClientSpec(max_attempts=3)).client.max_attempts == 3
    assert with_client(with_client(base, ClientSpec(max_attempts=3)), None).client is None
    with pytest.raises(ConfigError, match=r"with max_num_seqs 0, field 'server.max_num_seqs': Input should be greater"):
        with_server(base, max_num_seqs=0)
    with pytest.raises(ConfigError, match=r"field 'server.tenants.chat.max_running'"):
        with_server(base, tenants={"chat": {"max_running": 0}})
