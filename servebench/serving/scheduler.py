"""Admission, batching and preemption for a continuous-batching server, as a pure component.

The scheduler holds no clock and does no I/O: every call takes the caller's time ``now`` in
seconds. The simulator drives it with a modelled step time; the torch engine drives it with real
compute. Both follow the same loop::

    sched = Scheduler(SchedulerConfig(kv_budget_tokens=65_536, policy="reserve"))
    outcome = sched.add_request(Request("r1", arrival_s=0.0, prompt_tokens=1000, max_output_tokens=200), now)
    # outcome is None when queued, or a terminal "rejected" Outcome (queue full, or it can never fit)
    plan = sched.step(now)                  # whom to admit, prefill chunks, who decodes, who was preempted
    ...run plan.prefill chunks and one decode token for each id in plan.decode...
    done = sched.on_step_done(plan, now, finished={"r7"})   # -> terminal Outcomes (successes)
    done += sched.expire(now)               # deadlines passed: "timeout" Outcomes, KV freed
    sched.cancel("r3", now)                 # -> "cancelled" Outcome (or None if unknown), KV freed

Semantics:

* ``step(now)`` schedules running sequences first (oldest admission first), then admits waiting
  requests in FIFO order (head-of-line: admission stops at the first request that does not fit).
  ``max_num_seqs`` bounds running sequences; ``max_num_batched_tokens`` bounds the tokens of one
  step (one per decoding sequence plus prefill chunk tokens). With ``chunked_prefill`` a prompt is
  split to fill the budget; without it a prompt is prefilled whole or not at all in that step
  (a preempted sequence whose recompute exceeds the whole budget is split anyway).
* The prefill chunk that completes a sequence's context samples its first token at the end of
  the step (``first_token`` = that step's end time); each decode step adds one token.
* A sequence in a plan that has not been committed is *in flight*: later ``step`` calls skip it.
  So a caller may run prefill on its own lane and commit parts of a plan at different times with
  ``plan.only(ids)`` (the simulator's ``separate`` prefill lane does that).
* KV is accounted in tokens. ``reserve``: admission reserves prompt + full output cap, freed at the
  end; no preemption. ``paged``: ``block_size_tokens`` blocks are allocated as tokens are held;
  when a running sequence needs a block and none is free, the newest running sequence (last
  admitted) is preempted: its blocks are freed, it goes to the front of the waiting queue, and when
  readmitted it recomputes prompt + generated tokens as a prefill (vLLM's recompute). A prompt
  whose next chunk finds no block and is itself the newest waits, keeping its blocks. While any
  running sequence lacks KV, nobody new is admitted.
* ``max_waiting`` is a true bound: the waiting queue never holds more, preempted requests
  included. A request preempted while the queue is full cannot go back to it, so it ends at once
  as ``failed`` with error ``preempted_queue_full`` (its blocks freed, its tokens so far kept as
  wasted ``output_tokens``), listed in ``plan.preempted`` and returned in ``plan.ended``. (vLLM
  has no waiting bound and always requeues; a server that promises one cannot.) Callers must
  deliver ``plan.ended`` like any other terminal outcome.
* A request whose deadline passes (``expire``) or that is cancelled frees its KV at once; a plan
  still in flight that names it is ignored for it on commit.
* ``output_tokens`` on a Request (known in simulation) ends it with success after that many tokens;
  otherwise it ends at ``max_output_tokens`` or when the caller names it in ``finished`` (EOS).
  A request always generates at least one token (the first is sampled when its prefill
  completes), so ``output_tokens`` below 1 is refused with a ConfigError rather than turned into a
  one-token success.
* Every request ends in exactly one terminal :class:`Outcome`; ``Outcome.to_record()`` gives the
  canonical record (``start`` = arrival, ``admitted``, ``first_token``, ``end``, ``status``,
  ``prompt_tokens``, ``output_tokens`` = tokens generated so far, ``slice``, ``error``).
* Pure decode runs: ``max_decode_steps(plan)`` is how many identical decode steps the plan's
  sequences can take before one completes or (paged) runs out of blocks; ``extend(plan, k)``
  allocates KV for k steps now and ``on_step_done(plan, now)`` then commits all k at once (the
  simulator's fast path).
* ``step(now, prefill=False)`` or ``step(now, decode=False)`` plans one kind of work only, for
  callers with separate prefill and decode lanes. State for traces and event loops:
  ``num_waiting``, ``num_running``, ``kv_tokens_used`` (reserved or whole blocks),
  ``kv_tokens_held`` (KV actually computed), ``has_work``, ``next_deadline()``.
* Prefix caching (``prefix_caching=True``; see :mod:`servebench.serving.prefix_cache`): a request whose
  ``content`` gives block keys reuses, at admission, the longest run of cached full prompt blocks
  from its start (at most all but its last prompt token); only the rest is prefilled, and
  ``Outcome.cached_prompt_tokens`` says how many tokens it reused (at the admission whose prefill
  gave its first token). Each full prompt block it computes is cached when its chunk is
  committed. A cached block is counted once however many requests hold it: under ``paged`` as
  one block, under ``reserve`` as ``block_size_tokens`` tokens outside any request's
  reservation (a request reserves its uncached prompt plus its output cap). Blocks no running
  request holds stay cached, counted as free in ``kv_tokens_used``, until admission or growth
  needs their space: then the least recently released are evicted. With ``block_events=True``
  the scheduler lists what the engine must mirror in its physical cache: ``registered`` (request
  id, block index, key) and ``evicted`` (key, payload); the caller drains both after each call.
* Shedding (``max_queue_wait_s`` W): a request still waiting W seconds after its arrival, never
  admitted, is removed from the queue and ends as ``rejected`` with error ``queue_wait_exceeded``
  (at arrival + W, through ``expire``), instead of holding a queue slot until its deadline. A
  request preempted back to the queue has been admitted, so it is not shed. At equal times
  shedding comes before a timeout.
* Tenants (``Request.tenant``; limits in ``tenants``): a tenant at its ``max_running`` is
  skipped at admission (its requests keep their place) and the next waiting request is tried;
  other tenants are not held behind it. Admission still stops at the first request that does not
  fit the KV or the step's token budget (head-of-line, as without tenants).
* ``scheduling="fair"``: admission picks among the tenants with an admissible waiting request the
  one with the least *weighted admitted tokens* (prompt plus output cap of each request at its
  first admission, divided by the tenant's ``weight``); ties go to the request that waited
  longest, and within a tenant requests keep FIFO order. A tenant that starts waiting after an
  idle spell starts at the least value among the tenants already waiting, so it banks no credit
  while idle. This is deficit round robin over admitted tokens with a vanishing quantum (weighted
  fair queueing by token demand): over a backlogged interval each tenant is admitted tokens in
  proportion to its weight. Requests without a tenant form one tenant of weight 1.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

try:  # the compiler's class options (servebench.serving.native); without mypy's extensions nothing needs them
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - a plain install
    def mypyc_attr(*_args: object, **_kwargs: object) -> Callable[[type], type]:  # type: ignore[misc]
        return lambda cls: cls

from servebench.capacity.kv import Policy as Policy  # re-exported: one definition (capacity.kv)
from servebench.capacity.kv import tokens_per_request
from servebench.errors import ConfigError
from servebench.records.schema import record_dict
from servebench.serving.prefix_cache import PrefixCache, PromptContent
from servebench.serving.scheduler_config import SCHEDULINGS as SCHEDULINGS  # re-exported: the scheduler's names
from servebench.serving.scheduler_config import AdmissionSpec as AdmissionSpec
from servebench.serving.scheduler_config import SchedulerConfig as SchedulerConfig
from servebench.serving.scheduler_config import Scheduling as Scheduling
from servebench.serving.scheduler_config import TenantLimit as TenantLimit

ERR_QUEUE_FULL = "queue_full"
ERR_TOO_LARGE = "kv_exceeds_budget"
ERR_PROMPT_TOO_LONG = "prompt_exceeds_batch_budget"
ERR_DEADLINE = "deadline_exceeded"
ERR_CANCELLED = "cancelled"
ERR_PREEMPTED_QUEUE_FULL = "preempted_queue_full"
ERR_QUEUE_WAIT = "queue_wait_exceeded"


@mypyc_attr(native_class=False)  # compiled, still a plain class: its __init__ writes __dict__ (2 us a Request less)
@dataclass(frozen=True)
class Request:
    """One request as the scheduler sees it; times are on the caller's clock, in seconds."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    max_output_tokens: int
    output_tokens: int | None = None  # tokens it will generate (>= 1; simulation); None: until the cap or EOS
    timeout_s: float | None = None  # deadline after arrival; None: the config's
    slice: str | None = None
    content: PromptContent | None = None  # the prompt's block keys, for prefix caching; None: never cached
    tenant: str | None = None  # whose limits and share apply (see TenantLimit); None: the unnamed tenant
    deadline_error: str | None = None  # error of a timeout at its deadline; None: deadline_exceeded

    def __init__(self, request_id: str, arrival_s: float, prompt_tokens: int, max_output_tokens: int,
                 output_tokens: int | None = None, timeout_s: float | None = None, slice: str | None = None,
                 content: PromptContent | None = None, tenant: str | None = None,
                 deadline_error: str | None = None) -> None:
        # the frozen dataclass's own __init__ calls object.__setattr__ a field (2 us a Request; this, 0.45 us): the
        # simulator makes one a request. The fields, in order, as declared (test_scheduler checks each is set)
        d = self.__dict__
        d["request_id"], d["arrival_s"], d["prompt_tokens"] = request_id, arrival_s, prompt_tokens
        d["max_output_tokens"], d["output_tokens"], d["timeout_s"] = max_output_tokens, output_tokens, timeout_s
        d["slice"], d["content"], d["tenant"], d["deadline_error"] = slice, content, tenant, deadline_error

    @property
    def output_target_tokens(self) -> int:
        """Return the tokens it generates before it ends: ``output_tokens`` capped at ``max_output_tokens``."""
        return self.max_output_tokens if self.output_tokens is None else min(self.output_tokens, self.max_output_tokens)


