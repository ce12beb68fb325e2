"""Open-loop load from several workers that share one arrival schedule, on clocks aligned to the coordinator.

The plan is drawn once and dealt round-robin (:func:`partition`), so the merged arrivals are the
requested process and every planned request is sent by exactly one worker. Each worker times on
its own ``time.monotonic``; clocks of different processes or machines are never subtracted
directly. Before the run the coordinator pings each worker (:func:`clock_offset`: offset =
coordinator time at the middle of the round trip minus the worker's reading, uncertainty = half
the round trip, best of several pings) and gives each worker the common start instant translated
to its own clock. A record's times all come from one worker's clock, so its latency, TTFT and TPOT
are exact; times of different workers agree within the offset's uncertainty. The pings are
repeated after the run: a drift larger than the two uncertainties together is reported.

Workers are OS processes here (:class:`ProcessWorkers`); :mod:`servebench.load.ray_runner` gives Ray
actors on a cluster. Both run :func:`run_part`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from servebench.errors import ConfigError, WorkerError
from servebench.load.client import HttpOutcome
from servebench.load.generator import (
    GeneratorStats,
    LoadConfig,
    LoadResult,
    PlannedRequest,
    RunState,
    RunStopped,
    WorkerStats,
    generator_stats,
    lag_stats,
    run_load,
    stoppable,
    warm_up_sync,
    warmup_warning,
)
from servebench.serving.send_lag import LAG_FLOOR_S

PINGS = 8
START_LEAD_S = 1.0  # from the last ping to the common origin: every worker gets its part and starts its sender


@dataclass(frozen=True)
class ClockOffset:
    """Coordinator clock minus worker clock, and half the round trip of the ping that measured it."""

    offset_s: float
    uncertainty_s: float


@dataclass
class WorkerRun:
    """What one worker sends back: its outcomes on its clock since the common origin, and its counters."""

    worker: int
    host: str
    pid: int
    planned: int
    outcomes: list[HttpOutcome]
    peak_in_flight: int
    waited_for_slot: int
    start_late_s: float
    started_utc: str
    model: str | None = None
    error: str | None = None


class Worker(Protocol):
    """A load-generator worker as the coordinator sees it."""

    def clock(self) -> float:
        """Return the worker's ``time.monotonic()`` now (a ping)."""
        ...

    def submit(self, config: LoadConfig, plan: list[PlannedRequest], start_at: float, worker: int) -> None:
        """Start :func:`run_part` on the worker without waiting for it."""
        ...

    def result(self) -> WorkerRun:
        """Wait for the submitted run and return it."""
        ...

    def stop(self) -> bool:
        """Ask a submitted run to end now, its outcomes so far coming back from :meth:`result`; False if it cannot."""
        ...


# --------------------------------------------------------------------------- pure helpers


def partition(plan: Sequence[PlannedRequest], workers: int) -> list[list[PlannedRequest]]:
    """Deal a plan sorted by intended time round-robin to ``workers`` workers (each gets every n-th arrival).

    >>> from servebench.load.generator import PlannedRequest
    >>> plan = [PlannedRequest(f"r{i}", float(i), "x", 1, 1) for i in range(5)]
    >>> [[r.request_id for r in part] for part in partition(plan, 2)]
    [['r0', 'r2', 'r4'], ['r1', 'r3']]
    """
    if workers < 1:
        raise ConfigError(f"--workers {workers}: need at least one worker")
    if workers > len(plan):
        raise ConfigError(f"--workers {workers}: more workers than the {len(plan)} planned requests")
    return [list(plan[k::workers]) for k in range(workers)]


def clock_offset(ping: Callable[[], float], now: Callable[[], float] = time.monotonic,
                 pings: int = PINGS) -> ClockOffset:
    """Measure a worker's clock against ``now``: the ping with the shortest round trip wins.

    The worker's reading ``w`` was taken somewhere between our ``c0`` and ``c1``; assuming the
    middle, our clock minus its is ``(c0 + c1) / 2 - w``, off by at most ``(c1 - c0) / 2``.

    >>> clock_offset(lambda: 100.0, iter([1.0, 1.4, 2.0, 2.2]).__next__, pings=2)
    ClockOffset(offset_s=-97.9, uncertainty_s=0.10000000000000009)
    """
    best: ClockOffset | None = None
    for _ in range(pings):
        c0 = now()
        w = ping()
        c1 = now()
        sample = ClockOffset(offset_s=(c0 + c1) / 2 - w, uncertainty_s=(c1 - c0) / 2)
        if best is None or sample.uncertainty_s < best.uncertainty_s:
            best = sample
    assert best is not None  # pings >= 1
    return best


