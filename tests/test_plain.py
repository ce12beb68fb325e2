"""One number formatter for people: the same rule in the terminal, the figures, the HTML site and the dashboard."""

from __future__ import annotations

import io
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from servebench import formatting
from servebench.analysis.summary import build_report
from servebench.output import plain, terminal
from servebench.output.figures import summary as figures_summary
from servebench.output.site.html import cell, table
from servebench.records.schema import parse_objects
from servebench.records.table import validate


def test_every_surface_uses_the_one_formatter() -> None:
    from servebench.analysis import compare, diagnosis, walkthrough

    assert terminal.fmt is formatting.fmt and figures_summary.fmt is formatting.fmt
    assert figures_summary.fmt_share is formatting.fmt_share
    assert compare.fmt is diagnosis.fmt is walkthrough.fmt is formatting.fmt
    assert not hasattr(plain, "fmt")  # one home: output.plain keeps words, not numbers


def test_no_data_and_infinity_read_the_same_everywhere() -> None:
    assert [formatting.fmt(v) for v in (None, math.nan, math.inf, -math.inf)] == ["—", "—", "∞", "-∞"]
    assert [cell(v) for v in (None, math.nan, math.inf)] == ["—", "—", "∞"]  # the HTML site's cells
    assert "<td class=\"num\">—</td>" in str(table(["x"], [[None]]))
    assert formatting.fmt_share(None) == formatting.fmt_share(math.nan) == formatting.NO_DATA


def test_terminal_report_shows_a_failure_aware_infinity_as_the_dashboard_does(r1_r4) -> None:
    report = build_report(validate(parse_objects(r1_r4), 0, 10), 0, 10)
    out = io.StringIO()
    terminal.print_report(Console(file=out, width=250, color_system=None), report)
    text = out.getvalue()
    assert "∞" in text and " inf " not in text


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_finite_number_reads_back_within_its_shown_precision(x: float) -> None:
    text = formatting.fmt(x)
    back = float(text.replace(",", ""))
    assert abs(back - x) <= 5e-4 * abs(x) + 1e-300, (x, text)
