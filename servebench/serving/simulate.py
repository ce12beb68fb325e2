"""A discrete-event clock around the scheduler: a modelled continuous-batching server.

Events sit in a heap of (time, priority, sequence number, kind, payload), so ties resolve the
same way on every run: work that completes at t comes before cancellations, deadlines, then
arrivals at t (a request finishing exactly at its deadline succeeds; an arrival at t sees the KV
freed at t). Only the next arrival is in the heap at a time.

Two server shapes (``prefill_lane``):

* ``shared``: one engine loop; each step runs the plan's prefill chunks and decodes together and
  takes ``StepModel.step_s``. This is continuous batching: a long prompt slows every decoder.
* ``separate``: prefills run beside the decode batch, each taking ``StepModel.prefill_s`` of its
  whole prompt (no per-step token budget); decode steps take ``step_s(0, decoders, kv)``. This
  reproduces the spec's flat timings.

The step model places requests in time too: a request reaches the scheduler ``arrival_lag_s``
after it arrives (its record still starts at its arrival, so the lag is inside its TTFT), and a
step's tokens (first tokens, ends) are stamped ``emit_lead_s`` before the step ends, as the real
engine emits them when the model finishes and then does its bookkeeping. Both default to 0.
A step adds ``StepModel.extra_s`` for what came before it on its lane: the engine's idle time
(``wake_s``), or a previous step with prompt tokens (``after_prefill_s``).
A model with step-time noise (``StepModel.noise_excess_s``, fitted by ``servebench validate``, or
``noise_factors``) adds to each step's time the next excess of its seeded stream, or multiplies it
by the next factor (``StepNoise``; the seed is the scenario's, on a stream of its own, so the
workload draw is unchanged): one value per step, in the order the steps run, whether they run one
by one or as a decode run.

With ``prefix_caching`` on, each request carries its prompt's content (``Workload.prompt_contents``)
so the scheduler can reuse cached blocks, and its record says how many prompt tokens it reused
(``cached_prompt_tokens``). A conversation's later turns arrive when the previous turn ends plus
its think time, whatever the previous turn's status.

A request the scheduler drops while planning (preempted while the waiting queue is full: ``failed``,
``preempted_queue_full``) ends at that step's start, like any other terminal outcome.

Fast path: when a step is pure decode, the loop asks the scheduler how many identical steps can
follow before a sequence completes or (paged) needs a block it lacks, cuts that at the last step
boundary before the next event, and commits the whole run at once: exactly the per-step result
with one heap event instead of hundreds.
"""

from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass, field
from struct import Struct
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servebench.capacity.stepmodel import FEW_STEPS, StepModel, StepNoise
from servebench.records.schema import NO_EXTRA
from servebench.records.steps import StepTrace
from servebench.records.table import STATUSES, RecordTable
from servebench.records.token_times import TokenLog, TokenRuns
from servebench.serving.retry import ERR_CLIENT_DEADLINE, ClientSpec
from servebench.serving.scenario import Scenario
from servebench.serving.scheduler import Outcome, Request, Scheduler, SchedulerConfig, StepPlan, mypyc_attr
from servebench.serving.workload import ClosedLoopPlan, Workload, draw_cancellations, draw_workload

PRIO_RUN, PRIO_PREFILL, PRIO_CANCEL, PRIO_DEADLINE, PRIO_ARRIVAL = 0, 1, 2, 3, 4
NOISE_STREAM = 0x5E  # the step noise's generator: default_rng([seed, NOISE_STREAM]), apart from the workload's
LAG_STREAM = 0x1A  # the arrival lags' generator (a model with arrival_lags_s): default_rng([seed, LAG_STREAM])
EV_RUN, EV_PREFILL, EV_CANCEL, EV_ARRIVAL, EV_RETRY, EV_SEEN = 0, 1, 2, 3, 4, 5
PASSIVE = frozenset((EV_ARRIVAL, EV_RETRY, EV_SEEN, EV_PREFILL))  # events a decode run need not stop for (_run_horizon)
TokenTimes = bool | Literal["runs"]  # token times in the records (True), none (False), or as SimResult.token_runs
_STATUS_CODE = {s: i for i, s in enumerate(STATUSES)}


