"""Make user text safe to show: terminal controls and bidi overrides become visible escapes.

A request ID, slice name, error cause or file name can hold ESC sequences that recolour or clear a
terminal, retitle its window or write a hyperlink, and bidi overrides (U+202E) that make text read
backwards in a terminal, a browser or a chart. Every display edge (the CLI's tables and error lines,
the HTML report, the dashboard) passes user text through :func:`safe_text` first; the data itself is
never changed.
"""

from __future__ import annotations

import re

from rich.markup import escape

# C0 controls, DEL and C1 controls (ESC and CSI among them) are shown as \xNN (\t, \n, \r by name)
_CONTROL = "\x00-\x1f\x7f-\x9f"
# bidi embeddings, overrides, isolates and marks; lone surrogates (they cannot even be encoded)
_FORMAT = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = re.compile(f"[{_CONTROL}{_FORMAT}]")
_UNSAFE_INLINE = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_FORMAT}]")  # keeps \t, \n and \r
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if code <= 0x9F:
        return f"\\x{code:02x}"
    return f"<U+{code:04X}>"


def safe_text(value: object, *, multiline: bool = False) -> str:
    """Return ``str(value)`` with every control character and bidi control shown as a visible escape.

    ``multiline`` keeps tabs and line breaks (HTML and the dashboard, where they only wrap text);
    without it the result is always one line (terminal tables and error lines).

    >>> safe_text("ok\\x1b[31mred\\u202eabc")
    'ok\\\\x1b[31mred<U+202E>abc'
    >>> safe_text("two\\nlines"), safe_text("two\\nlines", multiline=True)
    ('two\\\\nlines', 'two\\nlines')
    """
    text = value if isinstance(value, str) else str(value)
    pattern = _UNSAFE_INLINE if multiline else _UNSAFE
    if pattern.search(text) is None:  # the usual case: no copy
        return text
    return pattern.sub(_visible, text)


def safe_markup(value: object) -> str:
    """Return user text ready for a rich markup string: controls made visible, then ``[tags]`` escaped.

    >>> safe_markup("[bold]x\\x1b[2J")
    '\\\\[bold]x\\\\x1b[2J'
    """
    return escape(safe_text(value))
