"""Disaggregated prefill and decode: prompts on prefill instances, tokens on decode instances, KV over a link.

A scenario's ``fleet: {prefill_replicas: P, decode_replicas: D, kv_transfer_gbps: B}`` runs P prefill
instances and D decode instances of the scenario's server on one event clock (``docs/fleet.md``):

* A request arrives at the fleet and the router sends it to a prefill instance. There it is the
  single-replica simulator's request with one output token (``prefill_view``): the scheduler admits
  it under the instance's KV budget and token budget, computes its prompt (chunked, batched with
  other prompts, or on the ``separate`` lane) and it is done when its prefill is. A prefill instance
  never decodes, so its prompt's KV is freed there when the prefill ends.
* At that moment the router picks a decode instance (its load: requests handed to it and not yet
  ended) and the prompt's KV crosses the prefill instance's link: ``kv_bytes(model, prompt_tokens)``
  (the KV calculator's count) over B GB/s (1e9 bytes). One link per prefill instance carries one
  transfer at a time, in the order the prefills end, so a transfer may wait for the one before.
* The decode instance receives the request with its prompt computed: its step model is the decode
  view of the scenario's (``decode_view``): taking in a prompt costs what one decode step of it does
  (its KV read and its sequence), so the step that takes it in samples its first token; each later
  step adds one token. Its admission reserves KV as the scenario's policy says (reserve: prompt and
  output cap; paged: blocks as they fill), so decode instances hold what they can. No prompt is
  computed there, so a decode step never carries a prefill: TPOT has no prefill interference.

TTFT is therefore queueing and prefill on the prefill instance, the transfer (and any wait for the
link), and queueing and the first step on the decode instance. The record's ``admitted`` is its
admission to a prefill instance and ``cached_prompt_tokens`` its prefix-cache reuse there. Records
carry ``prefill_replica``, ``decode_replica`` (null when it never reached one) and ``kv_transfer_s``
(from the prefill's end to the KV's arrival, link wait included; null without a transfer).

A deadline or a client's cancellation that falls while the KV is crossing (or waiting for the link) ends
the request then (at the deadline, or the cancellation) without a decode instance: its record starts at its
arrival, has no ``kv_transfer_s`` (no KV arrived) and the link is free from its end; the prefill instances keep the
scenario's ``max_waiting`` and ``max_queue_wait_s``, the decode instances take every prompt handed to
them (no waiting bound, no shedding: the prompt is computed). Each instance draws its step noise from
a stream of its own: prefill instance k as ``simulate(..., replica=k)``, decode instance k from
``[seed, DECODE_STREAM, k]``.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from servebench.analysis.disagg import DECODE_COLUMN, PREFILL_COLUMN, TRANSFER_COLUMN
from servebench.capacity.kv import ModelShape, kv_bytes
from servebench.capacity.stepmodel import StepModel
from servebench.errors import ConfigError
from servebench.records.steps import StepTrace
from servebench.records.table import STATUSES
from servebench.serving.fleet import (
    ROUTER_STREAM,
    _Merged,
    _Replica,
    _seeds,
    merge_token_runs,
    simulate_scenario,
)
from servebench.serving.scenario import FleetSpec, Scenario
from servebench.serving.scheduler import ERR_CANCELLED, ERR_DEADLINE, Outcome
from servebench.serving.simulate import (
    EV_ARRIVAL,
    LAG_STREAM,
    NOISE_STREAM,
    PRIO_ARRIVAL,
    SimResult,
    TokenTimes,
    _Recorder,
    _trace,
)
from servebench.serving.workload import Workload, draw_cancellations, draw_workload

GB = 1e9  # kv_transfer_gbps counts decimal gigabytes, as links are rated
DECODE_STREAM = 0xDE  # decode instance k's noise and lags: default_rng([seed, DECODE_STREAM, k, ...])
_NONE = (math.inf, math.inf, math.inf)
_SUCCESS = STATUSES.index("success")


@dataclass(frozen=True)
class DisaggResult:
    """What one disaggregated simulation produced.

    ``result.records`` carry ``prefill_replica``, ``decode_replica`` and ``kv_transfer_s``;
    ``result.trace`` holds every instance's step rows (prefill instances first, ``traces`` has them
    apart); the arrays here are the same columns as numbers (-1 and NaN where a request has none).
    """

    result: SimResult
    prefill_replica: np.ndarray  # int64, each record's prefill instance (-1: none, rejected before routing)
    decode_replica: np.ndarray  # int64, each record's decode instance (-1: it never reached one)
    kv_transfer_s: np.ndarray  # float64, prefill end to KV arrival (NaN: no transfer)
    traces: tuple[StepTrace, ...]  # prefill instances', then decode instances'


def transfer_s(model: ModelShape, prompt_tokens: int, kv_transfer_gbps: float) -> float:
    """Return the seconds a prompt's KV takes to cross a link of ``kv_transfer_gbps`` GB/s.

    >>> from servebench.capacity.kv import ModelShape
    >>> transfer_s(ModelShape(layers=32, kv_heads=8, head_dim=128), 8192, 2**30 / 1e9)  # 1 GiB at 1 GiB/s
    1.0
    """
    return kv_bytes(model, prompt_tokens) / (kv_transfer_gbps * GB)


def decode_view(model: StepModel) -> StepModel:
    """Return a decode instance's step model: taking in a computed prompt costs one decode step of it.

    Its KV is read as a decoder's (``per_kv_token_s`` a prompt token) and it is one more sequence
    (``per_decode_seq_s``); nothing is computed, so no ``after_prefill_s``, and no arrival lag (the
    request was seen by its prefill instance).

    >>> m = StepModel(base_s=0.01, per_prefill_token_s=1e-4, per_decode_seq_s=1e-3, per_kv_token_s=1e-6)
    >>> round(decode_view(m).step_s(1000, 0, 0, 1), 9) == round(m.step_s(0, 1, 1000), 9)  # take in 1,000 tokens
    True
    """
    return model.model_copy(update={
        "per_prefill_token_s": model.per_kv_token_s, "per_prefill_seq_s": model.per_decode_seq_s,
        "after_prefill_s": 0.0, "prefill_noise_factors": (), "prefill_noise_excess_s": (),
        "arrival_lag_s": 0.0, "arrival_lags_s": (), "busy_arrival_lags_s": ()})


def prefill_view(workload: Workload) -> Workload:
    """Return the workload as a prefill instance serves it: each request done with its first token."""
    ones = np.ones(len(workload), dtype=np.int64)
    return replace(workload, output_tokens=ones, max_output_tokens=ones)


def simulate_deployment(scenario: Scenario, *, token_times: TokenTimes = True) -> SimResult:
    """Simulate a scenario as it says: one replica, replicas behind a router, or disaggregated prefill and decode."""
    if scenario.fleet is not None and scenario.fleet.disaggregated:
        return simulate_disaggregated(scenario, token_times=token_times).result
    return simulate_scenario(scenario, token_times=token_times)


def simulate_disaggregated(scenario: Scenario, fleet: FleetSpec | None = None, *, workload: Workload | None = None,
                           rng: np.random.Generator | None = None, token_times: TokenTimes = True,
                           decode_runs: bool = True, lazy_decode: bool = True,
                           shape: ModelShape | None = None) -> DisaggResult:
    """Simulate ``fleet`` (default: the scenario's) as prefill and decode instances of the scenario's server.

    The workload and cancellations come from ``rng`` (default: the scenario's seed) as :func:`simulate` draws them.
    ``shape`` counts the KV bytes a prompt moves (default: ``server.model``; the planner's scenarios give their
    budget in tokens and the model here).
    """
    fleet = fleet or scenario.fleet
    if fleet is None or not fleet.disaggregated:
        raise ConfigError(f"scenario {scenario.name!r}: fleet needs prefill_replicas, decode_replicas and "
                          "kv_transfer_gbps to disaggregate")
    shape = shape or scenario.server.model
    if shape is None:
        raise ConfigError(f"scenario {scenario.name!r}: disaggregated prefill and decode needs server.model to count "
                          "the KV bytes a prompt moves")
    rng = scenario.rng() if rng is None else rng
    if workload is None:
        drawn = draw_workload(scenario.workload, rng, scenario.cancel)
        plan, cancel_after = drawn.plan(), drawn.cancel_after_s
    else:
        plan, cancel_after = workload, draw_cancellations(len(workload), scenario.cancel, rng)
    if not isinstance(plan, Workload) or plan.has_turns:
        raise ConfigError(f"scenario {scenario.name!r}: disaggregated prefill and decode takes open-loop requests "
                          "that do not follow others' ends (no closed-loop users, no conversations)")
    loop = _Disaggregated(scenario, fleet, shape, plan, cancel_after, token_times=token_times,
                          decode_runs=decode_runs, lazy_decode=lazy_decode)
    loop.run()
    return loop.result(scenario.name)


class _Pool:
    """One kind of instance: the shared record rows and the clock's view that ``fleet._Replica`` reads."""

    def __init__(self, rows: int, class_names: tuple[str, ...], count: int, first: int, next_s: Callable[[], float],
                 horizon_s: Callable[[], float], on_end: Callable[[int, int, float], None]) -> None:
        self.rec = _Recorder(rows, class_names)
        self.intended = np.full(rows, np.nan)
        self.load = [0] * count  # requests sent to each instance, not yet ended there
        self.first = first  # the pool's first instance's number on the clock (its keys tie-break by it)
        self.next_arrival_s, self._horizon_s, self._on_end = next_s, horizon_s, on_end

    def horizon_s(self, replica: int) -> float:
        """Return the earliest a request could reach an instance of this pool."""
        return self._horizon_s()

    def ended(self, replica: int, i: int, now: float) -> None:
        """Request ``i`` ended on instance ``replica`` (numbered on the clock) in this pool's stage."""
        self.load[replica - self.first] -= 1
        self._on_end(replica - self.first, i, now)


class _DecodeInstance(_Replica):
    """A decode instance: requests reach it with their prompts computed, when their KV has arrived."""

    def take(self, i: int, arrived_s: float, start_s: float) -> None:
        """Take request ``i`` (arrived at the fleet at ``start_s``) when its KV arrives at ``arrived_s``."""
        self.lagged = True  # the record starts at the fleet's arrival, not the KV's
        self.intended[i] = start_s
        self._push(arrived_s, PRIO_ARRIVAL, EV_ARRIVAL, i)


class _Router:
    """One pool's router: round_robin, least_outstanding or power_of_two over its instances' loads."""

    def __init__(self, kind: str, load: list[int], rng: np.random.Generator, n: int) -> None:
        self.load, self.sent = load, 0
        count = len(load)
        if kind == "power_of_two" and count >= 2:
            first = rng.integers(count, size=n)
            second = rng.integers(count - 1, size=n)
            second += second >= first  # two distinct instances
            self.pairs = list(zip(first.tolist(), second.tolist()))
        self.choose: Callable[[int], int] = getattr(self, f"_{kind}") if count > 1 else (lambda i: 0)

    def _round_robin(self, i: int) -> int:
        return self.sent % len(self.load)

    def _least_outstanding(self, i: int) -> int:
        load = self.load
        return min(range(len(load)), key=load.__getitem__)

    def _power_of_two(self, i: int) -> int:
        a, b = self.pairs[i]
        return a if self.load[a] <= self.load[b] else b

    def route(self, i: int) -> int:
        """Return request ``i``'s instance and count it there."""
        k = self.choose(i)
        self.sent += 1
        self.load[k] += 1
        return k


class _Disaggregated:
    """The prefill and decode instances, the arrivals, the links and the transfers in flight."""

    def __init__(self, scenario: Scenario, spec: FleetSpec, shape: ModelShape, reqs: Workload,
                 cancel_after_s: np.ndarray | None, *, token_times: TokenTimes, decode_runs: bool,
                 lazy_decode: bool) -> None:
        assert spec.prefill_replicas is not None and spec.decode_replicas is not None  # FleetSpec's check
        assert spec.kv_transfer_gbps is not None
        n, seed = len(reqs), scenario.seed
        self.reqs, self.n, self.spec = reqs, n, spec
        self.arrival_s = reqs.arrival_s.tolist()
        self.position = 0
        self.start_s = self.arrival_s  # open loop: the record starts at the drawn arrival
        self.cancel = None if cancel_after_s is None else cancel_after_s.tolist()
        by_length: dict[int, float] = {}
        self.transfer = [by_length.setdefault(p, transfer_s(shape, p, spec.kv_transfer_gbps))
                         for p in reqs.prompt_tokens.tolist()]
        self.min_transfer_s = min(self.transfer, default=0.0)
        config = scenario.server.scheduler_config()
        separate = scenario.server.prefill_lane == "separate"
        prefill_config = config.model_copy(update={"max_num_batched_tokens": None}) if separate else config
        decode_config = config.model_copy(update={"max_num_batched_tokens": None, "prefix_caching": False,
                                                  "max_waiting": None, "max_queue_wait_s": None})
        model = scenario.step_model.to_model()
        self.timeout_s = [config.timeout_s if t is None else t for t in reqs.class_timeout_s]
        self.cls = reqs.class_index.tolist()
        self.handoffs: list[tuple[float, int, int, int]] = []  # (KV arrival, sequence, request, decode instance)
        self.counter = 0
        P, D = spec.prefill_replicas, spec.decode_replicas
        self.link_free_s = [0.0] * P
        self.prefill_of = np.full(n, -1, dtype=np.int64)
        self.decode_of = np.full(n, -1, dtype=np.int64)
        self.kv_transfer_s = np.full(n, np.nan)
        self.ppool = _Pool(n, reqs.class_names, P, 0, self._next_prefill_s, self.next_arrival_s, self._prefill_ended)
        self.dpool = _Pool(n, reqs.class_names, D, P, self._next_handoff_s, self._decode_horizon_s,
                           lambda k, i, now: None)
        stream = np.random.default_rng([seed, ROUTER_STREAM])
        self.prefill_router = _Router(spec.router, self.ppool.load, stream, n)
        self.decode_router = _Router(spec.router, self.dpool.load, np.random.default_rng([seed, ROUTER_STREAM, 1]), n)
        pview = prefill_view(reqs)
        self.prefills = [
            _Replica(self.ppool, k, prefill_config, model, pview, separate=separate, cancel_after_s=cancel_after_s,
                     decode_runs=decode_runs, token_times=False, client=None, client_rng=None, lazy_decode=lazy_decode,
                     noise=model.noise(np.random.default_rng([*_seeds(seed, k), NOISE_STREAM])),
                     lag_rng=np.random.default_rng([*_seeds(seed, k), LAG_STREAM]))
            for k in range(P)]
        dmodel = decode_view(model)
        self.decodes = [
            _DecodeInstance(self.dpool, P + k, decode_config, dmodel, reqs, separate=False,
                            cancel_after_s=cancel_after_s, decode_runs=decode_runs, token_times=token_times, client=None, client_rng=None,
                            lazy_decode=lazy_decode,
                            noise=dmodel.noise(np.random.default_rng([seed, DECODE_STREAM, k, NOISE_STREAM])),
                            lag_rng=np.random.default_rng([seed, DECODE_STREAM, k, LAG_STREAM]))
            for k in range(D)]
        self.instances: list[_Replica] = [*self.prefills, *self.decodes]
        self.keys = [_NONE] * (P + D)

    # ------------------------------------------------------------------ the clock's view
    def next_arrival_s(self) -> float:
        """Return the next arrival not yet routed (inf: none left)."""
        return self.arrival_s[self.position] if self.position < self.n else math.inf

    def _next_handoff_s(self) -> float:
        return self.handoffs[0][0] if self.handoffs else math.inf

    def _next_prefill_s(self) -> float:
        """A prefill instance runs until the next arrival or KV arrival (decode ends move the decode router's loads)."""
        return min(self.next_arrival_s(), self._next_handoff_s())

    def _decode_horizon_s(self) -> float:
        """Return the earliest a prompt's KV could reach a decode instance: one crossing now, or one a prefill sends."""
        soonest = min((self.keys[k][0] for k in range(len(self.prefills))), default=math.inf)
        return min(self._next_handoff_s(), soonest + self.min_transfer_s)

    # ------------------------------------------------------------------ the hand-off
    def _prefill_ended(self, p: int, i: int, now: float) -> None:
        """Request ``i`` left prefill instance ``p``: its KV goes to a decode instance, unless it failed there."""
        if self.ppool.rec.status[i] != _SUCCESS:
            return  # rejected, timed out or cancelled while prefilling: its record is the prefill instance's
        leaves = max(now, self.link_free_s[p])
        arrives = leaves + self.transfer[i]
        start, timeout = self.start_s[i], self.timeout_s[self.cls[i]]
        deadline = math.inf if timeout is None else start + timeout
        cancel = start + self.cancel[i] if self.cancel is not None and self.cancel[i] == self.cancel[i] else math.inf
        if min(deadline, cancel) <= arrives:  # it ends while its KV crosses (or waits for the link)
            status, error, end = ("timeout", ERR_DEADLINE, deadline) if deadline <= cancel else ("cancelled",
                                                                                               ERR_CANCELLED, cancel)
            end = max(end, now)
            self.link_free_s[p] = max(leaves, end)  # the transfer stops when the request ends
            self.dpool.rec.arrival[i] = start  # the record's start: its arrival at the fleet
            self.dpool.rec.add(Outcome(str(i), start, None, None, end, status,
                                       int(self.reqs.prompt_tokens[i]), 0, self.reqs.class_names[self.cls[i]], error))
            return
        self.link_free_s[p] = arrives
        self.kv_transfer_s[i] = (leaves - now) + self.transfer[i]  # exactly the transfer when the link was free
        d = self.decode_router.route(i)
        self.decode_of[i] = d
        self.counter += 1
        heapq.heappush(self.handoffs, (arrives, self.counter, i, d))

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Route arrivals, deliver KV and run the instances, in one order of events (time, priority, instance)."""
        instances, keys = self.instances, self.keys
        count = len(instances)
        while True:
            arrival = (self.next_arrival_s(), PRIO_ARRIVAL, -2)
            handoff = (self._next_handoff_s(), PRIO_ARRIVAL, -1)
            k = min(range(count), key=keys.__getitem__)
            if arrival <= handoff and arrival < keys[k]:
                if arrival[0] == math.inf:
                    break
                i = self.position
                self.position += 1
                p = self.prefill_router.route(i)
                self.prefill_of[i] = p
                self.prefills[p].deliver(i, arrival[0])
                keys[p] = self.prefills[p].next_key()
                continue
            if handoff < keys[k]:
                at_s, _, i, d = heapq.heappop(self.handoffs)
                self.decodes[d].take(i, at_s, self.start_s[i])
                keys[len(self.prefills) + d] = self.decodes[d].next_key()
                continue
            if keys[k] == _NONE:
                break
            limit = min((keys[j] for j in range(count) if j != k), default=_NONE)
            instances[k].advance(min(limit, handoff))
            keys[k] = instances[k].next_key()

    # ------------------------------------------------------------------ the result
    def result(self, name: str) -> DisaggResult:
        """Return one record per request: the decode instance's, or the prefill instance's where it ended there."""
        prec, drec, n = self.ppool.rec, self.dpool.rec, self.n
        here = drec.status < 0  # ended while prefilling
        for column in ("arrival", "first_token", "end", "status", "output", "error"):
            getattr(drec, column)[here] = getattr(prec, column)[here]
        drec.admitted[:] = prec.admitted  # admitted: to its prefill instance
        drec.cached[:] = prec.cached
        drec.preemptions += prec.preemptions
        head = self.decodes[0]
        if head.token_log is not None:
            head.token_log = _Merged(merge_token_runs([d.token_log.take_runs(n, int) for d in self.decodes], n))  # type: ignore[assignment, union-attr]
        traces = tuple(_trace(r.trace_s, r.trace_n) for r in self.instances)
        head.trace_s = array("d", b"".join(bytes(r.trace_s) for r in self.instances))
        head.trace_n = array(head.trace_n.typecode, b"".join(bytes(r.trace_n) for r in self.instances))  # one budget
        one = head.result(name)
        one = replace(one, engine_steps=sum(r.engine_steps for r in self.instances),
                      events=sum(r.events for r in self.instances),
                      prefix_evictions=sum(r.sched.evictions for r in self.prefills))
        reached = self.decode_of >= 0
        extra = {**one.records.extra,
                 PREFILL_COLUMN: pa.array(self.prefill_of, pa.int64(), mask=self.prefill_of < 0),
                 DECODE_COLUMN: pa.array(self.decode_of, pa.int64(), mask=~reached),
                 TRANSFER_COLUMN: pa.array(self.kv_transfer_s, pa.float64(), mask=np.isnan(self.kv_transfer_s))}
        one = replace(one, records=one.records.with_columns(extra=extra))
        return DisaggResult(one, self.prefill_of, self.decode_of, self.kv_transfer_s, traces)
