"""HTML building blocks for the static site: escaping, tables, figure embeds and the page shell.

Everything a user supplied (file names, titles, request IDs, slice names, error texts, metadata) is
escaped on the way in: a plain ``str`` is always escaped, only :class:`Markup` built here passes as is,
and control characters and bidi overrides in it become visible escapes (``safetext``).
Figure JSON lives inside ``<script type="application/json">``, where HTML escaping does not apply, so
:func:`json_for_script` escapes ``<``, ``>`` and ``&`` as JSON unicode escapes instead (a ``</script>``
in a slice name can then never close the tag early), and makes controls and bidi overrides visible.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from servebench.formatting import fmt
from servebench.output.safetext import safe_text

PLOTLY_JS = "assets/plotly.min.js"
SITE_JS = "assets/servebench.js"
SITE_CSS = "assets/servebench.css"

_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
# in JSON text: an escaped backslash (skipped); the \u escape of a control (C0 but tab and line breaks,
# DEL, C1) or of a bidi control; a raw DEL, C1 or bidi control
_SCRIPT_CONTROL = re.compile(r"\\\\|\\u(00(?:0[0-8bcefBCEF]|1[0-9a-fA-F]|7[fF]|[89][0-9a-fA-F])"
                             r"|061[cC]|200[eEfF]|202[a-eA-E]|206[6-9])|[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class Markup(str):
    """HTML that this package built and vouches for; every other string gets escaped."""


def esc(value: object) -> str:
    """Return ``value`` as HTML text: Markup unchanged, anything else escaped (quotes included).

    >>> esc("<script>alert(1)</script>")
    '&lt;script&gt;alert(1)&lt;/script&gt;'
    >>> esc(Markup("<b>ok</b>"))
    '<b>ok</b>'
    """
    if isinstance(value, Markup):
        return value
    return html.escape(safe_text(value, multiline=True), quote=True)


def join(parts: Iterable[object], sep: str = "") -> Markup:
    """Concatenate escaped parts into one Markup."""
    return Markup(esc(sep).join(esc(p) for p in parts))


def tag(name: str, content: object = "", **attrs: object) -> Markup:
    """Return ``<name attrs>content</name>`` with the content and every attribute value escaped.

    A trailing underscore in an attribute name is dropped (``class_`` gives ``class``).
    """
    attr_text = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None)
    return Markup(f"<{name}{attr_text}>{esc(content)}</{name}>")


def json_for_script(text: str) -> str:
    """Make JSON text safe inside a ``<script>`` element; it still parses to the same value.

    >>> json_for_script('{"name": "</script><script>alert(1)</script>"}')
    '{"name": "\\\\u003c/script\\\\u003e\\\\u003cscript\\\\u003ealert(1)\\\\u003c/script\\\\u003e"}'
    """
    text = _SCRIPT_CONTROL.sub(_visible_in_json, text)
    for ch, rep in _SCRIPT_UNSAFE.items():
        text = text.replace(ch, rep)
    return text


def _visible_in_json(match: re.Match[str]) -> str:
    """Turn a control or bidi character in JSON text into JSON for its visible escape."""
    token = match.group()
    if token == "\\\\":
        return token
    char = chr(int(token[2:], 16)) if token.startswith("\\u") else token
    return safe_text(char).replace("\\", "\\\\")  # the escape's backslash, as JSON text


def cell(value: object, digits: int = 4) -> object:
    """Format a metric for a table cell by ``formatting.fmt``'s rule (None and NaN as '—', infinity as '∞')."""
    if isinstance(value, Markup):
        return value
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt(value, digits)
    return value


def table(headers: Sequence[object], rows: Iterable[Sequence[object]], *, cls: str = "grid",
          caption: object | None = None) -> Markup:
    """Return an HTML table; numbers are right-aligned and formatted, everything escaped."""
    head = join(tag("th", h) for h in headers)
    body_rows = []
    for row in rows:
        cells = []
        for v in row:
            num = isinstance(v, (int, float)) and not isinstance(v, bool) or v is None
            cells.append(tag("td", cell(v), class_="num" if num else None))
        body_rows.append(tag("tr", join(cells)))
    cap = tag("caption", caption) if caption is not None else ""
    return tag("table", join([cap, tag("thead", tag("tr", head)), tag("tbody", join(body_rows))]), class_=cls)


def key_values(items: Mapping[str, object] | Sequence[tuple[object, object]], *, caption: object | None = None) -> Markup:
    """Return a two-column table of names and values."""
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    return table(["", ""], pairs, cls="kv", caption=caption)


