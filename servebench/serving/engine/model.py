"""A decoder-only transformer built in code with seeded random weights (no downloads).

Llama-style blocks: RMSNorm, grouped-query attention with rotary position embeddings, and a
SwiGLU MLP. Presets range from ``tiny`` (CPU tests) to shapes of real models for GPUs; the
weights are random, so the outputs are meaningless but the compute and memory traffic per token
are those of the real shape.

The forward pass takes a flat batch of new tokens from many sequences (prefill chunks and
single decode tokens mixed), each at its own positions, and reads and writes keys and values
through a :class:`~servebench.serving.engine.kvcache.PagedKVCache`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor, nn

from servebench.errors import ConfigError


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder-only transformer."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_positions: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "max_positions"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"model '{self.name}': {field} must be a positive integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise ConfigError(f"model '{self.name}': heads ({self.heads}) must be a multiple of "
                              f"kv_heads ({self.kv_heads})")
        if self.head_dim % 2:
            raise ConfigError(f"model '{self.name}': head_dim must be even for rotary embeddings, "
                              f"got {self.head_dim}")

    @property
    def param_count(self) -> int:
        """Return the number of parameters (embeddings and LM head counted once each unless tied)."""
        qkv = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        out = self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.ffn
        per_layer = qkv + out + mlp + 2 * self.hidden
        embed = self.vocab * self.hidden
        head = 0 if self.tie_embeddings else self.vocab * self.hidden
        return self.layers * per_layer + embed + head + self.hidden

    @property
    def eos_token_id(self) -> int:
        """Return the end-of-sequence token: the last id of the vocabulary."""
        return self.vocab - 1

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        """Return KV bytes per cached token: 2 x layers x KV heads x head dim x bytes per element."""
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element


PRESETS: dict[str, ModelConfig] = {
    # CPU tests: a few hundred thousand parameters, steps of about a millisecond.
    "tiny": ModelConfig("tiny", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=176,
                        vocab=512, max_positions=2048),
    # CPU benchmarks: big enough that a step is real matrix work, small enough for 2 cores.
    "small": ModelConfig("small", layers=4, hidden=256, heads=8, kv_heads=2, head_dim=32, ffn=688,
                         vocab=4096, max_positions=4096),
    # Shapes of real models (Hugging Face config.json of each), for GPUs.
    "llama-3.2-1b": ModelConfig("llama-3.2-1b", layers=16, hidden=2048, heads=32, kv_heads=8, head_dim=64,
                                ffn=8192, vocab=128256, max_positions=131072, rope_theta=500000.0,
                                tie_embeddings=True),
    "qwen2.5-1.5b": ModelConfig("qwen2.5-1.5b", layers=28, hidden=1536, heads=12, kv_heads=2, head_dim=128,
                                ffn=8960, vocab=151936, max_positions=32768, rope_theta=1000000.0,
                                norm_eps=1e-6, tie_embeddings=True),
    "llama-3.1-8b": ModelConfig("llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                                ffn=14336, vocab=128256, max_positions=131072, rope_theta=500000.0),
    "mistral-7b": ModelConfig("mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                              ffn=14336, vocab=32000, max_positions=32768, rope_theta=1000000.0),
}


def preset(name: str) -> ModelConfig:
    """Return the preset shape called ``name``."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model preset '{name}'; choose one of {', '.join(PRESETS)}") from None


def pick_device(requested: str = "auto") -> tuple[torch.device, torch.dtype]:
    """Return CUDA with bf16 when available (or requested), else the CPU with fp32."""
    if requested not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device must be auto, cpu or cuda, got '{requested}'")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' requested but torch sees no CUDA device")
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


def configure_cpu(threads: int) -> None:
    """Set torch's CPU threads."""
    if threads < 1:
        raise ConfigError(f"threads must be at least 1, got {threads}")
    torch.set_num_threads(threads)


def flushing_denormals() -> bool:
    """Return True when this thread's float arithmetic flushes denormals to zero."""
    return bool((torch.tensor([1e-40], dtype=torch.float32) * 1.0).item() == 0.0)


@contextlib.contextmanager
def denormals_flushed() -> Iterator[None]:
    """Flush denormal floats to zero in this thread while the engine computes, then restore the previous mode.

    Random weights produce denormals, and x86 arithmetic on them is slow (a matmul over denormal
    weights took about 200x the CPU time without the flush: ``benchmarks/fast_paths.py`` case
    ``flush_denormals``). The flag is per-thread processor state, so it is scoped here rather than
    left set for the whole process (and a caller that had already turned it on keeps it on).
    """
    was_on = flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if not was_on:
            torch.set_flush_denormal(False)


