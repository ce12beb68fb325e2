"""Workloads: arrival processes and prompt/output length distributions, drawn from a passed-in RNG.

Open loop (arrivals independent of completions)::

    spec = WorkloadSpec(arrival=ArrivalSpec(kind="poisson", rate_rps=1.0), num_requests=300,
                        classes=[ClassSpec(name="review", prompt=LengthSpec(kind="fixed", value=7800),
                                           output=LengthSpec(kind="fixed", value=200))])
    reqs = generate_arrivals(spec, np.random.default_rng(7))   # list[RequestSpec], by arrival time
    wl = generate_workload(spec, rng)                            # the same as columns (Workload)

Closed loop (N users, each sends its next request a think time after its last one ended)::

    plan = closed_loop_plan(spec_with_closed_loop, rng)  # lengths and think times drawn up front
    # request i goes to the first free user; it arrives plan.think_s[i] after that user's last end

The order of draws is fixed (arrival gaps, then class choices, then lengths class by class, then
shared-prefix groups and the content salt when a class shares prefixes or holds conversations,
then think times, then the clients' cancellations), so a seed gives the same workload on every machine.
Classes are mixed by weight. :func:`draw_workload` is that whole draw, and the simulator, the engine
run and the load generator all call it, so they serve the same requests.

Prompt content, for prefix caching (``Workload.prompt_contents``; token ids from
:mod:`servebench.serving.prefix_cache`, the same for the simulator and the engine):

* by default every prompt is its own tokens: nothing is shared (cold prompts);
* ``shared_prefix: {tokens: N, groups: G, zipf: s}``: a prompt begins with one of G documents of
  N tokens (uniform, or Zipf-skewed with exponent s), then its own tokens; ``prompt`` is the
  total, so it must never draw fewer than N. One group whose N is the whole (fixed) prompt gives
  repeated identical prompts;
* ``conversation: {turns: T, think_s: S}``: the class's requests, in arrival order, are taken T at
  a time as one chat; the first arrives at its drawn time, each later turn S seconds after the
  previous turn ends (whatever its status), and its prompt is the previous prompt plus the
  previous answer (its drawn output length) plus a new message (the drawn prompt less any
  shared prefix). Only open-loop arrivals take conversations.

A workload may instead replay a trace (``trace: {path, format, speedup, start_s, duration_s,
max_requests}`` in place of ``arrival`` and ``classes``): its requests arrive at the trace's times divided
by ``speedup``, with the trace's prompt and output lengths, unchanged, and a trace with prefix block IDs
gives prompts that share exactly those blocks (:mod:`servebench.serving.trace_replay` states the rules).

Every count and time is bounded by what a run can use, so a hostile file gets a one-line error and
memory never grows with a count the run does not reach (``docs/scenarios.md``, "Bounds"): at most
``MAX_GENERATED`` requests, users, shared-prefix groups and conversation turns (a run of that many
requests can take no more); at most ``MAX_CLASSES`` classes (and tenants, which only classes name);
lengths of at most ``MAX_LENGTH_TOKENS`` tokens; and times, durations and the span of the arrivals
(requests / rate) of at most ``MAX_TIME_S`` seconds, below which float64 seconds still resolve
0.12 us: past it a simulated step of milliseconds is lost to rounding and every latency reads 0.
Drawing the group of G > ``LARGE_GROUPS`` shared prefixes takes memory for the requests only.

Output lengths are at least 1 token: a server samples the first token when the prefill completes,
so there is no request that generates nothing. An output distribution that can draw 0 (``fixed``
0, ``uniform`` from 0, ``lognormal`` with ``min_tokens`` 0, an empirical 0) is refused with a
ConfigError naming the class, never clamped to 1 behind the user's back. Prompts may be 0 tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servebench.errors import ConfigError
from servebench.records.traces import FORMATS as TRACE_FORMATS
from servebench.serving.prefix_cache import SegmentPrompt, segment_id
from servebench.serving.trace_replay import TraceBlocks, TraceWindow, block_prompts, read_cached, select_window

MAX_GENERATED = 10_000_000  # refuse workloads larger than this many requests (and users, groups, turns)
MAX_CLASSES = 10_000  # workload classes (and named tenants) in one scenario
MAX_LENGTH_TOKENS = 100_000_000  # longest prompt or output: 10x the longest context window offered (10M tokens)
MAX_TIME_S = 1e9  # any time in a run, s (31.7 years): float64 seconds still resolve 0.12 us there
LARGE_GROUPS = 65_536  # above this many shared-prefix groups, the group draw does not build a weight per group


class LengthSpec(BaseModel):
    """A token-length distribution: fixed, uniform (inclusive), lognormal (median, sigma) or empirical."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["fixed", "uniform", "lognormal", "empirical"] = "fixed"
    value: int | None = Field(None, ge=0, le=MAX_LENGTH_TOKENS, description="Fixed length, tokens.")
    low: int | None = Field(None, ge=0, le=MAX_LENGTH_TOKENS, description="Uniform: smallest length, tokens.")
    high: int | None = Field(None, ge=0, le=MAX_LENGTH_TOKENS,
                             description="Uniform: largest length, tokens (inclusive).")
    median: float | None = Field(None, gt=0, le=MAX_LENGTH_TOKENS, description="Lognormal: median length, tokens.")
    sigma: float | None = Field(None, ge=0, description="Lognormal: sigma of log length.")
    min_tokens: int = Field(1, ge=0, le=MAX_LENGTH_TOKENS, description="Lognormal draws are clipped to at least this.")
    max_tokens: int | None = Field(None, ge=1, le=MAX_LENGTH_TOKENS,
                                   description="Lognormal draws are clipped to at most this (and to "
                                               "MAX_LENGTH_TOKENS).")
    values: list[int] | None = Field(None, description="Empirical: lengths drawn with replacement.")
    path: str | None = Field(None, description="Empirical: file of lengths (read by the scenario loader).")

    @model_validator(mode="after")
    def _check(self) -> "LengthSpec":
        k = self.kind
        if k == "fixed" and self.value is None:
            raise ValueError("a fixed length needs 'value'")
        if k == "uniform" and (self.low is None or self.high is None or self.low > self.high):
            raise ValueError("a uniform length needs 'low' <= 'high'")
        if k == "lognormal" and (self.median is None or self.sigma is None):
            raise ValueError("a lognormal length needs 'median' and 'sigma'")
        if k == "empirical":
            if not self.values and self.path is None:
                raise ValueError("an empirical length needs 'values' or 'path'")
            if self.values is not None and any(v < 0 or v > MAX_LENGTH_TOKENS for v in self.values):
                raise ValueError(f"empirical lengths must be from 0 to {MAX_LENGTH_TOKENS:,} tokens")
        return self

    @property
    def lower_tokens(self) -> int | None:
        """Return the smallest length this can draw, or None when no values are loaded yet."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return self.low
        if self.kind == "empirical":
            return min(self.values) if self.values else None
        return self.min_tokens

    @property
    def upper_tokens(self) -> int | None:
        """Return the largest length this can draw, or None when unbounded."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return self.high
        if self.kind == "empirical":
            return max(self.values) if self.values else None
        return self.max_tokens

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``n`` lengths as int64."""
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)
        if self.kind == "lognormal":
            with np.errstate(over="ignore"):
                x = np.rint(np.exp(rng.normal(np.log(self.median), self.sigma, size=n)))
            hi = MAX_LENGTH_TOKENS if self.max_tokens is None else min(self.max_tokens, MAX_LENGTH_TOKENS)
            return np.clip(x, min(self.min_tokens, hi), hi).astype(np.int64)  # inf draws clip too, never wrap
        if not self.values:
            raise ConfigError(f"empirical length from {self.path!r} has no values loaded")
        return np.asarray(self.values, dtype=np.int64)[rng.integers(0, len(self.values), size=n)]


class SharedPrefixSpec(BaseModel):
    """Prompts that begin with one of ``groups`` shared documents of ``tokens`` tokens."""

    model_config = ConfigDict(extra="forbid")

    tokens: int = Field(ge=1, le=MAX_LENGTH_TOKENS,
                        description="Shared prefix length, tokens (part of the class's prompt length).")
    groups: int = Field(1, ge=1, le=MAX_GENERATED, description="Distinct prefixes; each request takes one (so a "
                                                               "run can use at most as many as its requests).")
    zipf: float | None = Field(None, gt=0, description="Zipf exponent of the group choice; None: uniform.")

    def group_weights(self) -> np.ndarray:
        """Return each group's probability.

        >>> SharedPrefixSpec(tokens=10, groups=3, zipf=1.0).group_weights().round(3).tolist()
        [0.545, 0.273, 0.182]
        """
        if self.zipf is None:
            return np.full(self.groups, 1.0 / self.groups)
        w = 1.0 / np.arange(1, self.groups + 1, dtype=np.float64) ** self.zipf
        return w / w.sum()

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``n`` group indices (int64), each with its group's probability.

        Up to ``LARGE_GROUPS`` groups this is ``rng.choice`` over the weights, as it always was; above,
        the same uniforms (``rng.random(n)``, what ``choice`` draws) are placed by the inverse of the
        distribution function, computed a block of groups at a time, so memory does not grow with
        groups the run never reaches. Either way one uniform per request is drawn, so later draws
        are unchanged.

        >>> spec = SharedPrefixSpec(tokens=1, groups=LARGE_GROUPS + 1, zipf=1.0)
        >>> bool((spec.draw(4, np.random.default_rng(0)) < LARGE_GROUPS + 1).all())
        True
        """
        if self.groups == 1:
            return np.zeros(n, dtype=np.int64)
        if self.groups <= LARGE_GROUPS:
            return rng.choice(self.groups, size=n, p=self.group_weights()).astype(np.int64)
        u = rng.random(n)
        if self.zipf is None:
            return np.minimum((u * self.groups).astype(np.int64), self.groups - 1)
        return _inverse_zipf(u, self.groups, self.zipf)


