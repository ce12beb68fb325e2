"""Summary's overview as three small static SVG pictures: every request by outcome, p95 over time, the CDFs.

The overview is the first screen: it must be drawn with the page, not after a chart library has loaded.
As Vega-Lite charts it made the browser fetch and compile Vega (about a bare page's first load again, measured
in benchmarks/dashboard.py) and build three views before the first screen was complete; as SVG in the page's
Markdown it costs nothing beyond its own few kilobytes. The same numbers, interactive (zoom, tooltips), are one
click away in Summary's chart panels. Pure: data in, SVG text out; every text is a number, a unit or a fixed
word (no user text, so nothing to escape but through :func:`_text`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

from servebench.formatting import fmt
from servebench.output.figures.over_time import OverTimeBins
from servebench.output.figures.records import STATUS_COLORS, CdfSeries
from servebench.output.figures.vegalite import UNIT_SCALE

WIDTH, HEIGHT = 260, 250  # a line picture's own units (it scales to its column: half the overview's charts)
BAR_WIDTH = 520  # the outcome bar's: it spans both line pictures
LEFT, RIGHT, TOP, BOTTOM = 48, 10, 44, 62  # the plot's margins: ticks and titles left and below, a legend under
FONT = "font-family:'Source Sans Pro',sans-serif"
GREY = "#757575"
METRIC_COLORS: dict[str, str] = {"latency": "#0d47a1", "ttft": "#ef6c00"}
METRIC_NAMES: dict[str, str] = {"latency": "Latency", "ttft": "TTFT"}


def _text(x: float, y: float, text: str, *, size: int = 11, anchor: str = "start", color: str = GREY,
          weight: str = "normal", rotate: bool = False) -> str:
    turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{color}" '
            f'font-weight="{weight}"{turn}>{escape(text)}</text>')


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Return round tick values (1, 2 or 5 times a power of ten apart) from ``low`` to at most ``high``.

    >>> nice_ticks(0, 23_043), nice_ticks(0, 1), nice_ticks(5, 5)
    ([0.0, 10000.0, 20000.0], [0.0, 0.5, 1.0], [5.0])
    """
    if not high > low:
        return [float(low)]
    raw = (high - low) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 12) for i in range(int((high - first) / step + 1e-9) + 1)]


def _frame(title: str, subtitle: str, body: list[str], label: str, width: int = WIDTH, height: int = HEIGHT) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="{escape(label)}" style="{FONT};max-width:{width * 1.5:.0f}px">'
            + _text(0, 14, title, size=14, color="#31333f", weight="600") + _text(0, 29, subtitle, size=10)
            + "".join(body) + "</svg>")


def _legend(items: Sequence[tuple[str, str]], y: float) -> list[str]:
    out, x = [], float(LEFT)
    for name, color in items:
        out.append(f'<rect x="{x:.1f}" y="{y - 8:.1f}" width="10" height="10" fill="{color}"/>')
        out.append(_text(x + 14, y, name, size=11))
        x += 24 + 6.5 * len(name)
    return out


def line_picture(lines: Mapping[str, tuple[np.ndarray, np.ndarray]], colors: Mapping[str, str], *, title: str,
                 subtitle: str, x_title: str, y_title: str, x_domain: tuple[float, float],
                 y_domain: tuple[float, float], step: bool = False, y_percent: bool = False) -> str:
    """Return lines (name -> (x, y); NaN breaks a line) on one plot with round ticks, axis titles and a legend.

    >>> svg = line_picture({"a": (np.array([0.0, 1.0, 2.0]), np.array([1.0, np.nan, 3.0]))}, {"a": "#000"},
    ...                    title="t", subtitle="s", x_title="x", y_title="y", x_domain=(0, 2), y_domain=(0, 3))
    >>> svg.count("<polyline"), "NaN" in svg
    (2, False)
    """
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x0, x1 = x_domain
    y0, y1 = y_domain
    sx = w / (x1 - x0) if x1 > x0 else 0.0
    sy = h / (y1 - y0) if y1 > y0 else 0.0

    def px(x: float) -> float:
        return LEFT + (x - x0) * sx

    def py(y: float) -> float:
        return TOP + h - (y - y0) * sy

    body = [f'<rect x="{LEFT}" y="{TOP}" width="{w}" height="{h}" fill="none" stroke="#ddd"/>']
    for v in nice_ticks(y0, y1):
        body.append(f'<line x1="{LEFT}" x2="{LEFT + w}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="#eee"/>')
        body.append(_text(LEFT - 4, py(v) + 4, f"{v:.0%}" if y_percent else fmt(v), size=10, anchor="end"))
    for v in nice_ticks(x0, x1):
        body.append(_text(px(v), TOP + h + 14, fmt(v), size=10, anchor="middle"))
    body.append(_text(LEFT + w / 2, TOP + h + 30, x_title, anchor="middle"))
    body.append(_text(12, TOP + h / 2, y_title, anchor="middle", rotate=True))
    for name, (xs, ys) in lines.items():
        if step and xs.size:  # step-after: each value holds until the next x
            xs, ys = np.repeat(xs, 2)[1:], np.repeat(ys, 2)[:-1]
        finite = np.isfinite(ys)
        runs = np.split(np.arange(xs.size), np.flatnonzero(np.diff(finite.astype(np.int8))) + 1)
        for run in runs:
            if run.size and finite[run[0]]:
                points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs[run], ys[run]))
                body.append(f'<polyline points="{points}" fill="none" stroke="{colors[name]}" stroke-width="1.6"/>')
    body += _legend([(name, colors[name]) for name in lines], HEIGHT - 6)
    return _frame(title, subtitle, body, f"{title}: {', '.join(lines)}")


