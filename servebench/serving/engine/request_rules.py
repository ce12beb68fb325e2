"""What the HTTP server refuses in a request body before reading its fields: text that is not Unicode, and
OpenAI parameters it does not implement.

A client that asks for a feature must never get a quiet no. OpenAI's parameters (and vLLM's sampling
extensions) that the engine does not implement are refused with a 400 naming the parameter, unless
absent, null, or the value that turns them off (``presence_penalty: 0``, ``best_of: 1``), which
is what the engine does anyway. (``min_tokens`` turns off in context, so the HTTP layer checks it.)
Fields neither API knows are still ignored, as vLLM ignores them.
"""

from __future__ import annotations

import json
import re
from typing import Any

SHOWN_CHARS = 80  # how much of a client's value an error message repeats

# Each parameter the engine does not implement, and the values that ask for nothing (null always does).
NOT_IMPLEMENTED: dict[str, tuple[Any, ...]] = {
    # OpenAI, completions and chat
    "presence_penalty": (0,), "frequency_penalty": (0,), "best_of": (1,), "suffix": ("",),
    "response_format": ({"type": "text"},), "tools": ([],), "tool_choice": ("none",), "functions": ([],),
    "function_call": ("none",), "audio": (), "prediction": (), "modalities": (["text"],), "reasoning_effort": (),
    "web_search_options": (),
    # vLLM's sampling extensions
    "top_k": (-1, 0), "min_p": (0,), "repetition_penalty": (1,), "length_penalty": (1,),
    "stop_token_ids": ([],), "include_stop_str_in_output": (False,), "skip_special_tokens": (True,),
    "prompt_logprobs": (), "use_beam_search": (False,), "bad_words": ([],), "allowed_token_ids": (),
    "guided_json": (), "guided_regex": (), "guided_choice": (), "guided_grammar": (), "structured_outputs": (),
}
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadRequest(Exception):
    """A request the server refuses: HTTP status, message, error code and the offending field."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None,
                 status: int = 400) -> None:
        super().__init__(message)
        self.message, self.code, self.param, self.status = message, code, param, status


def shown(value: Any) -> str:
    """Return a client's value as JSON for an error message, cut short.

    >>> shown("x" * 100)[-5:], shown(0.5)
    ('xx...', '0.5')
    """
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def lone_surrogate_at(doc: Any) -> str | None:
    """Return the dotted path of the first string (or key) in ``doc`` holding a lone surrogate, else None.

    JSON's ``"\\ud800"`` escape decodes to one; it is not Unicode text and cannot be encoded as UTF-8.

    >>> lone_surrogate_at({"messages": [{"role": "user", "content": "hi \\ud800"}]})
    'messages.0.content'
    >>> lone_surrogate_at({"prompt": "\\U0001F600"}) is None  # a surrogate pair is one real character
    True
    """
    stack: list[tuple[str, Any]] = [("body", doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                where = key_path(path, key)
                if _SURROGATE.search(key):
                    return where
                stack.append((where, item))
        elif isinstance(value, list):
            stack.extend((key_path(path, str(i)), item) for i, item in reversed(list(enumerate(value))))
    return None


def key_path(path: str, key: str) -> str:
    """Return ``path.key`` (the body's own fields without a prefix), the key made printable and cut short.

    >>> key_path("body", "messages"), key_path("messages", "0"), key_path("body", "a\\ud800")
    ('messages', 'messages.0', 'a\\\\ud800')
    """
    safe = key.encode("utf-8", "backslashreplace").decode("utf-8")[:SHOWN_CHARS]
    return safe if path == "body" else f"{path}.{safe}"


def check_unicode(doc: Any) -> None:
    """Refuse a body with a lone surrogate anywhere, naming where."""
    where = lone_surrogate_at(doc)
    if where is not None:
        raise BadRequest(f"invalid request: {where}: text holds a lone surrogate (such as \\ud800), which is not "
                         "valid Unicode", "invalid_value", None if where == "body" else where)


def check_implemented(doc: dict[str, Any]) -> None:
    """Refuse a parameter the engine does not implement, unless it asks for nothing (see NOT_IMPLEMENTED)."""
    for name, off in NOT_IMPLEMENTED.items():
        value = doc.get(name)
        if value is not None and not any(_same(value, v) for v in off):
            offs = " or ".join(["null", *(json.dumps(v) for v in off)])
            raise BadRequest(f"'{name}' is not supported by this server (got {shown(value)}); leave it out or send "
                             f"{offs}", "unsupported_parameter", name)


def _same(a: Any, b: Any) -> bool:
    """Return True when two JSON values are equal and of one JSON type (true is not 1; 0 and 0.0 are one number).

    >>> _same(0, 0.0), _same(True, 1), _same([], []), _same("none", "none")
    (True, False, True, True)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b
