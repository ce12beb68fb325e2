"""A real-time timing run: arrivals on the wall clock, the engine loop serving them, records out.

A producer thread sends each request when the monotonic clock reaches its arrival time
(open loop), or a think time after an earlier request ended (closed loop), independently of how
busy the engine is, so queueing is real. The calling thread runs the engine loop until every
request sent has its one terminal record. Every time is seconds on ``time.monotonic()``
relative to the run's start (the moment the first arrival is due).

A record's ``start`` is the request's intended arrival time, as in the simulator: when the
producer thread is late (it waits for the interpreter lock while the engine thread runs), the
delay stays inside the measured TTFT and latency instead of being dropped, and its size is
reported as the arrival lag. Deadlines and clients' cancellations also count from the intended
arrival.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from servebench.analysis.percentiles import percentile
from servebench.errors import ConfigError
from servebench.records.token_times import fits
from servebench.serving.engine.loop import EngineLoop, StepRow, warm_up
from servebench.serving.engine.model import Decoder, denormals_flushed
from servebench.serving.retry import ERR_CLIENT_DEADLINE, ClientSpec
from servebench.serving.scenario import CancelSpec, Scenario
from servebench.serving.scheduler import Outcome, Request, SchedulerConfig
from servebench.serving.send_lag import lag_threshold_s, sent_late
from servebench.serving.workload import RequestSpec, WorkloadSpec, draw_workload

ERR_RUN_LIMIT = "run_time_limit"
ERR_STOPPED = "stopped_by_user"  # the run was stopped from outside (the dashboard's Stop button)
Progress = Callable[[int, int, int], None]  # (ended, sent, total)


@dataclass
class TimingRun:
    """What a timing run produced."""

    records: list[dict[str, Any]]  # canonical timing records, by arrival
    steps: list[StepRow]
    offered: int  # requests sent
    planned: int  # requests the workload had (more than offered if the run hit its time limit)
    wall_s: float
    arrival_lag_p99_s: float | None  # how late the producer sent requests (its own queueing)
    arrival_lag_max_s: float | None
    end_state: dict[str, int] = field(default_factory=dict)  # loop snapshot once every request ended
    send_lags_s: dict[str, float] = field(default_factory=dict)  # request ID -> how late it was sent (submitted)
    notes: list[str] = field(default_factory=list)

    def step_dicts(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.steps]


class _Collector:
    """Listener for every request of a run: stores outcomes, wakes the closed-loop producer."""

    def __init__(self, on_end: Callable[[Outcome], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.outcomes: list[Outcome] = []
        self._on_end = on_end
        self.token_times: dict[str, list[float]] = {}  # each ended request's token emission times (step ends)

    def for_request(self, request_id: str) -> "_RequestTokens":
        """Return a listener for one request that keeps its token times and reports its outcome here."""
        return _RequestTokens(self, request_id)

    def on_token(self, token_id: int, time_s: float) -> None:
        pass

    def on_outcome(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)
        if self._on_end is not None:
            self._on_end(outcome)

    @property
    def ended(self) -> int:
        with self.lock:
            return len(self.outcomes)


CANCEL, ARRIVE = 0, 1  # at equal times a client's cancellation comes before an arrival, as in the simulator


def _request_id(i: int) -> str:
    return f"r{i:06d}"


def _request(i: int, spec: RequestSpec, arrival_s: float, timeout_s: float | None = None,
             deadline_error: str | None = None) -> Request:
    return Request(_request_id(i), arrival_s, max(1, spec.prompt_tokens), spec.max_output_tokens,
                   output_tokens=spec.output_tokens, timeout_s=spec.timeout_s if timeout_s is None else timeout_s,
                   slice=spec.slice, tenant=spec.tenant, deadline_error=deadline_error)


class _Attempts:
    """Retrying clients' state in an engine run (see :mod:`servebench.serving.retry`), shared by the threads.

    Row i below n is the first attempt of logical request i; retries get the rows after. Every
    method takes the lock: the producer thread sends and cancels, the engine thread ends attempts.
    """

    def __init__(self, client: ClientSpec, n: int, server_timeout_s: float | None, seed: int) -> None:
        self.client = client
        self.server_timeout_s = server_timeout_s
        self.rng = np.random.default_rng([seed, 17])  # backoff jitter
        self.lock = threading.Lock()
        self.logical_of = list(range(n))
        self.attempt_of = [1] * n
        self.first_start = [0.0] * n
        self.live = list(range(n))  # logical -> row of its latest attempt
        self.gave_up = [False] * n
        self.pending = [False] * n  # a retry is scheduled
        self.done = 0  # logical requests ended (no retry to come)

    def request(self, row: int, spec: RequestSpec, due_s: float) -> Request | None:
        """Return the attempt to send at ``due_s``, its timeout cut by the client's deadline; None if given up."""
        with self.lock:
            lg = self.logical_of[row]
            self.pending[lg] = False
            if self.gave_up[lg]:
                return None
            if row == lg:
                self.first_start[lg] = due_s
            self.live[lg] = row
            first = self.first_start[lg]
        server = spec.timeout_s if spec.timeout_s is not None else self.server_timeout_s
        timeout, by_client = self.client.attempt_timeout(due_s, first, server)
        return _request(row, spec, due_s, timeout, ERR_CLIENT_DEADLINE if by_client else None)

    def cancel(self, lg: int) -> str | None:
        """Give up logical request ``lg``: return its live attempt's id to cancel, or None when none is live."""
        with self.lock:
            if self.gave_up[lg]:
                return None
            self.gave_up[lg] = True
            if self.pending[lg]:  # backing off: the logical request ends now, its retry is not sent
                self.pending[lg] = False
                self.done += 1
                return None
            return _request_id(self.live[lg])

    def after(self, outcome: Outcome) -> tuple[float, int] | None:
        """Return (when, row) of the retry an ended attempt calls for, or None when its logical request is done."""
        row = int(outcome.request_id[1:])
        with self.lock:
            lg = self.logical_of[row]
            nxt = None if self.gave_up[lg] else self.client.next_start(
                self.attempt_of[row], outcome.status, outcome.error, outcome.end, self.first_start[lg], self.rng)
            if nxt is None:
                self.done += 1
                return None
            new = len(self.logical_of)
            self.logical_of.append(lg)
            self.attempt_of.append(self.attempt_of[row] + 1)
            self.pending[lg] = True
            return nxt, new

    def logical(self, row: int) -> int:
        with self.lock:
            return self.logical_of[row]

    def label(self, record: dict[str, Any]) -> dict[str, Any]:
        """Add ``logical_id`` (its first attempt's request id) and ``attempt`` to an attempt's record."""
        row = int(record["request_id"][1:])
        record["logical_id"] = _request_id(self.logical_of[row])
        record["attempt"] = self.attempt_of[row]
        return record


