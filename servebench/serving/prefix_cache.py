"""Prefix caching: full prompt blocks shared between requests by content, evicted least recently used.

A prompt is cut into blocks of ``block_size`` tokens. Block j's key is a hash chained over its
tokens and block j-1's key, so two prompts with an equal key at block j are equal up to the end
of block j. A request reuses the longest run of cached blocks from its start; only full prompt
blocks are cached (a partly filled last block and generated tokens never are), and at least one
prompt token is always computed, since the prefill's last position yields the first token.

:class:`PrefixCache` holds the keyed blocks with a reference count each: a running request that
reuses or computed a block holds one reference. A block no request holds stays cached, its
space reclaimable, until the space is needed: then the least recently released goes first.
(Blocks of one request are released last block first, so a chain loses its tail before its head.)
The cache knows nothing of free space or clocks; the scheduler accounts the space, once per
block however many requests share it, and the engine maps keys to its physical KV blocks.

Keys come from a prompt's content, in one of two forms that give the same sharing:

* :class:`TokenPrompt`: token ids (the engine and the HTTP server);
* :class:`SegmentPrompt`: a workload's prompt as segments (a shared document, a request's own
  question, a previous answer), each a deterministic run of token ids (:func:`segment_tokens`),
  hashed by segment and offset instead of token by token, so the simulator never materializes
  millions of ids. ``SegmentPrompt.token_ids`` gives the ids the engine is sent.

Python's ``hash`` of a tuple of ints is the same in every process (only str and bytes hashes are
salted), so keys are reproducible; two different prompts share a key with probability about 2**-64.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

ROOT_KEY = 0x5EB_CACE  # the parent key of a prompt's first block


class PromptContent(Protocol):
    """A prompt's content as far as the cache needs it."""

    @property
    def num_tokens(self) -> int: ...

    def block_keys(self, block_size: int) -> list[int]:
        """Return the chained key of each full block of the prompt, first block first."""
        ...


@dataclass(frozen=True)
class TokenPrompt:
    """A prompt given as token ids."""

    token_ids: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def block_keys(self, block_size: int) -> list[int]:
        """Return chained block keys over the token ids.

        >>> a = TokenPrompt(tuple(range(40))).block_keys(16)
        >>> b = TokenPrompt(tuple(range(32)) + (7,) * 8).block_keys(16)
        >>> len(a), a == b, TokenPrompt((1, 2, 3)).block_keys(16)
        (2, True, [])
        """
        ids = self.token_ids
        keys: list[int] = []
        parent = ROOT_KEY
        for start in range(0, len(ids) - block_size + 1, block_size):
            parent = hash((parent, ids[start:start + block_size]))
            keys.append(parent)
        return keys


@dataclass(frozen=True)
class SegmentPrompt:
    """A prompt as segments ``(segment_id, tokens)``: each a deterministic run of ids (see :func:`segment_tokens`).

    Equal segment ids mean equal token runs, so a shared document is one segment id used by many
    prompts, and a request's own text a segment id no other prompt uses.
    """

    segments: tuple[tuple[int, int], ...]

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.segments)

    def block_keys(self, block_size: int) -> list[int]:
        """Return chained block keys, each over the (segment, offset, length) pieces the block spans.

        A block inside one segment is keyed by the key before the segment and its offset in it,
        which names the same content as chaining block by block (the segment's ids are fixed).

        >>> doc = (11, 40)
        >>> a = SegmentPrompt((doc, (1, 30))).block_keys(16)
        >>> b = SegmentPrompt((doc, (2, 30))).block_keys(16)
        >>> len(a), a[:2] == b[:2], a[2] == b[2]
        (4, True, False)
        """
        keys: list[int] = []
        parent = ROOT_KEY
        pieces: list[tuple[int, int, int]] = []  # the block being filled
        fill = 0
        for seg, length in self.segments:
            offset = 0
            if fill:  # finish the block a previous segment started
                take = min(block_size - fill, length)
                pieces.append((seg, 0, take))
                fill += take
                offset = take
                if fill == block_size:
                    parent = hash((parent, tuple(pieces)))
                    keys.append(parent)
                    pieces, fill = [], 0
            whole = (length - offset) // block_size
            if whole:  # whole blocks inside this segment
                base = parent
                keys.extend([hash((base, seg, o)) for o in range(offset, offset + whole * block_size, block_size)])
                parent = keys[-1]
                offset += whole * block_size
            if offset < length:
                pieces = [(seg, offset, length - offset)]
                fill = length - offset
        return keys

    def token_ids(self, vocab_size: int) -> list[int]:
        """Return the prompt's token ids in ``[0, vocab_size)``."""
        if not self.segments:
            return []
        return np.concatenate([segment_tokens(seg, n, vocab_size) for seg, n in self.segments]).tolist()


_MASK = (1 << 64) - 1


def segment_id(*parts: int) -> int:
    """Return a 63-bit segment id for a tuple of integers (a kind tag, a seed, an index...)."""
    return hash(tuple(parts)) & 0x7FFF_FFFF_FFFF_FFFF


def segment_tokens(seg: int, length: int, vocab_size: int) -> np.ndarray:
    """Return the ``length`` token ids of segment ``seg``: splitmix64 of (segment, position), mod the vocabulary.

    The same on every machine, and position p's id does not depend on ``length``.

    >>> segment_tokens(5, 4, 1000).tolist() == segment_tokens(5, 6, 1000)[:4].tolist()
    True
    """
    with np.errstate(over="ignore"):
        x = (np.arange(length, dtype=np.uint64) + np.uint64((seg * 0x9E3779B97F4A7C15) & _MASK))
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(vocab_size)).astype(np.int64)


