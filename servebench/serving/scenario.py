"""A simulation scenario (server limits, step-time model, workload), loaded from YAML or JSON.

    name: profile_b
    seed: 1
    server:
      policy: reserve                 # or paged
      model: {layers: 32, kv_heads: 8, head_dim: 128, bytes_per_element: 2}
      kv_budget_gib: 8                # or kv_budget_tokens: 65536
      timeout_s: 20
      prefill_lane: separate          # the spec's flat timings; shared: prefill inside the step
    step_model: {flat: {prefill_s: 1.2, prompt_tokens: 7800, tpot_s: 0.031}}
    workload:
      arrival: {kind: poisson, rate_rps: 1.0}
      num_requests: 300
      classes:
        - {name: review, prompt: {kind: fixed, value: 7800}, output: {kind: fixed, value: 200}}

A fleet of identical replicas behind a router: ``fleet: {replicas: 4, router: least_outstanding}``
(``servebench.serving.fleet``; ``docs/fleet.md``). Without ``fleet`` the scenario is one replica.

A workload may replay a trace instead: ``workload: {trace: {path: conversation_trace.jsonl, speedup: 2}}``
(the path relative to the scenario file; ``docs/scenarios.md`` and ``docs/traces.md`` give the fields).

Validation is strict, as the README promises of records: ``chunked_prefill: "yes"`` is not a
boolean and ``max_attempts: true`` not an integer (nothing is coerced); a key given twice in one
mapping, a number that is not finite, and a count past what a run can use (``workload``'s bounds)
are refused with one line naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from servebench.capacity.documents import check_values, read_document, validation_line
from servebench.capacity.kv import GIB, ModelShape, Policy, budget_tokens, bytes_per_token
from servebench.capacity.stepmodel import STEP_COEFFICIENTS, StepModel
from servebench.errors import ConfigError, ServebenchError
from servebench.serving.retry import ClientSpec
from servebench.serving.scheduler import SchedulerConfig
from servebench.serving.workload import (  # CancelSpec is importable here too
    MAX_GENERATED,
    CancelSpec,
    WorkloadSpec,
    rate_problem,
    replay_trace,
)


class ServerSpec(SchedulerConfig):
    """One replica's scheduler limits and KV budget: the scheduler's configuration as a scenario gives it.

    Beside the scheduler's own fields, the KV budget may be given as a model shape and the GiB left
    for its cache, and ``prefill_lane`` says how the simulator runs prompts.
    """

    kv_budget_tokens: int | None = Field(  # type: ignore[assignment]  # or from model + kv_budget_gib
        None, ge=1, description="KV budget in tokens (or give model + kv_budget_gib).")
    model: ModelShape | None = Field(None, description="Model shape, to turn kv_budget_gib into tokens.")
    kv_budget_gib: float | None = Field(None, gt=0, description="Memory left for the KV cache, GiB.")
    prefill_lane: Literal["shared", "separate"] = Field(
        "shared", description="shared: prompts are computed inside the batched step (continuous batching); "
                              "separate: each whole prefill runs beside the decode batch (the spec's flat timings; "
                              "max_num_batched_tokens does not apply).")

    @model_validator(mode="after")
    def _check(self) -> "ServerSpec":
        by_shape = self.model is not None or self.kv_budget_gib is not None
        if self.kv_budget_tokens is not None and by_shape:
            raise ValueError("give kv_budget_tokens, or model + kv_budget_gib, not both")
        if self.kv_budget_tokens is None and (self.model is None or self.kv_budget_gib is None):
            raise ValueError("give kv_budget_tokens, or both model and kv_budget_gib")
        if self.kv_budget_tokens is None and self.budget_tokens() < 1:
            block = f" in blocks of {self.block_size_tokens:,} tokens" if self.policy == "paged" else ""
            raise ValueError(f"kv_budget_gib {self.kv_budget_gib:g} holds no token of this model{block} "
                             f"({bytes_per_token(self.model):,} bytes per token)")  # type: ignore[arg-type]
        return self

    def budget_tokens(self) -> int:
        """Return the KV budget in tokens (from the model shape and GiB when given so)."""
        if self.kv_budget_tokens is not None:
            return self.kv_budget_tokens
        assert self.model is not None and self.kv_budget_gib is not None  # checked by the validator
        block = self.block_size_tokens if self.policy == "paged" else None
        return budget_tokens(self.kv_budget_gib * GIB, self.model, block_size=block)

    def scheduler_config(self) -> SchedulerConfig:
        """Return the scheduler's configuration: these limits, with the KV budget in tokens."""
        fields = {name: getattr(self, name) for name in SchedulerConfig.model_fields}
        return SchedulerConfig(**fields | {"kv_budget_tokens": self.budget_tokens()})


