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
    from servebench.serving.scenario import (with_kv_budget_tokens, with_max_num_seqs, with_mix, with_model,
                                             with_policy, with_rate)

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