def _inverse_zipf(u: np.ndarray, groups: int, exponent: float, block: int = 1 << 20) -> np.ndarray:
    """Return the group of each uniform ``u`` under Zipf weights 1 / rank^exponent, a block of ranks at a time.

    Two passes over the ranks (the total weight, then the cumulative weight), each holding one block.
    """
    total = 0.0
    for lo in range(0, groups, block):
        total += float((1.0 / np.arange(lo + 1, min(groups, lo + block) + 1, dtype=np.float64) ** exponent).sum())
    order = np.argsort(u, kind="stable")
    targets = u[order] * total
    out = np.empty(u.size, dtype=np.int64)
    done, below = 0, 0.0
    for lo in range(0, groups, block):
        cdf = below + np.cumsum(1.0 / np.arange(lo + 1, min(groups, lo + block) + 1, dtype=np.float64) ** exponent)
        k = done + int(np.searchsorted(targets[done:], cdf[-1], side="left"))
        out[order[done:k]] = lo + np.searchsorted(cdf, targets[done:k], side="right")
        done, below = k, float(cdf[-1])
    out[order[done:]] = groups - 1  # rounding left a target at the very top: the last group
    return np.minimum(out, groups - 1)


class ConversationSpec(BaseModel):
    """Multi-turn chats: each turn resends the whole history plus a new message."""

    model_config = ConfigDict(extra="forbid")

    turns: int = Field(ge=1, le=MAX_GENERATED, description="Turns per conversation.")
    think_s: float = Field(0.0, ge=0, le=MAX_TIME_S, description="Time from a turn's end to the next turn's arrival, s.")


