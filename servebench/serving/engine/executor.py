"""Execute one engine step: prefill chunks for some sequences and one decode token for others.

The executor owns the model, the paged KV cache and each sequence's tokens; it makes no
scheduling decision. A plan names, per sequence, how many of its not-yet-computed tokens to run
this step. A sequence whose known tokens are all computed after the step emits its next token
(picked by its :class:`~servebench.serving.engine.model.SamplingParams`: greedy by default), until it has
``max_new_tokens`` or stops early (the EOS token unless ``ignore_eos``, or its stop check). Preemption
drops a sequence's KV and keeps its tokens, so a later prefill recomputes prompt and output so far
(vLLM's recompute preemption).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from servebench.errors import ServebenchError
from servebench.serving.engine.kvcache import KVCacheFullError, PagedKVCache
from servebench.serving.engine.model import (
    AttentionGroup,
    Decoder,
    ForwardBatch,
    SamplingParams,
    sample_tokens,
    sampling_generator,
)


@dataclass
class SequenceState:
    """One sequence's tokens (prompt, then generated) and how many have KV in the cache."""

    seq_id: str
    tokens: list[int]
    prompt_tokens: int
    max_new_tokens: int
    computed: int = 0
    sampling: SamplingParams = field(default_factory=SamplingParams)
    generator: Optional[torch.Generator] = None
    stopped: bool = False  # ended early: EOS or the stop check

    @property
    def generated(self) -> int:
        return len(self.tokens) - self.prompt_tokens

    @property
    def done(self) -> bool:
        return self.stopped or self.generated >= self.max_new_tokens

    @property
    def pending(self) -> int:
        """Return known tokens whose KV is not yet computed."""
        return len(self.tokens) - self.computed


@dataclass(frozen=True)
class ComputePlan:
    """What to compute in one step: ``prefill`` as (sequence, tokens) chunks, ``decode`` sequences."""

    prefill: tuple[tuple[str, int], ...] = ()
    decode: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


@dataclass
class StepResult:
    """Tokens emitted by a step, and the step's size for the trace."""

    emitted: dict[str, int] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)  # sequences that stopped early on this step's token
    prefill_tokens: int = 0
    decode_seqs: int = 0
    kv_tokens: int = 0  # tokens stored in the cache after the step (read by attention)
    logits: dict[str, Tensor] | None = None  # next-token logits per emitting sequence, when asked for


