"""Plain row tables (step traces, sweep points): hostile files get one clear error naming file and line."""

from __future__ import annotations

import pytest

from servebench.errors import InputFormatError
from servebench.records.rows import rows_from_bytes


@pytest.mark.parametrize("data, name, fragment", [
    (b"[" * 100_000 + b"]" * 100_000, "deep.json", "deep.json: unreadable JSON: nested too deeply"),
    (b'{"a": 1}\n{"a": ' + b"7" * 5000 + b"}\n", "long.jsonl", "long.jsonl: line 2: unreadable JSON: Exceeds"),
    (b'step,time_s\n1,"0.5\n', "open.csv", "open.csv: malformed CSV: unexpected end of data"),
])
def test_hostile_row_files_raise_one_line(data, name, fragment):
    with pytest.raises(InputFormatError) as info:
        rows_from_bytes(data, name)
    assert str(info.value).startswith(fragment) and "\n" not in str(info.value)


def test_a_plain_csv_still_reads_numbers():
    assert rows_from_bytes(b'step,time_s,note\n1,0.5,"a, b"\n', "ok.csv") == [{"step": 1, "time_s": 0.5, "note": "a, b"}]