class PrefixCache:
    """Cached prompt blocks by key, with reference counts and a least-recently-released order.

    ``insert`` adds a block its computing request holds (1 reference); ``acquire`` adds a reference
    to cached blocks a new request reuses; ``release`` drops references, and a block at 0 becomes
    evictable (most recent last); ``evict(n)`` drops the n least recent evictable blocks and
    returns them with their payloads (the engine's physical block ids; None in the simulator).

    The order is a queue of (key, release stamp) with lazy deletion: a block reused and released
    again gets a new entry and its old one is skipped, which keeps every operation O(1) per block.
    A block at 0 references stores minus its stamp in place of its count.
    """

    def __init__(self) -> None:
        self._refs: dict[int, int] = {}  # key -> references (> 0), or -stamp when evictable
        self._payload: dict[int, Any] = {}
        self._queue: deque[tuple[int, int]] = deque()  # (key, stamp) in release order, stale entries included
        self._stamp = 0
        self._evictable = 0

    @property
    def num_cached(self) -> int:
        """Return how many blocks are cached (held or evictable)."""
        return len(self._refs)

    @property
    def num_evictable(self) -> int:
        """Return how many cached blocks no request holds."""
        return self._evictable

    def __contains__(self, key: int) -> bool:
        return key in self._refs

    def refs(self, key: int) -> int:
        """Return the references to ``key`` (0 when evictable or absent)."""
        return max(self._refs.get(key, 0), 0)

    def payload(self, key: int) -> Any:
        """Return what was stored with ``key`` (None if absent)."""
        return self._payload.get(key)

    def set_payload(self, key: int, payload: Any) -> None:
        """Attach a payload (a physical block id) to a cached block."""
        if key in self._refs:
            self._payload[key] = payload

    def match(self, keys: Sequence[int], limit: int | None = None) -> int:
        """Return how many of ``keys`` from the start are cached (at most ``limit``)."""
        refs = self._refs
        n = len(keys) if limit is None else min(limit, len(keys))
        for i in range(n):
            if keys[i] not in refs:
                return i
        return n

    def unheld(self, keys: Iterable[int]) -> int:
        """Return how many of these cached keys no request holds (reusing them takes them off the evictable list)."""
        refs = self._refs
        return sum(1 for k in keys if refs[k] <= 0)

    def acquire(self, keys: Iterable[int]) -> None:
        """Add one reference to each cached key."""
        refs = self._refs
        for k in keys:
            r = refs[k]
            if r <= 0:
                refs[k] = 1
                self._evictable -= 1
            else:
                refs[k] = r + 1

    def insert(self, key: int, payload: Any = None) -> bool:
        """Cache a block its computing request holds; False (nothing changed) if ``key`` is cached already."""
        if key in self._refs:
            return False
        self._refs[key] = 1
        if payload is not None:
            self._payload[key] = payload
        return True

    def insert_run(self, keys: Sequence[int], start: int, stop: int) -> int:
        """Insert ``keys[start:stop]`` in order, stopping at the first cached already; return how many were inserted."""
        refs = self._refs
        for j in range(start, stop):
            k = keys[j]
            if k in refs:
                return j - start
            refs[k] = 1
        return stop - start

    def release(self, keys: Sequence[int]) -> None:
        """Drop one reference to each key, last key first, so a chain's tail is evicted before its head."""
        refs, append = self._refs, self._queue.append
        stamp = self._stamp
        freed = 0
        for k in keys[::-1]:
            r = refs[k] - 1
            if r:
                refs[k] = r
            else:
                stamp += 1
                refs[k] = -stamp
                append((k, stamp))
                freed += 1
        self._stamp = stamp
        self._evictable += freed
        if len(self._queue) > 2 * len(refs) + 4096:
            self._compact()

    def _compact(self) -> None:
        """Drop stale queue entries (blocks reused or evicted since)."""
        refs = self._refs
        self._queue = deque(e for e in self._queue if refs.get(e[0]) == -e[1])

    def evict(self, n: int, *, report: bool = True) -> list[tuple[int, Any]]:
        """Drop the ``n`` least recently released unheld blocks; return (key, payload) for each (none unless ``report``)."""
        if n > self._evictable:
            raise ValueError(f"cannot evict {n} blocks: only {self._evictable} are unheld")
        refs, pop, payload = self._refs, self._queue.popleft, self._payload
        out: list[tuple[int, Any]] = []
        left = n
        while left:
            k, stamp = pop()
            if refs.get(k) != -stamp:
                continue  # reused (or evicted) since this release
            del refs[k]
            left -= 1
            if report or payload:
                out.append((k, payload.pop(k, None)))
        self._evictable -= n
        return out if report else []

    def check(self, held: dict[int, int]) -> None:
        """Raise AssertionError unless the reference counts equal ``held`` (key -> holders) and the evictable count is right."""
        live = {k: r for k, r in self._refs.items() if r > 0}
        if live != {k: r for k, r in held.items() if r}:
            raise AssertionError("prefix cache reference counts differ from the requests holding blocks")
        unheld = [k for k, r in self._refs.items() if r <= 0]
        if len(unheld) != self._evictable:
            raise AssertionError("prefix cache evictable count differs from the blocks at 0 references")
        queued = {k for k, stamp in self._queue if self._refs.get(k) == -stamp}
        if queued != set(unheld):
            raise AssertionError("prefix cache release order misses an evictable block")
