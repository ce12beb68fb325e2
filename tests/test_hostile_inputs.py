"""Hostile record files through the loader API and the CLI: never a traceback, and defects named.

The corpus (``tests/hostile.py``) is built by code into a temporary folder. Each file must either load
or fail with a ServebenchError (CLI: exit 2 and one line) that names the file; where the defect sits
in one row and field, the error names them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hostile import FILE, Case, corpus, write_corpus

from servebench.analysis.summary import SLO, build_report
from servebench.cli.core import main
from servebench.errors import ServebenchError
from servebench.records.loaders import read_path, to_table

CASES = corpus()


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory) -> list[tuple[Path, Case]]:
    return write_corpus(tmp_path_factory.mktemp("hostile"))


def test_the_corpus_covers_every_format_with_over_a_hundred_files():
    by_ext: dict[str, int] = {}
    for case in CASES:
        ext = case.name.rsplit(".", 1)[1]
        by_ext[ext] = by_ext.get(ext, 0) + 1
    assert len(CASES) >= 100
    assert set(by_ext) == {"csv", "json", "jsonl", "parquet"} and min(by_ext.values()) >= 20, by_ext
    assert sum(c.row is not None and c.row != FILE for c in CASES) >= 60  # most defects sit in a known place


def _expect_error_names_defect(message: str, case: Case) -> None:
    assert case.name in message, message
    if isinstance(case.row, int):
        assert f"row {case.row}" in message, message
    if case.field is not None:
        assert f"field '{case.field}'" in message, message


def _check_loader(path: Path, case: Case) -> None:
    try:
        loaded = read_path(path)
        table, ws, we = to_table(loaded)
        build_report(table, ws, we, SLO())
    except ServebenchError as exc:
        assert not case.ok, f"must load: {exc}"
        message = str(exc)
        assert "\n" not in message, message
        _expect_error_names_defect(message, case)
    except Exception as exc:  # noqa: BLE001 - any other exception is the bug this test exists for
        raise AssertionError(f"{type(exc).__name__}: {exc}") from exc
    else:
        assert case.row is None, f"accepted, but its defect is at row {case.row}, field {case.field}"
        if case.warning:
            assert any(case.warning in w for w in loaded.warnings), loaded.warnings


def _failures(hostile_files: list[tuple[Path, Case]], check) -> list[str]:
    """Run ``check`` on every file; return one line per file it failed on (all of them, not the first)."""
    failures = []
    for path, case in hostile_files:
        try:
            check(path, case)
        except AssertionError as exc:
            failures.append(f"{case.name}: {exc}".splitlines()[0][:300])
    return failures


def test_loader_api_loads_or_raises_a_servebench_error_naming_the_defect(hostile_files):
    failures = _failures(hostile_files, _check_loader)
    assert not failures, "\n".join(failures)


def test_cli_exits_0_or_2_with_one_line_naming_the_file(hostile_files, capsys):
    def check(path: Path, case: Case) -> None:
        try:
            main(["summarize", str(path), "--json"])
            code = 0
        except SystemExit as stop:
            code = stop.code
        except Exception as exc:  # noqa: BLE001 - a traceback in the real CLI
            capsys.readouterr()
            raise AssertionError(f"{type(exc).__name__}: {exc}") from exc
        out, err = capsys.readouterr()
        if code == 0:
            assert case.row is None, f"exit 0, but its defect is at row {case.row}, field {case.field}"
            assert out.lstrip().startswith("{")
        else:
            assert code == 2, f"exit {code}: {err}"
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), err
            _expect_error_names_defect(lines[0], case)

    failures = _failures(hostile_files, check)
    assert not failures, "\n".join(failures)


SAMPLE = ["huge_int_start.json", "uint64_max_tokens.parquet"]  # each process costs a second or more of imports


def test_a_sample_through_the_real_process(hostile_files):
    by_name = {case.name: (path, case) for path, case in hostile_files}
    for name in SAMPLE:
        path, case = by_name[name]
        res = subprocess.run([sys.executable, "-m", "servebench", "summarize", str(path), "--json"],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and res.stdout == "", (name, res.stdout, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        _expect_error_names_defect(res.stderr, case)


@pytest.mark.slow  # about 30 s: DuckDB reads each of the 200-odd files on its own
def test_every_file_gives_the_same_outcome_in_both_engines(hostile_files):
    """The whole corpus through --engine memory and --engine duckdb: the same report and warnings, or the same error."""
    from servebench.analysis.record_sets import summarize_path

    def outcome(path: Path, engine: str) -> tuple:
        try:
            done = summarize_path(path, engine=engine)
        except ServebenchError as exc:
            return type(exc).__name__, str(exc)
        return done.report.model_dump_json(), done.warnings

    def check(path: Path, case: Case) -> None:
        assert outcome(path, "duckdb") == outcome(path, "memory"), "the engines differ"

    failures = _failures(hostile_files, check)
    assert not failures, "\n".join(failures)
