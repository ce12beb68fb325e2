"""Small tables as Markdown (GitHub tables): shown by the dashboard's markdown element, no table component.

Streamlit's table component (``st.table``) loads 0.75 MB of Arrow code in the browser the first time a page
shows one; a Markdown table is drawn by the markdown element every page already uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pandas as pd

from servebench.formatting import NO_DATA, fmt

# every ASCII punctuation mark CommonMark lets a backslash escape: a cell's text is shown as it is, never markup
_MARKUP = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&=\"'])")
_UNESCAPE = re.compile(r"\\(.)")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
# a number as fmt or fmt_share wrote it ("1,235", "0.2", "1.235e-05", "50%", "-∞"), or no data ("—")
_FORMATTED_NUMBER = re.compile(r"-?(\d[\d,]*(\.\d+)?(e[-+]\d+)?%?|∞)|" + NO_DATA)


def _cell(value: object) -> str:
    """Return a cell's text with Markdown punctuation escaped and line breaks as spaces."""
    return _MARKUP.sub(r"\\\1", " ".join(str(value).splitlines()))


def markdown_table(frame: pd.DataFrame) -> str:
    """Return ``frame`` as a Markdown table without its index: numbers formatted by ``fmt`` and right-aligned.

    A column of numbers a caller formatted already (every cell as ``fmt`` or ``fmt_share`` writes one) is
    right-aligned too, so its digits line up as a numeric column's do.

    >>> print(markdown_table(pd.DataFrame({"status": ["success"], "count": [2900], "share": ["96.7%"]})))
    | status | count | share |
    | :--- | ---: | ---: |
    | success | 2,900 | 96\\.7% |
    """
    numeric = [(pd.api.types.is_numeric_dtype(frame[name]) and not pd.api.types.is_bool_dtype(frame[name]))
               or _formatted_numbers(frame[name]) for name in frame.columns]
    lines = ["| " + " | ".join(_cell(name) for name in frame.columns) + " |",
             "| " + " | ".join("---:" if num else ":---" for num in numeric) + " |"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(fmt(value) if num else value) for value, num in zip(row, numeric))
                     + " |")
    return "\n".join(lines)


def _formatted_numbers(column: pd.Series) -> bool:
    """Whether every cell is a number as ``fmt`` writes one (or no data), and some cell is a number."""
    cells = column.tolist()
    return (bool(cells) and all(isinstance(c, str) and _FORMATTED_NUMBER.fullmatch(c) for c in cells)
            and any(c != NO_DATA for c in cells))


def read_markdown_table(text: str) -> pd.DataFrame:
    """Return the table ``markdown_table`` wrote, every cell as the text shown (the inverse, for tests and checks).

    Lines that are not table rows (a title above the table) are left out.

    >>> read_markdown_table(markdown_table(pd.DataFrame({"a|b": ["x*"], "n": [1234]}))).to_dict("list")
    {'a|b': ['x*'], 'n': ['1,234']}
    """
    rows = [[_UNESCAPE.sub(r"\1", cell.strip()) for cell in _CELL_SPLIT.split(line.strip()[1:-1])]
            for line in text.strip().splitlines() if line.startswith("|")]
    return pd.DataFrame(rows[2:], columns=rows[0])


def markdown_tables(texts: Iterable[str]) -> list[pd.DataFrame]:
    """Return the tables among Markdown texts (a page's markdown elements), read by ``read_markdown_table``.

    >>> [t.to_dict("list") for t in markdown_tables(["A title", "**Counts**\\n| n |\\n| ---: |\\n| 3 |"])]
    [{'n': ['3']}]
    """
    return [read_markdown_table(text) for text in texts if "\n| " in f"\n{text}"]
