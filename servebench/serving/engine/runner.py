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

from servebench.errors import ConfigError
from servebench.analysis.percentiles import percentile
from servebench.serving.scenario import CancelSpec, Scenario
from servebench.serving.scheduler import Outcome, Request, SchedulerConfig
from servebench.serving.send_lag import lag_threshold_s, sent_late
from servebench.records.token_times import fits
from servebench.serving.workload import RequestSpec, WorkloadSpec, draw_workload
from servebench.serving.engine.loop import EngineLoop, StepRow, warm_up
from servebench.serving.engine.model import Decoder, denormals_flushed

ERR_RUN_LIMIT = "run_time_limit"
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


def _request(i: int, spec: RequestSpec, arrival_s: float) -> Request:
    return Request(_request_id(i), arrival_s, max(1, spec.prompt_tokens), spec.max_output_tokens,
                   output_tokens=spec.output_tokens, timeout_s=spec.timeout_s, slice=spec.slice)


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
        self.stopping = False
        self.sent = 0
        self.lags: list[float] = []
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
                self.loop.cancel(_request_id(index))
                continue
            self.lags.append(self.loop.clock() - due)
            self.sent += 1
            if self.cancel_after_s is not None and self.cancel_after_s[index] == self.cancel_after_s[index]:
                self.schedule(due + self.cancel_after_s[index], index, CANCEL)  # this client gives up then
            self.loop.submit(_request(index, self.specs[index], due),
                             None if self.prompt_ids is None else self.prompt_ids[index],
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
                        cancel=scenario.cancel, **kwargs)


def run_workload(model: Decoder, scheduler: SchedulerConfig, workload: WorkloadSpec, *, seed: int = 0,
                 cancel: CancelSpec | None = None, max_wall_s: float | None = None, warmup_steps: int = 3,
                 progress: Progress | None = None, on_step: Callable[[StepRow], None] | None = None) -> TimingRun:
    """Serve ``workload`` in real time on ``model`` under ``scheduler``; return records and step trace.

    The workload (then the clients' cancellations) is drawn from ``numpy.random.default_rng(seed)``
    by :func:`~servebench.serving.workload.draw_workload`, the simulator's draw. ``max_wall_s`` bounds the run: requests still live then are
    cancelled with error ``run_time_limit`` (kept as records) and requests not yet sent are not offered.
    """
    with denormals_flushed(), gc_frozen():
        return _run_workload(model, scheduler, workload, seed=seed, cancel=cancel, max_wall_s=max_wall_s,
                             warmup_steps=warmup_steps, progress=progress, on_step=on_step)


def _run_workload(model: Decoder, scheduler: SchedulerConfig, workload: WorkloadSpec, *, seed: int,
                  cancel: CancelSpec | None, max_wall_s: float | None, warmup_steps: int,
                  progress: Progress | None, on_step: Callable[[StepRow], None] | None) -> TimingRun:
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

    def on_end(outcome: Outcome) -> None:
        # closed loop: the next request goes to the user that just became free
        with next_lock:
            if think is None or next_index[0] >= len(specs):
                return
            i = next_index[0]
            next_index[0] += 1
        producer_ref[0].schedule(outcome.end + float(think[i]), i)

    collector = _Collector(on_end if think is not None else None)
    producer = _Producer(loop, collector, specs)
    producer.cancel_after_s = cancel_after
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
            ended = collector.ended
            if progress is not None and (ended, producer.sent) != shown:  # only on change: it runs between steps
                shown = (ended, producer.sent)
                progress(ended, producer.sent, total)
            if ended >= total:
                break
            if max_wall_s is not None and loop.clock() > max_wall_s:
                producer.stop()
                producer.join()
                loop.cancel_all(ERR_RUN_LIMIT)
                notes.append(f"stopped at the {max_wall_s:g} s limit: {total - producer.sent} requests never sent")
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
        progress(collector.ended, producer.sent, total)
    records = sorted((_with_token_times(o.to_record(), collector.token_times.get(o.request_id))
                      for o in collector.outcomes), key=lambda r: (r["start"], r["request_id"]))
    lag_p99 = percentile(producer.lags, 99)
    note = arrival_lag_note(lag_p99, max(producer.lags, default=None), records)
    if note is not None:
        notes.append(note)
    return TimingRun(records=records, steps=steps, offered=producer.sent, planned=total, wall_s=wall_s,
                     arrival_lag_p99_s=lag_p99, arrival_lag_max_s=max(producer.lags, default=None),
                     end_state=end_state, notes=notes)


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
