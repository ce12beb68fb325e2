"""Summary's small tables as Markdown: every cell's text comes back as written, numbers formatted by fmt."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from servebench.formatting import fmt, fmt_share
from servebench.output.figures.markdown_table import markdown_table, read_markdown_table

TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=12).map(str.strip)


@settings(max_examples=60, deadline=None)
@given(labels=st.lists(TEXT, min_size=1, max_size=4),
       numbers=st.lists(st.one_of(st.integers(-10**9, 10**9), st.floats(allow_nan=True, allow_infinity=True)),
                        min_size=4, max_size=4))
def test_every_cell_reads_back_as_shown(labels: list[str], numbers: list[float]) -> None:
    frame = pd.DataFrame({"label": labels, "value": numbers[:len(labels)]})
    back = read_markdown_table(markdown_table(frame))
    assert list(back.columns) == ["label", "value"]
    assert list(back["label"]) == labels
    assert list(back["value"]) == [fmt(v) for v in frame["value"]]


@settings(max_examples=60, deadline=None)
@given(cells=st.lists(TEXT, min_size=1, max_size=5))
def test_user_text_is_never_markup(cells: list[str]) -> None:
    """A cell's text ('|', '*', '[x](y)', '<b>') is shown as text: one row, one cell each, no emphasis, link or HTML."""
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown_table(pd.DataFrame({"cause": cells})))
    assert html.count("<tr>") == len(cells) + 1
    assert html.count("<td") == len(cells)
    for tag in ("<em>", "<strong>", "<a ", "<code>", "<b>", "<s>", "<del>"):
        assert tag not in html


def test_numbers_are_right_aligned_and_formatted() -> None:
    text = markdown_table(pd.DataFrame({"status": ["success", "timeout"], "count": [2900, 100],
                                        "share": [0.96667, math.nan]}))
    assert text.splitlines()[1] == "| :--- | ---: | ---: |"
    assert "| success | 2,900 | 0\\.9667 |" in text
    assert "| timeout | 100 | — |" in text


@settings(max_examples=60, deadline=None)
@given(numbers=st.lists(st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True)),
                        min_size=1, max_size=6))
def test_numbers_formatted_before_the_table_are_right_aligned_as_numbers_are(numbers: list[float]) -> None:
    """A caller's fmt'd column (the Load sweep's) lines up as a numeric one; text stays left, even with digits."""
    shown = [fmt(v) for v in numbers]
    frame = pd.DataFrame({"found by": ["grid"] * len(numbers), "raw": numbers, "shown": shown,
                          "share": [fmt_share(0.5)] * len(numbers), "interval": ["0.2 [0.1, 0.3]"] * len(numbers)})
    align = markdown_table(frame).splitlines()[1]
    every_number = any(s != "—" for s in shown)
    assert align == f"| :--- | ---: | {'---:' if every_number else ':---'} | ---: | :--- |"
    assert list(read_markdown_table(markdown_table(frame))["shown"]) == shown  # the text is kept as it was