class ClassSpec(BaseModel):
    """One workload class (e.g. short hints, long reviews), mixed with the others by weight."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("default", description="Slice name written to each record.")
    weight: float = Field(1.0, gt=0, description="Relative share of requests.")
    prompt: LengthSpec = Field(description="Prompt length, tokens.")
    output: LengthSpec = Field(description="Tokens each request generates before it stops.")
    max_output_tokens: int | None = Field(
        None, ge=1, le=MAX_LENGTH_TOKENS, description="Output cap (KV reservation); default: the largest output drawn.")
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIME_S,
                                    description="Deadline after arrival; default: the scenario's.")
    shared_prefix: SharedPrefixSpec | None = Field(None, description="Prompts begin with a shared document.")
    conversation: ConversationSpec | None = Field(None, description="Requests form multi-turn chats.")
    tenant: str | None = Field(None, min_length=1, description="Tenant whose limits and share apply (server.tenants); "
                                                               "records carry it as their slice unless 'name' is set.")

    @property
    def slice_name(self) -> str:
        """Return the slice written to records: the class's own name if it set one, else its tenant."""
        if self.tenant is not None and "name" not in self.model_fields_set:
            return self.tenant
        return self.name

    @model_validator(mode="after")
    def _prefix_fits(self) -> "ClassSpec":
        problem = _short_prompt(self)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("output")
    @classmethod
    def _output_at_least_one(cls, output: LengthSpec) -> LengthSpec:
        problem = _zero_output(output)
        if problem:
            raise ValueError(problem)
        return output


