"""Nothing is cut off at 1,400 px, measured in Chromium on every page of the dashboard (issue 36).

Each page is opened in a 1,400 px window as a user finds it, and again after what fills it (a plan, a sweep, the
walk-through revealed, uploads), the window as tall as the page. An element is clipped when its content is wider
(or, with overflow hidden, taller) than its box and its box cuts it off or scrolls sideways (``scrollWidth`` over
``clientWidth``: a text ellipsis, a chip list, a grid's scroller), or when its box reaches past the right edge of
the page's main area. A chart drawn on a canvas is measured as a box: what Vega draws inside it is covered by the
charts' own tests (points keep room at the plot's edges, labels inside the plot); a grid's cells, drawn on a canvas
too, are measured from its accessible table (``GRID_CUT``).
"""

from __future__ import annotations

import pytest
from browser import REPO, browser_page, require_chromium, screenshot, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTH_PX = 1400
TIMEOUT_MS = 180_000
IMPORTERS = REPO / "tests" / "data" / "importers"
IDLE = """() => document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'
  && !document.querySelector('[data-testid="stSkeleton"]')
  && [...document.querySelectorAll('.stPrintGraphic')].every(c => c.querySelector('canvas, svg.marks, .main-svg'))"""
PAGE_HEIGHT = """() => Math.max(document.querySelector('[data-testid="stMain"]').scrollHeight,
  document.querySelector('[data-testid="stSidebarContent"]')?.scrollHeight || 0)"""
CLIPPED = """() => {
  const out = [];
  const main = document.querySelector('[data-testid="stMain"]');
  const edge = main.getBoundingClientRect().right;
  const shown = e => { const cs = getComputedStyle(e); return cs.display !== 'none' && cs.visibility !== 'hidden'; };
  const label = e => (e.getAttribute('data-testid') || e.tagName.toLowerCase())
    + (typeof e.className === 'string' && e.className ? '.' + e.className.split(' ')[0] : '');
  const areas = [main, document.querySelector('[data-testid="stSidebarContent"]')].filter(Boolean);
  for (const area of areas) for (const box of area.querySelectorAll('*')) {
    if (!shown(box)) continue;
    const r = box.getBoundingClientRect();
    if (r.width < 2 || r.height < 2) continue;
    if (area === main && r.right > edge + 1) {
      out.push({element: label(box), why: `right edge at ${Math.round(r.right)} px, the page ends at ${Math.round(edge)} px`,
                text: (box.innerText || '').trim().slice(0, 80)});
      continue;
    }
    const cs = getComputedStyle(box);
    if (box.tagName === 'INPUT' && box.type !== 'range' && box.scrollWidth > box.clientWidth + 1) {  // its value cut
      out.push({element: label(box), why: `its value needs ${box.scrollWidth} px in ${box.clientWidth} px`,
                text: (box.value || box.getAttribute('aria-label') || '').slice(0, 80)});
      continue;
    }
    // a box that scrolls up and down (a grid of many rows) hides rows by design; sideways it hides columns
    const clipsY = cs.overflowY === 'hidden' || cs.overflowY === 'clip';
    if (cs.overflowX === 'visible' && !clipsY) continue;
    // what the box shows: its padding box; anything drawn past it is cut off (or scrolled out of sight)
    const left = r.left + box.clientLeft, top = r.top + box.clientTop;
    const right = left + box.clientWidth, bottom = top + box.clientHeight;
    const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT | NodeFilter.SHOW_ELEMENT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.nodeType === Node.ELEMENT_NODE && !shown(n)) continue;
      let rects;
      if (n.nodeType === Node.TEXT_NODE) {
        if (!n.textContent.trim() || !shown(n.parentElement)) continue;
        const range = document.createRange(); range.selectNodeContents(n); rects = [...range.getClientRects()];
      } else if (n.children.length === 0) { rects = [n.getBoundingClientRect()]; } else continue;
      const cut = rects.find(q => q.width > 1 && q.height > 1 && (q.right > right + 1 || q.left < left - 1
        || (clipsY && (q.bottom > bottom + 1 || q.top < top - 1))));
      if (cut) {
        out.push({element: label(box), why: `shows ${Math.round(right - left)} x ${Math.round(bottom - top)} px of `
                  + `content drawn at ${Math.round(cut.left - left)}..${Math.round(cut.right - left)} x `
                  + `${Math.round(cut.top - top)}..${Math.round(cut.bottom - top)} px`,
                  text: (n.textContent || n.getAttribute('aria-label') || '').trim().slice(0, 80)});
        break;
      }
    }
  }
  return out;
}"""

