"""The engine as a service in a background thread, for an HTTP server or any other front end.

Usage::

    from servebench.serving.engine.service import EngineService, RequestRejected
    from servebench.serving.scheduler import SchedulerConfig

    with EngineService("tiny", scheduler=SchedulerConfig(kv_budget_tokens=8192, max_waiting=64)) as svc:
        try:
            handle = svc.submit(prompt=[1, 2, 3], max_tokens=16, deadline_s=5.0)   # or prompt=120 (a count)
        except RequestRejected as exc:          # bounded queue full (exc.outcome.error == "queue_full")
            ...                                 # or the request can never fit ("kv_exceeds_budget")
        for event in handle:                    # TokenEvent(token_id, time_s), as the engine emits them
            ...
        outcome = handle.result()               # the terminal Outcome: status success / timeout / cancelled
        record = outcome.to_record()            # canonical timing record (start, admitted, first_token, end, ...)
        handle.cancel()                         # at any time: ends it "cancelled" and frees its KV

Threading: ``submit``, ``cancel`` and ``stats`` may be called from any thread. A handle's
iterator blocks on a thread-safe queue. ``await handle.next_batch()`` (and ``anext_event()``,
``async for`` over ``handle.stream()``) wait on the event loop itself, woken by the engine thread,
so a waiter that is cancelled or times out never takes an event with it. Every handle ends with exactly one outcome
(``stop()`` cancels live requests with error ``engine_stopped``). Times are seconds on
``time.monotonic()`` relative to the service's start; ``svc.clock()`` reads that clock and
``svc.t0_monotonic`` is its origin. The model has no tokenizer: prompts are token ids in
``[0, svc.vocab_size)`` (:mod:`servebench.serving.engine.words` maps words to ids for its HTTP API). Output
length is exactly ``max_tokens`` under the default greedy, fixed-length sampling; pass
``sampling=SamplingParams(...)`` for temperature, top-p, a seed, EOS (``ignore_eos=False``) or a stop check.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from servebench.errors import ConfigError, ServebenchError
from servebench.serving.engine.loop import EngineLoop, warm_up
from servebench.serving.engine.model import (
    Decoder,
    ModelConfig,
    SamplingParams,
    configure_cpu,
    denormals_flushed,
    pick_device,
    preset,
)
from servebench.serving.scheduler import Outcome, Request, SchedulerConfig

ERR_STOPPED = "engine_stopped"


class RequestRejected(ServebenchError):
    """The scheduler refused a request: ``outcome.error`` is "queue_full" or "kv_exceeds_budget"."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        super().__init__(f"request {outcome.request_id} rejected: {outcome.error}")


@dataclass(frozen=True)
class TokenEvent:
    """One generated token and when the engine emitted it (end of its step), in service seconds."""

    token_id: int
    time_s: float


class Observer(Protocol):
    """Sees each request's gaps between tokens and its outcome, exactly once (called from any thread)."""

    def on_token_gap(self, gap_s: float) -> None: ...

    def on_outcome(self, outcome: Outcome) -> None: ...