def peak_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """Return the most intervals [start, end) open at once (ties: an end before a start).

    >>> peak_overlap([(0, 2), (1, 3), (2, 4)])
    2
    """
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def clock_warnings(stats: Sequence[WorkerStats], lag_budget_s: float = LAG_FLOOR_S) -> list[str]:
    """Say when a worker's clock drifted beyond what the pings can resolve, or the alignment is coarse."""
    out = []
    for w in stats:
        bound = w.clock_uncertainty_s + w.clock_uncertainty_end_s
        if abs(w.clock_drift_s) > bound:
            out.append(f"worker {w.worker} ({w.host}): its clock moved {w.clock_drift_s:+.3g} s against the "
                       f"coordinator's during the run, more than the pings resolve ({bound:.3g} s); times across "
                       "workers agree only to that drift (each record's own durations are unaffected)")
    worst = max((w.clock_uncertainty_s for w in stats), default=0.0)
    if worst > lag_budget_s:
        out.append(f"workers' clocks are aligned only within {worst:.3g} s (half the best ping's round trip); "
                   "cross-worker quantities (window, peak concurrency) carry that uncertainty")
    late = [w for w in stats if w.start_late_s > 0]
    if late:
        out.append("workers started after the common origin: " + ", ".join(
            f"{w.worker} by {w.start_late_s:.3g} s" for w in late) + " (their send lag includes it)")
    return out


def merge_runs(config: LoadConfig, plan_size: int, runs: Sequence[WorkerRun], start: Sequence[ClockOffset],
               end: Sequence[ClockOffset], model: str, stopped_by: str | None = None) -> LoadResult:
    """Merge the workers' outcomes into one run with per-worker and whole-run statistics.

    ``stopped_by``: the signal that cut the run short (the runs hold what each worker had gathered).
    """
    failed = [r for r in runs if r.error is not None]
    if failed:
        raise WorkerError("; ".join(f"worker {r.worker} ({r.host}) failed: {r.error}" for r in failed))
    outcomes = sorted((o for r in runs for o in r.outcomes), key=lambda o: (o.intended_s, o.request_id))
    per_worker = []
    for r, s, e in zip(runs, start, end):
        per_worker.append(WorkerStats(
            worker=r.worker, host=r.host, pid=r.pid, planned=r.planned, offered=len(r.outcomes),
            sent=sum(o.sent_s is not None for o in r.outcomes),
            completed=sum(o.status == "success" for o in r.outcomes), peak_in_flight=r.peak_in_flight,
            waited_for_slot=r.waited_for_slot, schedule_lag_s=lag_stats(r.outcomes), start_late_s=r.start_late_s,
            clock_offset_s=s.offset_s, clock_uncertainty_s=s.uncertainty_s, clock_offset_end_s=e.offset_s,
            clock_uncertainty_end_s=e.uncertainty_s, clock_drift_s=e.offset_s - s.offset_s))
    sent = [(o.sent_s, o.end_s) for o in outcomes if o.sent_s is not None and math.isfinite(o.end_s)]
    stats: GeneratorStats = generator_stats(
        outcomes, "open", plan_size, config.max_in_flight * len(runs), peak_overlap(sent),
        sum(r.waited_for_slot for r in runs), config.duration_s, interrupted=stopped_by is not None)
    stats = stats.model_copy(update={"workers": per_worker, "warnings": stats.warnings + clock_warnings(per_worker)})
    started = min(r.started_utc for r in runs)
    return LoadResult(outcomes=outcomes, stats=stats, model=model, config=config, started_utc=started,
                      stopped_by=stopped_by)


# --------------------------------------------------------------------------- a worker's part


def run_part(config: LoadConfig, plan: list[PlannedRequest], start_at: float, worker: int,
             stop_signals: Sequence[signal.Signals] = ()) -> WorkerRun:
    """Send one worker's part of the schedule, its origin ``start_at`` on this process's monotonic clock.

    A signal in ``stop_signals`` ends the part early, as a stopped run: in-flight requests become
    cancelled outcomes and the part comes back with what it gathered.
    """
    state = RunState()
    late_s = max(0.0, time.monotonic() - start_at)
    error = None
    try:
        asyncio.run(stoppable(run_load(config, plan, state=state, start_at=start_at), state, stop_signals))
    except RunStopped:
        pass  # the coordinator asked for it; the outcomes gathered are the part's result
    except Exception as exc:  # sent back as text: the coordinator names the worker and fails the run
        error = f"{type(exc).__name__}: {exc}"
    for o in state.outcomes:
        o.worker = worker
    return WorkerRun(worker=worker, host=socket.gethostname(), pid=os.getpid(), planned=len(plan),
                     outcomes=state.outcomes, peak_in_flight=state.peak_in_flight,
                     waited_for_slot=state.waited_for_slot, start_late_s=late_s, started_utc=state.started_utc,
                     model=state.model, error=error)