class ArrivalSpec(BaseModel):
    """An open-loop arrival process."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["poisson", "gamma", "constant", "replay"] = "poisson"
    rate_rps: float | None = Field(None, gt=0, description="Mean arrival rate, requests per second.")
    cv: float = Field(1.0, gt=0, description="Gamma: coefficient of variation of gaps (burstiness; 1 = Poisson).")
    start_s: list[float] | None = Field(None, description="Replay: arrival times (e.g. records' start).")
    speed: float = Field(1.0, gt=0, description="Replay: time compression (2 = twice as fast).")
    path: str | None = Field(None, description="Replay: records file whose start times to replay (read by the scenario loader).")

    @model_validator(mode="after")
    def _check(self) -> "ArrivalSpec":
        if self.kind == "replay":
            if not self.start_s and self.path is None:
                raise ValueError("a replay needs 'start_s' (arrival times) or 'path' (a records file)")
            problem = replay_span_problem(self.start_s, self.speed)
            if problem:
                raise ValueError(problem)
        elif self.rate_rps is None:
            raise ValueError(f"a {self.kind} arrival process needs 'rate_rps'")
        return self


class ClosedLoopSpec(BaseModel):
    """N users; each sends a request, waits for its end, thinks, and sends the next."""

    model_config = ConfigDict(extra="forbid")

    users: int = Field(ge=1, le=MAX_GENERATED, description="Concurrent users (a run uses at most one per request).")
    think_s: float = Field(0.0, ge=0, le=MAX_TIME_S, description="Mean think time between a user's requests, s.")
    think: Literal["fixed", "exponential"] = Field("fixed", description="Think time distribution.")


class CancelSpec(BaseModel):
    """Clients that give up: each request is cancelled with ``probability`` after an exponential wait."""

    model_config = ConfigDict(extra="forbid")

    probability: float = Field(ge=0, le=1, description="Share of requests whose client cancels.")
    after_s: float = Field(gt=0, le=MAX_TIME_S, description="Mean wait after arrival before cancelling, s.")


def rate_problem(rate_rps: float, num_requests: int | None, duration_s: float | None) -> str | None:
    """Say why open-loop arrivals at ``rate_rps`` cannot run (None: they can).

    The arrivals span about (requests - 1) / rate seconds (or the duration); past ``MAX_TIME_S`` float64
    seconds lose the precision of a step. A duration's expected requests must stay within ``MAX_GENERATED``.

    >>> rate_problem(1e-300, 600, None)
    'rate_rps 1e-300 spreads 600 requests over 5.99e+302 s, past 1e+09 s where float64 seconds keep microseconds: give a rate of at least 5.99e-07 requests/s'
    >>> rate_problem(2.0, 600, None) is None
    True
    """
    if not (rate_rps > 0 and math.isfinite(rate_rps)):
        return f"rate_rps {rate_rps} must be a positive, finite number of requests per second"
    if num_requests is not None and num_requests > 1:
        span_s = (num_requests - 1) / rate_rps
        if span_s > MAX_TIME_S:
            return (f"rate_rps {rate_rps:g} spreads {num_requests:,} requests over {span_s:.3g} s, past "
                    f"{MAX_TIME_S:g} s where float64 seconds keep microseconds: give a rate of at least "
                    f"{(num_requests - 1) / MAX_TIME_S:.3g} requests/s")
    elif num_requests is None and duration_s is not None and rate_rps * duration_s > MAX_GENERATED:
        return (f"rate_rps {rate_rps:g} x duration_s {duration_s:g} gives about {rate_rps * duration_s:.3g} requests, "
                f"over the {MAX_GENERATED:,} a run may draw")
    return None


def replay_span_problem(start_s: list[float] | None, speed: float) -> str | None:
    """Say why replayed arrival times cannot run (None: they can): their span / speed must stay within MAX_TIME_S."""
    if not start_s:
        return None
    span_s = (max(start_s) - min(start_s)) / speed
    if not span_s <= MAX_TIME_S:
        return (f"the replayed arrivals span {span_s:.3g} s at speed {speed:g}, past {MAX_TIME_S:g} s where float64 "
                "seconds keep microseconds")
    if len(start_s) > MAX_GENERATED:
        return f"the replay holds {len(start_s):,} arrival times, over the {MAX_GENERATED:,} a run may draw"
    return None


class TraceSpec(BaseModel):
    """A trace to replay: which of its requests, and how fast (``trace_replay`` states the rules)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The trace file (or a run folder of records), relative to the "
                                                "scenario file.")
    format: str = Field("auto", description=f"The trace's format: auto (told from its columns, as servebench trace "
                                            f"stats does), {', '.join(TRACE_FORMATS)}.")
    speedup: float = Field(1.0, gt=0, description="Arrival times are divided by this (2: twice the traffic, the "
                                                  "same shape).")
    start_s: float = Field(0.0, ge=0, le=MAX_TIME_S, description="The window replayed starts this long after the "
                                                                 "trace's first request (trace seconds).")
    duration_s: float | None = Field(None, gt=0, le=MAX_TIME_S, description="The window's length in trace seconds; "
                                                                            "None: to the trace's end.")
    max_requests: int | None = Field(None, ge=1, le=MAX_GENERATED, description="Replay only the window's first "
                                                                               "this many requests.")

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in ("auto", *TRACE_FORMATS):
            raise ValueError(f"unknown trace format {value!r}: auto, {', '.join(TRACE_FORMATS)}")
        return value

    def window(self) -> TraceWindow:
        """Return the requests this replay sends (the trace read once per process while the file is unchanged)."""
        return select_window(read_cached(self.path, self.format), self.start_s, self.duration_s, self.max_requests)

    def left_out_note(self) -> str | None:
        """Say how many requests of the window are left out for 0 output tokens (None when none is)."""
        n = self.window().left_out_zero_output
        if not n:
            return None
        return (f"trace {self.path}: {n:,} request{'' if n == 1 else 's'} of the window left out: 0 output tokens "
                "cannot be replayed (BurstGPT's failed requests have them)")

    def with_speedup(self, speedup: float) -> "TraceSpec":
        """Return the replay at another speedup (checked: positive and finite)."""
        if not (speedup > 0 and math.isfinite(speedup)):
            raise ConfigError(f"speedup {speedup} must be a positive, finite number")
        return self.model_copy(update={"speedup": float(speedup)})