def over_time_picture(b: OverTimeBins, unit: str = "ms") -> str:
    """Return latency and TTFT p95 of the successes ending in each bin, against seconds since the window start."""
    k = UNIT_SCALE[unit]
    lines = {METRIC_NAMES[key]: (b.mids_s, np.array([np.nan if v is None else v * k for v in b.percentiles_s[key][95]],
                                                    dtype=np.float64)) for key in METRIC_NAMES}
    top = max((float(np.nanmax(y)) for _, y in lines.values() if np.isfinite(y).any()), default=1.0)
    span = float(b.mids_s[-1] + b.width_s / 2) if b.mids_s.size else 1.0
    return line_picture(lines, {METRIC_NAMES[key]: METRIC_COLORS[key] for key in METRIC_NAMES},
                        title=f"p95 over time ({unit})", subtitle=f"{b.mids_s.size} bins of {b.width_s:.3g} s, by end",
                        x_title="s since the window start", y_title=f"p95, {unit}", x_domain=(0.0, span),
                        y_domain=(0.0, top * 1.05 or 1.0))


def cdf_picture(series: Mapping[str, CdfSeries], unit: str = "ms") -> str:
    """Return the CDFs of success latency and TTFT on one plot (``series['latency']``, ``series['ttft']``)."""
    k = UNIT_SCALE[unit]
    drawn = {METRIC_NAMES[key]: (series[key].x * k, series[key].y) for key in METRIC_NAMES if series[key].n}
    top = max((float(x.max()) for x, _ in drawn.values()), default=1.0)
    return line_picture(drawn, {METRIC_NAMES[key]: METRIC_COLORS[key] for key in METRIC_NAMES},
                        title=f"Latency and TTFT CDF ({unit})", subtitle=f"n = {series['latency'].n:,} successes",
                        x_title="milliseconds" if unit == "ms" else "seconds", y_title="share of successes",
                        x_domain=(0.0, top or 1.0), y_domain=(0.0, 1.0), step=True, y_percent=True)


def outcome_picture(by_status: Mapping[str, int], words: Mapping[str, str]) -> str:
    """Return one bar of every request split by status (in ``STATUS_COLORS`` order), so its parts add up to offered.

    >>> svg = outcome_picture({"success": 3, "timeout": 1}, {"success": "Completed", "timeout": "Timed out"})
    >>> "Every request by outcome (4 offered)" in svg, svg.count("<rect")
    (True, 4)
    """
    offered = sum(by_status.values())
    names = [name for name in STATUS_COLORS if by_status.get(name, 0)]
    w, y, h = BAR_WIDTH - LEFT - 3 * RIGHT, 40, 30  # room right of the bar for its last tick's label
    body, x = [], float(LEFT)
    for name in names:
        part = w * by_status[name] / offered
        body.append(f'<rect x="{x:.2f}" y="{y}" width="{part:.2f}" height="{h}" fill="{STATUS_COLORS[name]}">'
                    f'<title>{escape(words.get(name, name))}: {by_status[name]:,}</title></rect>')
        x += part
    for v in nice_ticks(0, offered):
        body.append(_text(LEFT + w * v / max(offered, 1), y + h + 14, fmt(v), size=10, anchor="middle"))
    legend = _legend([(words.get(name, name), STATUS_COLORS[name]) for name in names], y + h + 36)
    return _frame(f"Every request by outcome ({offered:,} offered)", "", body + legend,
                  f"Every request by outcome: {offered:,} offered", BAR_WIDTH, y + h + 44)