@mypyc_attr(native_class=False)  # as Request
@dataclass(frozen=True)
class Outcome:
    """A request's terminal outcome, field for field the canonical timing record."""

    request_id: str
    start: float
    admitted: float | None
    first_token: float | None
    end: float
    status: str
    prompt_tokens: int
    output_tokens: int
    slice: str | None
    error: str | None
    preemptions: int = 0
    cached_prompt_tokens: int | None = None  # prompt tokens reused from the prefix cache; None: caching off or never admitted

    def __init__(self, request_id: str, start: float, admitted: float | None, first_token: float | None, end: float,
                 status: str, prompt_tokens: int, output_tokens: int, slice: str | None, error: str | None,
                 preemptions: int = 0, cached_prompt_tokens: int | None = None) -> None:
        # as Request's: one an ended request, without object.__setattr__ a field
        d = self.__dict__
        d["request_id"], d["start"], d["admitted"], d["first_token"] = request_id, start, admitted, first_token
        d["end"], d["status"], d["prompt_tokens"], d["output_tokens"] = end, status, prompt_tokens, output_tokens
        d["slice"], d["error"], d["preemptions"] = slice, error, preemptions
        d["cached_prompt_tokens"] = cached_prompt_tokens

    def to_record(self) -> dict[str, Any]:
        """Return the canonical record dict, leaving out absent optional fields."""
        return record_dict(request_id=self.request_id, start=self.start, admitted=self.admitted,
                           first_token=self.first_token, end=self.end, status=self.status,
                           prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                           slice=self.slice, error=self.error, cached_prompt_tokens=self.cached_prompt_tokens)


