"""A fleet: replicas of one server behind a router, on one event clock.

Each replica is the single-replica simulator's loop (:mod:`servebench.serving.simulate`: its own
scheduler, event heap, step model, noise and lag streams); the fleet owns what crosses replicas:
the arrivals and the router. Events run in one global order, (time, priority, replica): the replica
with the earliest event handles it, a replica runs on alone until another replica's next event or the
fleet's next arrival, and an arrival is routed when it is the earliest thing left (before a replica's
own arrival-priority events at the same time). The router reads the replicas as they are at the
arrival: its load is each replica's outstanding requests (routed, not yet ended).

A decode run on one replica (the simulator's fast path) stops where a request could reach it: the
fleet's next known arrival, or the earliest moment another replica's next event could send a
conversation's next turn (that event plus the shortest think time). A workload of drawn arrivals only
(no conversations, open loop) therefore costs each replica no more events than it would alone.

Routers (``FleetSpec.router``; ties go to the lowest replica index):

* ``round_robin``: replica ``k mod N`` for the k-th arrival.
* ``least_outstanding``: the replica with the fewest outstanding requests.
* ``power_of_two``: two distinct replicas drawn at random (``default_rng([seed, ROUTER_STREAM])``), the
  less loaded of the two (the first drawn on a tie).
* ``prefix_affinity``: the replica whose prefix cache holds the longest run of the prompt's leading
  blocks (a tie: the less loaded), unless it is overloaded against the least-loaded replica (more than
  ``affinity_slack_requests`` more outstanding requests and more than ``affinity_slack_ratio`` times as
  many, SGLang's router rule); then, or when no replica holds a block of it, the least-loaded replica.
  The cache is read as it is (Dynamo's KV router reads its replicas' cache events the same way): a
  prompt routed but not yet computed is not in it.
* ``session_affinity``: a conversation's later turns go to the replica of its first turn, which goes to
  the least-loaded replica; a request outside a conversation is a session of its own.

A client's retry goes back to the replica of its request's first attempt (its backoff runs there), and
a cancellation ends the attempt where it runs. Every request ends on exactly one replica: the replicas
share one row per request, and a row that ends twice is a simulator error.
"""

from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from servebench.analysis.fleet import REPLICA_COLUMN
from servebench.capacity.stepmodel import StepModel
from servebench.errors import ConfigError
from servebench.records.steps import StepTrace
from servebench.records.token_times import TokenRuns
from servebench.serving.retry import ClientSpec
from servebench.serving.scenario import FleetSpec, Scenario
from servebench.serving.scheduler import SchedulerConfig
from servebench.serving.simulate import (
    LAG_STREAM,
    NOISE_STREAM,
    PRIO_ARRIVAL,
    PRIO_DEADLINE,
    SimResult,
    TokenTimes,
    _EventLoop,
    _Recorder,
    _trace,
    simulate,
)
from servebench.serving.workload import ClosedLoopPlan, Workload, draw_cancellations, draw_workload

ROUTER_STREAM = 0x70  # power_of_two's draws: default_rng([seed, ROUTER_STREAM]), apart from the workload's
_NONE = (math.inf, math.inf, math.inf)  # the key of a replica with nothing left to do


@dataclass(frozen=True)
class FleetResult:
    """What one fleet simulation produced.

    ``result.records`` carry a ``replica`` column; ``result.trace`` holds every replica's step rows,
    replica 0's first (``traces`` has them apart), and its counters are the fleet's sums.
    """

    result: SimResult
    replica: np.ndarray  # int64, each record row's replica
    traces: tuple[StepTrace, ...]
    router: str


def simulate_scenario(scenario: Scenario, *, token_times: TokenTimes = True,
                      workload: Workload | ClosedLoopPlan | None = None) -> SimResult:
    """Simulate a scenario as it says: one replica (:func:`simulate`), or its ``fleet``'s replicas and router."""
    if scenario.fleet is None:
        return simulate(scenario, token_times=token_times, workload=workload)
    return simulate_fleet(scenario, token_times=token_times, workload=workload).result


