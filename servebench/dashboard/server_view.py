"""The server's own metrics on the dashboard: which upload is one, reading it, and its charts over time.

A load run writes its scrapes of the server's ``/metrics`` as ``server_metrics.parquet`` beside its records, and
AIPerf exports the same as ``server_metrics_export.parquet``. Uploaded with (or after) the record file, such a
file joins the record set on screen: Summary's over-time panel and Diagnosis then draw running, waiting, KV
use and preemptions under the client's TTFT and offered load, every chart on one time axis (seconds since the
window's start, the records' clock and the scrapes'), and Diagnosis weighs the server's evidence.
Pure but for :func:`read_server_metrics`, which reads the upload's bytes through a temporary file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from servebench.errors import InputFormatError
from servebench.output.figures.server_metrics import COLORS, server_panels
from servebench.output.figures.vegalite import CONFIG, UNIT_SCALE, Spec, _title, stacked_y
from servebench.records.rundir import SERVER_METRICS
from servebench.records.server_samples import AIPERF_FILE, ServerSamples, read_aiperf_parquet, read_samples
from servebench.records.table import RecordTable

SERVER_FILE_NAMES = (SERVER_METRICS, AIPERF_FILE)
SERVER_CHART_PX = 170  # each row's whole height: five rows read as one chart of 850 px
CHART_POINTS = 600  # TTFT points per chart: the shape survives, the browser stays quick on 100,000 records


def is_server_metrics_file(name: str) -> bool:
    """Return whether an upload's name says it holds a server's scrapes rather than records.

    >>> is_server_metrics_file("server_metrics.parquet"), is_server_metrics_file("run3_server_metrics_export.parquet")
    (True, True)
    >>> is_server_metrics_file("records.parquet")
    False
    """
    return name.lower().endswith(SERVER_FILE_NAMES)


def read_server_metrics(name: str, data: bytes) -> ServerSamples:
    """Read an uploaded server-metrics file (servebench's or AIPerf's layout, by its name).

    A file that cannot be read raises InputFormatError naming the upload (not the temporary file it went through).
    """
    with tempfile.TemporaryDirectory(prefix="sb-server-metrics-") as tmp:
        path = Path(tmp) / Path(name).name
        path.write_bytes(data)
        try:
            return read_aiperf_parquet(path) if name.lower().endswith(AIPERF_FILE) else read_samples(path)
        except InputFormatError as exc:
            raise InputFormatError(str(exc).replace(str(path), name)) from None


def server_charts(table: RecordTable, samples: ServerSamples, window_start: float, window_end: float,
                  unit: str = "ms") -> list[Spec]:
    """Return one chart per row of the server timeline (client TTFT, offered load, running and waiting, KV use,
    preemptions), each over the same x domain, seconds since the window's start, so their times line up.

    The client's TTFT is in ``unit``; a row the server does not publish is left out.
    """
    span = [0.0, max(float(window_end - window_start), 1e-9)]
    x = {"field": "x", "type": "quantitative", "title": "seconds since the window start", "scale": {"domain": span}}
    charts = []
    panels = server_panels(table, samples, window_start, window_end, max_points=CHART_POINTS)
    for i, panel in enumerate(panels):
        scale = UNIT_SCALE[unit] if i == 0 else 1.0  # the first row is the client's TTFT, in seconds
        title = f"client TTFT, {unit}" if i == 0 else panel.title
        frame = pd.DataFrame({"x": np.concatenate([line.x for line in panel.lines]),
                              "y": np.concatenate([line.y for line in panel.lines]) * scale,
                              "series": np.repeat([line.name for line in panel.lines],
                                                  [line.x.size for line in panel.lines])})
        names = [line.name for line in panel.lines]
        markers = panel.lines[0].markers
        mark: Spec = {"type": "point", "size": 10, "filled": True} if markers else \
            {"type": "line", "interpolate": "step-after"}
        charts.append({
            "usermeta": {"embedOptions": {"renderer": "canvas"}},  # as every dashboard chart: quicker than SVG
            "title": _title(title, [f"from {', '.join(sorted({line.source for line in panel.lines}))}"]),
            "height": SERVER_CHART_PX, "config": CONFIG, "datasets": {"rows": frame}, "data": {"name": "rows"},
            "mark": mark,
            "encoding": {"x": x, "y": {**stacked_y(title), "scale": {"zero": True}},
                         "color": {"field": "series", "type": "nominal", "title": None, "sort": names,
                                   "scale": {"domain": names, "range": [COLORS[n] for n in names]},
                                   "legend": {"orient": "right"} if len(names) > 1 else None},
                         "tooltip": [{"field": "series"}, {"field": "x", "title": "s", "format": ".4~g"},
                                     {"field": "y", "title": title, "format": ",.4~g"}]},
        })
    return charts
