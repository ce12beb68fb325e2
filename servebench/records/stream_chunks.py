"""What one OpenAI completion or chat chunk carries: the answer's text and the reasoning's.

Reasoning models served by vLLM and SGLang (DeepSeek-R1, Qwen3, gpt-oss) stream their thinking
beside the answer: a chat chunk's ``delta.reasoning_content`` (newer vLLM: ``delta.reasoning``)
beside ``delta.content``; a whole reply holds both in ``message``. The completions endpoint has no
reasoning field (vLLM's reasoning parsers serve chat only): its ``text`` is all answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REASONING_KEYS = ("reasoning_content", "reasoning")  # vLLM and SGLang; newer vLLM (and OpenRouter) name it reasoning


def chunk_parts(doc: Mapping[str, Any]) -> tuple[str, str]:
    """Return the answer text and the reasoning text of one completion or chat chunk (or whole reply).

    A server that fills both reasoning names with the same text (vLLM while it renamed the field)
    is read once: the first non-empty name counts.

    >>> chunk_parts({"choices": [{"delta": {"reasoning_content": "hm", "reasoning": "hm"}}]})
    ('', 'hm')
    >>> chunk_parts({"choices": [{"delta": {"content": "4", "reasoning": None}}]}), chunk_parts({"choices": [{"text": "a"}]})
    (('4', ''), ('a', ''))
    """
    answer, reasoning = [], []
    for choice in doc.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        holder = choice.get("delta") or choice.get("message")
        holder = holder if isinstance(holder, Mapping) else {}
        text = choice.get("text")
        if text is None:
            text = holder.get("content")
        if isinstance(text, str):
            answer.append(text)
        thought = next((holder[k] for k in REASONING_KEYS if isinstance(holder.get(k), str) and holder[k]), "")
        reasoning.append(thought)
    return "".join(answer), "".join(reasoning)


def reasoning_tokens_reported(usage: Any) -> int | None:
    """Return ``usage.completion_tokens_details.reasoning_tokens`` (OpenAI's, vLLM's) when it is a count, else None.

    >>> reasoning_tokens_reported({"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}})
    6
    >>> reasoning_tokens_reported({"completion_tokens_details": None}), reasoning_tokens_reported({"completion_tokens_details": {"reasoning_tokens": True}})
    (None, None)
    """
    details = usage.get("completion_tokens_details") if isinstance(usage, Mapping) else None
    value = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    return value if type(value) is int and value >= 0 else None


__all__ = ["REASONING_KEYS", "chunk_parts", "reasoning_tokens_reported"]
