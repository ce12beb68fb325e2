"""Log-probabilities of generated tokens, shaped as OpenAI's completions and chat APIs return them.

A :class:`LogprobRecorder` is a request's ``SamplingParams.on_logits``: on the engine thread, after
each token is chosen, it keeps the token's log-probability and the ``top`` most likely tokens under
the model's own distribution (log-softmax of the raw logits, before ``logit_bias``, temperature and
top-p: what vLLM returns by default). The HTTP layer reads entry k once it has the k-th token
(the recorder appends before the engine hands the token over), and :class:`LogprobFormat` shapes
entries for one reply: the legacy completions object (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``) or chat's ``{"content": [...]}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

MAX_LOGPROBS = 20  # alternatives per token a request may ask for (OpenAI's chat top_logprobs; vLLM's default cap)
FLOOR_LOGPROB = -9999.0  # OpenAI's value for a token too unlikely to express: JSON has no -Infinity


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its log-probability and the most likely tokens at its step, most likely first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass
class LogprobRecorder:
    """Keep each generated token's logprob and its ``top`` alternatives (called on the engine thread)."""

    top: int
    tokens: list[TokenLogprob] = field(default_factory=list)

    def __call__(self, token_id: int, logits: Tensor) -> None:
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        values, ids = logprobs.topk(min(self.top, logprobs.numel()))
        row = torch.cat([logprobs[token_id].reshape(1), values]).tolist()  # one copy off the device
        top = tuple(zip(ids.tolist(), (_finite(v) for v in row[1:])))
        self.tokens.append(TokenLogprob(token_id, _finite(row[0]), top))


def _finite(logprob: float) -> float:
    """Return a logprob JSON can carry: at least FLOOR_LOGPROB.

    >>> _finite(float("-inf")), _finite(-0.5)
    (-9999.0, -0.5)
    """
    return max(logprob, FLOOR_LOGPROB)


@dataclass
class LogprobFormat:
    """Shape one reply's token logprobs for the API, token by token (streaming) or all at once.

    ``render`` gives a token's text; ``offset`` is where the generated text starts in the reply's
    text (after an echoed prompt), for the completions object's ``text_offset``.
    """

    chat: bool
    render: Callable[[int], str]
    offset: int = 0

    def entries(self, tokens: Sequence[TokenLogprob]) -> dict[str, Any]:
        """Return the ``logprobs`` object of a choice holding ``tokens`` (the next ones of the reply).

        >>> fmt = LogprobFormat(chat=False, render=lambda t: f" t{t}")
        >>> fmt.entries([TokenLogprob(7, -0.25, ((7, -0.25), (3, -2.0)))])
        {'tokens': [' t7'], 'token_logprobs': [-0.25], 'top_logprobs': [{' t7': -0.25, ' t3': -2.0}], 'text_offset': [0]}
        >>> fmt.entries([TokenLogprob(9, -1.5, ())])["text_offset"]
        [3]
        """
        if self.chat:
            return {"content": [self._chat_entry(t) for t in tokens], "refusal": None}
        offsets = []
        for t in tokens:
            offsets.append(self.offset)
            self.offset += len(self.render(t.token_id))
        return {"tokens": [self.render(t.token_id) for t in tokens],
                "token_logprobs": [t.logprob for t in tokens],
                # the chosen token is always among the alternatives shown, as OpenAI's legacy API does
                "top_logprobs": [{self.render(i): lp for i, lp in t.top + ((t.token_id, t.logprob),)} for t in tokens],
                "text_offset": offsets}

    def _chat_entry(self, t: TokenLogprob) -> dict[str, Any]:
        return {**self._chat_token(t.token_id, t.logprob),
                "top_logprobs": [self._chat_token(i, lp) for i, lp in t.top]}

    def _chat_token(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.render(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}