MAX_REPLICAS = 256  # replicas in one fleet: each is a scheduler of its own on the one event clock
Router = Literal["round_robin", "least_outstanding", "power_of_two", "prefix_affinity", "session_affinity"]
MAX_TRANSFER_GBPS = 1e6  # a prefill-to-decode link, GB/s: a thousand times NVLink's
DISAGGREGATED_ROUTERS = ("round_robin", "least_outstanding", "power_of_two")  # routers that read load, not caches
_DISAGGREGATED = ("prefill_replicas", "decode_replicas", "kv_transfer_gbps")


class FleetSpec(BaseModel):
    """Replicas of the scenario's ``server`` behind a router (``servebench.serving.fleet``).

    ``prefix_affinity`` sends a request to the replica holding the longest cached prefix of its prompt
    unless that replica is overloaded: its outstanding requests exceed the least-loaded replica's by more
    than ``affinity_slack_requests`` and by more than ``affinity_slack_ratio`` times (SGLang's router
    rule, with its defaults 64 and 1.5); then, or when no replica holds any of the prompt, the
    least-loaded replica takes it.

    ``prefill_replicas``, ``decode_replicas`` and ``kv_transfer_gbps`` (together, in place of ``replicas``)
    disaggregate: prompts on prefill instances, decodes on decode instances, each prompt's KV crossing a
    link between them (``servebench.serving.disagg``).
    """

    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(1, ge=1, le=MAX_REPLICAS, description="Identical replicas, each the scenario's server.")
    router: Router = Field("round_robin", description="How a request picks its replica (docs/fleet.md).")
    affinity_slack_requests: int = Field(
        64, ge=0, description="prefix_affinity: outstanding requests the cached replica may have beyond the "
                              "least-loaded one's before the router balances instead.")
    affinity_slack_ratio: float = Field(
        1.5, ge=1, le=1e6, description="prefix_affinity: and how many times the least-loaded one's (both must hold "
                                       "to balance).")
    prefill_replicas: int | None = Field(
        None, ge=1, le=MAX_REPLICAS, description="Disaggregated: instances that only compute prompts "
                                                 "(servebench.serving.disagg); give with decode_replicas.")
    decode_replicas: int | None = Field(
        None, ge=1, le=MAX_REPLICAS, description="Disaggregated: instances that only decode, each taking a prompt's "
                                                 "KV from a prefill instance.")
    kv_transfer_gbps: float | None = Field(
        None, gt=0, le=MAX_TRANSFER_GBPS, description="Disaggregated: each prefill instance's link to the decode "
                                                      "instances, GB/s (1e9 bytes); a prompt's KV takes its bytes / "
                                                      "this to cross.")

    @model_validator(mode="after")
    def _check_disaggregated(self) -> "FleetSpec":
        given = [name for name in _DISAGGREGATED if getattr(self, name) is not None]
        if not given:
            return self
        if len(given) < len(_DISAGGREGATED):
            missing = ", ".join(name for name in _DISAGGREGATED if name not in given)
            raise ValueError(f"disaggregated prefill and decode needs {', '.join(_DISAGGREGATED)} together; "
                             f"{missing} missing")
        if self.replicas != 1:
            raise ValueError(f"replicas {self.replicas} with prefill_replicas and decode_replicas: a disaggregated "
                             "fleet counts its instances in those two (leave replicas out)")
        if self.router not in DISAGGREGATED_ROUTERS:
            raise ValueError(f"router {self.router} does not route a disaggregated fleet; use one of "
                             f"{', '.join(DISAGGREGATED_ROUTERS)}")
        return self

    @property
    def disaggregated(self) -> bool:
        """Return whether prompts and decodes run on instances of their own."""
        return self.prefill_replicas is not None


class FlatStep(BaseModel):
    """The spec's flat timings: a prompt of ``prompt_tokens`` prefills in ``prefill_s``; a decode step takes ``tpot_s``."""

    model_config = ConfigDict(extra="forbid")

    prefill_s: float = Field(ge=0)
    prompt_tokens: int = Field(ge=1)
    tpot_s: float = Field(ge=0)