def available_bytes(device: torch.device) -> int | None:
    """Return free memory on the device (CUDA) or in RAM (CPU, Linux), or None when unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def device_name(device: torch.device) -> str:
    """Return a human name for the device (the GPU's name, or the CPU's model when known)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return "cpu: " + (platform.processor() or platform.machine())


# --------------------------------------------------------------------------- sampling

StopCheck = Callable[[list[int], int], bool]
"""Called after each emitted token with the sequence's tokens and where its output starts; True ends it."""

LogitsHook = Callable[[int, Tensor], None]
"""Called after each emitted token with its id and the raw fp32 logits (one row) it was chosen from."""


@dataclass(frozen=True)
class SamplingParams:
    """How one sequence picks its next tokens.

    Temperature 0 is greedy (argmax). Otherwise the logits are divided by the temperature, the
    smallest set of tokens whose probability reaches ``top_p`` is kept, and one is drawn with the
    sequence's own generator seeded with ``seed``: the same seed and logits give the same tokens,
    whatever else shares the batch. ``ignore_eos`` runs to the length cap through the EOS token;
    ``logit_bias`` adds to chosen logits before anything else. ``on_logits`` sees each chosen token
    with the model's own logits, before bias or temperature (the HTTP API's logprobs). The defaults
    (greedy, fixed length) are what ``servebench run`` measures.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = True
    logit_bias: tuple[tuple[int, float], ...] = ()
    stop: StopCheck | None = None
    on_logits: LogitsHook | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def sample_tokens(logits: Tensor, params: Sequence[SamplingParams],
                  generators: Sequence[torch.Generator | None]) -> list[int]:
    """Pick each row's next token: argmax where greedy, else a draw from that row's generator.

    ``logits`` is (rows, vocab) fp32; row i follows ``params[i]`` and draws one uniform number from
    ``generators[i]`` (a CPU generator, so a seed gives the same draws on every device). The draw
    is inverse-CDF over the probabilities sorted from the largest, cut at top-p, for all sampled
    rows at once.
    """
    if all(p.greedy and not p.logit_bias for p in params):
        return logits.argmax(dim=-1).tolist()
    logits = logits.clone()
    for i, p in enumerate(params):
        if p.logit_bias:
            ids = torch.tensor([t for t, _ in p.logit_bias], device=logits.device)
            logits[i].index_add_(0, ids, torch.tensor([b for _, b in p.logit_bias], device=logits.device))
    chosen = logits.argmax(dim=-1)
    rows = [i for i, p in enumerate(params) if not p.greedy]
    if rows:
        for i in rows:
            if generators[i] is None:
                raise ConfigError(f"row {i} samples at temperature {params[i].temperature} but has no generator")
        device = logits.device
        idx = torch.tensor(rows, device=device)
        temps = torch.tensor([params[i].temperature for i in rows], device=device).unsqueeze(1)
        top_p = torch.tensor([params[i].top_p for i in rows], device=device).unsqueeze(1)
        draws = torch.cat([torch.rand(1, generator=generators[i]) for i in rows]).to(device)  # type: ignore[arg-type]
        probs = torch.softmax(logits.index_select(0, idx) / temps, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs * (before < top_p)  # the largest always stays
        cdf = sorted_probs.cumsum(dim=-1)
        pos = torch.searchsorted(cdf, (draws * cdf[:, -1]).unsqueeze(1), right=True)
        pos = pos.clamp(max=cdf.shape[1] - 1)
        chosen[idx] = order.gather(1, pos).squeeze(1)
    return chosen.tolist()


def sampling_generator(params: SamplingParams) -> torch.Generator | None:
    """Return the CPU generator a sampled sequence draws from (None when greedy)."""
    if params.greedy:
        return None
    if params.seed is None:
        raise ConfigError("a sampled sequence needs a seed (the engine draws one when the request has none)")
    return torch.Generator().manual_seed(params.seed)


# --------------------------------------------------------------------------- building blocks


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Normalise the last dimension by its root mean square (computed in fp32), then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) * weight


def rope_tables(head_dim: int, positions: int, theta: float, device: torch.device) -> tuple[Tensor, Tensor]:
    """Return cos and sin tables of shape (positions, head_dim / 2), in fp32."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(positions, device=device, dtype=torch.float64), inv)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (first half, second half) of the last dim; cos/sin broadcast over heads."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.to(x.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Grouped-query attention written out (the no-cache reference path), without copying KV heads.

    q: (B, Q, H, D); k, v: (B, L, KVH, D); mask: (B, Q, L) true where a query may see a key.
    Returns (B, Q, H, D). Scores and softmax are computed in fp32.
    """
    b, nq, h, d = q.shape
    kvh = k.shape[2]
    g = h // kvh
    qg = q.reshape(b, nq, kvh, g, d).permute(0, 2, 3, 1, 4).float()  # B, KVH, G, Q, D
    kt = k.permute(0, 2, 3, 1).unsqueeze(2).float()  # B, KVH, 1, D, L
    scores = torch.matmul(qg, kt) * (1.0 / math.sqrt(d))  # B, KVH, G, Q, L
    scores = scores.masked_fill(~mask[:, None, None, :, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v.permute(0, 2, 1, 3).unsqueeze(2).float())  # B, KVH, G, Q, D
    return out.permute(0, 3, 1, 2, 4).reshape(b, nq, h, d).to(q.dtype)


@dataclass
class AttentionGroup:
    """Sequences whose attention runs as one padded batch.

    ``rows`` index the flat token batch: (B, Q), every row real (a group is either one prefill
    chunk or single-token decodes); ``keys`` are cache slots (B, L) (padding points at slot 0 and
    is masked); ``mask`` is (B, Q, L), true where a query may see a key.
    """

    rows: Tensor
    keys: Tensor
    mask: Tensor

    @property
    def flat_rows(self) -> Tensor:
        return self.rows.flatten()


def paged_attention(q: Tensor, k_layer: Tensor, v_layer: Tensor, group: AttentionGroup) -> Tensor:
    """Attend a group's queries over keys gathered from the cache; return (B x Q, H, D).

    ``k_layer``/``v_layer`` are one layer's cache, (slots, KV heads, D), gathered by plain indexing
    (``index_select`` on a 2-D view measured 1.3x to 1.6x faster on a CPU: under 2x, so not kept;
    ``benchmarks/fast_paths.py``, case ``index_select_2d``).
    """
    b, nq = group.rows.shape
    k = k_layer[group.keys].transpose(1, 2)  # (B, L, KV heads, D) -> (B, KV heads, L, D)
    v = v_layer[group.keys].transpose(1, 2)
    qb = q.index_select(0, group.flat_rows).view(b, nq, q.shape[1], q.shape[2]).transpose(1, 2)
    out = nn.functional.scaled_dot_product_attention(qb, k, v, attn_mask=group.mask.unsqueeze(1), enable_gqa=True)
    return out.transpose(1, 2).reshape(b * nq, q.shape[1], q.shape[2])


@dataclass
class ForwardBatch:
    """A flat batch of new tokens from several sequences, with where their keys live."""

    token_ids: Tensor  # (T,)
    positions: Tensor  # (T,)
    write_slots: Tensor  # (T,) cache slot of each new token's key and value
    groups: list[AttentionGroup]
    logit_rows: Tensor  # rows of the flat batch whose next-token logits are wanted


class Decoder(nn.Module):
    """A Llama-shaped decoder with seeded random weights."""

    def __init__(self, config: ModelConfig, *, seed: int = 0, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.config = config
        device = torch.device(device)
        need = config.param_count * torch.empty((), dtype=dtype).element_size()
        free = available_bytes(device)
        if free is not None and need > 0.9 * free:
            raise ConfigError(f"model '{config.name}' needs {need / 2**30:.1f} GiB of weights "
                              f"({str(dtype).removeprefix('torch.')}) but only {free / 2**30:.1f} GiB is free on "
                              f"{device}; pick a smaller preset")
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        c = config

        def weight(*shape: int, std: float) -> nn.Parameter:
            w = torch.empty(*shape, device=device, dtype=torch.float32)
            w.normal_(0.0, std, generator=gen)
            return nn.Parameter(w.to(dtype), requires_grad=False)

        def ones(n: int) -> nn.Parameter:
            return nn.Parameter(torch.ones(n, device=device, dtype=dtype), requires_grad=False)

        qkv_out = (c.heads + 2 * c.kv_heads) * c.head_dim
        resid_std = 1.0 / math.sqrt(2 * c.layers)
        self.embed = weight(c.vocab, c.hidden, std=1.0)
        self.attn_norm = nn.ParameterList([ones(c.hidden) for _ in range(c.layers)])
        self.wqkv = nn.ParameterList([weight(c.hidden, qkv_out, std=c.hidden ** -0.5) for _ in range(c.layers)])
        self.wo = nn.ParameterList([weight(c.heads * c.head_dim, c.hidden,
                                           std=resid_std * (c.heads * c.head_dim) ** -0.5) for _ in range(c.layers)])
        self.mlp_norm = nn.ParameterList([ones(c.hidden) for _ in range(c.layers)])
        self.w_gate_up = nn.ParameterList([weight(c.hidden, 2 * c.ffn, std=c.hidden ** -0.5)
                                           for _ in range(c.layers)])
        self.w_down = nn.ParameterList([weight(c.ffn, c.hidden, std=resid_std * c.ffn ** -0.5)
                                        for _ in range(c.layers)])
        self.final_norm = ones(c.hidden)
        self.lm_head = self.embed if c.tie_embeddings else weight(c.vocab, c.hidden, std=c.hidden ** -0.5)
        cos, sin = rope_tables(c.head_dim, c.max_positions, c.rope_theta, device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    def _qkv(self, layer: int, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        c = self.config
        h = rms_norm(x, self.attn_norm[layer], c.norm_eps)
        qkv = h @ self.wqkv[layer]
        q, k, v = qkv.split([c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim], dim=-1)
        cos = self.rope_cos[positions].unsqueeze(-2)
        sin = self.rope_sin[positions].unsqueeze(-2)
        q = apply_rope(q.unflatten(-1, (c.heads, c.head_dim)), cos, sin)
        k = apply_rope(k.unflatten(-1, (c.kv_heads, c.head_dim)), cos, sin)
        return q, k, v.unflatten(-1, (c.kv_heads, c.head_dim))

    def _mlp(self, layer: int, x: Tensor) -> Tensor:
        h = rms_norm(x, self.mlp_norm[layer], self.config.norm_eps)
        gate, up = (h @ self.w_gate_up[layer]).chunk(2, dim=-1)
        return (nn.functional.silu(gate) * up) @ self.w_down[layer]

    def _logits(self, x: Tensor) -> Tensor:
        return (rms_norm(x, self.final_norm, self.config.norm_eps) @ self.lm_head.T).float()

    @torch.inference_mode()
    def forward_batch(self, batch: ForwardBatch, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        """Run new tokens through every layer, writing their KV to the cache; return fp32 logits.

        ``k_cache``/``v_cache`` are (layers, slots, KV heads, head dim). Returns logits for
        ``batch.logit_rows`` only, shape (len(logit_rows), vocab). Positions must be below
        ``max_positions`` (the executor checks this on the CPU, so the GPU never waits for it).
        """
        c = self.config
        x = self.embed[batch.token_ids]
        for layer in range(c.layers):
            q, k, v = self._qkv(layer, x, batch.positions)
            k_cache[layer].index_copy_(0, batch.write_slots, k)
            v_cache[layer].index_copy_(0, batch.write_slots, v)
            attn = torch.empty_like(q)
            for group in batch.groups:
                attn[group.flat_rows] = paged_attention(q, k_cache[layer], v_cache[layer], group)
            x = x + attn.flatten(-2) @ self.wo[layer]
            x = x + self._mlp(layer, x)
        return self._logits(x[batch.logit_rows])

    @torch.inference_mode()
    def forward_full(self, token_ids: Tensor) -> Tensor:
        """Recompute a whole sequence with causal attention and no cache; return (T, vocab) fp32 logits.

        The reference that cached decoding is tested against.
        """
        c = self.config
        n = token_ids.shape[0]
        positions = torch.arange(n, device=self.device)
        mask = torch.ones(n, n, dtype=torch.bool, device=self.device).tril().unsqueeze(0)
        x = self.embed[token_ids]
        for layer in range(c.layers):
            q, k, v = self._qkv(layer, x, positions)
            attn = attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), mask)[0]
            x = x + attn.flatten(-2) @ self.wo[layer]
            x = x + self._mlp(layer, x)
        return self._logits(x)