def simulate_fleet(scenario: Scenario, fleet: FleetSpec | None = None, *,
                   workload: Workload | ClosedLoopPlan | None = None, rng: np.random.Generator | None = None,
                   token_times: TokenTimes = True, decode_runs: bool = True, lazy_decode: bool = True) -> FleetResult:
    """Simulate ``fleet`` (default: the scenario's, else one replica) of the scenario's server.

    The workload, cancellations and clients' backoff come from ``rng`` as :func:`simulate` draws them;
    replica k draws its step noise and arrival lags as ``simulate(..., replica=k)`` does, so one replica
    is exactly :func:`simulate`'s run (its records then carry ``replica`` 0).
    """
    fleet = fleet or scenario.fleet or FleetSpec()
    if fleet.disaggregated:  # its instances are not replicas: servebench.serving.disagg runs them
        raise ConfigError(f"scenario {scenario.name!r}: a fleet of prefill and decode instances runs in "
                          "servebench.serving.disagg (simulate_disaggregated), not as replicas")
    if fleet.replicas == 1:
        one = simulate(scenario, workload=workload, rng=rng, decode_runs=decode_runs, token_times=token_times,
                       lazy_decode=lazy_decode)
        replica = np.zeros(len(one.records), dtype=np.int64)
        return FleetResult(_with_replica(one, replica), replica, (one.trace,), fleet.router)
    rng = scenario.rng() if rng is None else rng
    if workload is None:
        drawn = draw_workload(scenario.workload, rng, scenario.cancel)
        workload, cancel_after = drawn.plan(), drawn.cancel_after_s
    else:
        n = len(workload.requests) if isinstance(workload, ClosedLoopPlan) else len(workload)
        cancel_after = draw_cancellations(n, scenario.cancel, rng)
    client = scenario.client
    client_rng = np.random.default_rng(int(rng.integers(2**62))) if client is not None and client.retries else None
    config = scenario.server.scheduler_config()
    separate = scenario.server.prefill_lane == "separate"
    if separate:  # as simulate_workload: each prefill runs whole on its own lane
        config = config.model_copy(update={"max_num_batched_tokens": None})
    loop = _Fleet(fleet, config, scenario.step_model.to_model(), workload, separate=separate,
                  cancel_after_s=cancel_after, decode_runs=decode_runs, token_times=token_times, client=client,
                  client_rng=client_rng, lazy_decode=lazy_decode, seed=scenario.seed)
    loop.run()
    return loop.result(scenario.name)


def _with_replica(result: SimResult, replica: np.ndarray) -> SimResult:
    """Return ``result`` with its records' ``replica`` column."""
    records = result.records
    extra = {**records.extra, REPLICA_COLUMN: pa.array(replica, pa.int64())}
    return replace(result, records=records.with_columns(extra=extra))


def merge_token_runs(parts: list[TokenRuns], n: int) -> TokenRuns:
    """Return one :class:`TokenRuns` over ``n`` rows from replicas' runs over the same rows (a row on one replica)."""
    shift = np.cumsum([0] + [p.ticks.size for p in parts[:-1]])
    run_row = np.concatenate([p.run_row for p in parts])
    order = np.argsort(run_row, kind="stable")  # a row's runs all come from one replica, already in time order
    return TokenRuns(ticks=np.concatenate([p.ticks for p in parts]), run_row=run_row[order],
                     run_start=np.concatenate([p.run_start + s for p, s in zip(parts, shift)])[order],
                     run_len=np.concatenate([p.run_len for p in parts])[order], n=n)