class StepModelSpec(StepModel):
    """The step-time model as a scenario gives it: its coefficients, or ``flat`` timings turned into them.

    With ``flat``, the coefficients come from it (``StepModel.from_flat``) and any given beside it are
    unused; the noise, lag and wake fields apply either way. ``to_model`` gives the model to run.
    """

    flat: FlatStep | None = None

    def to_model(self) -> StepModel:
        """Return the step model."""
        fields = {name: getattr(self, name) for name in StepModel.model_fields}
        if self.flat is not None:
            flat = StepModel.from_flat(self.flat.prefill_s, self.flat.prompt_tokens, self.flat.tpot_s)
            fields |= {name: getattr(flat, name) for name in STEP_COEFFICIENTS}
        return StepModel(**fields)


class Scenario(BaseModel):
    """Everything one simulation needs."""

    model_config = ConfigDict(extra="forbid")

    name: str = "scenario"
    description: str | None = None
    seed: int = Field(0, ge=0, description="Seed of the workload's random generator.")
    server: ServerSpec
    step_model: StepModelSpec
    workload: WorkloadSpec
    cancel: CancelSpec | None = None
    client: ClientSpec | None = Field(None, description="Retrying clients; None: one attempt, no retry.")
    fleet: FleetSpec | None = Field(None, description="Replicas behind a router; None: one replica.")

    @field_validator("fleet")
    @classmethod
    def _check_fleet(cls, fleet: FleetSpec | None, info: ValidationInfo) -> FleetSpec | None:
        """Refuse prefix_affinity without prefix caching, naming the field (a model check would name none)."""
        server = info.data.get("server")  # absent when the server was refused: that refusal comes first
        if fleet is not None and fleet.router == "prefix_affinity" and server is not None and not server.prefix_caching:
            raise PydanticCustomError("fleet_router", "router prefix_affinity routes by the replicas' cached "
                                                      "prefixes: turn on server.prefix_caching")
        return fleet

    @field_validator("fleet")
    @classmethod
    def _check_disaggregated(cls, fleet: FleetSpec | None, info: ValidationInfo) -> FleetSpec | None:
        """Refuse what a disaggregated fleet does not simulate, naming the field (a model check would name none)."""
        if fleet is None or not fleet.disaggregated:
            return fleet
        server, client, workload = (info.data.get(name) for name in ("server", "client", "workload"))  # absent: refused
        if server is not None and server.model is None:
            raise PydanticCustomError("fleet_disaggregated", "kv_transfer_gbps moves each prompt's KV bytes: give "
                                      "server.model (and kv_budget_gib) so the KV calculator can count them")
        if client is not None and client.retries:
            raise PydanticCustomError("fleet_disaggregated", "retrying clients are not simulated with disaggregated "
                                      "prefill and decode; leave client.retries out")
        if workload is not None and (workload.closed_loop is not None
                                     or any(c.conversation is not None for c in workload.classes)):
            raise PydanticCustomError("fleet_disaggregated", "requests that follow others' ends (closed_loop users, "
                                      "conversations) are not simulated with disaggregated prefill and decode")
        return fleet

    def rng(self) -> np.random.Generator:
        """Return a fresh generator seeded by the scenario."""
        return np.random.default_rng(self.seed)


def parse_scenario(data: Any, source: str = "scenario", base_dir: Path | None = None) -> Scenario:
    """Validate a scenario from parsed YAML/JSON, strictly; load files it names relative to ``base_dir``.

    Strict: a boolean must be true or false, an integer an integer (not ``true``, ``1.0`` or ``"1"``), a
    number a number; every number finite.
    """
    check_values(data, source)
    try:
        scenario = Scenario.model_validate(data, strict=True)
    except ValidationError as exc:
        raise ConfigError(validation_line(source, exc)) from None
    return _load_files(scenario, source, base_dir or Path("."))


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file (.yaml, .yml or .json)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {p}: {exc.strerror or exc}") from None
    return parse_scenario(_scenario_document(text, str(p)), str(p), p.parent)


def scenario_from_bytes(data: bytes, name: str, base_dir: Path | None = None) -> Scenario:
    """Parse a scenario file's bytes (an upload): JSON when ``name`` ends in .json, else YAML.

    Every problem is one ConfigError starting with ``name``: not UTF-8, not valid YAML or JSON, not a
    mapping, or the first field the scenario refuses. Files it names are read relative to ``base_dir``.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    return parse_scenario(_scenario_document(text, name), name, base_dir)


def _scenario_document(text: str, name: str) -> dict[str, Any]:
    """Return a scenario file's text parsed as JSON (a .json name) or YAML; it must be a mapping, no key twice."""
    data = read_document(text, name)
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: a scenario must be a mapping, got {type(data).__name__}")
    return data


