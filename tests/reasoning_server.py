"""A reasoning model's OpenAI-compatible stream on 127.0.0.1 (raw sockets, asyncio in a thread) for tests.

Chat requests get what vLLM and SGLang send for a reasoning model: a role chunk, then reasoning chunks
(``delta.reasoning_content``, or another field name), then answer chunks (``delta.content``), a usage
chunk with ``completion_tokens_details.reasoning_tokens``, and ``[DONE]``. The completions endpoint
has no reasoning field: its chunks are all ``text``, the thinking included, as vLLM serves it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from faulty_server import LocalHTTPServer


class ReasoningServer(LocalHTTPServer):
    """Stream ``reasoning[k]`` reasoning chunks then ``answer`` answer chunks to the k-th request (cycling).

    ``prefill_s`` passes before the first chunk and ``gap_s`` between chunks, so a reply's first
    answer comes ``reasoning * gap_s`` after its first token. ``tokens_per_chunk`` > 1 sends each chunk
    with the running usage (vLLM's continuous usage stats); ``details`` False leaves the reasoning
    count out of the usage; ``field`` names the reasoning field (``reasoning`` for newer vLLM).
    """

    def __init__(self, reasoning: Sequence[int] = (3,), answer: int = 4, *, field: str = "reasoning_content",
                 prefill_s: float = 0.05, gap_s: float = 0.02, tokens_per_chunk: int = 1,
                 details: bool = True) -> None:
        super().__init__()
        self.reasoning, self.answer, self.field = list(reasoning), answer, field
        self.prefill_s, self.gap_s, self.tokens_per_chunk, self.details = prefill_s, gap_s, tokens_per_chunk, details
        self.served = 0

    async def _answer(self, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        await self._stream(path.endswith("/chat/completions"), writer)
        return True

    async def _stream(self, chat: bool, writer: asyncio.StreamWriter) -> None:
        thinking = self.reasoning[self.served % len(self.reasoning)]
        self.served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def send(doc: dict) -> None:
            data = f"data: {json.dumps(doc)}\n\n".encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        if chat:
            send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        await asyncio.sleep(self.prefill_s)
        k = self.tokens_per_chunk
        for i in range(thinking + self.answer):
            word = " t" * k if i < thinking else " a" * k
            if not chat:
                choice = {"index": 0, "text": word}
            elif i < thinking:
                choice = {"index": 0, "delta": {self.field: word}}
            else:
                choice = {"index": 0, "delta": {"content": word}}
            doc = {"choices": [choice]}
            if k > 1:
                doc["usage"] = {"prompt_tokens": 3, "completion_tokens": (i + 1) * k}
            send(doc)
            await writer.drain()
            await asyncio.sleep(self.gap_s)
        usage = {"prompt_tokens": 3, "completion_tokens": (thinking + self.answer) * k}
        if self.details and chat:
            usage["completion_tokens_details"] = {"reasoning_tokens": thinking * k}
        send({"choices": [], "usage": usage})
        data = b"data: [DONE]\n\n"
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
        await writer.drain()