@dataclass(frozen=True)
class SimResult:
    """What one simulation produced: one terminal record per arrival, and the step trace."""

    name: str
    records: RecordTable
    trace: StepTrace
    window_start_s: float
    window_end_s: float
    kv_budget_tokens: int
    engine_steps: int  # steps simulated (a decode run counts each of its steps)
    events: int  # heap events handled
    preemptions: int
    prefix_evictions: int = 0  # prefix-cache blocks evicted to make room (caching on)
    token_runs: TokenRuns | None = None  # token times as runs of step times (token_times="runs"), records without them

    def status_counts(self) -> dict[str, int]:
        """Return how many records ended in each status (every status present, 0 if none)."""
        counts = np.bincount(self.records.status.astype(np.int64), minlength=len(STATUSES))
        return {s: int(c) for s, c in zip(STATUSES, counts)}


@dataclass
class _Recorder:
    """Columnar terminal records, filled as outcomes arrive."""

    n: int
    slices: tuple[str, ...]
    arrival: np.ndarray = field(init=False)
    admitted: np.ndarray = field(init=False)
    first_token: np.ndarray = field(init=False)
    end: np.ndarray = field(init=False)
    status: np.ndarray = field(init=False)
    output: np.ndarray = field(init=False)
    error: np.ndarray = field(init=False)
    cached: np.ndarray = field(init=False)
    preemptions: int = 0

    def __post_init__(self) -> None:
        self.arrival = np.full(self.n, np.nan)
        self.admitted = np.full(self.n, np.nan)
        self.first_token = np.full(self.n, np.nan)
        self.end = np.full(self.n, np.nan)
        self.status = np.full(self.n, -1, dtype=np.int8)
        self.output = np.full(self.n, -1, dtype=np.int64)
        self.error = np.full(self.n, None, dtype=object)
        self.cached = np.full(self.n, -1, dtype=np.int64)

    def add(self, o: Outcome) -> int:
        i = int(o.request_id)
        if self.status[i] != -1:
            raise RuntimeError(f"request {i} ended twice")  # a simulator bug, never user input
        self.end[i] = o.end
        if o.admitted is not None:
            self.admitted[i] = o.admitted
        if o.first_token is not None:
            self.first_token[i] = o.first_token
        self.status[i] = _STATUS_CODE[o.status]
        self.output[i] = o.output_tokens
        self.error[i] = o.error
        if o.cached_prompt_tokens is not None:
            self.cached[i] = o.cached_prompt_tokens
        self.preemptions += o.preemptions
        return i


def simulate(scenario: Scenario, *, workload: Workload | ClosedLoopPlan | None = None,
             rng: np.random.Generator | None = None, decode_runs: bool = True,
             token_times: TokenTimes = True, replica: int = 0, lazy_decode: bool = True) -> SimResult:
    """Simulate a scenario; the workload (and cancellations) come from ``rng`` (default: its seed).

    ``decode_runs=False`` turns off the fast path (one event per step: the baseline to check against);
    ``lazy_decode=False`` the scheduler's decode cohort (every decoder walked each step: the other baseline).
    ``token_times=False`` leaves the records without token times (a sweep that reports no ITL saves the work);
    ``"runs"`` keeps them as ``SimResult.token_runs`` (runs of shared step times, a float per step) and not
    in the records, for a caller that reports (``build_report(..., token_runs=)``) and writes them in parts.
    ``replica`` k > 0 draws the step noise and arrival lags from other seeds (``[seed, k]``), the workload
    unchanged: another replay of the same run, for a model with noise or a spread of lags.
    """
    rng = scenario.rng() if rng is None else rng
    if workload is None:  # the draw the engine run and the load generator make from the same seed
        drawn = draw_workload(scenario.workload, rng, scenario.cancel)
        workload, cancel_after = drawn.plan(), drawn.cancel_after_s
    else:  # drawn already: only the clients' cancellations come from ``rng``
        n = len(workload.requests) if isinstance(workload, ClosedLoopPlan) else len(workload)
        cancel_after = draw_cancellations(n, scenario.cancel, rng)
    client = scenario.client
    client_rng = np.random.default_rng(int(rng.integers(2**62))) if client is not None and client.retries else None
    return simulate_workload(scenario.server.scheduler_config(), scenario.step_model.to_model(), workload,
                             prefill_lane=scenario.server.prefill_lane, cancel_after_s=cancel_after,
                             name=scenario.name, decode_runs=decode_runs, token_times=token_times,
                             lazy_decode=lazy_decode,
                             client=client, client_rng=client_rng,
                             noise_seed=scenario.seed if replica == 0 else (scenario.seed, replica))