def run_workers(workers: Sequence[Worker], config: LoadConfig, plan: Sequence[PlannedRequest], model: str,
                lead_s: float = START_LEAD_S) -> LoadResult:
    """Measure each worker's clock, start every part at one common instant, merge the outcomes.

    ``config.model`` is fixed to ``model`` so every worker sends the same name. Ctrl-C or a
    :class:`RunStopped` (SIGTERM, see :func:`raising_on`) while the parts run asks every worker to
    stop; if all can, the result holds what each had gathered (``stopped_by`` set), else it re-raises.
    """
    if config.users is not None:
        raise ConfigError("--workers shares one open-loop schedule; closed loop (--users) runs in one process")
    parts = partition(plan, len(workers))
    config = config.model_copy(update={"model": model})
    warmup = None
    if config.warmup_requests:  # once, from here, before the clocks are measured: a worker's would make it start late
        warmup = warm_up_sync(config, plan)
        config = config.model_copy(update={"warmup_requests": 0})
    for w in workers:
        w.clock()  # the first call may wait for the worker to start: not a measurement
    start = [clock_offset(w.clock) for w in workers]
    origin = time.monotonic() + lead_s
    for k, (w, part) in enumerate(zip(workers, parts)):
        w.submit(config, part, origin - start[k].offset_s, k)
    runs: list[WorkerRun] = []
    stopped_by = None
    try:
        for w in workers:
            runs.append(w.result())
    except (KeyboardInterrupt, RunStopped) as exc:
        stopped_by = exc.signal_name if isinstance(exc, RunStopped) else "SIGINT"
        if not all([w.stop() for w in workers[len(runs):]]):
            raise
        runs.extend(w.result() for w in workers[len(runs):])  # each part ends at once, with what it gathered
    end = [clock_offset(w.clock) for w in workers]
    merged = merge_runs(config, len(plan), runs, start, end, model, stopped_by)
    if warmup is not None:
        merged.stats = merged.stats.model_copy(update={"warmup": warmup,
                                                       "warnings": merged.stats.warnings + warmup_warning(warmup)})
    merged.t0_monotonic_s = origin  # the common origin on this (the coordinator's) clock
    return merged


def raising_on(signals: Sequence[signal.Signals] = (signal.SIGTERM,)) -> contextlib.AbstractContextManager[None]:
    """Within the block, a signal in ``signals`` raises :class:`RunStopped` (in the main thread; elsewhere nothing).

    For synchronous code such as a coordinator waiting on its workers, as Ctrl-C raises KeyboardInterrupt.
    Once: a repeat of the signal is ignored while the block lasts, so it cannot cut short the stopping.
    """
    def stop(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_IGN)
        raise RunStopped(signal.Signals(signum).name)
    return _handling(signals, stop)


@contextlib.contextmanager
def _handling(signals: Sequence[signal.Signals], handler: Any) -> Iterator[None]:
    """Give ``signals`` to ``handler`` within the block, then what they had (main thread only: elsewhere they
    cannot be set, nor do they arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# --------------------------------------------------------------------------- OS processes


def _process_main(conn: Connection) -> None:
    """Serve pings and runs for the coordinator until told to stop (a worker process's loop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the coordinator's "stop now": it means something only in a run
    while True:
        msg = conn.recv()
        if msg[0] == "clock":
            conn.send(time.monotonic())
        elif msg[0] == "run":
            conn.send(run_part(*msg[1:], stop_signals=(signal.SIGTERM,)))
        else:
            return


@dataclass
class _ProcessWorker:
    process: Any
    conn: Connection

    def clock(self) -> float:
        self.conn.send(("clock",))
        return self._recv()

    def submit(self, config: LoadConfig, plan: list[PlannedRequest], start_at: float, worker: int) -> None:
        self.conn.send(("run", config, plan, start_at, worker))

    def result(self) -> WorkerRun:
        return self._recv()

    def stop(self) -> bool:
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGTERM)  # ignored unless a run is going: then it ends that run
        return True

    def _recv(self) -> Any:
        try:
            return self.conn.recv()
        except EOFError:
            raise WorkerError(f"load worker process {self.process.pid} exited "
                              f"(exit code {self.process.exitcode})") from None


@dataclass
class ProcessWorkers:
    """``n`` worker processes on this machine (spawned, so nothing of the parent's event loop is inherited)."""

    n: int
    workers: list[_ProcessWorker] = field(default_factory=list)

    def __enter__(self) -> list[_ProcessWorker]:
        ctx = mp.get_context("spawn")
        for _ in range(self.n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_process_main, args=(child,), daemon=True, name="servebench-load-worker")
            proc.start()
            child.close()
            self.workers.append(_ProcessWorker(proc, parent))
        return self.workers

    def __exit__(self, *exc: object) -> None:
        # a second Ctrl-C or SIGTERM must not cut this short: a worker left alive would hang this process's exit
        # (multiprocessing joins daemonic children at exit, after a SIGTERM that an idle worker ignores)
        with _handling((signal.SIGINT, signal.SIGTERM), signal.SIG_IGN):
            for w in self.workers:
                try:
                    w.conn.send(("stop",))
                except OSError:
                    pass
            for w in self.workers:
                w.process.join(timeout=5)
                if w.process.is_alive():
                    w.process.kill()  # SIGTERM only stops a worker's run; it does not end the process
                    w.process.join(timeout=5)
                w.conn.close()


def run_with_processes(config: LoadConfig, plan: Sequence[PlannedRequest], workers: int, model: str) -> LoadResult:
    """Run the plan from ``workers`` OS processes on this machine."""
    partition(plan, workers)  # refuse a bad count before starting processes
    with ProcessWorkers(workers) as handles:
        return run_workers(handles, config, plan, model)