class Executor:
    """Run plans against a model and a paged KV cache."""

    def __init__(self, model: Decoder, cache: PagedKVCache) -> None:
        self.model = model
        self.cache = cache
        self.sequences: dict[str, SequenceState] = {}

    def add(self, seq_id: str, prompt_ids: list[int], max_new_tokens: int,
            sampling: SamplingParams | None = None) -> SequenceState:
        """Register a sequence (no KV is taken until a step computes its tokens); greedy by default."""
        if seq_id in self.sequences:
            raise ServebenchError(f"sequence '{seq_id}' is already in the engine")
        if not prompt_ids or max_new_tokens < 1:
            raise ServebenchError(f"sequence '{seq_id}' needs at least one prompt token and max_new_tokens >= 1, "
                                  f"got {len(prompt_ids)} and {max_new_tokens}")
        vocab = self.model.config.vocab
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
            raise ServebenchError(f"sequence '{seq_id}': prompt token ids must be in [0, {vocab})")
        limit = self.model.config.max_positions
        if len(prompt_ids) + max_new_tokens > limit:
            raise ServebenchError(f"sequence '{seq_id}': {len(prompt_ids)} prompt + {max_new_tokens} output tokens "
                                  f"exceed the model's {limit} positions")
        sampling = sampling or SamplingParams()
        state = SequenceState(seq_id, list(prompt_ids), len(prompt_ids), max_new_tokens, sampling=sampling,
                              generator=sampling_generator(sampling))
        self.sequences[seq_id] = state
        return state

    def remove(self, seq_id: str) -> int:
        """Forget a sequence and free its KV; return the tokens freed."""
        self.sequences.pop(seq_id, None)
        return self.cache.free(seq_id)

    def adopt(self, seq_id: str, blocks: list[int], tokens: int) -> None:
        """Start a sequence's KV from cached blocks holding its first ``tokens`` prompt tokens (prefix caching)."""
        state = self._state(seq_id)
        if tokens > state.prompt_tokens or tokens >= len(state.tokens) or state.computed:
            raise ServebenchError(f"sequence '{seq_id}' cannot adopt {tokens} cached tokens "
                                  f"({state.prompt_tokens} prompt tokens, {state.computed} computed)")
        self.cache.adopt(seq_id, blocks, tokens)
        state.computed = tokens

    def preempt(self, seq_id: str) -> int:
        """Free a sequence's KV but keep its tokens, to be recomputed by a later prefill."""
        state = self.sequences[seq_id]
        state.computed = 0
        return self.cache.free(seq_id)

    def execute(self, plan: ComputePlan, *, keep_logits: bool = False) -> StepResult:
        """Compute the plan's tokens, write their KV, and return the tokens emitted.

        ``keep_logits`` also returns each emitting sequence's fp32 logits (for tests).
        """
        chunks: list[tuple[SequenceState, int]] = []
        for seq_id, n in plan.prefill:
            chunks.append((self._state(seq_id), n))
        for seq_id in plan.decode:
            state = self._state(seq_id)
            if state.pending != 1:
                raise ServebenchError(f"sequence '{seq_id}' scheduled to decode but has {state.pending} "
                                      "uncomputed tokens (expected 1)")
            chunks.append((state, 1))
        result = StepResult(prefill_tokens=sum(n for _, n in plan.prefill), decode_seqs=len(plan.decode))
        if not chunks:
            result.kv_tokens = self.cache.used_tokens
            return result
        batch, emit_ids = self._build(chunks, n_prefill=len(plan.prefill))
        logits = self.model.forward_batch(batch, self.cache.k, self.cache.v)
        if emit_ids:
            states = [self.sequences[seq_id] for seq_id in emit_ids]
            next_ids = sample_tokens(logits, [s.sampling for s in states], [s.generator for s in states])
            eos = self.model.config.eos_token_id
            for i, (state, token) in enumerate(zip(states, next_ids)):
                state.tokens.append(token)
                result.emitted[state.seq_id] = token
                sp = state.sampling
                if sp.on_logits is not None:
                    sp.on_logits(token, logits[i])
                if (token == eos and not sp.ignore_eos) or (sp.stop is not None
                                                             and sp.stop(state.tokens, state.prompt_tokens)):
                    state.stopped = True
                    result.finished.append(state.seq_id)
            if keep_logits:
                result.logits = {seq_id: logits[i].cpu() for i, seq_id in enumerate(emit_ids)}
        result.kv_tokens = self.cache.used_tokens
        return result

    def _state(self, seq_id: str) -> SequenceState:
        try:
            return self.sequences[seq_id]
        except KeyError:
            raise ServebenchError(f"sequence '{seq_id}' is not in the engine") from None

    def _build(self, chunks: list[tuple[SequenceState, int]], n_prefill: int) -> tuple[ForwardBatch, list[str]]:
        """Lay the chunks out as one flat batch; allocate KV for the new tokens."""
        device = self.model.device
        token_ids: list[int] = []
        positions: list[Tensor] = []
        write: list[Tensor] = []
        logit_rows: list[int] = []
        emit_ids: list[str] = []
        spans: list[tuple[int, int, int, Tensor]] = []  # first row, new tokens, start position, key slots
        need = sum(self.cache.blocks_needed(s.seq_id, s.computed + n) for s, n in chunks)
        if need > self.cache.free_blocks:
            raise KVCacheFullError(f"step needs {need} more KV blocks but only {self.cache.free_blocks} are free; "
                                   "the scheduler's KV budget must not exceed the cache's capacity")
        seen: set[str] = set()
        for state, n in chunks:
            if state.seq_id in seen:
                raise ServebenchError(f"sequence '{state.seq_id}' appears twice in one step plan")
            seen.add(state.seq_id)
            if n < 1 or n > state.pending:
                raise ServebenchError(f"sequence '{state.seq_id}': cannot compute {n} tokens, "
                                      f"{state.pending} are pending")
            if state.done and n == state.pending:
                raise ServebenchError(f"sequence '{state.seq_id}' already has its {state.max_new_tokens} tokens")
            start, stop = state.computed, state.computed + n
            if stop > self.model.config.max_positions:
                raise ServebenchError(f"sequence '{state.seq_id}': position {stop - 1} is beyond the model's "
                                      f"max_positions {self.model.config.max_positions}")
            row0 = len(token_ids)
            token_ids.extend(state.tokens[start:stop])
            positions.append(torch.arange(start, stop))
            write.append(self.cache.extend(state.seq_id, stop))
            state.computed = stop
            spans.append((row0, n, start, self.cache.slots(state.seq_id, 0, stop)))
            if stop == len(state.tokens):
                logit_rows.append(row0 + n - 1)
                emit_ids.append(state.seq_id)
        groups = [self._prefill_group(*span) for span in spans[:n_prefill]]
        if len(spans) > n_prefill:
            groups.append(self._decode_group(spans[n_prefill:]))
        batch = ForwardBatch(
            token_ids=torch.tensor(token_ids, dtype=torch.long).to(device),
            positions=torch.cat(positions).to(device),
            write_slots=torch.cat(write).to(device),
            groups=[AttentionGroup(g.rows.to(device), g.keys.to(device), g.mask.to(device)) for g in groups],
            logit_rows=torch.tensor(logit_rows, dtype=torch.long).to(device),
        )
        return batch, emit_ids

    @staticmethod
    def _prefill_group(row0: int, n: int, start: int, keys: Tensor) -> AttentionGroup:
        """One chunk: query j (position start + j) sees keys at positions up to start + j."""
        length = keys.shape[0]
        q_pos = torch.arange(start, start + n).unsqueeze(1)
        mask = torch.arange(length).unsqueeze(0) <= q_pos
        return AttentionGroup(rows=torch.arange(row0, row0 + n).unsqueeze(0), keys=keys.unsqueeze(0),
                              mask=mask.unsqueeze(0))

    @staticmethod
    def _decode_group(spans: list[tuple[int, int, int, Tensor]]) -> AttentionGroup:
        """All single-token decodes in one padded batch; each sees its whole stored sequence."""
        lengths = torch.tensor([s[3].shape[0] for s in spans])
        keys = torch.nn.utils.rnn.pad_sequence([s[3] for s in spans], batch_first=True, padding_value=0)
        mask = torch.arange(keys.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        rows = torch.tensor([s[0] for s in spans]).unsqueeze(1)
        return AttentionGroup(rows=rows, keys=keys, mask=mask.unsqueeze(1))
