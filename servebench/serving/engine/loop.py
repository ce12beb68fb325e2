"""The engine loop: the shared scheduler decides, the executor computes, on one monotonic clock.

One thread runs :meth:`EngineLoop.run_once` (or :meth:`EngineLoop.serve`) over and over; any
thread may :meth:`~EngineLoop.submit` or :meth:`~EngineLoop.cancel` meanwhile. The scheduler is
touched only under the loop's lock, and the lock is released while the model computes, so
arrivals queue up in real time during a step (the scheduler keeps a step's sequences "in
flight" until it is committed). Cancelled sequences give their KV back to the cache before the
next step is planned, so the scheduler's accounting and the physical cache never disagree.

With prefix caching (``SchedulerConfig.prefix_caching``) the scheduler's
:class:`~servebench.serving.prefix_cache.PrefixCache` decides what is shared and the physical cache
follows it: a block the scheduler caches is pinned (its payload is the physical block id), a
request admitted with a hit starts from those blocks instead of computing them, and an evicted
block is unpinned before the step that needs its space runs.

Listeners get token events and exactly one terminal :class:`~servebench.serving.scheduler.Outcome` per
request, always outside the lock.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from servebench.errors import ConfigError
from servebench.records.steps import StepRow
from servebench.serving.engine.executor import ComputePlan, Executor
from servebench.serving.engine.kvcache import PagedKVCache
from servebench.serving.engine.model import Decoder, SamplingParams
from servebench.serving.prefix_cache import TokenPrompt
from servebench.serving.scheduler import Outcome, Request, Scheduler, SchedulerConfig


class Listener(Protocol):
    """Receives one request's events (called from the engine thread, or the submitting/cancelling one)."""

    def on_token(self, token_id: int, time_s: float) -> None: ...

    def on_outcome(self, outcome: Outcome) -> None: ...


class NullListener:
    """A listener that ignores everything."""

    def on_token(self, token_id: int, time_s: float) -> None:
        pass

    def on_outcome(self, outcome: Outcome) -> None:
        pass


def cache_capacity_tokens(config: SchedulerConfig) -> int:
    """Return the physical cache size for a scheduler config.

    Under ``paged`` the scheduler counts whole blocks, so its budget is exact. Under ``reserve``
    it counts tokens, while the cache stores each sequence in whole blocks: add one partly
    filled block per sequence that can run at once.
    """
    bs = config.block_size_tokens
    if config.policy == "paged":
        return config.num_blocks * bs
    seqs = min(config.max_num_seqs, config.kv_budget_tokens)
    # a request's own tokens start on a block boundary after its cached blocks: one partial block each
    return config.kv_budget_tokens + seqs * (bs if config.prefix_caching else bs - 1)