class WorkloadSpec(BaseModel):
    """Arrivals (open loop), users (closed loop) or a trace, request classes, and when to stop."""

    model_config = ConfigDict(extra="forbid")

    arrival: ArrivalSpec | None = None
    closed_loop: ClosedLoopSpec | None = None
    trace: TraceSpec | None = Field(None, description="Replay a trace's arrivals and lengths, in place of 'arrival' "
                                                      "and 'classes'.")
    classes: list[ClassSpec] = Field(default_factory=list, max_length=MAX_CLASSES,
                                     description="Request classes (at least one, unless a trace gives the requests).")
    num_requests: int | None = Field(None, ge=1, le=MAX_GENERATED, description="Requests to send.")
    duration_s: float | None = Field(None, gt=0, le=MAX_TIME_S, description="Stop sending after this time, s.")

    @model_validator(mode="after")
    def _check(self) -> "WorkloadSpec":
        if self.trace is not None:
            given = [name for name in ("arrival", "closed_loop", "classes") if getattr(self, name)]
            if given:
                raise ValueError(f"a trace gives the arrivals and lengths: leave out {' and '.join(map(repr, given))}")
            return self
        if not self.classes:
            raise ValueError("give 'classes' (at least one request class) or a 'trace' to replay")
        if (self.arrival is None) == (self.closed_loop is None):
            raise ValueError("give exactly one of 'arrival' (open loop), 'closed_loop' or 'trace'")
        if self.closed_loop is not None and self.num_requests is None:
            raise ValueError("a closed loop needs 'num_requests'")
        if self.closed_loop is not None and any(c.conversation is not None for c in self.classes):
            raise ValueError("a conversation needs open-loop 'arrival' (its later turns follow the earlier ones' ends)")
        if self.arrival is not None and self.arrival.kind != "replay" and \
                self.num_requests is None and self.duration_s is None:
            raise ValueError("give 'num_requests' or 'duration_s'")
        if self.arrival is not None and self.arrival.rate_rps is not None and self.arrival.kind != "replay":
            problem = rate_problem(self.arrival.rate_rps, self.num_requests, self.duration_s)
            if problem:
                raise ValueError(problem)
        return self

    def with_rate(self, rate_rps: float) -> "WorkloadSpec":
        """Return a copy with an open-loop rate (a replay is sped up to that mean rate)."""
        if self.trace is not None:
            raise ConfigError("a trace replays its own arrivals: set its speedup instead of a rate")
        if self.arrival is None:
            raise ConfigError("a closed-loop workload has no arrival rate; sweep its users instead")
        if self.arrival.kind == "replay":
            times = self.arrival.start_s or []
            span = (max(times) - min(times)) if len(times) > 1 else 0.0
            speed = 1.0 if span <= 0 else rate_rps * span / (len(times) - 1)
            arrival = self.arrival.model_copy(update={"speed": speed})
        else:
            arrival = self.arrival.model_copy(update={"rate_rps": rate_rps})
        return self.model_copy(update={"arrival": arrival})

    def with_speedup(self, speedup: float) -> "WorkloadSpec":
        """Return a copy replaying its trace at ``speedup``."""
        if self.trace is None:
            raise ConfigError("only a trace replay has a speedup; set an arrival rate or users instead")
        return self.model_copy(update={"trace": self.trace.with_speedup(speedup)})

    def with_users(self, users: int) -> "WorkloadSpec":
        """Return a copy with ``users`` closed-loop users."""
        if self.closed_loop is None:
            raise ConfigError("an open-loop workload has no users; sweep its rate instead")
        return self.model_copy(update={"closed_loop": self.closed_loop.model_copy(update={"users": users})})


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: when, how long its prompt, how many tokens it generates, its class."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_output_tokens: int
    slice: str | None
    timeout_s: float | None = None
    tenant: str | None = None


@dataclass(frozen=True)
class Workload:
    """Requests as columns, sorted by arrival (NaN arrivals in a closed-loop plan)."""

    arrival_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    max_output_tokens: np.ndarray  # int64
    class_index: np.ndarray  # int64 into class_names
    class_names: tuple[str, ...]
    class_timeout_s: tuple[float | None, ...]
    # prompt content (see the module docstring); None: every prompt is its own, every request independent
    prefix_tokens: np.ndarray | None = None  # int64, shared prefix length (0: none)
    prefix_group: np.ndarray | None = None  # int64, which shared prefix (-1: none)
    prev_turn: np.ndarray | None = None  # int64, index of the previous turn of its conversation (-1: first turn)
    turn_think_s: np.ndarray | None = None  # float64, previous turn's end to this arrival, s
    content_salt: int = 0  # makes one seed's documents and messages differ from another's
    class_tenants: tuple[str | None, ...] = ()  # each class's tenant (empty: none has one)
    trace_row: np.ndarray | None = None  # int64, a replayed request's 1-based row in its trace (None: drawn)
    trace_blocks: TraceBlocks | None = None  # a replayed trace's prefix block IDs: the prompts' content

    def tenant_of(self, class_index: int) -> str | None:
        """Return the tenant of a class (None when it names none)."""
        return self.class_tenants[class_index] if self.class_tenants else None

    @property
    def has_turns(self) -> bool:
        """Return True when some requests arrive after an earlier turn ends, not at a drawn time."""
        return self.prev_turn is not None and bool((self.prev_turn >= 0).any())

    def next_turns(self) -> np.ndarray:
        """Return each request's next turn index (-1: none)."""
        nxt = np.full(len(self), -1, dtype=np.int64)
        if self.prev_turn is not None:
            later = np.flatnonzero(self.prev_turn >= 0)
            nxt[self.prev_turn[later]] = later
        return nxt

    @property
    def shares_content(self) -> bool:
        """Return True when prompts share content (documents, conversation turns or a trace's blocks)."""
        return self.prefix_tokens is not None or self.trace_blocks is not None

    def prompt_contents(self) -> list[SegmentPrompt]:
        """Return each prompt as segments: shared documents, messages and previous answers, or a trace's blocks."""
        if self.trace_blocks is not None and self.trace_row is not None:
            return block_prompts(self.trace_blocks, self.prompt_tokens, self.trace_row)
        n = len(self)
        salt = self.content_salt
        prompt = self.prompt_tokens.tolist()
        out_len = self.output_tokens.tolist()
        cls = self.class_index.tolist()
        pre = self.prefix_tokens.tolist() if self.prefix_tokens is not None else [0] * n
        group = self.prefix_group.tolist() if self.prefix_group is not None else [-1] * n
        prev = self.prev_turn.tolist() if self.prev_turn is not None else [-1] * n
        contents: list[SegmentPrompt] = []
        for i in range(n):
            p = prev[i]
            if p < 0:
                head: tuple[tuple[int, int], ...] = ((segment_id(3, salt, cls[i], group[i]), pre[i]),) if pre[i] else ()
                own = prompt[i] - pre[i]
            else:  # the history, the previous answer, then this turn's message
                head = contents[p].segments + ((segment_id(2, salt, p), out_len[p]),)
                own = prompt[i] - prompt[p] - out_len[p]
            contents.append(SegmentPrompt(head + ((segment_id(1, salt, i), own),) if own else head))
        return contents

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def to_specs(self) -> list[RequestSpec]:
        """Return the requests as RequestSpec objects."""
        names, timeouts = self.class_names, self.class_timeout_s
        return [RequestSpec(float(a), int(p), int(o), int(m), names[c], timeouts[c], self.tenant_of(c))
                for a, p, o, m, c in zip(self.arrival_s.tolist(), self.prompt_tokens.tolist(),
                                         self.output_tokens.tolist(), self.max_output_tokens.tolist(),
                                         self.class_index.tolist())]