class _RequestTokens:
    """One request's listener: the time of each token it was sent (the engine's step end), then its outcome."""

    __slots__ = ("collector", "request_id", "times")

    def __init__(self, collector: _Collector, request_id: str) -> None:
        self.collector = collector
        self.request_id = request_id
        self.times: list[float] = []

    def on_token(self, token_id: int, time_s: float) -> None:
        self.times.append(time_s)

    def on_outcome(self, outcome: Outcome) -> None:
        with self.collector.lock:
            self.collector.token_times[outcome.request_id] = self.times
        self.collector.on_outcome(outcome)


def _with_token_times(record: dict[str, Any], times: list[float] | None) -> dict[str, Any]:
    """Add the request's token times to its record when they obey the record's rules."""
    if times and fits(times, record):
        record["token_times"] = times
    return record


class _Producer(threading.Thread):
    """Send requests at their arrival times; arrivals may be added while it runs (closed loop)."""

    def __init__(self, loop: EngineLoop, collector: _Collector, specs: list[RequestSpec]) -> None:
        super().__init__(name="servebench-arrivals", daemon=True)
        self.loop = loop
        self.collector = collector
        self.specs = specs
        self.cv = threading.Condition()
        self.heap: list[tuple[float, int, int]] = []  # (due, kind, request index); cancels sort first
        self.cancel_after_s: list[float] | None = None
        self.prompt_ids: list[list[int] | None] | None = None  # each request's prompt (prefix caching)
        self.attempts: _Attempts | None = None  # retrying clients; None: one attempt per request
        self.stopping = False
        self.sent = 0  # attempts sent
        self.sent_logical = 0  # logical requests whose first attempt was sent (equal to sent without retries)
        self.lags: list[float] = []
        self.send_lags: dict[str, float] = {}  # request ID -> its lag (the clock when submitted - its arrival)
        self.error: BaseException | None = None

    def schedule(self, due_s: float, index: int, kind: int = ARRIVE) -> None:
        with self.cv:
            heapq.heappush(self.heap, (due_s, kind, index))
            self.cv.notify()

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported to the engine thread, which re-raises it
            self.error = exc

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.stopping:
                    if self.heap:
                        delay = self.heap[0][0] - self.loop.clock()
                        if delay <= 0:
                            break
                        self.cv.wait(min(delay, 0.25))
                    else:
                        self.cv.wait(0.25)
                if self.stopping:
                    return
                due, kind, index = heapq.heappop(self.heap)
            if kind == CANCEL:
                rid = _request_id(index) if self.attempts is None else self.attempts.cancel(index)
                if rid is not None:
                    self.loop.cancel(rid)
                continue
            lg = index if self.attempts is None else self.attempts.logical(index)
            req = (_request(index, self.specs[lg], due) if self.attempts is None
                   else self.attempts.request(index, self.specs[lg], due))
            if req is None:  # its client gave up while backing off
                continue
            lag = self.loop.clock() - due
            self.lags.append(lag)
            self.send_lags[req.request_id] = lag
            self.sent += 1
            self.sent_logical += index == lg
            if index == lg and self.cancel_after_s is not None and self.cancel_after_s[index] == self.cancel_after_s[index]:
                self.schedule(due + self.cancel_after_s[index], index, CANCEL)  # this client gives up then
            self.loop.submit(req, None if self.prompt_ids is None else self.prompt_ids[lg],
                             listener=self.collector.for_request(_request_id(index)))