def simulate_workload(config: SchedulerConfig, model: StepModel, workload: Workload | ClosedLoopPlan, *,
                      prefill_lane: Literal["shared", "separate"] = "shared",
                      cancel_after_s: np.ndarray | None = None, name: str = "simulation",
                      decode_runs: bool = True, token_times: TokenTimes = True, client: ClientSpec | None = None,
                      client_rng: np.random.Generator | None = None,
                      noise_seed: int | tuple[int, ...] = 0, lazy_decode: bool = True) -> SimResult:
    """Run the event loop over a drawn workload; see the module docstring for the semantics.

    With ``client`` each request is a logical request served by attempts (see
    :mod:`servebench.serving.retry`): one record per attempt, with ``logical_id`` and ``attempt``;
    ``client_rng`` draws the backoff jitter. A client's cancellation ends its live attempt, or its
    wait for a retry, and no further attempt is sent. A model with step-time noise draws it from
    ``default_rng([noise_seed, NOISE_STREAM])``, one with a spread of arrival lags draws each
    request's from ``default_rng([noise_seed, LAG_STREAM])`` (a retry is seen as late as its request).
    """
    seeds = (noise_seed,) if isinstance(noise_seed, int) else tuple(noise_seed)
    separate = prefill_lane == "separate"
    if separate:  # each prefill runs whole on its own lane: no per-step token budget applies
        config = config.model_copy(update={"max_num_batched_tokens": None})
    loop = _EventLoop(config, model, workload, separate=separate, cancel_after_s=cancel_after_s,
                      decode_runs=decode_runs, token_times=token_times, client=client, client_rng=client_rng,
                      lazy_decode=lazy_decode,
                      noise=model.noise(np.random.default_rng([*seeds, NOISE_STREAM])),
                      lag_rng=np.random.default_rng([*seeds, LAG_STREAM]))
    loop.run()
    return loop.result(name)