class RequestHandle:
    """One submitted request: its token events, its outcome, and cancellation."""

    def __init__(self, service: "EngineService", request_id: str, arrival_s: float) -> None:
        self.request_id = request_id
        self.arrival_s = arrival_s
        self._service = service
        self._events: queue.Queue[TokenEvent | Outcome] = queue.Queue()
        self._done = threading.Event()
        self._outcome: Outcome | None = None
        self._wake_lock = threading.Lock()
        self._waker: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self.tokens: list[int] = []
        self._last_token_s: float | None = None

    # listener side (engine thread)
    def on_token(self, token_id: int, time_s: float) -> None:
        observer = self._service.observer
        if observer is not None and self._last_token_s is not None:
            observer.on_token_gap(time_s - self._last_token_s)
        self._last_token_s = time_s
        self._events.put(TokenEvent(token_id, time_s))
        self._wake()

    def on_outcome(self, outcome: Outcome) -> None:
        if self._service.observer is not None:
            self._service.observer.on_outcome(outcome)
        self._outcome = outcome
        self._done.set()
        self._events.put(outcome)
        self._wake()

    def _wake(self) -> None:
        with self._wake_lock:
            waker = self._waker
        if waker is not None:
            loop, ready = waker
            try:
                loop.call_soon_threadsafe(ready.set)
            except RuntimeError:  # that event loop is closed: nobody is waiting any more
                pass

    # caller side
    @property
    def outcome(self) -> Outcome | None:
        """Return the terminal outcome, or None while the request is live."""
        return self._outcome

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def next_event(self, timeout: float | None = None) -> TokenEvent | Outcome:
        """Return the next token event, or the outcome once all tokens are read (blocks; may raise queue.Empty)."""
        if self._outcome is not None and self._events.empty():
            return self._outcome
        event = self._events.get(timeout=timeout)
        if isinstance(event, TokenEvent):
            self.tokens.append(event.token_id)
        return event

    def __iter__(self) -> Iterator[TokenEvent]:
        """Yield token events until the outcome (then stop; read it with :meth:`result`)."""
        while True:
            event = self.next_event()
            if isinstance(event, Outcome):
                return
            yield event

    def _ready_event(self) -> asyncio.Event:
        """Return the asyncio.Event the engine thread sets on this loop when an event arrives."""
        loop = asyncio.get_running_loop()
        with self._wake_lock:
            if self._waker is None or self._waker[0] is not loop:
                self._waker = (loop, asyncio.Event())
            return self._waker[1]

    async def anext_event(self) -> TokenEvent | Outcome:
        """Await the next token event or the outcome on the event loop (nothing is lost if cancelled)."""
        ready = self._ready_event()
        while True:
            ready.clear()
            try:
                return self.next_event(timeout=0)
            except queue.Empty:
                await ready.wait()  # set by the engine thread after its put, so no event is missed

    async def next_batch(self) -> tuple[list[int], Outcome | None]:
        """Await at least one event; return the token ids ready now, and the outcome once it came.

        Events are taken only after the wait, on the caller's task: a wait that is cancelled
        (a timeout, a client that left) takes nothing, so no token is ever lost.
        """
        tokens: list[int] = []
        event = await self.anext_event()
        while True:
            if isinstance(event, Outcome):
                return tokens, event
            tokens.append(event.token_id)
            try:
                event = self.next_event(timeout=0)
            except queue.Empty:
                return tokens, None

    async def stream(self) -> AsyncIterator[TokenEvent]:
        """Async-iterate token events until the outcome."""
        while True:
            event = await self.anext_event()
            if isinstance(event, Outcome):
                return
            yield event

    def result(self, timeout: float | None = None) -> Outcome:
        """Wait for and return the terminal outcome (raises TimeoutError if ``timeout`` passes)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} still live after {timeout} s")
        assert self._outcome is not None
        return self._outcome

    def cancel(self) -> Outcome | None:
        """End the request as "cancelled" (its KV is freed before the next step); None if already ended."""
        return self._service.cancel(self.request_id)


class EngineService:
    """Run an :class:`EngineLoop` in a daemon thread; see the module docstring."""

    def __init__(self, model: str | ModelConfig = "tiny", *, scheduler: SchedulerConfig | None = None,
                 seed: int = 0, device: str = "auto", threads: int | None = None, warmup_steps: int = 3) -> None:
        config = preset(model) if isinstance(model, str) else model
        dev, dtype = pick_device(device)
        if threads is not None:
            configure_cpu(threads)
        self.scheduler_config = scheduler or SchedulerConfig(kv_budget_tokens=16_384, max_num_seqs=32,
                                                             max_waiting=256, policy="paged")
        self.model = Decoder(config, seed=seed, device=dev, dtype=dtype)
        self.t0_monotonic = time.monotonic()
        self._loop = EngineLoop(self.model, self.scheduler_config, seed=seed + 1, clock=self.clock)
        self._warmup_steps = warmup_steps
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.observer: Observer | None = None  # sees every token gap and outcome (serve-engine's /metrics)

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab

    def clock(self) -> float:
        """Return seconds on time.monotonic() since the service was created."""
        return time.monotonic() - self.t0_monotonic

    def start(self) -> "EngineService":
        """Warm the model up and start the engine thread (idempotent)."""
        if self._loop.stopped:
            raise ConfigError("this engine service was stopped; create a new one")
        if self._thread is None:
            with denormals_flushed():  # as the engine thread will compute
                warm_up(self.model, self.scheduler_config, self._warmup_steps)
            self._thread = threading.Thread(target=self._serve, name="servebench-engine", daemon=True)
            self._thread.start()
        return self

    def _serve(self) -> None:
        try:
            with denormals_flushed():
                self._loop.serve(idle_wait_s=0.05)
        except BaseException as exc:  # surfaced to callers by submit() and stats()
            self._error = exc
            self._loop.stop()
            self._loop.cancel_all(f"engine_error: {type(exc).__name__}")

    def _check(self) -> None:
        if self._error is not None:
            raise ServebenchError(f"the engine thread failed: {self._error!r}") from self._error
        if self._thread is None:
            raise ConfigError("the engine service is not started; call start() or use it as a context manager")

    def submit(self, prompt: list[int] | int, max_tokens: int, deadline_s: float | None = None, *,
               request_id: str | None = None, slice: str | None = None,
               sampling: SamplingParams | None = None) -> RequestHandle:
        """Queue a request now and return its handle; raise RequestRejected if the scheduler refuses it.

        ``prompt`` is a list of token ids or a token count (ids then drawn from a seeded RNG);
        ``deadline_s`` is measured from now (None: the scheduler config's ``timeout_s``);
        ``sampling`` defaults to greedy with exactly ``max_tokens`` tokens.
        """
        self._check()
        if isinstance(prompt, bool) or not isinstance(prompt, (int, list)):
            raise ConfigError(f"prompt must be a list of token ids or a token count, got {type(prompt).__name__}")
        count = prompt if isinstance(prompt, int) else len(prompt)
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {max_tokens}")
        if deadline_s is not None and not deadline_s > 0:
            raise ConfigError(f"deadline_s must be positive, got {deadline_s}")
        rid = request_id or f"req-{next(self._ids):08d}"
        now = self.clock()
        handle = RequestHandle(self, rid, now)
        request = Request(rid, now, count, max_tokens, timeout_s=deadline_s, slice=slice)
        outcome = self._loop.submit(request, None if isinstance(prompt, int) else list(prompt), handle, sampling)
        if outcome is not None:
            raise RequestRejected(outcome)
        return handle

    def cancel(self, request_id: str) -> Outcome | None:
        """Cancel a live request by id; None if it already ended or is unknown."""
        return self._loop.cancel(request_id)

    def stats(self) -> dict[str, Any]:
        """Return running and waiting sequences, KV tokens used (scheduler) and held (cache), steps, device."""
        if self._error is not None:
            raise ServebenchError(f"the engine thread failed: {self._error!r}") from self._error
        return {**self._loop.snapshot(), "kv_budget_tokens": self.scheduler_config.kv_budget_tokens,
                "device": str(self.model.device), "model": self.model.config.name}

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel live requests (error "engine_stopped"), stop the engine thread and wait for it."""
        if self._thread is None:
            return
        self._loop.stop()
        self._thread.join(timeout_s)
        self._loop.cancel_all(ERR_STOPPED)
        if not self._thread.is_alive():
            self._loop.settle()
        self._thread = None

    def __enter__(self) -> "EngineService":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
