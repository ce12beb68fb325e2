"""The scenario's ``fleet:`` key: one replica by default, strict fields, prefix_affinity needs caching."""

from __future__ import annotations

import pytest

from servebench.errors import ConfigError
from servebench.serving.scenario import FleetSpec, parse_scenario

BASE = {"server": {"kv_budget_tokens": 1000}, "step_model": {"base_s": 0.01},
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 1.0}, "num_requests": 3,
                     "classes": [{"prompt": {"value": 10}, "output": {"value": 5}}]}}


def test_no_fleet_key_is_one_replica() -> None:
    assert parse_scenario(BASE).fleet is None
    assert FleetSpec() == FleetSpec(replicas=1, router="round_robin")


def test_a_fleet_is_read() -> None:
    fleet = parse_scenario({**BASE, "fleet": {"replicas": 4, "router": "power_of_two"}}).fleet
    assert fleet is not None and (fleet.replicas, fleet.router) == (4, "power_of_two")


@pytest.mark.parametrize(("fleet", "message"), [
    ({"replicas": 0}, "field 'fleet.replicas': Input should be greater than or equal to 1, got 0"),
    ({"replicas": 257}, "field 'fleet.replicas': Input should be less than or equal to 256, got 257"),
    ({"replicas": True}, "field 'fleet.replicas': Input should be a valid integer, got True"),
    ({"router": "random"}, "field 'fleet.router': Input should be 'round_robin'"),
    ({"replica": 2}, "field 'fleet.replica': Extra inputs are not permitted"),
    ({"replicas": 2, "router": "prefix_affinity"}, "turn on server.prefix_caching"),
    ({"affinity_slack_ratio": 0.5}, "field 'fleet.affinity_slack_ratio': Input should be greater than or equal to 1"),
])
def test_a_bad_fleet_is_one_line_naming_the_field(fleet: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        parse_scenario({**BASE, "fleet": fleet}, "f.yaml")
    assert message in str(info.value) and str(info.value).startswith("f.yaml, field ")
    assert "\n" not in str(info.value)


def test_prefix_affinity_with_caching_is_accepted() -> None:
    server = {**BASE["server"], "prefix_caching": True}
    fleet = parse_scenario({**BASE, "server": server, "fleet": {"replicas": 2, "router": "prefix_affinity"}}).fleet
    assert fleet is not None and fleet.router == "prefix_affinity"
