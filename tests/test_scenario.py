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