@contextlib.contextmanager
def gc_frozen() -> Iterator[None]:
    """Keep the objects alive now (torch, the model) out of the garbage collector's scans until exit.

    Shorter GC pauses during a timing run; every object is handed back to the collector on exit,
    error or not. When someone else has frozen objects already (the caller, or a concurrent run),
    nothing is frozen or unfrozen, so their freeze is left as it was.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_scenario(model: Decoder, scenario: Scenario, **kwargs: Any) -> TimingRun:
    """Serve a scenario's workload under its server limits (its step model is what gets measured)."""
    return run_workload(model, scenario.server.scheduler_config(), scenario.workload, seed=scenario.seed,
                        cancel=scenario.cancel, client=scenario.client, **kwargs)


def run_workload(model: Decoder, scheduler: SchedulerConfig, workload: WorkloadSpec, *, seed: int = 0,
                 cancel: CancelSpec | None = None, max_wall_s: float | None = None, warmup_steps: int = 3,
                 progress: Progress | None = None, on_step: Callable[[StepRow], None] | None = None,
                 client: ClientSpec | None = None, stop: threading.Event | None = None) -> TimingRun:
    """Serve ``workload`` in real time on ``model`` under ``scheduler``; return records and step trace.

    With ``client`` each request is a logical request served by attempts, as in the simulator: one
    record per attempt with ``logical_id`` and ``attempt``, retries after a backoff, never past
    the client's deadline (``planned`` and progress count logical requests).

    The workload (then the clients' cancellations) is drawn from ``numpy.random.default_rng(seed)``
    by :func:`~servebench.serving.workload.draw_workload`, the simulator's draw. ``max_wall_s`` bounds the run: requests still live then are
    cancelled with error ``run_time_limit`` (kept as records) and requests not yet sent are not offered.
    Setting ``stop`` (from another thread) ends the run the same way, its live requests cancelled with error
    ``stopped_by_user``; what ran is kept.
    """
    with denormals_flushed(), gc_frozen():
        return _run_workload(model, scheduler, workload, seed=seed, cancel=cancel, max_wall_s=max_wall_s,
                             warmup_steps=warmup_steps, progress=progress, on_step=on_step, client=client,
                             stop=stop)