@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (servebench.serving.native), the fleet's replicas extend it
class _EventLoop:
    """One simulation: the event heap, the scheduler it drives, the records and the step trace.

    Open loop, only the next drawn arrival is in the heap (``next_request`` is a position in
    ``firsts``, the requests that arrive at drawn times) and a conversation's later turn is pushed
    when the turn before it ends. Closed loop, ``next_request`` is the next request a user that
    became free sends. With a client, record rows are attempts: rows below ``n`` are first
    attempts (row i of logical request i), retries are appended.
    """

    def __init__(self, config: SchedulerConfig, model: StepModel, workload: Workload | ClosedLoopPlan, *,
                 separate: bool, cancel_after_s: np.ndarray | None, decode_runs: bool, token_times: TokenTimes,
                 client: ClientSpec | None, client_rng: np.random.Generator | None,
                 noise: StepNoise | None = None, lag_rng: np.random.Generator | None = None,
                 lazy_decode: bool = True) -> None:
        closed = isinstance(workload, ClosedLoopPlan)
        reqs = workload.requests if isinstance(workload, ClosedLoopPlan) else workload
        n = len(reqs)
        self.closed, self.reqs, self.n = closed, reqs, n
        self.users = workload.users if isinstance(workload, ClosedLoopPlan) else 0
        self.think = workload.think_s if isinstance(workload, ClosedLoopPlan) else None
        self.config, self.model, self.separate, self.decode_runs = config, model, separate, decode_runs
        self.client, self.client_rng = client, client_rng
        self.sched = Scheduler(config, lazy_decode=lazy_decode)
        rows = n if client is None else n * client.max_attempts  # one record row per attempt
        self.rec = _Recorder(rows, reqs.class_names)
        self.logical_of: list[int] = list(range(n)) if client is not None else []  # row -> logical request
        self.attempt_of: list[int] = [1] * n if client is not None else []  # row -> attempt number
        self.live_row: list[int] = list(range(n)) if client is not None else []  # logical -> its latest row
        self.gave_up = [False] * n if client is not None else []  # the client cancelled: no more attempts
        self.pending = [False] * n if client is not None else []  # a retry is scheduled (backing off)
        self.token_log = TokenLog(int) if token_times else None  # each output token's emission time: records' token_times
        if self.token_log is not None:
            self.sched.on_cohort_run = self.token_log.add_group_run
        self.runs_only = token_times == "runs"
        # the step ends of the decode run in flight (one at a time: busy), until it ends
        self.run_ends: np.ndarray | list[float] | None = None
        # per-request values as flat arrays (an element reads back as a Python number, as from a list, at 8 bytes
        # a value rather than a list's 8 plus an object's 24 to 32: 1,000,000 requests held 200 MB in lists)
        self.prompt = _ints(reqs.prompt_tokens)
        self.output = _ints(reqs.output_tokens)
        self.cap = _ints(reqs.max_output_tokens)
        self.cls = _ints(reqs.class_index)
        self.names, self.class_timeouts = reqs.class_names, reqs.class_timeout_s
        self.tenants = [reqs.tenant_of(c) for c in range(len(reqs.class_names))]  # each class's tenant
        self.contents = reqs.prompt_contents() if config.prefix_caching else None
        turns = reqs.has_turns and not closed
        self.next_turn = _ints(reqs.next_turns()) if turns else None
        self.turn_think = _floats(reqs.turn_think_s) if turns else None  # type: ignore[arg-type]
        self.firsts = _ints(np.flatnonzero(reqs.prev_turn < 0)) if turns else range(n)  # type: ignore[operator]
        self.arrivals = _floats(reqs.arrival_s)  # open loop: the drawn arrival times
        self.cancel = None if cancel_after_s is None else _floats(cancel_after_s)
        self.heap: list[tuple[float, int, int, int, Any]] = []
        self.counter = 0
        # the step trace, flat: its two times a row, and its 12 counts (int32 when every count fits: a budget and a
        # batch below 2**31); a tuple a row took four times the memory
        self.trace_s = array("d")
        self.trace_n = array("i" if config.kv_budget_tokens + config.max_num_seqs < 2**31 - 1 else "q")
        # a row's values packed in one call and appended as bytes: array.extend converts a tuple an item at a time
        self.pack_s, self.pack_n = Struct("2d").pack, Struct(f"12{self.trace_n.typecode}").pack
        # request row i reaches the scheduler lags[i] after its arrival (a retry: as late as its request), or
        # busy_lags[i] after it when a step is running then (the model has busy_arrival_lags_s): then arrivals
        # are pushed at their arrival (push_lags 0) and the lag is chosen there (_arrive)
        lag_rng = lag_rng or np.random.default_rng(0)
        self.lags = _floats(model.draw_arrival_lags_s(rows, lag_rng))
        self.busy_lags = (_floats(model.draw_arrival_lags_s(rows, lag_rng, busy=True))
                          if model.busy_arrival_lags_s else None)
        self.push_lags = self.lags if self.busy_lags is None else _floats(np.zeros(rows))
        self.lagged = any(self.lags) or self.busy_lags is not None
        self.lead = model.emit_lead_s  # a step's tokens are stamped this long before it ends
        self.extras = bool(model.wake_s or model.after_prefill_s)  # steps take time for what came before them
        self.noise = noise  # each step's time factor, in step order (None: the model's time exactly)
        self.last_end = 0.0  # when the engine loop's last step or run ends (it starts idle at 0)
        self.last_prefill = False  # whether that step had prompt tokens
        self.intended = np.full(rows, np.nan)  # each request's arrival (closed loop: set when it is scheduled)
        self.busy = False  # the (decode) engine loop is running a step or run
        self.engine_steps = 0
        self.events = 0
        self.next_request = 0

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Handle events in (time, priority, sequence number) order, deadlines between them, until none is left."""
        self._first_arrivals()
        sched, heap, pop, separate = self.sched, self.heap, heapq.heappop, self.separate
        while True:
            d = sched.next_deadline()
            if heap and (d is None or d > heap[0][0] or (d == heap[0][0] and heap[0][1] < PRIO_DEADLINE)):
                now, _, _, kind, payload = pop(heap)
                self.events += 1
                if kind == EV_RUN:  # most events: _handle's first case, without the call between
                    self._run_done(payload, now)
                else:
                    self._handle(kind, payload, now)
                if separate or not self.busy:  # a busy shared lane starts nothing (_kick)
                    self._kick(now)
            elif d is not None:
                self.events += 1
                self._finish(sched.expire(d), d)
                self._kick(d)
            else:
                break

    def _handle(self, kind: int, payload: Any, now: float) -> None:
        """Handle one event taken from the heap (the fleet's replicas run their events through it too)."""
        if kind == EV_RUN:
            self._run_done(payload, now)
        elif kind == EV_PREFILL:
            self._prefill_done(payload, now)
        elif kind == EV_CANCEL:
            self._cancel(payload, now)
        elif kind == EV_RETRY:
            self._retry(*payload, now)  # type: ignore[call-arg]  # (logical, attempt, start)
        elif kind == EV_SEEN:
            self._arrive(payload, now, seen=True)
        elif kind == EV_ARRIVAL:
            self._arrival(payload, now)
        else:
            raise RuntimeError(f"unknown event kind {kind}")  # a simulator bug

    def _push(self, t: float, prio: int, kind: int, payload: Any) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (t, prio, self.counter, kind, payload))

    def _run_horizon(self) -> tuple[float, float]:
        """Return when the next event comes, and until when a decode run may go on past it: the end of the step
        it falls in, if it only adds to the queue (PASSIVE) and nothing else comes before that step ends.

        An arrival while a step runs reads nothing the step changes (it joins the queue; the step after sees
        it), so the run can take that step too rather than stop before it, as one step at a time would: one
        run fewer per arrival, the same records. ``after`` is the earliest other event (a deadline, a cancel,
        anything else), which the run must not pass: they read the running sequences' tokens. Without such an
        arrival ``after`` is ``-inf``.
        """
        heap = self.heap
        d = self.sched.next_deadline()
        if not heap:
            return (math.inf if d is None else d), -math.inf
        t, _, _, kind, _ = heap[0]
        if d is not None and d <= t:
            return d, -math.inf
        if kind not in PASSIVE:
            return t, -math.inf
        after = math.inf if d is None else d
        for j in (1, 2):  # the second event is one of the heap's top's children
            if j < len(heap) and heap[j][0] < after:
                after = heap[j][0]
        return t, after

    # ------------------------------------------------------------------ arrivals, attempts, ends
    def _first_arrivals(self) -> None:
        """Push the first drawn arrival (open loop), or each user's first request at time 0 (closed loop)."""
        if self.closed:
            for _ in range(min(self.users, self.n)):
                self.intended[self.next_request] = 0.0
                self._push(0.0 + self.push_lags[self.next_request], PRIO_ARRIVAL, EV_ARRIVAL, self.next_request)
                self.next_request += 1
        elif self.n:
            self.intended[:self.n] = self.reqs.arrival_s
            first = self.firsts[0]
            self._push(self.arrivals[first] + self.push_lags[first], PRIO_ARRIVAL, EV_ARRIVAL, first)
            self.next_request = 1

    def _schedule_arrival(self, i: int, at_s: float) -> None:
        """Request ``i`` arrives at ``at_s`` and reaches the scheduler its arrival lag later."""
        self.intended[i] = at_s
        self._push(self.intended[i] + self.push_lags[i], PRIO_ARRIVAL, EV_ARRIVAL, i)

    def _arrival(self, i: int, now: float) -> None:
        """Push the next drawn arrival when ``i`` is the one pushed last (open loop), then add ``i``."""
        firsts, k = self.firsts, self.next_request
        if not self.closed and k < len(firsts) and i == firsts[k - 1]:
            self._push(self.arrivals[firsts[k]] + self.push_lags[firsts[k]], PRIO_ARRIVAL, EV_ARRIVAL, firsts[k])
            self.next_request += 1
        self._arrive(i, now)

    def _arrive(self, i: int, now: float, seen: bool = False) -> None:
        """Give record row ``i`` to the scheduler; its first attempt also schedules its client's cancellation.

        With lags by the engine's state, a row not yet ``seen`` is seen its lag later (longer while a step runs).
        """
        if self.busy_lags is not None and not seen:
            lag = self.busy_lags[i] if self.busy else self.lags[i]
            if lag > 0:
                self._push(now + lag, PRIO_ARRIVAL, EV_SEEN, i)
                return
        client, rec = self.client, self.rec
        start = float(self.intended[i]) if self.lagged else now  # the record starts at the arrival, not when seen
        rec.arrival[i] = start
        lg = i if client is None else self.logical_of[i]  # the logical request (itself without a client)
        c = self.cls[lg]
        timeout = self.class_timeouts[c]
        why = None
        if client is not None:  # the client's deadline, from the first attempt's start, cuts an attempt
            timeout, by_client = client.attempt_timeout(start, float(rec.arrival[lg]),
                                                        self.config.timeout_s if timeout is None else timeout)
            why = ERR_CLIENT_DEADLINE if by_client else None
            self.live_row[lg] = i
        out = self.sched.add_request(Request(str(i), start, self.prompt[lg], self.cap[lg], self.output[lg], timeout,
                                             self.names[c], None if self.contents is None else self.contents[lg],
                                             self.tenants[c], why), now)
        if out is not None:
            self._finish([out], now)
        cancel = self.cancel
        first = i < self.n  # cancellations are drawn per logical request: its first attempt schedules it
        if first and cancel is not None and cancel[i] == cancel[i] and (out is None or client is not None):  # not NaN
            self._push(max(now, start + cancel[i]), PRIO_CANCEL, EV_CANCEL, str(i))

    def _finish(self, outs: list[Outcome], now: float) -> None:
        """Record terminal outcomes; a failed attempt may be retried, else its logical request has ended."""
        client, rec = self.client, self.rec
        token_log = self.token_log
        for o in outs:
            i = rec.add(o)
            if token_log is not None:
                token_log.close(o.request_id)
            if client is not None:
                lg = self.logical_of[i]
                nxt = None if self.gave_up[lg] else client.next_start(self.attempt_of[i], o.status, o.error, o.end,
                                                                      float(rec.arrival[lg]), self.client_rng)
                if nxt is not None:  # backoff, then the next attempt (never overlapping this one)
                    self.pending[lg] = True
                    self._push(nxt + self.push_lags[lg], PRIO_ARRIVAL, EV_RETRY, (lg, self.attempt_of[i] + 1, nxt))
                    continue
                i = lg
            self._logical_done(i, now)

    def _logical_done(self, i: int, now: float) -> None:
        """Start what follows a (logical) request's end: its conversation's next turn, or a user's next request."""
        if self.next_turn is not None and self.next_turn[i] >= 0:  # the conversation's next turn, after think time
            j = self.next_turn[i]
            self._schedule_arrival(j, now + self.turn_think[j])  # type: ignore[index]
        if self.closed and self.next_request < self.n:
            assert self.think is not None
            self._schedule_arrival(self.next_request, now + self.think[self.next_request])
            self.next_request += 1

    def _cancel(self, request_id: str, now: float) -> None:
        """A client gives up: end its request (its live attempt), or its wait for a retry."""
        if self.client is None:
            out = self.sched.cancel(request_id, now)
            if out is not None:
                self._finish([out], now)
            return
        lg = int(request_id)
        if self.gave_up[lg]:
            return
        self.gave_up[lg] = True
        out = self.sched.cancel(str(self.live_row[lg]), now)
        if out is not None:
            self._finish([out], now)
        elif self.pending[lg]:  # cancelled while backing off: the logical request ends now
            self._logical_done(lg, now)

    def _retry(self, lg: int, attempt: int, start_s: float, now: float) -> None:
        """Send logical request ``lg``'s next attempt (a new record row) unless its client gave up."""
        self.pending[lg] = False
        if not self.gave_up[lg]:
            row = len(self.logical_of)
            self.logical_of.append(lg)
            self.attempt_of.append(attempt)
            self.intended[row] = start_s
            self._arrive(row, now)

    # ------------------------------------------------------------------ steps
    def _kick(self, now: float) -> None:
        """Start whatever can start now: the engine step (shared) or prefills and decodes (separate)."""
        if self.separate:
            self._kick_separate(now)
            return
        sched = self.sched
        if not self.busy and sched.has_work:
            plan = sched.step(now)
            if plan.ended:
                self._finish(plan.ended, now)  # preempted into a full queue: failed at once
            if plan.decode or plan.prefill:  # not plan.is_empty
                self._start_run(now, plan, 0)

    def _kick_separate(self, now: float) -> None:
        """Start admitted prompts' whole prefills on their own lane, and the decode batch when it is idle."""
        sched = self.sched
        if sched.num_waiting:  # whole prompts on this lane: only admissions start new prefills
            plan = sched.step(now, decode=False)
            if plan.ended:
                self._finish(plan.ended, now)
            if plan.prefill:
                longest = 0.0
                for rid, chunk in plan.prefill:
                    dur = self.model.prefill_s(chunk)
                    if self.noise is not None:
                        dur = self.noise.apply(dur, float(self.noise.take(1, prefill=True)[0]))
                    longest = max(longest, dur)
                    self._push(now + dur, PRIO_PREFILL, EV_PREFILL, plan.only({rid}))
                self.trace_s.frombytes(self.pack_s(now, longest))
                self.trace_n.frombytes(self.pack_n(1, 2, plan.running, plan.waiting, plan.kv_tokens_used, 0,
                                                   plan.prefill_tokens, 0, sched.kv_tokens_held, len(plan.prefill),
                                                   len(plan.admitted), len(plan.preempted)))
        if not self.busy and sched.num_running:
            plan = sched.step(now, prefill=False)
            if plan.ended:
                self._finish(plan.ended, now)
            if plan.decode:
                self._start_run(now, plan, 1)

    def _start_run(self, now: float, plan: StepPlan, lane: int) -> None:
        """Time a plan (a pure decode plan may become a run of steps) and schedule its end."""
        prefill = plan.prefill
        d, prefill_seqs = len(plan.decode), len(prefill)
        prefill_tokens = prefill[0][1] if prefill_seqs == 1 else plan.prefill_tokens
        extra = self.model.extra_s(now - self.last_end, self.last_prefill) if self.extras else 0.0
        if prefill_seqs or d == 0:
            dur = self.model.step_s(prefill_tokens, d, plan.kv_tokens_read, prefill_seqs)
            if extra:
                dur += extra
            end = now + (dur if self.noise is None else
                         self.noise.apply(dur, float(self.noise.take(1, bool(plan.prefill))[0])))
        else:
            end = self._decode_run_end(now, plan, extra)
        self.last_end, self.last_prefill = end, prefill_seqs > 0
        steps = plan.steps
        self.engine_steps += steps
        self.busy = True
        self.trace_s.frombytes(self.pack_s(now, end - now))
        self.trace_n.frombytes(self.pack_n(steps, lane, plan.running, plan.waiting, plan.kv_tokens_used,
                                           plan.kv_tokens_read, prefill_tokens, d, self.sched.kv_tokens_held,
                                           prefill_seqs, len(plan.admitted), len(plan.preempted)))
        self.counter += 1  # _push, inline
        heapq.heappush(self.heap, (end, PRIO_RUN, self.counter, EV_RUN, plan))

    def _decode_run_end(self, now: float, plan: StepPlan, extra_s: float = 0.0) -> float:
        """Return when a pure decode plan ends, extended to identical steps up to the next event (the fast path);
        its first step adds ``extra_s``."""
        sched, model, noise = self.sched, self.model, self.noise
        d = len(plan.decode)
        kmax = sched.max_decode_steps(plan) if self.decode_runs else 1
        base = model.step_s(0, d, plan.kv_tokens_read)
        first = base + extra_s if extra_s else base
        one = first if noise is None else noise.apply(first, float(noise.peek(1)[0]))
        horizon, after = self._run_horizon()
        if kmax <= 1 or now + one > horizon:  # the first step already takes the next event in
            if noise is not None:
                noise.advance(1)
            return now + one
        if horizon != math.inf and base > 0:  # steps only lengthen (noise: by at least its smallest value)
            shortest = base if noise is None else noise.shortest_s(base)
            cap = int((horizon - now) / shortest) + 3
            if cap < kmax:
                kmax = cap
        ends: np.ndarray | list[float]
        if noise is None and kmax <= FEW_STEPS:  # added up in Python, up to the step the next event falls in
            ends = model.decode_run_ends_until(now, d, plan.kv_tokens_read, kmax, extra_s, horizon)
            k = len(ends) - (ends[-1] > horizon)  # the steps that end before the next event
        else:
            ends = model.decode_run_ends(now, d, plan.kv_tokens_read, kmax,
                                         None if noise is None else noise.peek(kmax), extra_s,
                                         additive=noise is not None and noise.additive)
            k = int(np.searchsorted(ends, horizon, side="right"))  # the steps that end before the next event
        if k < len(ends) and ends[k] <= after:  # and the one it arrives in (a step ending with it commits first)
            k += 1
        k = 1 if k < 1 else kmax if k > kmax else k  # at least one step, at most kmax
        if noise is not None:
            noise.advance(k)
        if k > 1 and self.token_log is not None:
            self.run_ends = ends if k == len(ends) else ends[:k]
        if k > 1:
            sched.extend(plan, k)
        return float(ends[k - 1])

    def _run_done(self, plan: StepPlan, now: float) -> None:
        """Commit a step or decode run; its tokens are stamped ``emit_lead_s`` before its end."""
        self.busy = False
        lead, token_log = self.lead, self.token_log
        stamp = max(plan.now_s, now - lead) if lead else now  # tokens out before the bookkeeping
        emitted: list[str] = []
        done = self.sched.on_step_done(plan, stamp, tokens=None if token_log is None else emitted)
        if done:
            self._finish(done, now)
        if token_log is not None:
            ends = None
            if plan.steps > 1:
                ends, self.run_ends = self.run_ends, None
            # a cohort's steps are group ticks (its members' runs come when they leave it); a step's tokens one stamp,
            # a decode run's one per step, each stamped like the run's last
            times = None if ends is None else np.maximum(np.asarray(ends) - lead, plan.now_s) if lead else ends
            if plan.cohort:
                token_log.add_group([stamp] if times is None else times)
            if not emitted:  # a cohort's run: its members' tokens are the group's
                return
            if times is None:
                token_log.add_step(emitted, stamp)
            else:
                token_log.add_run(emitted, times)

    def _prefill_done(self, plan: StepPlan, now: float) -> None:
        """Commit one whole prefill of the separate lane."""
        token_log = self.token_log
        emitted: list[str] = []
        self._finish(self.sched.on_step_done(plan, now, tokens=None if token_log is None else emitted), now)
        if token_log is not None:
            token_log.add_step(emitted, now)

    # ------------------------------------------------------------------ the result
    def result(self, name: str) -> SimResult:
        """Return one record per attempt (per request without a client) and the step trace."""
        rec, reqs, n, client = self.rec, self.reqs, self.n, self.client
        m = n if client is None else len(self.logical_of)  # record rows: attempts
        lgs = np.arange(n) if client is None else np.asarray(self.logical_of, dtype=np.int64)
        if np.any(rec.status[:m] < 0):
            raise RuntimeError(f"{int(np.sum(rec.status[:m] < 0))} requests never ended")  # a simulator bug
        # what only the loop read goes first: the result's arrays are made on top of what is left (1,000,000 requests:
        # 60 MB of per-request inputs)
        self.prompt = self.output = self.cap = self.arrivals = self.lags = self.push_lags = array("q")
        self.busy_lags = self.cancel = self.next_turn = self.turn_think = None
        self.heap = []
        runs = None if self.token_log is None else self.token_log.take_runs(m, int)
        self.token_log = self.sched.on_cohort_run = None  # its ticks now the runs', its other arrays freed
        trace = _trace(self.trace_s, self.trace_n)
        self.trace_s, self.trace_n = array("d"), array("i")  # the flat rows go before the records are built
        table = RecordTable.from_columns(
            start=rec.arrival[:m], end=rec.end[:m], status=rec.status[:m], first_token=rec.first_token[:m],
            output_tokens=rec.output[:m], admitted=rec.admitted[:m],
            prompt_tokens=reqs.prompt_tokens.astype(np.int64)[lgs],
            request_id=pc.cast(pa.array(np.arange(m)), pa.string()),  # "0", "1", ...: no Python string a row
            slice=np.array(self.names, dtype=object)[reqs.class_index[lgs]] if n else np.array([], dtype=object),
            error=rec.error[:m], source=name, cached_prompt_tokens=rec.cached[:m],
            token_times=None if runs is None or self.runs_only else runs.expand(),
            logical_id=None if client is None else np.array([str(x) for x in self.logical_of], dtype=object),
            attempt=None if client is None else np.asarray(self.attempt_of, dtype=np.int64),  # type: ignore[arg-type]
            extra=NO_EXTRA if reqs.trace_row is None else {"trace_row": pa.array(reqs.trace_row[lgs], pa.int64())})
        end = float(rec.end[:m].max()) if m else 0.0
        return SimResult(name, table, trace, 0.0, max(end, 0.0), self.config.kv_budget_tokens,
                         self.engine_steps, self.events, rec.preemptions, self.sched.evictions,
                         token_runs=runs if self.runs_only else None)