def with_request_count(scenario: Scenario, requests: int) -> Scenario:
    """Return the scenario offering exactly ``requests`` requests (any duration limit dropped).

    The one place a request count is set: ``simulate --requests`` and every sweep point come here, and
    the edited scenario is validated whole (:func:`_revised`).
    """
    if requests < 1:
        raise ConfigError(f"scenario {scenario.name!r}: {requests} requests; a run needs at least 1")
    if requests > MAX_GENERATED:
        raise ConfigError(f"scenario {scenario.name!r}: {requests:,} requests; a run takes at most {MAX_GENERATED:,}")
    arrival = scenario.workload.arrival
    if arrival is not None and arrival.kind != "replay" and arrival.rate_rps is not None:
        problem = rate_problem(arrival.rate_rps, requests, None)
        if problem:
            raise ConfigError(f"scenario {scenario.name!r}: {problem}")
    return _revised(scenario, f"{requests:,} requests", {"workload": {"num_requests": requests, "duration_s": None}})


def _revised(scenario: Scenario, edit: str, changes: dict[str, Any]) -> Scenario:
    """Return the scenario with ``changes`` (dotted section -> fields) applied and every rule checked again.

    A copy with updated fields would skip the cross-field checks (KV budget given one way, not both);
    the edited document is validated as a whole, and a refusal names the edit and the field.
    """
    doc = scenario.model_dump(exclude_unset=True, exclude_none=True)  # unset stays unset: a tenant class keeps its slice
    for section, fields in changes.items():
        node = doc
        for part in section.split(".") if section else ():
            node = node.setdefault(part, {})
        for name, value in fields.items():
            if value is None:
                node.pop(name, None)
            else:
                node[name] = value
    return parse_scenario(doc, f"scenario {scenario.name!r} with {edit}")


def with_server(scenario: Scenario, **fields: Any) -> Scenario:
    """Return the scenario with server fields replaced (None: the field's default), every rule checked again.

    >>> sc = parse_scenario({"server": {"kv_budget_tokens": 100}, "step_model": {}, "workload": {
    ...     "arrival": {"rate_rps": 1}, "num_requests": 1, "classes": [{"prompt": {"kind": "fixed", "value": 1},
    ...     "output": {"kind": "fixed", "value": 1}}]}})
    >>> with_server(sc, scheduling="fair", max_num_batched_tokens=None).server.scheduling
    'fair'
    """
    values = {name: v.model_dump(exclude_none=True) if isinstance(v, BaseModel) else v for name, v in fields.items()}
    edit = ", ".join(f"{name} {'unset' if v is None else v}" for name, v in fields.items())
    return _revised(scenario, edit or "no server change", {"server": values})


def with_client(scenario: Scenario, client: ClientSpec | None) -> Scenario:
    """Return the scenario with other retrying clients (None: one attempt, no retry)."""
    value = None if client is None else client.model_dump(exclude_none=True)
    return _revised(scenario, "another client" if client is not None else "no client", {"": {"client": value}})


def with_policy(scenario: Scenario, policy: Policy) -> Scenario:
    """Return the scenario under another KV admission policy (reserve or paged)."""
    return _revised(scenario, f"policy {policy}", {"server": {"policy": policy}})


def with_max_num_seqs(scenario: Scenario, max_num_seqs: int) -> Scenario:
    """Return the scenario with another limit on running sequences."""
    return _revised(scenario, f"max_num_seqs {max_num_seqs}", {"server": {"max_num_seqs": max_num_seqs}})


def with_model(scenario: Scenario, model: ModelShape, kv_budget_gib: float) -> Scenario:
    """Return the scenario with a model shape and the GiB left for its KV cache (the budget in tokens follows)."""
    return _revised(scenario, f"a model shape and {kv_budget_gib:g} GiB", {"server": {
        "model": model.model_dump(exclude_none=True), "kv_budget_gib": kv_budget_gib, "kv_budget_tokens": None}})


def with_kv_budget_tokens(scenario: Scenario, kv_budget_tokens: int) -> Scenario:
    """Return the scenario with a KV budget in tokens (any model shape and GiB dropped)."""
    return _revised(scenario, f"{kv_budget_tokens:,} KV tokens", {"server": {
        "kv_budget_tokens": kv_budget_tokens, "model": None, "kv_budget_gib": None}})