@dataclass(slots=True)
class StepPlan:
    """What one step does. Ids in ``prefill`` and ``decode`` are in flight until committed."""

    now_s: float
    admitted: list[str] = field(default_factory=list)
    prefill: list[tuple[str, int]] = field(default_factory=list)  # (request_id, prompt tokens this step)
    decode: list[str] = field(default_factory=list)  # one token each
    preempted: list[str] = field(default_factory=list)
    ended: list[Outcome] = field(default_factory=list)  # ended while planning: preempted into a full queue
    kv_tokens_used: int = 0  # after this step's allocations
    kv_tokens_read: int = 0  # context tokens attended over by the decoding sequences
    waiting: int = 0  # waiting requests left after this step's admissions
    running: int = 0  # running sequences (in flight or not) after this step's admissions
    steps: int = 1  # identical decode steps this plan stands for (see Scheduler.extend)
    max_steps: int | None = None  # set by Scheduler.max_decode_steps
    cached: dict[str, int] = field(default_factory=dict)  # admitted id -> prompt tokens reused from the cache
    cohort: bool = False  # decode is the scheduler's whole decode cohort, advanced as one (see Scheduler)

    def __init__(self, now_s: float, admitted: list[str] | None = None, prefill: list[tuple[str, int]] | None = None,
                 decode: list[str] | None = None, preempted: list[str] | None = None,
                 ended: list[Outcome] | None = None, kv_tokens_used: int = 0, kv_tokens_read: int = 0,
                 waiting: int = 0, running: int = 0, steps: int = 1, max_steps: int | None = None,
                 cached: dict[str, int] | None = None, cohort: bool = False) -> None:
        # the dataclass's own __init__ calls a factory for each list (one plan a step): the fields as declared
        self.now_s = now_s
        self.admitted = [] if admitted is None else admitted
        self.prefill = [] if prefill is None else prefill
        self.decode = [] if decode is None else decode
        self.preempted = [] if preempted is None else preempted
        self.ended = [] if ended is None else ended
        self.kv_tokens_used, self.kv_tokens_read, self.waiting, self.running = (kv_tokens_used, kv_tokens_read,
                                                                                waiting, running)
        self.steps, self.max_steps, self.cached, self.cohort = steps, max_steps, {} if cached is None else cached, cohort

    @property
    def prefill_tokens(self) -> int:
        """Return the prompt tokens this step computes."""
        prefill = self.prefill
        if len(prefill) < 2:  # most steps: no generator to sum
            return prefill[0][1] if prefill else 0
        return sum(n for _, n in prefill)

    @property
    def batched_tokens(self) -> int:
        """Return the tokens this step computes: prefill chunks plus one per decoding sequence."""
        return self.prefill_tokens + len(self.decode)

    @property
    def is_empty(self) -> bool:
        """Return True when the step computes nothing."""
        return not self.prefill and not self.decode

    def only(self, request_ids: Collection[str]) -> "StepPlan":
        """Return the part of this plan for ``request_ids`` (to commit parts at different times)."""
        return StepPlan(self.now_s, [r for r in self.admitted if r in request_ids],
                        [(r, n) for r, n in self.prefill if r in request_ids],
                        [r for r in self.decode if r in request_ids], [], [], self.kv_tokens_used,
                        self.kv_tokens_read, self.waiting, self.running, self.steps,
                        cached={r: n for r, n in self.cached.items() if r in request_ids})


class _Seq:
    """A request's mutable state inside the scheduler."""

    __slots__ = ("req", "rid", "target", "deadline", "computed", "generated", "decoding", "admitted_s",
                 "first_token_s", "blocks", "reserved", "preemptions", "in_flight", "running", "alive", "key",
                 "keys", "shared", "cached_tokens", "registering", "order", "lazy", "cbase", "gbase", "join_clock",
                 "join_id")

    def __init__(self, req: Request, target: int, deadline: float, key: int) -> None:
        self.req = req
        self.rid = req.request_id
        self.key = key  # unique per add_request, so a reused request_id never matches a stale deadline
        self.target = target
        self.deadline = deadline
        self.computed = 0  # tokens whose KV is computed
        self.generated = 0  # output tokens sampled so far
        self.decoding = False
        self.admitted_s: float | None = None
        self.first_token_s: float | None = None
        self.blocks = 0  # blocks it holds alone (paged)
        self.reserved = 0  # tokens it reserves alone (reserve)
        self.preemptions = 0
        self.in_flight = False
        self.running = False
        self.alive = True
        self.keys: list[int] | None = None  # its full prompt blocks' keys (prefix caching), made at first admission try
        self.shared = 0  # leading prompt blocks it holds in the prefix cache
        self.cached_tokens: int | None = None  # prompt tokens reused at the admission that gives the first token
        self.registering = True  # False once a block it computed was cached already by another request
        self.order = 0  # its place in the running order (set when it joins the running list)
        self.lazy = False  # in the decode cohort: computed and generated are cbase and gbase plus the cohort clock
        self.cbase = 0
        self.gbase = 0
        self.join_clock = 0  # the cohort clock when it joined (its decode steps since are its run of tokens)
        self.join_id = 0


_ORDER = attrgetter("order")  # a running sequence's place in running order


def _sheddable(seq: _Seq) -> bool:
    """Return whether ``seq`` may still be shed: live (it leaves the scheduler when it ends) and never admitted."""
    return seq.alive and not seq.running and seq.admitted_s is None