@dataclass(frozen=True)
class ClosedLoopPlan:
    """Closed-loop requests drawn up front: request i waits ``think_s[i]`` after its user's last end."""

    users: int
    requests: Workload
    think_s: np.ndarray  # float64, 0 for each user's first request


def arrival_times(arrival: ArrivalSpec, num_requests: int | None, duration_s: float | None,
                  rng: np.random.Generator) -> np.ndarray:
    """Return sorted arrival times from 0, stopping at ``num_requests`` or before ``duration_s``."""
    if arrival.kind == "replay":
        if not arrival.start_s:
            raise ConfigError(f"replay of {arrival.path!r} has no start times loaded")
        t = np.sort(np.asarray(arrival.start_s, dtype=np.float64))
        t = (t - t[0]) / arrival.speed
        if duration_s is not None:
            t = t[t < duration_s]
        return t[:num_requests] if num_requests is not None else t
    rate = float(arrival.rate_rps)  # checked by ArrivalSpec
    if num_requests is None:
        if duration_s is None:
            raise ConfigError("arrival_times needs num_requests or duration_s")
        expected = rate * duration_s
        if expected > MAX_GENERATED:
            raise ConfigError(f"rate {rate} x duration {duration_s} s gives over {MAX_GENERATED} requests")
        chunk = int(expected + 6 * np.sqrt(expected) + 16)
    else:
        if num_requests > MAX_GENERATED:
            raise ConfigError(f"num_requests {num_requests} is over {MAX_GENERATED}")
        chunk = num_requests
    parts: list[np.ndarray] = []
    last, count = 0.0, 0
    while True:
        gaps = _gaps(arrival, rate, chunk, rng)
        t = last + np.cumsum(gaps)
        # the first arrival comes at time 0 (open loop starts with a request)
        if count == 0:
            t = t - gaps[0]
        parts.append(t)
        count += t.size
        last = float(t[-1])
        if num_requests is not None and count >= num_requests:
            break
        if duration_s is not None and last >= duration_s:
            break
    out = np.concatenate(parts)
    if duration_s is not None:
        out = out[out < duration_s]
    return out[:num_requests] if num_requests is not None else out


