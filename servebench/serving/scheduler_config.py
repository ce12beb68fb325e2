"""A server replica's limits and scheduling policy: the scheduler's configuration, as frozen pydantic models.

Apart from :mod:`servebench.serving.scheduler`, whose loop a build may compile (:mod:`servebench.serving.native`):
pydantic's models stay Python. ``servebench.serving.scheduler`` re-exports every name here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servebench.capacity.kv import Policy
from servebench.serving.workload import MAX_CLASSES, MAX_LENGTH_TOKENS, MAX_TIME_S

Scheduling = Literal["fcfs", "fair"]
SCHEDULINGS: tuple[str, ...] = ("fcfs", "fair")


class _Config(BaseModel):
    """A frozen configuration that refuses unknown fields (pydantic's ValidationError names the field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TenantLimit(_Config):
    """One tenant's cap on running sequences and its weight under ``fair`` scheduling."""

    max_running: int | None = Field(None, ge=1, description="Most running sequences of this tenant; None: no cap.")
    weight: float = Field(1.0, gt=0, allow_inf_nan=False,
                          description="Share under fair scheduling, relative to the other tenants.")


class AdmissionSpec(_Config):
    """Load shedding at the server's queue."""

    max_queue_wait_s: float | None = Field(
        None, gt=0, le=MAX_TIME_S,
        description="A request still waiting this long after arrival is rejected (queue_wait_exceeded).")


class SchedulerConfig(_Config):
    """Limits and policy of one server replica.

    A scenario's ``server`` is this model with the scenario's own fields added
    (``servebench.serving.scenario.ServerSpec``), so each limit and its bound is stated once.
    """

    policy: Policy = Field("reserve", description="KV admission policy.")
    kv_budget_tokens: int = Field(ge=1, description="KV budget in tokens.")
    max_num_seqs: int = Field(256, ge=1, description="Most running sequences.")
    max_num_batched_tokens: int | None = Field(None, ge=1, description="Most tokens per step; None: no limit.")
    chunked_prefill: bool = Field(True, description="Split prompts to fill the step's token budget.")
    max_waiting: int | None = Field(None, ge=1, description="Waiting-queue bound (arrivals beyond it are rejected); every request passes through it, so at least 1.")
    block_size_tokens: int = Field(16, ge=1, le=MAX_LENGTH_TOKENS, description="Paged KV block size, tokens.")
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIME_S, description="Deadline after arrival, s.")
    prefix_caching: bool = Field(False, description="Reuse cached full prompt blocks shared with earlier requests "
                                                    "(vLLM's automatic prefix caching); off by default.")
    admission: AdmissionSpec | None = Field(None, description="Shedding: reject requests that waited too long.")
    tenants: dict[str, TenantLimit] = Field(default_factory=dict, max_length=MAX_CLASSES,
                                            description="Per-tenant limits and weights (a run uses a tenant only "
                                                        "through a workload class, so at most as many as classes); "
                                                        "tenants not named have no cap and weight 1.")
    scheduling: Scheduling = Field(
        "fcfs", description="fcfs: admit in arrival order; fair: by weighted admitted tokens across tenants.")

    @model_validator(mode="after")
    def _blocks_fit(self) -> "SchedulerConfig":
        budget: int | None = self.kv_budget_tokens
        if budget is not None and self.policy == "paged" and budget < self.block_size_tokens:
            raise ValueError(f"kv_budget_tokens {budget} holds no {self.block_size_tokens}-token block")
        return self

    @property
    def max_queue_wait_s(self) -> float | None:
        """Return how long a request may wait before it is shed (None: never)."""
        return None if self.admission is None else self.admission.max_queue_wait_s

    @property
    def num_blocks(self) -> int:
        """Return the number of KV blocks under the paged policy."""
        return self.kv_budget_tokens // self.block_size_tokens