def _run_workload(model: Decoder, scheduler: SchedulerConfig, workload: WorkloadSpec, *, seed: int,
                  cancel: CancelSpec | None, max_wall_s: float | None, warmup_steps: int,
                  progress: Progress | None, on_step: Callable[[StepRow], None] | None,
                  client: ClientSpec | None = None, stop: threading.Event | None = None) -> TimingRun:
    draw = draw_workload(workload, np.random.default_rng(seed), cancel)  # the simulator's draw
    drawn = draw.requests
    specs = drawn.to_specs()
    think = draw.think_s  # None: open loop
    users = draw.users or 0
    if not specs:
        raise ConfigError("the workload has no requests")
    cancel_after = None if draw.cancel_after_s is None else draw.cancel_after_s.tolist()
    limit = model.config.max_positions
    worst = max(max(1, s.prompt_tokens) + s.max_output_tokens for s in specs)
    if worst > limit:
        raise ConfigError(f"a request of {worst} tokens (prompt + output cap) exceeds model "
                          f"'{model.config.name}' max_positions {limit}; shorten the workload or pick another preset")
    warm_up(model, scheduler, warmup_steps)

    steps: list[StepRow] = []

    def record_step(row: StepRow) -> None:
        steps.append(row)
        if on_step is not None:
            on_step(row)

    t0 = time.monotonic()
    loop = EngineLoop(model, scheduler, seed=seed + 1, clock=lambda: time.monotonic() - t0, on_step=record_step)
    next_index = [users]
    next_lock = threading.Lock()
    producer_ref: list[_Producer] = []

    attempts = None if client is None else _Attempts(client, len(specs), scheduler.timeout_s, seed)

    def on_end(outcome: Outcome) -> None:
        if attempts is not None:
            retry = attempts.after(outcome)
            if retry is not None:  # a retry after its backoff; the user is still waiting
                producer_ref[0].schedule(*retry)
                return
        # closed loop: the next request goes to the user that just became free
        with next_lock:
            if think is None or next_index[0] >= len(specs):
                return
            i = next_index[0]
            next_index[0] += 1
        producer_ref[0].schedule(outcome.end + float(think[i]), i)

    collector = _Collector(on_end if think is not None or attempts is not None else None)
    producer = _Producer(loop, collector, specs)
    producer.cancel_after_s = cancel_after
    producer.attempts = attempts
    if drawn.has_turns:
        raise ConfigError("servebench run does not send conversations yet (a later turn waits for the previous "
                          "answer): simulate this workload, or drop 'conversation' from its classes")
    if scheduler.prefix_caching:  # the workload's token ids, so the engine sees the simulator's sharing
        vocab = model.config.vocab
        producer.prompt_ids = [content.token_ids(vocab) if s.prompt_tokens else None
                               for content, s in zip(drawn.prompt_contents(), specs)]
    producer_ref.append(producer)
    if think is None:
        producer.heap = [(s.arrival_s, ARRIVE, i) for i, s in enumerate(specs)]
        heapq.heapify(producer.heap)
    else:
        producer.heap = [(float(think[i]), ARRIVE, i) for i in range(min(users, len(specs)))]
    notes: list[str] = []
    if any(s.prompt_tokens < 1 for s in specs):
        notes.append("prompts of 0 tokens were sent as 1 token (the engine needs one token to start from)")
    producer.start()
    total = len(specs)
    shown = (-1, -1)
    try:
        while True:
            if producer.error is not None:
                raise producer.error
            ended = collector.ended if attempts is None else attempts.done
            if progress is not None and (ended, producer.sent) != shown:  # only on change: it runs between steps
                shown = (ended, producer.sent)
                progress(ended, producer.sent, total)
            if ended >= total:
                break
            over = max_wall_s is not None and loop.clock() > max_wall_s
            if over or (stop is not None and stop.is_set()):
                producer.stop()
                producer.join()
                loop.cancel_all(ERR_RUN_LIMIT if over else ERR_STOPPED)
                unsent = total - producer.sent_logical  # user requests, not attempts
                why = f"at the {max_wall_s:g} s limit" if over else f"by the user after {loop.clock():.3g} s"
                notes.append(f"stopped {why}: {unsent} requests never sent")
                break
            loop.run_once(idle_wait_s=0.02)
    finally:
        producer.stop()
        producer.join(timeout=5)
        loop.stop()
        loop.settle()
    wall_s = loop.clock()
    end_state = loop.snapshot()
    if progress is not None:
        progress(collector.ended if attempts is None else attempts.done, producer.sent, total)
    records = sorted((_with_token_times(o.to_record(), collector.token_times.get(o.request_id))
                      for o in collector.outcomes), key=lambda r: (r["start"], r["request_id"]))
    if attempts is not None:
        records = [attempts.label(r) for r in records]
    lag_p99 = percentile(producer.lags, 99)
    note = arrival_lag_note(lag_p99, max(producer.lags, default=None), records)
    if note is not None:
        notes.append(note)
    return TimingRun(records=records, steps=steps, offered=producer.sent, planned=total, wall_s=wall_s,
                     arrival_lag_p99_s=lag_p99, arrival_lag_max_s=max(producer.lags, default=None),
                     end_state=end_state, notes=notes, send_lags_s=dict(producer.send_lags))


def arrival_lag_note(lag_p99_s: float | None, lag_max_s: float | None, records: list[dict[str, Any]]) -> str | None:
    """Return a note when the arrival thread's p99 lag exceeds 10 ms and 5% of the median success TTFT
    (the rule of :mod:`servebench.serving.send_lag`)."""
    ttft = [r["first_token"] - r["start"] for r in records if r["status"] == "success"]
    p50 = percentile(ttft, 50)
    threshold = lag_threshold_s(p50)
    if lag_p99_s is None or lag_max_s is None or not sent_late(lag_p99_s, p50):
        return None
    return (f"the arrival thread sent requests late: p99 {lag_p99_s * 1e3:.3g} ms, max {lag_max_s * 1e3:.3g} ms "
            f"(threshold {threshold * 1e3:.3g} ms); records start at the intended arrival, so the lag is inside "
            "the measured TTFT and latency")