def with_step_model(scenario: Scenario, step_model: StepModelSpec | StepModel) -> Scenario:
    """Return the scenario with another step-time model (coefficients, or flat timings)."""
    return _revised(scenario, "another step model", {"": {"step_model": step_model.model_dump(exclude_none=True)}})


def with_rate(scenario: Scenario, rate_rps: float) -> Scenario:
    """Return the scenario with open-loop Poisson-like arrivals at ``rate_rps`` (its arrival kind kept)."""
    if scenario.workload.arrival is None:
        raise ConfigError(f"scenario {scenario.name!r} is closed-loop (users), so it has no arrival rate to set")
    return _revised(scenario, f"rate {rate_rps:g} req/s", {"workload.arrival": {"rate_rps": rate_rps}})


def with_mix(scenario: Scenario, rows: list[dict[str, Any]]) -> Scenario:
    """Return the scenario with its workload classes edited as a table.

    Each row has ``name`` and ``weight``; where every class has fixed lengths, also ``prompt_tokens``,
    ``output_tokens`` and ``output_cap`` (None: no cap). A row past the existing classes is a new fixed
    class; classes with length distributions keep them (only their name and weight change).
    """
    if not rows:
        raise ConfigError(f"scenario {scenario.name!r}: the workload mix needs at least one class")
    old = scenario.model_dump(exclude_none=True)["workload"]["classes"]
    fixed = all(c["prompt"]["kind"] == "fixed" and c["output"]["kind"] == "fixed" for c in old)
    classes = []
    for i, row in enumerate(rows):
        cl = dict(old[i]) if i < len(old) else {"prompt": {"kind": "fixed"}, "output": {"kind": "fixed"}}
        cl["name"], cl["weight"] = str(row.get("name") or f"class{i + 1}"), row.get("weight")
        if fixed:
            cl["prompt"] = {"kind": "fixed", "value": row.get("prompt_tokens")}
            cl["output"] = {"kind": "fixed", "value": row.get("output_tokens")}
            cl.pop("max_output_tokens", None)
            if row.get("output_cap") is not None:
                cl["max_output_tokens"] = row["output_cap"]
        classes.append({k: v for k, v in cl.items() if v is not None})
    return _revised(scenario, "an edited workload mix", {"workload": {"classes": classes}})


def _load_files(scenario: Scenario, source: str, base_dir: Path) -> Scenario:
    wl = scenario.workload
    classes = []
    changed = False
    for i, c in enumerate(wl.classes):
        updates = {}
        for part in ("prompt", "output"):
            spec = getattr(c, part)
            if spec.kind == "empirical" and not spec.values and spec.path is not None:
                values = _read_lengths(base_dir / spec.path, f"{source}, workload.classes.{i}.{part}.path")
                updates[part] = spec.model_copy(update={"values": values})
        classes.append(c.model_copy(update=updates) if updates else c)
        changed = changed or bool(updates)
    arrival = wl.arrival
    if arrival is not None and arrival.kind == "replay" and not arrival.start_s and arrival.path is not None:
        from servebench.records.loaders import load_table
        try:
            table, _, _ = load_table(base_dir / arrival.path)
        except ServebenchError as exc:
            raise ConfigError(f"{source}, workload.arrival.path: {exc}") from None
        arrival = arrival.model_copy(update={"start_s": [float(x) for x in table.start]})
        changed = True
    trace = wl.trace
    if trace is not None:  # read now, so a bad trace is refused with the scenario; its path holds from any folder
        path = Path(trace.path) if Path(trace.path).is_absolute() else base_dir / trace.path
        trace = trace.model_copy(update={"path": str(path)})
        try:
            replay_trace(wl.model_copy(update={"trace": trace}))
        except ServebenchError as exc:
            raise ConfigError(f"{source}, workload.trace: {exc}") from None
        changed = True
    if not changed:
        return scenario
    return scenario.model_copy(update={"workload": wl.model_copy(update={"classes": classes, "arrival": arrival,
                                                                         "trace": trace})})


def _read_lengths(path: Path, where: str) -> list[int]:
    """Read token lengths: a JSON list, or one integer per line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    stripped = text.strip()
    try:
        values = json.loads(stripped) if stripped.startswith("[") else [int(x) for x in stripped.split()]
    except ValueError as exc:
        raise ConfigError(f"{where}: {path} is not a JSON list or one integer per line ({exc})") from None
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ConfigError(f"{where}: {path} must hold at least one non-negative integer length")
    return values