def _gaps(arrival: ArrivalSpec, rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    if arrival.kind == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    if arrival.kind == "gamma":
        shape = 1.0 / arrival.cv ** 2
        return rng.gamma(shape, 1.0 / (rate * shape), size=n)
    return np.full(n, 1.0 / rate)


def _zero_output(output: LengthSpec) -> str | None:
    """Say why an output distribution can draw 0 tokens, or return None when it cannot."""
    lower = output.lower_tokens
    if lower is None or lower >= 1:
        return None
    where = {"fixed": "'value'", "uniform": "'low'", "lognormal": "'min_tokens'"}.get(output.kind, "a value")
    return (f"output lengths must be at least 1 token (a request generates its first token when its prefill "
            f"completes), but this {output.kind} length can draw {lower}: raise {where} to 1 or more")


def _short_prompt(c: ClassSpec) -> str | None:
    """Say why a class's prompt can be shorter than its shared prefix, or return None when it cannot."""
    if c.shared_prefix is None:
        return None
    lower = c.prompt.lower_tokens
    if lower is None or lower >= c.shared_prefix.tokens:
        return None
    return (f"the prompt length includes the shared prefix of {c.shared_prefix.tokens} tokens, but this "
            f"{c.prompt.kind} length can draw {lower}: make every prompt at least {c.shared_prefix.tokens} tokens")


def _members(idx: np.ndarray, k: int) -> list[np.ndarray]:
    """Return the requests of each of ``k`` classes in index order (``flatnonzero(idx == c)`` for each c, in one sort)."""
    order = np.argsort(idx, kind="stable")
    return np.split(order, np.searchsorted(idx[order], np.arange(1, k)))


def draw_requests(classes: list[ClassSpec], n: int, rng: np.random.Generator) -> Workload:
    """Draw classes by weight, then each class's prompt and output lengths (arrivals left NaN).

    Raises ConfigError if a class's output lengths can be 0 or its prompts shorter than its shared
    prefix (values loaded from a file after validation).
    """
    for c in classes:
        problem = _zero_output(c.output) or _short_prompt(c)
        if problem:
            raise ConfigError(f"workload class {c.name!r}: {problem}")
    w = np.array([c.weight for c in classes], dtype=np.float64)
    with np.errstate(over="ignore"):
        if not math.isfinite(float(w.sum())):  # weights near the float maximum: only their ratios matter
            w = w / w.max()
    idx = rng.choice(len(classes), size=n, p=w / w.sum()) if len(classes) > 1 else np.zeros(n, dtype=np.int64)
    prompt = np.zeros(n, dtype=np.int64)
    output = np.zeros(n, dtype=np.int64)
    cap = np.zeros(n, dtype=np.int64)
    for c, sel in zip(classes, _members(idx, len(classes))):
        prompt[sel] = c.prompt.draw(sel.size, rng)
        out = c.output.draw(sel.size, rng)
        limit = c.max_output_tokens or c.output.upper_tokens
        if limit is None:
            limit = int(out.max()) if out.size else 1
        output[sel] = np.minimum(out, limit)
        cap[sel] = limit
    tenants = tuple(c.tenant for c in classes) if any(c.tenant is not None for c in classes) else ()
    wl = Workload(np.full(n, np.nan), prompt, output, cap, idx.astype(np.int64),
                  tuple(c.slice_name for c in classes), tuple(c.timeout_s for c in classes), class_tenants=tenants)
    if any(c.shared_prefix is not None or c.conversation is not None for c in classes):
        wl = _draw_content(classes, wl, rng)
    return wl


def _draw_content(classes: list[ClassSpec], wl: Workload, rng: np.random.Generator) -> Workload:
    """Draw shared-prefix groups and a content salt; chain conversation turns (prompts grow with history)."""
    n = len(wl)
    idx = wl.class_index
    prefix = np.zeros(n, dtype=np.int64)
    group = np.full(n, -1, dtype=np.int64)
    prev = np.full(n, -1, dtype=np.int64)
    think = np.zeros(n, dtype=np.float64)
    prompt = wl.prompt_tokens.copy()
    for c, sel in zip(classes, _members(idx, len(classes))):
        sp = c.shared_prefix
        if sp is not None:
            prefix[sel] = sp.tokens
            group[sel] = sp.draw(sel.size, rng)
        conv = c.conversation
        if conv is not None and conv.turns > 1:
            turn = np.arange(sel.size) % conv.turns
            later = sel[turn > 0]
            before = sel[np.flatnonzero(turn > 0) - 1]
            prev[later] = before
            think[later] = conv.think_s
            group[later] = group[before]  # one document for the whole chat (the first turn's)
    salt = int(rng.integers(1, 2**62))
    out = wl.output_tokens
    for i in np.flatnonzero(prev >= 0).tolist():  # in index order: a turn's history is final before it
        p = int(prev[i])
        prompt[i] = prompt[p] + out[p] + prompt[i] - prefix[i]
    return replace(wl, prompt_tokens=prompt, prefix_tokens=prefix, prefix_group=group, prev_turn=prev,
                   turn_think_s=think, content_salt=salt)


def generate_workload(spec: WorkloadSpec, rng: np.random.Generator) -> Workload:
    """Return an open-loop workload as columns sorted by arrival (later conversation turns: NaN)."""
    if spec.arrival is None:
        raise ConfigError("generate_workload needs an open-loop 'arrival'; use closed_loop_plan for users")
    t = arrival_times(spec.arrival, spec.num_requests, spec.duration_s, rng)
    wl = draw_requests(spec.classes, t.size, rng)
    if wl.prev_turn is not None:
        t = np.where(wl.prev_turn >= 0, np.nan, t)
    return replace(wl, arrival_s=t)


def generate_arrivals(spec: WorkloadSpec, rng: np.random.Generator) -> list[RequestSpec]:
    """Return an open-loop workload as RequestSpec objects sorted by arrival."""
    return generate_workload(spec, rng).to_specs()


def closed_loop_plan(spec: WorkloadSpec, rng: np.random.Generator) -> ClosedLoopPlan:
    """Draw a closed-loop workload's lengths and think times up front."""
    if spec.closed_loop is None or spec.num_requests is None:
        raise ConfigError("closed_loop_plan needs 'closed_loop' and 'num_requests'")
    cl = spec.closed_loop
    n = spec.num_requests
    wl = draw_requests(spec.classes, n, rng)
    if cl.think == "exponential" and cl.think_s > 0:
        think = rng.exponential(cl.think_s, size=n)
    else:
        think = np.full(n, cl.think_s)
    think[: min(cl.users, n)] = 0.0
    return ClosedLoopPlan(cl.users, wl, think)


@dataclass(frozen=True)
class DrawnWorkload:
    """One seed's requests and clients: what the simulator, the engine run and the load generator all serve.

    Open loop, ``requests`` carry their arrival times (``users`` is None). Closed loop, ``users``
    users send them in order, request i ``think_s[i]`` after its user's previous request ended.
    ``cancel_after_s`` is each client's wait after its request's arrival before it cancels (NaN:
    never); None when no client cancels.
    """

    requests: Workload
    users: int | None = None
    think_s: np.ndarray | None = None  # float64, closed loop only
    cancel_after_s: np.ndarray | None = None  # float64

    def __len__(self) -> int:
        return len(self.requests)

    def plan(self) -> Workload | ClosedLoopPlan:
        """Return the requests as the simulator takes them: the workload, or a closed-loop plan."""
        if self.users is None or self.think_s is None:
            return self.requests
        return ClosedLoopPlan(self.users, self.requests, self.think_s)


def draw_cancellations(n: int, cancel: CancelSpec | None, rng: np.random.Generator) -> np.ndarray | None:
    """Return each of ``n`` clients' wait before it cancels (NaN: never), or None when no client cancels.

    Who cancels is drawn first (one uniform each), then a wait for every client (exponential with
    mean ``after_s``), so a seed gives the same cancellations on every machine.
    """
    if cancel is None or cancel.probability <= 0:
        return None
    hit = rng.random(n) < cancel.probability
    return np.where(hit, rng.exponential(cancel.after_s, size=n), np.nan)


TRACE_CLASS = "trace"  # the slice of a trace's requests in their records


def replay_trace(spec: WorkloadSpec) -> Workload:
    """Return a trace's window as a workload: its arrivals divided by the speedup, its lengths unchanged.

    Arrivals are ``(t - start_s) / speedup`` for the trace's times ``t`` in the window, so with the defaults
    they are the trace's own, exactly. The workload's ``num_requests`` and ``duration_s`` (run seconds) then
    cut the replay as they cut any workload. Each request's output cap is the largest output replayed (a
    class without ``max_output_tokens`` does the same). Raises ConfigError when the window holds no request
    or its arrivals span past ``MAX_TIME_S``.
    """
    trace = spec.trace
    assert trace is not None  # the caller's test
    window = trace.window()
    t = window.trace
    index = window.index
    arrival = (t.arrival_s[index] - trace.start_s) / trace.speedup
    keep = index.size if spec.num_requests is None else min(index.size, spec.num_requests)
    if spec.duration_s is not None:
        keep = min(keep, int(np.searchsorted(arrival, spec.duration_s, side="left")))
    index, arrival = index[:keep], arrival[:keep]
    if index.size == 0:
        what = "requests with output tokens" if window.left_out_zero_output else "requests"
        raise ConfigError(f"trace {trace.path}: no {what} in the window replayed (start_s {trace.start_s:g}, "
                          f"duration_s {trace.duration_s}, max_requests {trace.max_requests}; the workload's "
                          f"num_requests {spec.num_requests}, duration_s {spec.duration_s})")
    span_s = float(arrival[-1] - arrival[0])
    if not span_s <= MAX_TIME_S:
        raise ConfigError(f"trace {trace.path}: at speedup {trace.speedup:g} the arrivals span {span_s:.3g} s, past "
                          f"{MAX_TIME_S:g} s where float64 seconds keep microseconds")
    output = t.output_tokens[index]
    blocks = replace(window, index=index).blocks()
    n = int(index.size)
    return Workload(arrival_s=arrival, prompt_tokens=t.prompt_tokens[index], output_tokens=output,
                    max_output_tokens=np.full(n, int(output.max()), dtype=np.int64),
                    class_index=np.zeros(n, dtype=np.int64), class_names=(TRACE_CLASS,), class_timeout_s=(None,),
                    trace_row=t.row[index], trace_blocks=blocks)


def draw_workload(spec: WorkloadSpec, rng: np.random.Generator, cancel: CancelSpec | None = None) -> DrawnWorkload:
    """Draw the requests (open-loop arrivals, closed-loop lengths and think times, or a trace's), then the
    cancellations.

    The one draw behind ``servebench simulate``, ``servebench run`` and ``servebench load``: one
    spec and seed give all three the same arrivals, lengths and prompt contents (token ids), and
    with ``cancel`` the same cancellations (the load generator's clients close their connections).
    A trace replay draws nothing for its requests; only the cancellations come from ``rng``.
    """
    if spec.trace is not None:
        drawn = DrawnWorkload(replay_trace(spec))
    elif spec.closed_loop is not None:
        plan = closed_loop_plan(spec, rng)
        drawn = DrawnWorkload(plan.requests, plan.users, plan.think_s)
    else:
        drawn = DrawnWorkload(generate_workload(spec, rng))
    return replace(drawn, cancel_after_s=draw_cancellations(len(drawn), cancel, rng))
