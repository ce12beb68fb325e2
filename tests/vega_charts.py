"""Read the Vega-Lite charts an AppTest page drew (each spec by its title, its datasets as frames); check a spec."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pyarrow as pa
from streamlit.testing.v1 import AppTest

Chart = tuple[dict[str, Any], dict[str, pd.DataFrame]]


def drawn_list(at: AppTest) -> list[Chart]:
    """Return (spec, {dataset name: frame}) of each of the page's Vega-Lite charts, in page order.

    Streamlit sends a spec's ``datasets`` frames beside it as Arrow; they are read back here.
    """
    return [(json.loads(c.proto.spec), {d.name: pa.ipc.open_stream(d.data.data).read_pandas() for d in c.proto.datasets})
            for c in at.get("vega_lite_chart")]


def drawn_charts(at: AppTest) -> dict[str, Chart]:
    """Return the page's Vega-Lite charts by title (the last of charts that share one)."""
    return {spec["title"]["text"]: (spec, frames) for spec, frames in drawn_list(at)}


def valid(spec: dict[str, Any]) -> dict[str, Any]:
    """Return ``spec`` with its frames as rows, after checking it against the Vega-Lite schema (Altair's) and JSON."""
    import altair as alt  # ships with Streamlit

    plain = dict(spec)
    if "datasets" in plain:
        plain["datasets"] = {k: json.loads(v.to_json(orient="records")) for k, v in spec["datasets"].items()}
    kind = alt.LayerChart if "layer" in plain else alt.FacetChart if "facet" in plain else alt.Chart
    kind.from_dict(plain)  # raises on anything not Vega-Lite
    json.dumps(plain)
    return plain
