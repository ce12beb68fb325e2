"""Tokens as words: the engine's HTTP API maps each whitespace-separated word to one token id and back."""

from __future__ import annotations

import zlib


def encode(text: str, vocab: int) -> list[int]:
    """Map each whitespace-separated word to one token id (a stable CRC32 hash): one word, one token.

    Word-level, not the engine's byte-level demo mapping, so a load generator's prompt of N words
    is exactly N prompt tokens.

    >>> ids = encode("hello world  hello", 512)
    >>> len(ids), ids[0] == ids[2], all(0 <= i < 512 for i in ids)
    (3, True, True)
    """
    return word_ids(text.split(), vocab)


def word_ids(words: list[str], vocab: int) -> list[int]:
    """Return each word's token id (CRC32 of its UTF-8, modulo ``vocab``)."""
    return [zlib.crc32(word.encode("utf-8")) % vocab for word in words]


def decode(token_id: int) -> str:
    """Render one output token as text (a leading space and ``t<id>``): one token, one word.

    >>> decode(7) + decode(42)
    ' t7 t42'
    """
    return f" t{token_id}"


class StopStrings:
    """A request's stop sequences, checked on the engine thread after each generated token.

    Called with the sequence's tokens and where its output starts; True once the output's text
    contains a stop sequence. Only the text a new occurrence could span is rebuilt (an occurrence
    must end in the newest token's text, or an earlier call would have found it).

    >>> check = StopStrings(("t2 t3",))
    >>> check([9, 1, 2], 1), check([9, 1, 2, 3], 1)
    (False, True)
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.longest = max(len(s) for s in stops)

    def __call__(self, tokens: list[int], start: int) -> bool:
        parts = [decode(tokens[-1])]
        size, i = 0, len(tokens) - 2
        while size < self.longest - 1 and i >= start:
            parts.append(decode(tokens[i]))
            size += len(parts[-1])
            i -= 1
        tail = "".join(reversed(parts))
        return any(s in tail for s in self.stops)


class ReplyText:
    """One reply's text as OpenAI shows it, token by token.

    Each token adds its word; text that could be the start of a stop sequence is held back until
    it is not. A stop sequence cuts the text where it begins; an EOS token (when not ignored) ends
    the reply without adding text. Either sets ``finish`` to "stop"; the tokens stay counted.

    >>> reply = ReplyText(("t3",), eos_token_id=None)
    >>> [reply.add(t) for t in (1, 2, 3)], reply.finish
    ([' t1', ' t2', ' '], 'stop')
    """

    def __init__(self, stops: tuple[str, ...], eos_token_id: int | None) -> None:
        self.stops = stops
        self.eos_token_id = eos_token_id
        self.text = ""
        self.shown = 0  # characters of text already released
        self.tokens = 0
        self.finish: str | None = None

    def add(self, token_id: int) -> str:
        """Take the next generated token; return the text it releases ("" if held back or cut)."""
        self.tokens += 1
        if self.finish is not None:
            return ""
        if token_id == self.eos_token_id:
            self.finish = "stop"
            return self.flush()
        before = len(self.text)
        self.text += decode(token_id)
        if self.stops:
            found = [i for i in (self.text.find(s, max(0, before - len(s) + 1)) for s in self.stops) if i >= 0]
            if found:
                self.finish = "stop"
                self.text = self.text[:min(found)]
                return self.flush()
            return self._release(len(self.text) - self._held())
        return self._release(len(self.text))

    def flush(self) -> str:
        """Release whatever is held back (the reply has ended)."""
        return self._release(len(self.text))

    def _held(self) -> int:
        """Return how many trailing characters could begin a stop sequence."""
        held = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.text)), held, -1):
                if self.text.endswith(s[:k]):
                    held = k
                    break
        return held

    def _release(self, upto: int) -> str:
        out = self.text[self.shown:upto] if upto > self.shown else ""
        self.shown = max(self.shown, upto)
        return out