class Scheduler:
    """Continuous-batching scheduler: see the module docstring for the protocol."""

    def __init__(self, config: SchedulerConfig, *, block_events: bool = False, lazy_decode: bool = True) -> None:
        self.config = config
        self._seqs: dict[str, _Seq] = {}
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []  # admission order
        # (deadline, key, seq): a sequence is live until it ends (alive), and its key, unique, orders equal deadlines
        self._deadlines: list[tuple[float, int, _Seq]] = []
        self._counter = 0
        self._free_blocks = config.num_blocks
        # the frozen config's values the hot path reads on every step
        self._paged, self._bs, self._num_blocks = config.policy == "paged", config.block_size_tokens, config.num_blocks
        self._max_queue_wait_s = config.max_queue_wait_s
        self._max_batched: float = math.inf if config.max_num_batched_tokens is None else config.max_num_batched_tokens
        self._reserved_tokens = 0
        self._held_tokens = 0  # tokens whose KV is computed, over running sequences (outside the prefix cache)
        self.cache: PrefixCache | None = PrefixCache() if config.prefix_caching else None
        self.block_events = block_events
        self.registered: list[tuple[str, int, int]] = []  # (request id, block index, key) newly cached
        self.evicted: list[tuple[int, Any]] = []  # (key, payload) evicted from the prefix cache
        self.evictions = 0  # blocks evicted from the prefix cache so far
        self._shed: list[tuple[float, int, _Seq]] = []  # (arrival + max_queue_wait_s, key, seq)
        self._limits = dict(config.tenants)
        self._tenanted = bool(config.tenants) or config.scheduling == "fair"
        self._tenant_running: dict[str | None, int] = {}
        self._tenant_waiting: dict[str | None, int] = {}
        self._tenant_tokens: dict[str | None, float] = {}  # weighted admitted tokens (fair)
        # the decode cohort (see _cohort_step): running decoders advanced as one by a clock of decode steps
        self._lazy = lazy_decode
        self._others: list[_Seq] = []  # running sequences outside the cohort, in running order
        self._next_order = 0
        self._clock = 0
        self._members: list[_Seq] = []  # the cohort, in running order, with their orders and IDs beside
        self._member_orders: list[int] = []
        self._member_rids: list[str] = []
        self._cbase_sum = 0  # sum of the members' cbase: their computed tokens are it plus clock each
        # each member's cbase modulo the block size, sorted (paged: who needs a block when; see _cohort_blocks)
        self._residues: list[int] = []
        self._done_heap: list[tuple[int, int, int, _Seq]] = []  # (target - gbase, order, join id, seq); lazy deletion
        self._join_ids = 0
        self._cohort_plan: StepPlan | None = None  # the cohort's plan in flight
        # called with (request id, first clock, end clock) when a member leaves: it decoded one token per cohort step
        # between them (the simulator's token log maps cohort steps to their end times)
        self.on_cohort_run: Callable[[str, int, int], None] | None = None

    # ------------------------------------------------------------------ the decode cohort
    # Running sequences that decode advance together: a step gives each one token. Their state is kept lazily, as
    # offsets (cbase, gbase) from one clock that a commit advances by its steps, so a step of d decoders costs
    # O(1) rather than O(d): the next completion is the top of a heap of remaining targets, the KV blocks k steps
    # need follow from how many members sit at each position within a block, and kv_tokens_read from a sum. A
    # member's fields are written back (_leave) whenever anything else reads them: it finishes, is preempted, or
    # a step cannot be planned for the whole cohort at once (_dissolve), when the per-sequence loop runs as before.

    def _in_flight(self, seq: _Seq) -> bool:
        return seq.in_flight or (seq.lazy and self._cohort_plan is not None)

    def _join(self, joiners: list[_Seq]) -> None:
        """Move running decoders (not in flight), in running order, from the others into the cohort."""
        if len(joiners) == 1:
            self._others.remove(joiners[0])
        else:  # after a step planned sequence by sequence: the whole cohort again
            joined = set(map(id, joiners))
            self._others = [q for q in self._others if id(q) not in joined]
        clock, bs, heap = self._clock, self._bs, self._done_heap
        members, orders, rids = self._members, self._member_orders, self._member_rids
        for seq in joiners:
            seq.lazy = True
            cbase = seq.computed - clock
            seq.cbase, seq.gbase, seq.join_clock = cbase, seq.generated - clock, clock
            order = seq.order
            if not orders or order > orders[-1]:  # the usual joiner: the newest, its prompt just prefilled
                members.append(seq)
                orders.append(order)
                rids.append(seq.rid)
            else:
                i = bisect_left(orders, order)
                members.insert(i, seq)
                orders.insert(i, order)
                rids.insert(i, seq.rid)
            self._cbase_sum += cbase
            insort(self._residues, cbase % bs)
            self._join_ids += 1
            seq.join_id = self._join_ids
            heapq.heappush(heap, (seq.target - seq.gbase, order, seq.join_id, seq))

    def _write_back(self, seq: _Seq) -> None:
        """Write a member's computed, generated and blocks from the clock (blocks allocated for a plan in flight kept)."""
        clock = self._clock
        seq.computed, seq.generated = seq.cbase + clock, seq.gbase + clock
        if self.config.policy == "paged":
            ahead = self._cohort_plan.steps if self._cohort_plan is not None else 0
            seq.blocks = -(-(seq.computed + ahead) // self.config.block_size_tokens) - seq.shared

    def _leave(self, seq: _Seq) -> None:
        """Take a member out of the cohort (it finishes or is preempted), its state written back."""
        self._write_back(seq)
        i = bisect_left(self._member_orders, seq.order)
        del self._members[i], self._member_orders[i], self._member_rids[i]
        self._cbase_sum -= seq.cbase
        residues = self._residues
        del residues[bisect_left(residues, seq.cbase % self._bs)]
        seq.lazy = False
        if self.on_cohort_run is not None and self._clock > seq.join_clock:
            self.on_cohort_run(seq.rid, seq.join_clock, self._clock)

    def _dissolve(self) -> None:
        """Write every member back and return them to the others (a step the cohort path cannot plan)."""
        if not self._members:
            return
        clock, report = self._clock, self.on_cohort_run
        for seq in self._members:
            self._write_back(seq)
            seq.lazy = False
            if report is not None and clock > seq.join_clock:
                report(seq.rid, seq.join_clock, clock)
        self._others = sorted(self._others + self._members, key=lambda q: q.order)
        self._members, self._member_orders, self._member_rids = [], [], []
        self._cbase_sum = 0
        self._residues = []
        self._done_heap = []

    def _cohort_blocks(self, steps: int) -> int:
        """Return the KV blocks the members need for their next ``steps`` tokens (each holds its blocks exactly).

        A member of residue r reaches a block boundary first after (c - r) % bs steps (c = -clock % bs), then every
        bs steps: with steps - 1 = q * bs + s, each member needs q + 1 blocks, less one for each whose first boundary
        comes after step s, the residues c + 1 .. c + bs - 1 - s (modulo bs): two bisections of the sorted residues.
        """
        bs = self._bs
        c = -self._clock % bs
        if steps == 1:  # those at a block boundary now
            return self._at_boundary()
        q, s = divmod(steps - 1, bs)
        residues = self._residues
        lo, hi = (c + 1) % bs, (c + 1) % bs + bs - 1 - s  # the residues whose first boundary comes after step s
        if hi <= bs:
            late = bisect_left(residues, hi) - bisect_left(residues, lo)
        else:
            late = len(residues) - bisect_left(residues, lo) + bisect_left(residues, hi - bs)
        return len(residues) * (q + 1) - late

    def _at_boundary(self) -> int:
        """Return how many members are at a block boundary (their next token needs a block): ``_cohort_blocks(1)``."""
        residues, r = self._residues, -self._clock % self._bs
        i = bisect_left(residues, r)
        return bisect_right(residues, r, i) - i

    def _cohort_step(self, now: float, prefill: bool) -> StepPlan | None:
        """Plan a step in which every decoder decodes, as one cohort; None when that is not the step the
        per-sequence loop would plan (a decoder skipped for budget, or KV short: preemption or eviction)."""
        if self._others:
            joiners = [q for q in self._others if q.decoding and not q.in_flight]
            if joiners:
                self._join(joiners)
        n = len(self._members)
        budget: float = self._max_batched
        chunks: list[tuple[_Seq, int]] = []
        counted = 0  # members before the prefiller at hand, in running order, that took their token
        if prefill:
            for seq in self._others:
                if seq.in_flight or seq.decoding:
                    continue
                before = bisect_left(self._member_orders, seq.order) - counted
                if budget < before:
                    return None
                budget -= before
                counted += before
                chunk = self._chunk(seq, budget)
                if chunk:
                    chunks.append((seq, chunk))
                    budget -= chunk
        if budget < n - counted:
            return None
        budget -= n - counted
        if self._paged:
            bs = self._bs
            need = self._at_boundary() if n else 0
            if chunks:
                needs = [-(-(seq.computed + chunk) // bs) - seq.blocks - seq.shared for seq, chunk in chunks]
                if need + sum(x for x in needs if x > 0) > self._free_blocks:
                    return None
                self._free_blocks -= need
                for (seq, _), x in zip(chunks, needs):
                    if x > 0:
                        seq.blocks += x
                        self._free_blocks -= x
            elif need > self._free_blocks:
                return None
            else:
                self._free_blocks -= need
        for seq, _ in chunks:
            seq.in_flight = True
        plan = StepPlan(now, [], [(seq.rid, chunk) for seq, chunk in chunks] if chunks else [],
                        list(self._member_rids) if n else [], cohort=n > 0)
        if n:
            self._cohort_plan = plan
        if prefill and self._waiting:
            budget = self._admit(now, plan, budget)
        plan.kv_tokens_used = self.kv_tokens_used
        plan.kv_tokens_read = self._cbase_sum + n * self._clock + n
        plan.waiting = len(self._waiting)
        plan.running = len(self._running)
        return plan

    # ------------------------------------------------------------------ state
    @property
    def num_waiting(self) -> int:
        """Return how many requests wait for admission."""
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        """Return how many sequences hold a seat (admitted, not finished)."""
        return len(self._running)

    @property
    def kv_tokens_used(self) -> int:
        """Return KV tokens taken: reserved (reserve) or held in whole blocks (paged)."""
        if self._paged:
            cache = self.cache
            return (self._num_blocks - self._free_blocks - (0 if cache is None else cache.num_evictable)) * self._bs
        return self._reserved_tokens + self._held_cache_blocks() * self._bs

    @property
    def kv_tokens_held(self) -> int:
        """Return tokens whose KV is computed and kept (less than ``kv_tokens_used`` by what is reserved or rounded)."""
        return self._held_tokens if self.cache is None else self._held_tokens + self._held_cache_blocks() * self._bs

    @property
    def kv_tokens_cached(self) -> int:
        """Return tokens in prefix-cache blocks, held or not (0 with caching off)."""
        return 0 if self.cache is None else self.cache.num_cached * self.config.block_size_tokens

    def _num_evictable(self) -> int:
        return 0 if self.cache is None else self.cache.num_evictable

    def _held_cache_blocks(self) -> int:
        c = self.cache
        return 0 if c is None else c.num_cached - c.num_evictable

    @property
    def has_work(self) -> bool:
        """Return True while any request waits or runs."""
        return bool(self._waiting or self._running)

    def next_deadline(self) -> float | None:
        """Return the earliest deadline (or shedding time) of a live request, or None."""
        heap = self._deadlines
        while heap and not heap[0][2].alive:
            heapq.heappop(heap)
        shed = self._shed
        while shed and not _sheddable(shed[0][2]):
            heapq.heappop(shed)
        if not shed:
            return heap[0][0] if heap else None
        return shed[0][0] if not heap or shed[0][0] < heap[0][0] else heap[0][0]

    # ------------------------------------------------------------------ arrivals and exits
    def add_request(self, req: Request, now: float) -> Outcome | None:
        """Queue ``req``; return a "rejected" Outcome if the queue is full or it can never fit."""
        cfg = self.config
        if req.request_id in self._seqs:
            raise ConfigError(f"request_id {req.request_id!r} is already in the scheduler")
        if req.prompt_tokens < 0 or req.max_output_tokens < 1:
            raise ConfigError(f"request {req.request_id!r}: prompt_tokens {req.prompt_tokens} must be >= 0 "
                              f"and max_output_tokens {req.max_output_tokens} >= 1")
        if req.output_tokens is not None and req.output_tokens < 1:
            raise ConfigError(f"request {req.request_id!r}: output_tokens {req.output_tokens} must be >= 1 "
                              "(a request generates its first token when its prefill completes)")
        target = req.output_target_tokens
        error = None
        if cfg.max_waiting is not None and len(self._waiting) >= cfg.max_waiting:
            error = ERR_QUEUE_FULL
        elif self._max_tokens(req) > cfg.kv_budget_tokens:
            error = ERR_TOO_LARGE
        elif (not cfg.chunked_prefill and cfg.max_num_batched_tokens is not None
              and req.prompt_tokens > cfg.max_num_batched_tokens):
            error = ERR_PROMPT_TOO_LONG
        if error is not None:
            return Outcome(req.request_id, req.arrival_s, None, None, now, "rejected", req.prompt_tokens, 0,
                           req.slice, error)
        timeout = req.timeout_s if req.timeout_s is not None else cfg.timeout_s
        deadline = math.inf if timeout is None else req.arrival_s + timeout
        self._counter += 1
        seq = _Seq(req, target, deadline, self._counter)
        self._seqs[req.request_id] = seq
        self._waiting.append(seq)
        if self._tenanted:
            self._start_waiting(req.tenant)
        if deadline != math.inf:
            heapq.heappush(self._deadlines, (deadline, seq.key, seq))
        if self._max_queue_wait_s is not None:
            heapq.heappush(self._shed, (req.arrival_s + self._max_queue_wait_s, seq.key, seq))
        return None

    def _start_waiting(self, tenant: str | None) -> None:
        """Count a request of ``tenant`` into the queue; a tenant that was idle starts at the least waiting share."""
        waiting = self._tenant_waiting
        if not waiting.get(tenant) and self.config.scheduling == "fair":
            floor = min((self._tenant_tokens.get(t, 0.0) for t, k in waiting.items() if k and t != tenant),
                        default=None)
            if floor is not None and self._tenant_tokens.get(tenant, 0.0) < floor:
                self._tenant_tokens[tenant] = floor
        waiting[tenant] = waiting.get(tenant, 0) + 1

    def _weight(self, tenant: str | None) -> float:
        limit = self._limits.get(tenant) if tenant is not None else None
        return 1.0 if limit is None else limit.weight

    def _at_cap(self, tenant: str | None) -> bool:
        limit = self._limits.get(tenant) if tenant is not None else None
        return (limit is not None and limit.max_running is not None
                and self._tenant_running.get(tenant, 0) >= limit.max_running)

    def tenant_running(self, tenant: str | None) -> int:
        """Return how many running sequences belong to ``tenant``."""
        if self._tenanted:
            return self._tenant_running.get(tenant, 0)
        return sum(1 for seq in self._running if seq.req.tenant == tenant)

    def _max_tokens(self, req: Request) -> int:
        """Return the KV tokens a request can need at most (its reservation under ``reserve``)."""
        return tokens_per_request(req.prompt_tokens, req.max_output_tokens, self.config.policy,
                                  block_size=self.config.block_size_tokens)

    def expire(self, now: float) -> list[Outcome]:
        """End every live request whose deadline is at or before ``now`` with "timeout", and shed
        every never-admitted request waiting since ``max_queue_wait_s`` before ``now`` ("rejected"),
        earliest first (shedding first at equal times)."""
        out: list[Outcome] = []
        heap, shed = self._deadlines, self._shed
        while (heap and heap[0][0] <= now) or (shed and shed[0][0] <= now):
            if shed and shed[0][0] <= now and (not heap or shed[0][0] <= heap[0][0]):
                seq = heapq.heappop(shed)[2]
                if _sheddable(seq):
                    out.append(self._finish(seq, now, "rejected", ERR_QUEUE_WAIT))
                continue
            seq = heapq.heappop(heap)[2]
            if seq.alive:
                out.append(self._finish(seq, now, "timeout", seq.req.deadline_error or ERR_DEADLINE))
        return out

    def cancel(self, request_id: str, now: float) -> Outcome | None:
        """End a live request with "cancelled" and free its KV; None if it is not in the scheduler."""
        seq = self._seqs.get(request_id)
        if seq is None or not seq.alive:
            return None
        return self._finish(seq, now, "cancelled", ERR_CANCELLED)

    def _finish(self, seq: _Seq, now: float, status: str, error: str | None) -> Outcome:
        seq.alive = False
        if seq.lazy:
            self._leave(seq)
        elif seq.running:
            self._others.remove(seq)
        self._release(seq)
        if seq.running:
            self._running.remove(seq)
            seq.running = False
            if self._tenanted:
                self._tenant_running[seq.req.tenant] -= 1
        else:
            self._waiting.remove(seq)
            if self._tenanted:
                self._tenant_waiting[seq.req.tenant] -= 1
        del self._seqs[seq.req.request_id]
        req = seq.req
        return Outcome(req.request_id, req.arrival_s, seq.admitted_s, seq.first_token_s, now, status,
                       req.prompt_tokens, seq.generated, req.slice, error, seq.preemptions, seq.cached_tokens)

    def _release(self, seq: _Seq) -> None:
        bs = self.config.block_size_tokens
        self._held_tokens -= seq.computed - seq.shared * bs
        self._free_blocks += seq.blocks
        seq.blocks = 0
        self._reserved_tokens -= seq.reserved
        seq.reserved = 0
        if seq.shared:
            assert self.cache is not None and seq.keys is not None
            self.cache.release(seq.keys[:seq.shared])
            seq.shared = 0

    # ------------------------------------------------------------------ scheduling
    def step(self, now: float, *, prefill: bool = True, decode: bool = True) -> StepPlan:
        """Plan one step at ``now``: running sequences first, then FIFO admissions.

        ``prefill=False`` or ``decode=False`` leaves that kind of work out (and, without prefill,
        admits nobody), for callers that run prefill and decode on separate lanes.
        """
        if self._lazy and decode and self._cohort_plan is None:
            found = self._cohort_step(now, prefill)
            if found is not None:
                return found
            self._dissolve()  # this step is planned sequence by sequence
        cfg = self.config
        paged = cfg.policy == "paged"
        bs = cfg.block_size_tokens
        budget = math.inf if cfg.max_num_batched_tokens is None else cfg.max_num_batched_tokens
        plan = StepPlan(now)
        kv_read = 0
        starved = False  # a running sequence could not get KV: admit nobody this step
        decoding, prefilling = plan.decode, plan.prefill
        # without decode only prompts are planned: the cohort's members all decode, so the others (running order) suffice
        for seq in list(self._running if decode else self._others):
            if seq.in_flight or not seq.running:  # in flight, or preempted earlier in this step
                continue
            if seq.decoding:
                if not decode or budget < 1:
                    continue
                if paged:
                    need = -(-(seq.computed + 1) // bs) - seq.blocks - seq.shared
                    if need > 0:
                        if need <= self._free_blocks:  # _alloc's common case, inline: this loop is the hot path
                            seq.blocks += need
                            self._free_blocks -= need
                        elif self._make_room(need, seq, plan):
                            self._alloc(seq, need)
                        else:
                            starved = True
                            continue
                seq.in_flight = True
                decoding.append(seq.rid)
                kv_read += seq.computed + 1
                budget -= 1
                continue
            if not prefill:
                continue
            chunk = self._chunk(seq, budget)
            if chunk == 0:
                continue
            if paged:
                need = -(-(seq.computed + chunk) // bs) - seq.blocks - seq.shared
                if need > 0:
                    if not self._make_room(need, seq, plan):
                        starved = True
                        continue
                    self._alloc(seq, need)
            seq.in_flight = True
            prefilling.append((seq.rid, chunk))
            budget -= chunk
        if prefill and not starved:
            budget = self._admit(now, plan, budget)
        plan.kv_tokens_used = self.kv_tokens_used
        plan.kv_tokens_read = kv_read
        plan.waiting = len(self._waiting)
        plan.running = len(self._running)
        return plan

    def _chunk(self, seq: _Seq, budget: float) -> int:
        """Return the prefill tokens ``seq`` can compute in a step with ``budget`` tokens left."""
        return self._chunk_of(seq.req.prompt_tokens + seq.generated - seq.computed, budget)

    def _chunk_of(self, left: int, budget: float) -> int:
        """Return the prefill tokens of ``left`` to compute that fit a step with ``budget`` tokens left."""
        if left <= budget:
            return left
        cap = self.config.max_num_batched_tokens
        # a recompute longer than a whole step's budget could never run whole: split it anyway
        if (self.config.chunked_prefill or (cap is not None and left > cap)) and budget >= 1:
            return int(budget)
        return 0

    def _admit(self, now: float, plan: StepPlan, budget: float) -> float:
        cfg = self.config
        paged, bs = self._paged, self._bs
        waiting = self._waiting
        cache = self.cache
        while waiting and len(self._running) < cfg.max_num_seqs:
            pick = waiting[0] if not self._tenanted else self._next_candidate()
            if pick is None:
                break
            seq = pick
            total = seq.req.prompt_tokens + seq.generated
            hit = 0 if cache is None else self._lookup(seq, total)
            left = total - hit * bs
            chunk = left if left <= budget else self._chunk_of(left, budget)
            if chunk == 0 and left > 0:
                break
            reused = cache.unheld(seq.keys[:hit]) if hit else 0  # type: ignore[union-attr, index]
            if paged:
                need = -(-chunk // bs)
                if need > self._free_blocks + (0 if cache is None else cache.num_evictable) - reused:
                    break
            else:
                need = tokens_per_request(seq.req.prompt_tokens, seq.req.max_output_tokens) - hit * bs  # less cached
                cached = 0 if cache is None else cache.num_cached - cache.num_evictable + reused
                if need > cfg.kv_budget_tokens - self._reserved_tokens - cached * bs:
                    break
            if seq is waiting[0]:
                waiting.popleft()
            else:
                waiting.remove(seq)
            if self._tenanted:
                self._admitted_tenant(seq)
            if cache is not None:
                if hit:
                    cache.acquire(seq.keys[:hit])  # type: ignore[index]
                    seq.shared = hit
                    seq.computed = hit * bs
                seq.registering = True
                if seq.first_token_s is None:
                    seq.cached_tokens = hit * bs
                plan.cached[seq.req.request_id] = hit * bs
            if not paged:
                self._reserve(seq, need)
            elif cache is None and need > 0:  # _alloc's case without a cache to evict from, inline
                seq.blocks += need
                self._free_blocks -= need
            else:
                self._alloc(seq, need)
            seq.running = True
            seq.order = self._next_order
            self._next_order += 1
            self._running.append(seq)
            self._others.append(seq)
            if seq.admitted_s is None:
                seq.admitted_s = now
            plan.admitted.append(seq.rid)
            seq.in_flight = True
            plan.prefill.append((seq.rid, chunk))
            budget -= chunk
        return budget

    def _next_candidate(self) -> _Seq | None:
        """Return the waiting request to try next: FIFO past capped tenants, or by the fair rule."""
        fair = self.config.scheduling == "fair"
        active = sum(1 for k in self._tenant_waiting.values() if k)
        seen: set[str | None] = set()
        best: _Seq | None = None
        best_tokens = math.inf
        for seq in self._waiting:
            tenant = seq.req.tenant
            if tenant in seen:
                continue
            seen.add(tenant)
            if not self._at_cap(tenant):
                if not fair:
                    return seq
                tokens = self._tenant_tokens.get(tenant, 0.0)
                if tokens < best_tokens:  # strict: the earlier head (longer wait) wins ties
                    best, best_tokens = seq, tokens
            if len(seen) >= active:
                break
        return best

    def _admitted_tenant(self, seq: _Seq) -> None:
        """Move ``seq``'s tenant counts from waiting to running; charge its first admission (fair)."""
        tenant = seq.req.tenant
        self._tenant_waiting[tenant] -= 1
        self._tenant_running[tenant] = self._tenant_running.get(tenant, 0) + 1
        if seq.admitted_s is None:
            cost = seq.req.prompt_tokens + seq.req.max_output_tokens
            self._tenant_tokens[tenant] = self._tenant_tokens.get(tenant, 0.0) + cost / self._weight(tenant)

    def _lookup(self, seq: _Seq, total: int) -> int:
        """Return the leading prompt blocks of ``seq`` cached now (leaving at least one token to compute)."""
        bs = self.config.block_size_tokens
        if seq.keys is None:
            content = seq.req.content
            seq.keys = [] if content is None else content.block_keys(bs)[:seq.req.prompt_tokens // bs]
        if not seq.keys or total < 1:
            return 0
        assert self.cache is not None
        return self.cache.match(seq.keys, (total - 1) // bs)

    def _reserve(self, seq: _Seq, tokens: int) -> None:
        """Reserve ``tokens`` for ``seq`` (reserve policy), evicting unheld cached blocks if the budget needs it."""
        if self.cache is not None:
            bs = self.config.block_size_tokens
            over = self._reserved_tokens + tokens + self.cache.num_cached * bs - self.config.kv_budget_tokens
            if over > 0:
                self._evict(-(-over // bs))
        seq.reserved = tokens
        self._reserved_tokens += tokens

    def _alloc(self, seq: _Seq, blocks: int) -> None:
        if blocks > 0:
            if blocks > self._free_blocks:
                self._evict(blocks - self._free_blocks)
            seq.blocks += blocks
            self._free_blocks -= blocks

    def _evict(self, blocks: int) -> None:
        """Evict ``blocks`` unheld cached blocks, least recently released first (their space becomes free)."""
        assert self.cache is not None
        gone = self.cache.evict(blocks, report=self.block_events)
        self.evictions += blocks
        if self.config.policy == "paged":
            self._free_blocks += blocks
        if self.block_events:
            self.evicted.extend(gone)

    def _register(self, seq: _Seq) -> None:
        """Cache the full prompt blocks ``seq`` has computed beyond those it holds in the cache already."""
        cache, keys, bs = self.cache, seq.keys, self.config.block_size_tokens
        assert cache is not None and keys is not None
        full = min(min(seq.computed, seq.req.prompt_tokens) // bs, len(keys))
        if full <= seq.shared:
            return
        added = cache.insert_run(keys, seq.shared, full)
        if added < full - seq.shared:
            seq.registering = False  # another request computed the next block first: keep ours private from here
        if self.block_events:
            rid = seq.req.request_id
            self.registered.extend((rid, j, keys[j]) for j in range(seq.shared, seq.shared + added))
        if added:
            seq.shared += added
            self._held_tokens -= added * bs
            if self.config.policy == "paged":
                seq.blocks -= added
            else:
                seq.reserved -= added * bs
                self._reserved_tokens -= added * bs

    def _make_room(self, need: int, seq: _Seq, plan: StepPlan) -> bool:
        """Preempt the newest running sequences not in flight until ``need`` blocks are free (or evictable)."""
        while self._free_blocks + self._num_evictable() < need:
            victim = None
            for cand in reversed(self._running):
                if not self._in_flight(cand):
                    victim = cand
                    break
            if victim is None or (victim is seq and not seq.decoding):
                return False  # a prompt that cannot grow waits with its blocks rather than recompute itself
            self._preempt(victim, plan)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: _Seq, plan: StepPlan) -> None:
        """Free ``seq``'s KV and requeue it at the front; end it as failed if the queue is full."""
        seq.preemptions += 1
        plan.preempted.append(seq.req.request_id)
        cap = self.config.max_waiting
        if cap is not None and len(self._waiting) >= cap:
            plan.ended.append(self._finish(seq, plan.now_s, "failed", ERR_PREEMPTED_QUEUE_FULL))
            return
        if seq.lazy:
            self._leave(seq)
        else:
            self._others.remove(seq)
        self._release(seq)
        self._running.remove(seq)
        seq.running = False
        seq.decoding = False
        seq.computed = 0
        self._waiting.appendleft(seq)
        if self._tenanted:
            self._tenant_running[seq.req.tenant] -= 1
            self._start_waiting(seq.req.tenant)

    # ------------------------------------------------------------------ commits
    def on_step_done(self, plan: StepPlan, now: float, finished: Iterable[str] = (),
                     tokens: list[str] | None = None) -> list[Outcome]:
        """Commit ``plan`` (all of its ``steps``) as finished at ``now``; return successes ended by it.

        ``finished`` names sequences that produced EOS in this step. ``tokens``, when given, receives the
        request ID of every sequence that emitted output: one token for a completed prefill, ``steps``
        for a decoder, one per step (a plan of several steps has no prefill; the callers stamp the
        tokens with their step ends). A cohort plan's decoders are not listed: each decoded one token
        per step of the cohort clock (``on_cohort_run`` reports their spans when they leave it).
        """
        if plan.cohort and not plan.prefill and not finished:  # most commits: the cohort's decode steps alone
            return self._cohort_done(plan, now)
        steps = plan.steps
        done: list[Outcome] = []
        seqs = self._seqs
        for rid, chunk in plan.prefill:
            seq = seqs.get(rid)
            if seq is None or not seq.in_flight:
                continue
            seq.in_flight = False
            seq.computed += chunk
            self._held_tokens += chunk
            if seq.registering and self.cache is not None and seq.keys:
                self._register(seq)
            if seq.computed >= seq.req.prompt_tokens + seq.generated:
                seq.decoding = True
                seq.generated += 1
                if tokens is not None:
                    tokens.append(rid)
                if seq.first_token_s is None:
                    seq.first_token_s = now
                if seq.generated >= seq.target:
                    done.append(self._finish(seq, now, "success", None))
        if plan.cohort:
            ended = self._cohort_done(plan, now)
            if done:
                done.extend(ended)
            else:
                done = ended
            decoding: Iterable[str] = ()
        else:
            decoding = plan.decode
        decoded = 0
        for rid in decoding:
            seq = seqs.get(rid)
            if seq is None or not seq.in_flight:
                continue
            seq.in_flight = False
            seq.computed += steps
            decoded += 1
            seq.generated += steps
            if tokens is not None:
                tokens.append(rid)
            if seq.generated >= seq.target:
                self._held_tokens += decoded * steps  # _finish releases what the sequence holds, these steps included
                decoded = 0
                done.append(self._finish(seq, now, "success", None))
        if decoded:
            self._held_tokens += decoded * steps
        for rid in finished:
            seq = seqs.get(rid)
            if seq is not None and seq.running and (seq.lazy or seq.generated >= 1):  # a member has decoded
                done.append(self._finish(seq, now, "success", None))
        return done

    def _cohort_done(self, plan: StepPlan, now: float) -> list[Outcome]:
        """Commit the cohort's decode steps: advance the clock; members that reach their target end, in running order."""
        if plan is not self._cohort_plan:
            raise ConfigError("on_step_done: a cohort plan committed twice, or after another cohort plan")
        self._cohort_plan = None
        steps = plan.steps
        self._clock += steps
        self._held_tokens += steps * len(self._members)
        heap, clock, ended = self._done_heap, self._clock, []
        while heap:
            key, _, join_id, seq = heap[0]
            if not (seq.lazy and seq.join_id == join_id):
                heapq.heappop(heap)
            elif key <= clock:
                heapq.heappop(heap)
                ended.append(seq)
            else:
                break
        if not ended:
            return []
        if len(ended) > 1:
            ended.sort(key=_ORDER)
        return [self._finish(seq, now, "success", None) for seq in ended]

    def max_decode_steps(self, plan: StepPlan) -> int:
        """Return how many decode steps the plan's sequences can take with nothing else changing.

        The limit is the first completion (the last step of the run completes someone) and, under
        ``paged``, the free blocks the run would need. 0 for a plan with prefill; 1 after a preemption.
        """
        steps = (self._cohort_max_steps() if plan.cohort and not plan.prefill and not plan.preempted
                 else self._max_decode_steps(plan))
        plan.max_steps = steps
        return steps

    def _max_decode_steps(self, plan: StepPlan) -> int:
        if plan.prefill or not plan.decode:
            return 0 if plan.prefill else 1
        if plan.preempted:  # the next step's admissions may differ: take one step at a time
            return 1
        if plan.cohort:
            return self._cohort_max_steps()
        seqs = [self._seqs[r] for r in plan.decode if r in self._seqs]
        if not seqs:
            return 1
        k = min(s.target - s.generated for s in seqs)
        if self.config.policy != "paged":
            return max(k, 1)
        bs = self.config.block_size_tokens
        return self._longest_run(k, lambda steps: sum(-(-(s.computed + steps) // bs) - s.blocks - s.shared
                                                      for s in seqs))

    def _longest_run(self, k: int, extra: Callable[[int], int]) -> int:
        """Return the most steps, up to ``k``, whose ``extra`` blocks (beyond the first step's, allocated by
        step() already) are free or evictable: ``extra`` grows with the steps, so a binary search finds it."""
        free = self._free_blocks + self._num_evictable()
        if extra(k) <= free:
            return max(k, 1)
        lo, hi = 1, k  # extra(1) <= free
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if extra(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _cohort_max_steps(self) -> int:
        """``_max_decode_steps`` for the cohort's plan: the next completion, and (paged) the blocks free for the run."""
        heap = self._done_heap  # the fewest tokens any member has left before its target
        while heap and not (heap[0][3].lazy and heap[0][3].join_id == heap[0][2]):
            heapq.heappop(heap)
        k = (heap[0][0] - self._clock if heap else 0) or 1
        if not self._paged:
            return max(k, 1)
        bs = self._bs
        first = self._at_boundary()  # _cohort_blocks(1): allocated by step() already
        # each member crosses at most 1 + (k - 1) // bs block boundaries in k steps: when that many blocks are free,
        # so is what the run needs, without counting them (the usual case: KV is short only near preemption)
        if len(self._members) * (1 + (k - 1) // bs) - first <= self._free_blocks:
            return max(k, 1)  # as _longest_run returns it
        return self._longest_run(k, lambda steps: self._cohort_blocks(steps) - first)

    def extend(self, plan: StepPlan, steps: int) -> None:
        """Make a pure decode ``plan`` stand for ``steps`` identical steps, allocating their KV now.

        ``steps`` must be between 1 and ``max_decode_steps(plan)``.
        """
        limit = plan.max_steps if plan.max_steps is not None else self.max_decode_steps(plan)
        if plan.prefill or not 1 <= steps <= limit:
            raise ConfigError(f"extend: {steps} steps is not between 1 and {limit} for a pure decode plan")
        if self._paged and plan.cohort:  # the members' blocks, as _alloc one by one would take them
            blocks = self._cohort_blocks(steps) - self._cohort_blocks(plan.steps)
            if blocks > self._free_blocks:
                self._evict(blocks - self._free_blocks)
            self._free_blocks -= blocks
        elif self._paged:
            bs = self._bs
            for rid in plan.decode:
                seq = self._seqs.get(rid)
                if seq is not None and seq.in_flight:
                    self._alloc(seq, -(-(seq.computed + steps) // bs) - seq.blocks - seq.shared)
        plan.steps = steps
        plan.kv_tokens_used = self.kv_tokens_used

    def cached_keys(self, request_id: str) -> list[int]:
        """Return the keys of the prefix-cache blocks a running request holds, first block first."""
        seq = self._seqs.get(request_id)
        return [] if seq is None or not seq.keys else seq.keys[:seq.shared]

    def snapshot(self) -> dict[str, int]:
        """Return counts for a trace row: running, waiting, kv_tokens_used."""
        return {"running": len(self._running), "waiting": len(self._waiting), "kv_tokens_used": self.kv_tokens_used}
