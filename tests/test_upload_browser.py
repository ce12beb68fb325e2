"""Bad uploads in a real browser (issue 36): a binary file is named as one, and each bad file names itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import browser_page, require_chromium, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIMEOUT_MS = 120_000
IDLE = """() => document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'"""


def _upload(page, path: Path) -> str:
    """Upload one more file to the records uploader and return the error it gets."""
    page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(str(path))
    page.get_by_text(f"Showing {path.name} (upload").first.wait_for()
    page.wait_for_timeout(300)
    page.wait_for_function(IDLE, timeout=TIMEOUT_MS, polling=100)
    return "\n".join(page.locator('[data-testid="stAlertContentError"]').all_inner_texts())


def test_a_binary_file_and_a_second_bad_file_each_get_their_own_message(tmp_path: Path) -> None:
    require_chromium()
    binary = tmp_path / "export.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)  # valid UTF-8, read as a CSV it said 'missing columns'
    first = tmp_path / "run1.csv"
    first.write_text("start,end\n0,1\n")
    copy = tmp_path / "run1 (copy).csv"  # the same bytes: it was held already, so the first file's name showed
    copy.write_bytes(first.read_bytes())
    other = tmp_path / "run2.csv"
    other.write_text("start,end,status\n0,1,weird\n")
    with streamlit_server() as url, browser_page(viewport=(1400, 1000)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        assert "export.bin: not a text file (a NUL byte at offset 0)" in _upload(page, binary)
        assert "run1.csv: missing column 'status'" in _upload(page, first)
        shown = _upload(page, copy)
        assert "run1 (copy).csv: missing column 'status'" in shown and "\nrun1.csv" not in f"\n{shown}"
        assert "run2.csv, row 1, field 'status'" in _upload(page, other)
        assert page.get_by_text("Still showing requests_sample.csv").count() == 1  # the last good set stays