class EngineLoop:
    """Scheduler plus executor plus clock; see the module docstring for the threading rules."""

    def __init__(self, model: Decoder, config: SchedulerConfig, *, seed: int = 0,
                 clock: Callable[[], float] = time.monotonic,
                 on_step: Callable[[StepRow], None] | None = None) -> None:
        self.model = model
        self.config = config
        self.clock = clock
        self.scheduler = Scheduler(config, block_events=config.prefix_caching)
        self.cache = PagedKVCache(model.config, cache_capacity_tokens(config), block_size=config.block_size_tokens,
                                  device=model.device, dtype=model.dtype)
        self.executor = Executor(model, self.cache)
        self.on_step = on_step
        self._rng = np.random.default_rng(seed)
        self._cv = threading.Condition(threading.RLock())
        self._pending: dict[str, tuple[list[int], int, SamplingParams]] = {}  # prompt ids, tokens to generate
        self._listeners: dict[str, Listener] = {}
        self._to_free: list[str] = []
        self._stopped = False
        self._open_row: tuple[StepRow, float] | None = None  # last step, and when its iteration ended
        self.steps = 0
        # running totals for the server's /metrics: preempted sequences, prompt tokens computed, tokens
        # emitted, and with prefix caching the prompt tokens looked up and found at admission
        self.totals = {"preemptions": 0, "prompt_tokens": 0, "generation_tokens": 0, "prefix_queries": 0,
                       "prefix_hits": 0}

    # ------------------------------------------------------------------ any thread

    def submit(self, request: Request, prompt_ids: list[int] | None = None,
               listener: Listener | None = None, sampling: SamplingParams | None = None) -> Outcome | None:
        """Queue a request now; return a "rejected" Outcome (also sent to the listener) or None.

        ``prompt_ids`` default to ``request.prompt_tokens`` ids drawn from the loop's seeded RNG.
        ``sampling`` defaults to greedy with a fixed length; a sampled request without a seed gets
        one from the same RNG, so a run is reproducible. The request's ``arrival_s`` should be
        ``self.clock()`` at the moment it arrived.
        """
        listener = listener or NullListener()
        vocab = self.model.config.vocab
        if prompt_ids is not None and len(prompt_ids) != request.prompt_tokens:
            raise ConfigError(f"request {request.request_id!r}: {len(prompt_ids)} prompt ids but "
                              f"prompt_tokens={request.prompt_tokens}")
        if request.prompt_tokens < 1:
            raise ConfigError(f"request {request.request_id!r}: the engine needs at least one prompt token")
        if prompt_ids is not None and any(not 0 <= t < vocab for t in prompt_ids):
            raise ConfigError(f"request {request.request_id!r}: prompt ids must be in [0, {vocab})")
        limit = self.model.config.max_positions
        if request.prompt_tokens + request.max_output_tokens > limit:
            raise ConfigError(f"request {request.request_id!r}: {request.prompt_tokens} prompt + "
                              f"{request.max_output_tokens} output tokens exceed the model's {limit} positions")
        with self._cv:
            if self._stopped:
                raise ConfigError("the engine loop is stopped")
            if self.config.prefix_caching and request.content is None:  # cache by the prompt's token ids
                if prompt_ids is None:
                    prompt_ids = self._rng.integers(0, vocab, size=request.prompt_tokens).tolist()
                request = dataclasses.replace(request, content=TokenPrompt(tuple(prompt_ids)))
            outcome = self.scheduler.add_request(request, self.clock())
            if outcome is None:
                if prompt_ids is None:
                    prompt_ids = self._rng.integers(0, vocab, size=request.prompt_tokens).tolist()
                target = request.output_target_tokens
                sampling = sampling or SamplingParams()
                if not sampling.greedy and sampling.seed is None:
                    sampling = dataclasses.replace(sampling, seed=int(self._rng.integers(2**63)))
                self._pending[request.request_id] = (list(prompt_ids), max(target, 1), sampling)
                self._listeners[request.request_id] = listener
                self._cv.notify_all()
        if outcome is not None:
            listener.on_outcome(outcome)
        return outcome

    def cancel(self, request_id: str, error: str | None = None) -> Outcome | None:
        """End a live request with "cancelled"; its KV is freed before the next step. None if unknown."""
        with self._cv:
            outcome = self.scheduler.cancel(request_id, self.clock())
            if outcome is None:
                return None
            if error is not None:
                outcome = dataclasses.replace(outcome, error=error)
            self._to_free.append(request_id)
            listener = self._listeners.pop(request_id, None)
            self._pending.pop(request_id, None)
            self._cv.notify_all()
        if listener is not None:
            listener.on_outcome(outcome)
        return outcome

    def cancel_all(self, error: str) -> list[Outcome]:
        """Cancel every live request with the given error cause; return their outcomes."""
        with self._cv:
            ids = list(self._listeners)
        return [o for o in (self.cancel(rid, error) for rid in ids) if o is not None]

    def stop(self) -> None:
        """Refuse new requests and wake the loop so :meth:`serve` returns."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def snapshot(self) -> dict[str, int]:
        """Return running and waiting sequences, KV tokens used (scheduler) and held (cache), steps run, and totals.

        A cancelled sequence's tokens stay "held" until the engine thread frees them before its
        next step (it never touches the cache while a step computes).
        """
        with self._cv:
            sched = self.scheduler
            return {"running": sched.num_running, "waiting": sched.num_waiting,
                    "kv_tokens_used": sched.kv_tokens_used, "kv_tokens_held": self.cache.used_tokens,
                    "steps": self.steps, **self.totals}

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def live_requests(self) -> int:
        """Return requests submitted and not yet ended."""
        with self._cv:
            return len(self._listeners)

    def wake(self) -> None:
        """Wake a loop waiting for work (e.g. after an external state change)."""
        with self._cv:
            self._cv.notify_all()

    # ------------------------------------------------------------------ engine thread

    def serve(self, idle_wait_s: float = 0.05) -> None:
        """Run steps until :meth:`stop` is called."""
        while not self._stopped:
            self.run_once(idle_wait_s)

    def run_once(self, idle_wait_s: float = 0.05) -> bool:
        """Expire deadlines, plan, compute and commit one step; return False if there was nothing to do.

        With nothing to do it waits up to ``idle_wait_s`` (less if a deadline comes sooner) for
        a submission, a cancellation or :meth:`stop`.
        """
        finished: list[tuple[Listener, Outcome]] = []
        with self._cv:
            self._apply_frees()
            now = self.clock()
            for outcome in self.scheduler.expire(now):
                finished.append(self._close(outcome))
            plan = self.scheduler.step(now)
            self._unpin_evicted()
            for outcome in plan.ended:  # preempted into a full queue: ended at once, KV freed
                finished.append(self._close(outcome))
            closed = self._close_row(None if plan.is_empty else now)
            if plan.is_empty:
                if not finished and not self._stopped:
                    deadline = self.scheduler.next_deadline()
                    wait = idle_wait_s if deadline is None else min(idle_wait_s, max(0.0, deadline - now))
                    self._cv.wait(wait)
            else:
                self.totals["preemptions"] += len(plan.preempted)
                self.totals["prompt_tokens"] += plan.prefill_tokens
                if self.config.prefix_caching:
                    self.totals["prefix_queries"] += sum(len(self._pending[rid][0]) for rid in plan.admitted
                                                         if rid in self._pending)
                    self.totals["prefix_hits"] += sum(plan.cached.get(rid, 0) for rid in plan.admitted)
                for rid in plan.preempted:
                    if rid in self.executor.sequences:
                        self.executor.preempt(rid)
                for rid in plan.admitted:
                    if rid not in self.executor.sequences:
                        prompt_ids, target, sampling = self._pending[rid]
                        self.executor.add(rid, prompt_ids, target, sampling)
                    if plan.cached.get(rid):
                        prefix = self.scheduler.cache  # type: ignore[union-attr]
                        blocks = [prefix.payload(k) for k in self.scheduler.cached_keys(rid)]
                        self.executor.adopt(rid, blocks, plan.cached[rid])
        if plan.is_empty:
            self._dispatch([], finished)
            self._emit(closed)
            return False
        self._emit(closed)
        started = self.clock()
        result = self.executor.execute(ComputePlan(prefill=tuple(plan.prefill), decode=tuple(plan.decode)))
        if self.model.device.type == "cuda":
            torch.cuda.synchronize(self.model.device)
        end = self.clock()
        tokens: list[tuple[Listener, int]] = []
        with self._cv:
            self.totals["generation_tokens"] += len(result.emitted)
            for rid, token in result.emitted.items():
                listener = self._listeners.get(rid)
                if listener is not None:  # not cancelled while the step ran
                    tokens.append((listener, token))
            done = self.scheduler.on_step_done(plan, end, result.finished)
            self._pin_registered()  # before a finished request's blocks are let go
            for outcome in done:
                finished.append(self._close(outcome))
            row = StepRow(start_s=now, duration_s=end - now, compute_s=end - started,
                          prefill_tokens=plan.prefill_tokens, decode_seqs=len(plan.decode),
                          kv_tokens_read=plan.kv_tokens_read,
                          kv_tokens_used=self.scheduler.kv_tokens_used, kv_tokens_held=self.cache.used_tokens,
                          running=self.scheduler.num_running, waiting=self.scheduler.num_waiting,
                          preempted=len(plan.preempted), prefill_seqs=len(plan.prefill),
                          admitted=len(plan.admitted), compute_start_s=started)
            self.steps += 1
        self._dispatch([(listener, token, end) for listener, token in tokens], finished)
        self._open_row = (row, self.clock())
        return True

    def settle(self) -> None:
        """Free cancelled sequences' KV and emit the last step's row; call once no step can run."""
        with self._cv:
            self._apply_frees()
        self._emit(self._close_row(None))

    def _close_row(self, next_start: float | None) -> StepRow | None:
        if self._open_row is None:
            return None
        row, iteration_end = self._open_row
        self._open_row = None
        end = iteration_end if next_start is None else next_start
        return dataclasses.replace(row, duration_s=end - row.start_s)

    def _emit(self, row: StepRow | None) -> None:
        if row is not None and self.on_step is not None:
            self.on_step(row)

    def _pin_registered(self) -> None:
        """Pin the physical blocks of prompt blocks the scheduler just cached (under the lock)."""
        sched = self.scheduler
        if sched.cache is None:
            return
        for rid, index, key in sched.registered:
            block = self.cache.block_of(rid, index)
            self.cache.pin(block)
            sched.cache.set_payload(key, block)
        sched.registered.clear()

    def _unpin_evicted(self) -> None:
        """Return the physical blocks of evicted cache entries to the pool (under the lock)."""
        for _, block in self.scheduler.evicted:
            if block is not None:
                self.cache.unpin(block)
        self.scheduler.evicted.clear()

    def _apply_frees(self) -> None:
        """Free cancelled sequences' KV (engine thread only, between steps)."""
        for rid in self._to_free:
            self.executor.remove(rid)
        self._to_free.clear()

    def _close(self, outcome: Outcome) -> tuple[Listener, Outcome]:
        rid = outcome.request_id
        self.executor.remove(rid)
        self._pending.pop(rid, None)
        return self._listeners.pop(rid, NullListener()), outcome

    @staticmethod
    def _dispatch(tokens: list[tuple[Listener, int, float]], finished: list[tuple[Listener, Outcome]]) -> None:
        for listener, token, t in tokens:
            listener.on_token(token, t)
        for listener, outcome in finished:
            listener.on_outcome(outcome)


def warm_up(model: Decoder, config: SchedulerConfig, steps: int = 3) -> None:
    """Run a few throwaway prefill and decode steps so lazy initialisation is not timed."""
    if steps < 1:
        return
    cache = PagedKVCache(model.config, 256, block_size=config.block_size_tokens, device=model.device,
                         dtype=model.dtype)
    ex = Executor(model, cache)
    for i in range(4):
        ex.add(f"w{i}", [i + 1] * (8 + 8 * i), steps)
    ex.execute(ComputePlan(prefill=tuple((f"w{i}", 8 + 8 * i) for i in range(4))))
    for _ in range(steps - 1):
        ex.execute(ComputePlan(decode=tuple(f"w{i}" for i in range(4))))
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