def nested(value: Any, depth: int = 0) -> Markup:
    """Render JSON-like data (metadata) as nested tables, every key and value escaped."""
    if isinstance(value, Mapping):
        if not value:
            return Markup("<em>empty</em>")
        rows = [(tag("th", k, scope="row"), tag("td", nested(v, depth + 1))) for k, v in value.items()]
        return tag("table", join(tag("tr", join(r)) for r in rows), class_="nested")
    if isinstance(value, list):
        if not value:
            return Markup("<em>none</em>")
        if all(not isinstance(v, (Mapping, list)) for v in value):
            return Markup(esc(", ".join(fmt(v) if isinstance(v, float) else str(v) for v in value)))
        return join(tag("div", nested(v, depth + 1), class_="item") for v in value)
    if isinstance(value, float):
        return Markup(esc(fmt(value, 6)))
    if value is None:
        return Markup("<em>null</em>")
    return Markup(esc(value))


def figure(fig_id: str, fig_json: str, *, caption: object | None = None) -> Markup:
    """Return a chart placeholder and its plotly JSON, drawn by ``assets/servebench.js``."""
    parts = [tag("div", "", id=fig_id, class_="chart"),
             Markup(f'<script type="application/json" class="figure-data" data-target="{esc(fig_id)}">'
                    f"{json_for_script(fig_json)}</script>")]
    if caption is not None:
        parts.append(tag("p", caption, class_="caption"))
    return join(parts)


def section(title: object, *content: object, id_: str | None = None) -> Markup:
    """Return a titled section of the page."""
    return tag("section", join([tag("h2", title), *content]), id=id_)


def note(text: object, kind: str = "info") -> Markup:
    """Return a highlighted paragraph (``info``, ``warn`` or ``error``)."""
    return tag("p", text, class_=f"note {kind}")


def page(title: object, body: object, *, site_title: object, root: str = "", with_plotly: bool = True) -> str:
    """Return a whole HTML document; assets are linked relative to ``root`` so file:// works."""
    scripts = ""
    if with_plotly:
        scripts = (f'<script src="{esc(root + PLOTLY_JS)}"></script>\n'
                   f'<script src="{esc(root + SITE_JS)}"></script>\n')
    nav = tag("nav", join([tag("a", site_title, href=root + "index.html")]))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{esc(title)}</title>\n"
        f'<link rel="stylesheet" href="{esc(root + SITE_CSS)}">\n'
        f"</head>\n<body>\n{nav}\n<main>\n{tag('h1', title)}\n{esc(body)}\n</main>\n"
        f"{scripts}</body>\n</html>\n"
    )


SITE_JS_TEXT = """\
// Draw every figure whose JSON sits in a <script type="application/json" class="figure-data">.
(function () {
  function draw() {
    var blocks = document.querySelectorAll('script.figure-data');
    for (var i = 0; i < blocks.length; i++) {
      var target = document.getElementById(blocks[i].getAttribute('data-target'));
      if (!target) { continue; }
      var fig = JSON.parse(blocks[i].textContent);
      var layout = fig.layout || {};
      if (!layout.height) { layout.height = 450; }
      Plotly.newPlot(target, fig.data || [], layout,
                     {responsive: true, displaylogo: false, showLink: false});
    }
  }
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', draw);
  } else {
    draw();
  }
})();
"""

SITE_CSS_TEXT = """\
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #222;
       background: #fafafa; }
nav { background: #263238; padding: 0.6em 1.5em; }
nav a { color: #fff; text-decoration: none; font-weight: 600; }
main { max-width: 1200px; margin: 0 auto; padding: 1em 1.5em 3em; }
h1 { font-size: 1.6em; margin: 0.4em 0; overflow-wrap: anywhere; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.4em; }
section { margin-bottom: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; background: #fff; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
thead th { background: #eceff1; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv thead { display: none; }
table.kv td:first-child { font-weight: 600; }
table.nested th { background: #f5f5f5; font-weight: 600; white-space: nowrap; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 0.2em 0; }
.chart { width: 100%; min-height: 220px; background: #fff; border: 1px solid #eee; margin: 0.5em 0; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 1em; }
.scroll { overflow-x: auto; max-width: 100%; }
table.wide th, table.wide td { overflow-wrap: normal; white-space: nowrap; }
.caption, .muted { color: #666; font-size: 0.9em; }
.note { padding: 0.6em 0.9em; border-radius: 4px; border-left: 4px solid #1976d2; background: #e3f2fd; }
.note.warn { border-color: #f57c00; background: #fff3e0; }
.note.error { border-color: #d32f2f; background: #ffebee; }
.verdict { font-weight: 700; }
.toc { font-size: 0.92em; }
.toc a { color: #1565c0; text-decoration: none; }
ul.warnings li { margin: 0.2em 0; }
code { background: #eee; padding: 0 0.2em; border-radius: 3px; }
"""
