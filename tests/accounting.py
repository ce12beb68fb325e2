"""The scheduler's KV accounting checked from outside, after any call (tests run it after every step)."""

from __future__ import annotations

from servebench.serving.scheduler import Scheduler


def check_accounting(sched: Scheduler) -> None:
    """Raise AssertionError if the scheduler's KV accounting is inconsistent.

    Each cached block is counted once: its references equal the running requests holding it,
    and private blocks (or reservations) plus cached blocks never exceed the budget.
    """
    cfg, bs = sched.config, sched.config.block_size_tokens
    for seq in sched._members:  # their fields as the clock says
        sched._write_back(seq)
    running = sched._running
    if sorted(sched._others + sched._members, key=lambda q: q.order) != running or \
            any(not q.decoding or q.in_flight for q in sched._members):
        raise AssertionError("the cohort and the others are not the running sequences, or a member does not decode")
    cached = 0 if sched.cache is None else sched.cache.num_cached
    if sched.cache is not None:
        held: dict[int, int] = {}
        for seq in running:
            for k in (seq.keys or [])[:seq.shared]:
                held[k] = held.get(k, 0) + 1
        sched.cache.check(held)
    if any(seq.shared for seq in sched._waiting):
        raise AssertionError("a waiting request holds cached blocks")
    if cfg.policy == "paged":
        private = sum(seq.blocks for seq in running)
        if any(seq.blocks for seq in sched._waiting):
            raise AssertionError("a waiting request holds KV blocks")
        if private + cached + sched._free_blocks != cfg.num_blocks:
            raise AssertionError(f"blocks: {private} private + {cached} cached + {sched._free_blocks} free "
                                 f"!= {cfg.num_blocks}")
    else:
        if sched._reserved_tokens != sum(seq.reserved for seq in running):
            raise AssertionError("reserved tokens differ from the running requests' reservations")
        if sched._reserved_tokens + cached * bs > cfg.kv_budget_tokens:
            raise AssertionError(f"KV over budget: {sched._reserved_tokens} reserved + {cached} cached blocks "
                                 f"> {cfg.kv_budget_tokens} tokens")
    if sched.kv_tokens_used > cfg.kv_budget_tokens:
        raise AssertionError(f"kv_tokens_used {sched.kv_tokens_used} > budget {cfg.kv_budget_tokens}")
    if sched._held_tokens != sum(seq.computed - seq.shared * bs for seq in running):
        raise AssertionError("held tokens differ from the running requests' computed tokens")
    if sched._tenanted:
        for tenant in set(sched._tenant_running) | {seq.req.tenant for seq in running}:
            n = sum(1 for seq in running if seq.req.tenant == tenant)
            if sched._tenant_running.get(tenant, 0) != n:
                raise AssertionError(f"tenant {tenant!r}: {sched._tenant_running.get(tenant, 0)} counted running "
                                     f"!= {n}")
            limit = sched._limits.get(tenant) if tenant is not None else None
            if limit is not None and limit.max_running is not None and n > limit.max_running:
                raise AssertionError(f"tenant {tenant!r}: {n} running > max_running {limit.max_running}")
