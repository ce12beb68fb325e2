"""Fetch and compile the browser's chart code while a page is idle, so opening the first chart does not wait for it.

Streamlit loads the code of its Vega-Lite charts (vega-embed, vega's expression interpreter and its chart element,
about 1.5 MB) only when a page first draws a chart. Summary's first view draws none (its overview is SVG), so the
first panel of charts a user opened paid for that code: about 0.35 s of the browser's main thread on a 2-core
machine (benchmarks/dashboard.py's 'charts opened 100k'). The page instead asks for the same modules, by the
very URLs Streamlit imports them from (so the browser evaluates each once), once the page has been drawn and the
script has stopped: while the user reads the page, not while it is drawn.

The same goes for the code a first upload needs: the uploader's HTTP client (axios), which Streamlit imports when a
file is chosen, and the 'Showing' radio drawn once a second record set is held (about 0.03 s each on the
upload's path, before the file is sent and before the page is drawn again).

Pure: :func:`chart_chunks` finds the modules in the installed Streamlit, :func:`preload_script` writes the script.
"""

from __future__ import annotations

import json
from pathlib import Path

# the chart element and the two modules its first chart imports (Streamlit's loadVegaEmbed)
CHART_STEMS = ("ArrowVegaLiteChart", "embed", "vega-interpreter")
# a first upload's: the uploader's HTTP client, and the radio the sidebar draws once two record sets are held
UPLOAD_STEMS = ("axios", "Radio")
CHUNK_STEMS = CHART_STEMS + UPLOAD_STEMS
# after the script has stopped and no element is still loading: the page is drawn by then (measured: the last
# table or metric within 0.2 s of that on Summary), so the code is compiled while the user reads the page
AFTER_IDLE_MS = 300


def chart_chunks(static_js: Path) -> list[str] | None:
    """Return the file names of the modules to preload in Streamlit's ``static/js`` folder, or None if any is missing.

    Each name is ``STEM.HASH.js``, one per Streamlit build; another build without one of them gets no preload.
    """
    found = []
    for stem in CHUNK_STEMS:
        names = sorted(p.name for p in static_js.glob(f"{stem}.*.js") if p.name.count(".") == 2)
        if len(names) != 1:
            return None
        found.append(names[0])
    return found


def preload_script(chunks: list[str]) -> str:
    """Return a ``<script>`` that imports ``chunks`` (names beside Streamlit's own index module) once the page is idle.

    Idle: the script has stopped, no element is a skeleton still loading its code, and then ``AFTER_IDLE_MS``
    more. It runs once per browser tab; a failed import is left to Streamlit, which imports the module again when
    a chart needs it.

    >>> "embed.X.js" in preload_script(["embed.X.js"])
    True
    """
    return f"""<script>
(() => {{
  if (window.__servebenchChartCode) return;
  window.__servebenchChartCode = true;
  const index = document.querySelector('script[src*="/static/js/index."]');
  if (!index) return;
  const load = () => {{
    for (const name of {json.dumps(chunks)}) import(new URL(name, index.src).href).catch(() => {{}});
  }};
  const idle = () => {{
    const app = document.querySelector('[data-testid="stApp"]');
    const busy = !app || app.dataset.testScriptState !== 'notRunning' || document.querySelector('[data-testid="stSkeleton"]');
    if (busy) {{ setTimeout(idle, 100); return; }}
    setTimeout(() => (window.requestIdleCallback || setTimeout)(load), {AFTER_IDLE_MS});
  }};
  idle();
}})();
</script>"""