def _floats(values: np.ndarray) -> array:
    """Return ``values`` as a flat ``d`` array."""
    return array("d", np.ascontiguousarray(values, dtype=np.float64).tobytes())


def _ints(values: np.ndarray) -> array:
    """Return ``values`` as a flat ``q`` array."""
    return array("q", np.ascontiguousarray(values, dtype=np.int64).tobytes())


def _trace(times: array, counts: array) -> StepTrace:
    """Return the rows ``start_run`` and the prefill lane append (two times and 12 counts each) as the trace's columns.

    Each column is its own contiguous array (not a strided view of the rows), so the flat arrays can go once
    it is built; the counts stay int32 where the loop stored them so (a budget and a batch below 2**31): a
    million requests' 2.8 million rows take 134 MB, not 268 as int64.
    """
    rows = len(times) // 2
    a = (np.frombuffer(times, dtype=np.float64) if rows else np.zeros(0)).reshape(rows, 2)
    kind = np.dtype(counts.typecode) if rows else np.dtype(np.int64)
    i = (np.frombuffer(counts, dtype=kind) if rows else np.zeros(0, dtype=kind)).reshape(rows, 12)
    c = [np.ascontiguousarray(i[:, k], dtype=np.int8 if k == 1 else kind) for k in range(12)]
    return StepTrace(start_s=a[:, 0].copy(), duration_s=a[:, 1].copy(), steps=c[0], lane=c[1], running=c[2],
                     waiting=c[3], kv_tokens_used=c[4], kv_tokens_read=c[5], prefill_tokens=c[6], decode_seqs=c[7],
                     kv_tokens_held=c[8], prefill_seqs=c[9], admitted=c[10], preempted=c[11])  # compute_*: null
