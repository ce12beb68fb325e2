"""User text never drives a terminal or reorders a page: controls and bidi overrides shown as escapes everywhere."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.output.safetext import safe_markup, safe_text
from servebench.output.site import RunInput, SiteOptions, build_site
from servebench.output.site.html import json_for_script
from servebench.records.loaders import load_table

ESC_RED = "\x1b[31m"  # CSI by ESC [
TITLE = "\x1b]0;owned\x07"  # OSC: retitles the terminal window
CSI_C1 = "\x9b2J"  # CSI as one C1 character: clears the screen
BIDI = ("\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f")
# what must never reach a terminal, a page or a chart as itself
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
RAW_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def test_escape_sequences_and_bidi_controls_become_visible_escapes():
    assert safe_text(f"a{ESC_RED}b") == "a\\x1b[31mb"
    assert safe_text(TITLE) == "\\x1b]0;owned\\x07"
    assert safe_text(CSI_C1) == "\\x9b2J"
    assert safe_text("ID-\u202eFDP.exe") == "ID-<U+202E>FDP.exe"
    for ch in BIDI:
        assert safe_text(ch) == f"<U+{ord(ch):04X}>"
    assert safe_text("\ud800") == "<U+D800>"  # a lone surrogate cannot even be encoded to print
    assert safe_text("\x7f\x00") == "\\x7f\\x00"


def test_one_line_unless_multiline():
    assert safe_text("a\nb\r\tc") == "a\\nb\\r\\tc"
    assert safe_text("a\nb\r\tc\x1b", multiline=True) == "a\nb\r\tc\\x1b"


def test_ordinary_text_is_unchanged_and_not_copied():
    text = "GPU A100 · modèle 7B · 東京 · emoji 🚀 · [bracket] <tag> & \\x1b as typed"
    assert safe_text(text) is text
    assert safe_text(42) == "42"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_nothing_unsafe_survives_and_safe_text_is_kept(text: str):
    shown = safe_text(text)
    assert RAW_ONE_LINE.search(shown) is None
    assert RAW.search(safe_text(text, multiline=True)) is None
    shown.encode("utf-8")  # always printable: no lone surrogates
    if RAW_ONE_LINE.search(text) is None:
        assert shown == text


def test_markup_is_escaped_after_controls():
    assert safe_markup("[bold]x[/]\x1b[2J") == "\\[bold]x\\[/]\\x1b[2J"


def _hostile_csv(tmp_path: Path, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    path.write_text(
        "request_id,start,first_token,end,status,output_tokens,slice,error,gpu\n"
        f"id{ESC_RED}1,0,0.5,1,success,3,tenant{BIDI[4]}A,,A100{TITLE}\n"
        f"id{ESC_RED}1,1,,2,failed,,tenant{BIDI[4]}A,boom{CSI_C1}[bold]x[/],H100\u2066\n",
        encoding="utf-8")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True, timeout=120,
                          encoding="utf-8", errors="surrogateescape")


def test_cli_tables_show_user_text_escaped(tmp_path):
    res = _cli("summarize", str(_hostile_csv(tmp_path)))
    assert res.returncode == 0, res.stderr
    assert RAW_ONE_LINE.search(res.stdout.replace("\n", "")) is None
    assert "boom\\x9b2J[bold]x[/]" in res.stdout  # the cause, visible and not applied as markup
    assert "tenant<U+202E>A" in res.stdout
    assert "id\\x1b[31m1" in res.stdout  # the duplicate request ID


def test_cli_slice_by_an_extra_column_shows_its_values_escaped(tmp_path):
    res = _cli("summarize", str(_hostile_csv(tmp_path)), "--slice-by", "gpu")
    assert res.returncode == 0, res.stderr
    assert RAW_ONE_LINE.search(res.stdout.replace("\n", "")) is None
    assert "A100\\x1b]0;owned\\x07" in res.stdout and "H100<U+2066>" in res.stdout


def test_cli_error_line_neutralises_the_file_name(tmp_path):
    path = tmp_path / f"evil{BIDI[4]}vsc{ESC_RED}.csv"
    path.write_text("start,first_token,end,status,output_tokens\n0,0.5,2.5,success,9.0\n")
    res = _cli("summarize", str(path))
    assert res.returncode == 2
    line = res.stderr.strip()
    assert "\n" not in line and RAW_ONE_LINE.search(line) is None
    assert "evil<U+202E>vsc\\x1b[31m.csv, row 1, field 'output_tokens'" in line


def test_html_report_shows_controls_as_escapes_in_text_and_figures(tmp_path):
    table, ws, we = load_table(_hostile_csv(tmp_path, f"run{BIDI[4]}.csv"))
    run = RunInput(name=f"run{BIDI[4]}{ESC_RED}", path=str(tmp_path), kind="records", table=table,
                   window_start=ws, window_end=we, format="csv", warnings=[f"careful{TITLE}"])
    files = build_site([run], SiteOptions(title=f"T{BIDI[5]}", slice_by="gpu"))
    for path, data in files.items():
        if path.endswith(".html"):
            html = data.decode("utf-8")
            assert RAW.search(html) is None, path
    page = next(data.decode() for path, data in files.items() if path.startswith("run-"))
    assert "run&lt;U+202E&gt;\\x1b[31m" in page and "careful\\x1b]0;owned\\x07" in page
    assert "Slices by gpu" in page and "A100\\x1b]0;owned\\x07" in page


def test_figure_json_keeps_parsing_with_controls_made_visible():
    for value in (f"a{ESC_RED}b", f"x{BIDI[4]}y", CSI_C1, "back\\u001b as typed", "tab\tand\nline"):
        for ascii_only in (True, False):
            text = json_for_script(json.dumps({"name": value}, ensure_ascii=ascii_only))
            shown = json.loads(text)["name"]
            assert RAW.search(shown) is None and "<" not in text
            assert shown == safe_text(value, multiline=True)
