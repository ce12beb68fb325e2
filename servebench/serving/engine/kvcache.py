"""A paged KV cache: fixed-size blocks of token slots, a block table per sequence.

Keys and values of every layer live in two tensors of shape (layers, blocks x block_size,
KV heads, head dim). A sequence holds a list of blocks; its token at position p lives in slot
``table[p // block_size] * block_size + p % block_size``. Blocks are taken as tokens are
written and all returned when the sequence is freed (finished, timed out, cancelled or
preempted), so sequences of any lengths share one pool.

With prefix caching, blocks are shared: each block counts its holders (the sequences whose
tables list it, plus one ``pin`` while the prefix cache keeps it), a sequence can start from
cached blocks (``adopt``) instead of computing them, and a block returns to the pool only when
its last holder lets go.
"""

from __future__ import annotations

import torch
from torch import Tensor

from servebench.errors import ConfigError, ServebenchError
from servebench.serving.engine.model import ModelConfig, available_bytes


class KVCacheFullError(ServebenchError):
    """No free block is left for a token the scheduler asked to compute."""


class PagedKVCache:
    """Block pool and per-sequence block tables for one model."""

    def __init__(self, config: ModelConfig, capacity_tokens: int, *, block_size: int = 16,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        if capacity_tokens < 1 or block_size < 1:
            raise ServebenchError(f"KV cache needs capacity_tokens >= 1 and block_size >= 1, "
                                  f"got {capacity_tokens} and {block_size}")
        self.block_size = block_size
        self.num_blocks = -(-capacity_tokens // block_size)
        slots = self.num_blocks * block_size
        shape = (config.layers, slots, config.kv_heads, config.head_dim)
        need = config.kv_bytes_per_token(torch.empty((), dtype=dtype).element_size()) * slots
        free = available_bytes(torch.device(device))
        if free is not None and need > 0.9 * free:
            raise ConfigError(f"a KV cache of {slots:,} tokens for model '{config.name}' needs {need / 2**30:.2f} GiB "
                              f"but only {free / 2**30:.2f} GiB is free on {device}; lower the KV budget")
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.bytes_per_token = config.kv_bytes_per_token(self.k.element_size())
        self._free: list[int] = list(range(self.num_blocks - 1, -1, -1))
        self._tables: dict[str, list[int]] = {}
        self._lengths: dict[str, int] = {}
        self._slot_maps: dict[str, Tensor] = {}  # position -> slot, grown by doubling
        self._adopted: dict[str, int] = {}  # tokens a sequence started from cached blocks
        self._refs: dict[int, int] = {}  # holders of each block in use (tables and pins)
        self._used = 0

    # ------------------------------------------------------------------ accounting

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def used_tokens(self) -> int:
        """Return tokens the sequences computed and stored (tokens adopted from cached blocks not counted again)."""
        return self._used

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def length(self, seq_id: str) -> int:
        """Return how many tokens of ``seq_id`` are stored (0 when it holds nothing)."""
        return self._lengths.get(seq_id, 0)

    def __contains__(self, seq_id: str) -> bool:
        return seq_id in self._tables

    def sequences(self) -> list[str]:
        return list(self._tables)

    # ------------------------------------------------------------------ allocation

    def blocks_needed(self, seq_id: str, new_length: int) -> int:
        """Return how many more blocks ``seq_id`` needs to hold ``new_length`` tokens."""
        have = len(self._tables.get(seq_id, ()))
        return max(0, -(-new_length // self.block_size) - have)

    def extend(self, seq_id: str, new_length: int) -> Tensor:
        """Grow ``seq_id`` to ``new_length`` tokens; return the slots of the new positions.

        Raises KVCacheFullError (changing nothing) if the pool has too few free blocks.
        """
        old = self._lengths.get(seq_id, 0)
        if new_length < old:
            raise ServebenchError(f"sequence '{seq_id}': cannot shrink from {old} to {new_length} tokens")
        need = self.blocks_needed(seq_id, new_length)
        if need > len(self._free):
            raise KVCacheFullError(f"sequence '{seq_id}' needs {need} more KV blocks of {self.block_size} "
                                   f"tokens but only {len(self._free)} are free")
        table = self._tables.setdefault(seq_id, [])
        for _ in range(need):
            block = self._free.pop()
            self._refs[block] = 1
            table.append(block)
        self._lengths[seq_id] = new_length
        self._used += new_length - old
        slot_map = self._slot_maps.get(seq_id)
        if slot_map is None or slot_map.numel() < new_length:
            grown = torch.empty(max(new_length, 2 * (0 if slot_map is None else slot_map.numel()), 64),
                                dtype=torch.long)
            if slot_map is not None:
                grown[:old] = slot_map[:old]
            slot_map = self._slot_maps[seq_id] = grown
        bs = self.block_size
        if new_length - old == 1:
            slot_map[old] = table[old // bs] * bs + old % bs
        else:
            slot_map[old:new_length] = torch.tensor([table[p // bs] * bs + p % bs for p in range(old, new_length)],
                                                    dtype=torch.long)
        return slot_map[old:new_length]

    def slots(self, seq_id: str, start: int, stop: int) -> Tensor:
        """Return the cache slots of positions ``start`` to ``stop - 1`` of ``seq_id`` (a view)."""
        if stop > self._lengths.get(seq_id, 0) or start < 0:
            raise ServebenchError(f"sequence '{seq_id}': positions {start}..{stop - 1} are not all stored "
                                  f"(it holds {self._lengths.get(seq_id, 0)})")
        return self._slot_maps[seq_id][start:stop]

    def free(self, seq_id: str) -> int:
        """Let go of every block of ``seq_id`` (shared ones stay with their other holders); return the tokens it held."""
        table = self._tables.pop(seq_id, None)
        held = self._lengths.pop(seq_id, 0)
        self._slot_maps.pop(seq_id, None)
        self._used -= held - self._adopted.pop(seq_id, 0)
        if table:
            for block in reversed(table):
                self._drop(block)
        return held

    def _drop(self, block: int) -> None:
        r = self._refs[block] - 1
        if r:
            self._refs[block] = r
        else:
            del self._refs[block]
            self._free.append(block)

    # ------------------------------------------------------------------ sharing (prefix caching)

    def block_of(self, seq_id: str, index: int) -> int:
        """Return the physical block at ``index`` of ``seq_id``'s table."""
        return self._tables[seq_id][index]

    def pin(self, block: int) -> None:
        """Keep a block in use for the prefix cache, beyond the sequences that hold it."""
        self._refs[block] += 1

    def unpin(self, block: int) -> None:
        """Let the prefix cache go of a block; it returns to the pool if no sequence holds it."""
        self._drop(block)

    def adopt(self, seq_id: str, blocks: list[int], length: int) -> None:
        """Start ``seq_id`` from cached blocks holding its first ``length`` tokens (a whole number of blocks)."""
        if seq_id in self._tables:
            raise ServebenchError(f"sequence '{seq_id}' already holds KV blocks; it cannot adopt cached ones")
        if length != len(blocks) * self.block_size:
            raise ServebenchError(f"sequence '{seq_id}': {len(blocks)} cached blocks do not hold {length} tokens")
        for block in blocks:
            self._refs[block] += 1
        self._tables[seq_id] = list(blocks)
        self._lengths[seq_id] = length
        self._adopted[seq_id] = length
        bs = self.block_size
        slot_map = torch.empty(max(2 * length, 64), dtype=torch.long)
        if length:
            slot_map[:length] = (torch.tensor(blocks, dtype=torch.long).repeat_interleave(bs) * bs
                                 + torch.arange(bs).repeat(len(blocks)))
        self._slot_maps[seq_id] = slot_map