# A grid (st.dataframe) draws its cells on a canvas, so a cut-off cell is not in the DOM; its accessible table (the
# same text, not drawn) is. A column needs its widest text in the grid's font plus the cell's padding; the grid sizes
# a column to its text up to 500 px (glide-data-grid's maxColumnAutoWidth) and cuts it off beyond, or cuts columns
# when together they need more than the grid's width.
GRID_CUT = """() => [...document.querySelectorAll('[data-testid="stDataFrame"]')]
  .filter(g => g.getBoundingClientRect().height > 2).flatMap(g => {
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.font = '14px "Source Sans Pro", sans-serif';
    const need = [];
    const heads = [];
    for (const row of g.querySelectorAll('tr')) [...row.children].forEach((cell, i) => {
      if (cell.tagName === 'TH' && row.parentElement.tagName === 'THEAD') heads[i] = cell.innerText.trim();
      need[i] = Math.max(need[i] || 0, ctx.measureText(cell.innerText.trim()).width + 2 * 8 + 1);
    });
    const width = g.getBoundingClientRect().width;
    const total = need.reduce((a, b) => a + b, 0);
    const cut = need.map((w, i) => [heads[i] || `column ${i + 1}`, Math.round(w)]).filter(([, w]) => w > 500);
    return total > width || cut.length ? [{element: 'stDataFrame', text: heads.join('|').slice(0, 80),
      why: `its columns need ${Math.round(total)} px in ${Math.round(width)} px` + (cut.length
           ? `; ${cut.map(([h, w]) => `${h} needs ${w} px`).join(', ')}, past the 500 px a column is given` : '')}] : [];
  })"""


def _settle(page) -> None:
    page.wait_for_timeout(300)
    page.wait_for_function(IDLE, timeout=TIMEOUT_MS, polling=100)
    page.wait_for_timeout(300)


def _clipped(page, view: str) -> list[str]:
    """Return each clipped element of the page as it stands, the window as tall as the page (at most 15,000 px)."""
    height = min(15_000, int(page.evaluate(PAGE_HEIGHT)) + 40)
    page.set_viewport_size({"width": WIDTH_PX, "height": max(900, height)})
    _settle(page)
    found = [f"{view}: {c['element']} ({c['why']}): {c['text']!r}"
             for c in page.evaluate(CLIPPED) + page.evaluate(GRID_CUT)]
    if found:
        screenshot(page, f"clipped_{view.replace(' ', '_').replace('/', '_')}")
    page.set_viewport_size({"width": WIDTH_PX, "height": 900})
    return found


def _open(page, link: str) -> None:
    page.get_by_role("link", name=link, exact=True).click()
    page.get_by_role("heading", name=link).first.wait_for()
    _settle(page)


def _click(page, name: str) -> None:
    page.get_by_role("button", name=name, exact=True).first.click()
    _settle(page)


def test_no_element_is_clipped_at_1400_px_on_any_page() -> None:
    require_chromium()
    clipped: list[str] = []
    with streamlit_server() as url, browser_page(viewport=(WIDTH_PX, 900)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        _settle(page)
        for panel in page.locator('[data-testid="stExpander"] summary').all():  # Summary's charts, in panels
            panel.click()
            _settle(page)
        clipped += _clipped(page, "Summary")
        for link in ("Percentile explorer", "Token timing", "Compare runs", "KV calculator", "Timing run",
                     "Cache experiments", "Retries and fairness", "Traces"):
            _open(page, link)
            clipped += _clipped(page, link)
        _open(page, "Diagnosis")
        for n in range(1, 6):  # the walk-through, revealed to its end (the profiles' sweeps)
            _click(page, "Reveal the answer")
        page.get_by_role("heading", name="The knee: each profile swept over load").wait_for()
        clipped += _clipped(page, "Diagnosis walk-through")
        for mode in ("Diagnose the records in use", "Diagnose a profile table"):  # the rule tables
            page.get_by_text(mode, exact=True).click()
            _settle(page)
            clipped += _clipped(page, f"Diagnosis {mode}")
        _open(page, "Load sweep")
        _click(page, "Run the sweep")
        clipped += _clipped(page, "Load sweep")
        _open(page, "Capacity planner")
        _click(page, "Plan")
        page.locator('[data-testid="stExpander"] summary', has_text="The numbers behind it").click()
        _settle(page)
        clipped += _clipped(page, "Capacity planner")
        _open(page, "Traces")
        _click(page, "Plan for the busiest minute")
        clipped += _clipped(page, "Traces planned")
        _open(page, "Summary")  # two other tools' exports: long names in the sidebar, Compare with two runs
        page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(
            [str(IMPORTERS / "vllm-serve-detailed.json"), str(IMPORTERS / "guidellm-0.8.1-errors.json")])
        page.get_by_text("guidellm-0.8.1-errors.json (upload").first.wait_for()
        _settle(page)
        clipped += _clipped(page, "Summary with uploads")
        for link in ("Compare runs", "Token timing"):
            _open(page, link)
            if link == "Compare runs":  # its charts, in a panel opened on request
                page.locator('[data-testid="stExpander"] summary', has_text="Distributions").click()
                _settle(page)
            clipped += _clipped(page, f"{link} with uploads")
    assert not clipped, f"{len(clipped)} clipped:\n" + "\n".join(clipped)