class _Replica(_EventLoop):
    """One replica: the single-replica loop, its arrivals routed to it and its ends told to the fleet."""

    def __init__(self, fleet: "_Fleet", index: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fleet, self.index = fleet, index
        # one row per request (per attempt with a client) across the fleet: shared, so a request ends once
        self.rec, self.intended = fleet.rec, fleet.intended
        if self.client is not None:
            self.logical_of, self.attempt_of = fleet.logical_of, fleet.attempt_of
            self.live_row, self.gave_up, self.pending = fleet.live_row, fleet.gave_up, fleet.pending
        self.firsts = ()  # the fleet holds the arrivals

    def _first_arrivals(self) -> None:
        """Nothing: the router sends each arrival."""

    def deliver(self, i: int, at_s: float) -> None:
        """Take request ``i`` arriving at ``at_s`` (it reaches the scheduler its arrival lag later)."""
        self._schedule_arrival(i, at_s)

    def _logical_done(self, i: int, now: float) -> None:
        self.fleet.ended(self.index, i, now)

    def next_key(self) -> tuple[float, float, float]:
        """Return (time, priority, replica) of this replica's next event, as ``_EventLoop.run`` orders them."""
        heap, d = self.heap, self.sched.next_deadline()
        if heap:
            t, p = heap[0][0], heap[0][1]
            if d is not None and (d < t or (d == t and p > PRIO_DEADLINE)):
                return (d, PRIO_DEADLINE, self.index)
            return (t, p, self.index)
        return _NONE if d is None else (d, PRIO_DEADLINE, self.index)

    def advance(self, limit: tuple[float, float, float]) -> None:
        """Handle this replica's events that come before ``limit`` and before the fleet's next arrival."""
        fleet, sched, heap = self.fleet, self.sched, self.heap
        while True:
            key = self.next_key()
            arrival = (fleet.next_arrival_s(), PRIO_ARRIVAL, -1)
            if key >= limit or key >= arrival:
                return
            self.events += 1
            if key[1] == PRIO_DEADLINE:  # the heap holds no event of this priority: a deadline
                d = key[0]
                self._finish(sched.expire(d), d)
                self._kick(d)
                continue
            now, _, _, kind, payload = heapq.heappop(heap)
            self._handle(kind, payload, now)
            self._kick(now)

    # a decode run stops where a routed request could reach this replica (see the module docstring)
    def _run_horizon(self) -> tuple[float, float]:
        t, after = super()._run_horizon()  # type: ignore[misc]
        h = self.fleet.horizon_s(self.index)
        if h >= t:
            return t, after
        # an arrival comes first: it only joins the queue, so the run may take the step it falls in (the shared lane)
        return h, (-math.inf if self.separate else t)


class _Fleet:
    """The replicas, the arrivals not yet routed, the router and the shared record rows."""

    def __init__(self, spec: FleetSpec, config: SchedulerConfig, model: StepModel,
                 workload: Workload | ClosedLoopPlan, *, separate: bool, cancel_after_s: np.ndarray | None,
                 decode_runs: bool, token_times: TokenTimes, client: ClientSpec | None,
                 client_rng: np.random.Generator | None, lazy_decode: bool, seed: int) -> None:
        closed = isinstance(workload, ClosedLoopPlan)
        if config.prefix_caching:  # every replica reads the one list of prompt contents, drawn once
            workload = _with_shared_contents(workload)
        reqs = workload.requests if isinstance(workload, ClosedLoopPlan) else workload
        n = len(reqs)
        self.spec, self.reqs, self.n, self.closed, self.client = spec, reqs, n, closed, client
        rows = n if client is None else n * client.max_attempts
        self.rec = _Recorder(rows, reqs.class_names)
        self.intended = np.full(rows, np.nan)
        self.logical_of: list[int] = list(range(n)) if client is not None else []
        self.attempt_of: list[int] = [1] * n if client is not None else []
        self.live_row: list[int] = list(range(n)) if client is not None else []
        self.gave_up = [False] * n if client is not None else []
        self.pending = [False] * n if client is not None else []
        self.replica_of = np.full(n, -1, dtype=np.int64)
        self.load = [0] * spec.replicas  # outstanding requests per replica: routed, not yet ended
        self.replicas = [
            _Replica(self, k, config, model, workload, separate=separate, cancel_after_s=cancel_after_s,
                     decode_runs=decode_runs, token_times=token_times, client=client, client_rng=client_rng,
                     lazy_decode=lazy_decode, noise=model.noise(np.random.default_rng([*_seeds(seed, k), NOISE_STREAM])),
                     lag_rng=np.random.default_rng([*_seeds(seed, k), LAG_STREAM]))
            for k in range(spec.replicas)]
        self.keys = [_NONE] * spec.replicas
        # arrivals: drawn ones in order (open loop), and those that follow an end (turns, closed-loop requests)
        turns = reqs.has_turns and not closed
        self.next_turn = reqs.next_turns().tolist() if turns else None
        self.turn_think = reqs.turn_think_s.tolist() if turns else None  # type: ignore[union-attr]
        self.firsts: list[int] | range = (range(0) if closed else np.flatnonzero(reqs.prev_turn < 0).tolist()  # type: ignore[operator]
                                          if turns else range(n))
        self.arrival_s = reqs.arrival_s.tolist()
        self.position = 0
        self.later: list[tuple[float, int, int]] = []  # (arrival, sequence, request)
        self.counter = 0
        self.think = workload.think_s.tolist() if isinstance(workload, ClosedLoopPlan) else None
        self.next_request = 0
        if closed:
            for _ in range(min(workload.users, n)):  # type: ignore[union-attr]
                self._push_later(0.0, self.next_request)
                self.next_request += 1
        # the soonest a replica's end can send a request: its time plus the shortest think time (inf: nothing follows)
        self.min_follow_s = math.inf
        if isinstance(workload, ClosedLoopPlan) and n > workload.users:
            self.min_follow_s = float(workload.think_s[workload.users:].min())
        elif turns:
            self.min_follow_s = float(reqs.turn_think_s[reqs.prev_turn >= 0].min())  # type: ignore[index,operator]
        self.bs = config.block_size_tokens
        self.prompt = reqs.prompt_tokens.tolist()
        self.contents = self.replicas[0].contents if spec.router == "prefix_affinity" else None
        self.session_root = _session_roots(reqs.prev_turn) if spec.router == "session_affinity" and turns else None
        self.session_replica: dict[int, int] = {}
        if spec.router == "power_of_two" and spec.replicas >= 2:
            r = np.random.default_rng([seed, ROUTER_STREAM])
            first = r.integers(spec.replicas, size=n)
            second = r.integers(spec.replicas - 1, size=n)
            second += second >= first  # two distinct replicas
            self.pairs = list(zip(first.tolist(), second.tolist()))
        self.choose: Callable[[int], int] = getattr(self, f"_route_{spec.router}")
        self.arrivals_routed = 0

    # ------------------------------------------------------------------ arrivals
    def _push_later(self, at_s: float, i: int) -> None:
        self.counter += 1
        heapq.heappush(self.later, (at_s, self.counter, i))

    def next_arrival_s(self) -> float:
        """Return the next arrival not yet routed (inf: none known)."""
        t = self.arrival_s[self.firsts[self.position]] if self.position < len(self.firsts) else math.inf
        later = self.later
        return later[0][0] if later and later[0][0] < t else t

    def _pop_arrival(self) -> int:
        t = self.arrival_s[self.firsts[self.position]] if self.position < len(self.firsts) else math.inf
        if self.later and self.later[0][0] < t:
            return heapq.heappop(self.later)[2]
        self.position += 1
        return self.firsts[self.position - 1]

    def ended(self, replica: int, i: int, now: float) -> None:
        """Request ``i`` (logical) ended on ``replica``: it is no longer outstanding; start what follows it."""
        self.load[replica] -= 1
        if self.next_turn is not None and self.next_turn[i] >= 0:
            j = self.next_turn[i]
            self._push_later(now + self.turn_think[j], j)  # type: ignore[index]
        if self.closed and self.next_request < self.n:
            assert self.think is not None
            self._push_later(now + self.think[self.next_request], self.next_request)
            self.next_request += 1

    def horizon_s(self, replica: int) -> float:
        """Return the earliest a routed request could reach ``replica``: a known arrival, or one another sends."""
        t = self.next_arrival_s()
        if self.min_follow_s != math.inf:
            keys = self.keys
            soonest = min((keys[k][0] for k in range(len(keys)) if k != replica), default=math.inf)
            t = min(t, soonest + self.min_follow_s)
        return t

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Route each arrival and run the replicas, in one order of events (see the module docstring).

        The replicas' next keys sit in a heap (an entry is current while its version is the replica's), so
        each event costs O(log replicas), not a scan of every replica: a fleet of 256 stays near one's cost.
        """
        replicas, keys = self.replicas, self.keys
        version = [0] * len(replicas)
        heap = [(*key, 0) for key in keys if key != _NONE]
        heapq.heapify(heap)

        def update(k: int) -> None:
            key = keys[k] = replicas[k].next_key()
            version[k] += 1
            if key != _NONE:
                heapq.heappush(heap, (*key, version[k]))

        def first() -> tuple[float, float, float]:
            while heap and heap[0][3] != version[int(heap[0][2])]:
                heapq.heappop(heap)  # a replica's earlier key
            return heap[0][:3] if heap else _NONE

        while True:
            arrival = (self.next_arrival_s(), PRIO_ARRIVAL, -1)
            top = first()
            if arrival < top:
                if arrival[0] == math.inf:
                    break
                i = self._pop_arrival()
                r = self.choose(i)
                self.replica_of[i] = r
                self.load[r] += 1
                self.arrivals_routed += 1
                replicas[r].deliver(i, arrival[0])
                update(r)
                continue
            if top == _NONE:
                break
            k = int(top[2])
            heapq.heappop(heap)
            version[k] += 1  # its key leaves the heap while it runs
            replicas[k].advance(first())  # the earliest other replica's key
            update(k)

    # ------------------------------------------------------------------ routers
    def _least_loaded(self) -> int:
        load = self.load
        return min(range(len(load)), key=load.__getitem__)

    def _route_round_robin(self, i: int) -> int:
        return self.arrivals_routed % len(self.load)

    def _route_least_outstanding(self, i: int) -> int:
        return self._least_loaded()

    def _route_power_of_two(self, i: int) -> int:
        a, b = self.pairs[i]
        return a if self.load[a] <= self.load[b] else b

    def _route_prefix_affinity(self, i: int) -> int:
        assert self.contents is not None  # prefix_affinity needs prefix caching (FleetSpec's check)
        keys = self.contents[i].block_keys(self.bs)[:self.prompt[i] // self.bs]
        load, spec = self.load, self.spec
        best, best_blocks = -1, 0
        for k, rep in enumerate(self.replicas):
            cache = rep.sched.cache
            blocks = 0 if cache is None or not keys else cache.match(keys)
            if blocks > best_blocks or (blocks == best_blocks and best >= 0 and load[k] < load[best]):
                best, best_blocks = k, blocks
        least = self._least_loaded()
        if best < 0:
            return least
        over = load[best] - load[least] > spec.affinity_slack_requests and load[best] > spec.affinity_slack_ratio * load[least]
        return least if over else best

    def _route_session_affinity(self, i: int) -> int:
        if self.session_root is None:
            return self._least_loaded()
        root = self.session_root[i]
        chosen = self.session_replica.get(root)
        if chosen is None:
            chosen = self.session_replica[root] = self._least_loaded()
        return chosen

    # ------------------------------------------------------------------ the result
    def result(self, name: str) -> FleetResult:
        """Return the records (one per request, per attempt with a client) with their replicas, and the traces."""
        reps = self.replicas
        head = reps[0]
        m = self.n if self.client is None else len(self.logical_of)
        if head.token_log is not None:
            runs = merge_token_runs([r.token_log.take_runs(m, int) for r in reps], m)  # type: ignore[union-attr]
            head.token_log = _Merged(runs)  # type: ignore[assignment]
        traces = tuple(_trace(r.trace_s, r.trace_n) for r in reps)
        head.trace_s = array("d", b"".join(bytes(r.trace_s) for r in reps))
        head.trace_n = array(head.trace_n.typecode, b"".join(bytes(r.trace_n) for r in reps))
        one = head.result(name)
        replica = self.replica_of[np.asarray(self.logical_of, dtype=np.int64)] if self.client is not None else self.replica_of
        one = replace(one, engine_steps=sum(r.engine_steps for r in reps), events=sum(r.events for r in reps),
                      prefix_evictions=sum(r.sched.evictions for r in reps))
        return FleetResult(_with_replica(one, replica), replica, traces, self.spec.router)


@dataclass(frozen=True)
class _SharedContents(Workload):
    """The fleet's requests with their prompts' contents computed once (each replica's loop asks for them).

    A fleet of 256 replicas with prefix caching drew them 256 times: 8 of 18 s and 256 copies in memory.
    The contents are immutable, so sharing them changes nothing else.
    """

    contents: list[Any] = field(default_factory=list)

    def prompt_contents(self) -> list[Any]:
        return self.contents  # the one list: a replica reads it, never changes it


def _with_shared_contents(workload: Workload | ClosedLoopPlan) -> Workload | ClosedLoopPlan:
    """Return the workload whose requests hand every replica the same prompt contents."""
    reqs = workload.requests if isinstance(workload, ClosedLoopPlan) else workload
    shared = _SharedContents(**{f.name: getattr(reqs, f.name) for f in fields(Workload)},
                             contents=reqs.prompt_contents())
    return replace(workload, requests=shared) if isinstance(workload, ClosedLoopPlan) else shared


class _Merged:
    """The replicas' token logs merged, as ``_EventLoop.result`` reads a log."""

    def __init__(self, runs: TokenRuns) -> None:
        self.runs = runs

    def take_runs(self, n: int, row_of: Callable[[Any], int] = int) -> TokenRuns:
        return self.runs


def _seeds(seed: int, replica: int) -> tuple[int, ...]:
    """Return replica ``replica``'s noise and lag seeds, as ``simulate(..., replica=)`` takes them."""
    return (seed,) if replica == 0 else (seed, replica)


def _session_roots(prev_turn: np.ndarray | None) -> list[int]:
    """Return each request's conversation: the index of its first turn (itself outside a conversation)."""
    prev = [] if prev_turn is None else prev_turn.tolist()
    root = list(range(len(prev)))
    done = [p < 0 for p in prev]
    for i in range(len(prev)):
        chain = []
        j = i
        while not done[j]:
            chain.append(j)
            j = prev[j]
        for c in chain:
            root[c], done[c] = root[j], True
    return root
