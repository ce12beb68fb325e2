"""A timing run's folder read back with its scenario; the folder's files are ``servebench.records.rundir``'s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.errors import InputFormatError
from servebench.records import rundir
from servebench.records.loaders import load_table
from servebench.records.rundir import METADATA, RECORDS, STEPS  # noqa: F401  (the names pages show)
from servebench.records.steps import StepRow
from servebench.records.table import RecordTable
from servebench.serving.scenario import Scenario, parse_scenario


def write_run(out_dir: Path, records: list[dict[str, Any]], steps: list[StepRow], metadata: dict[str, Any]) -> None:
    """Write a timing run's records, step trace and metadata into ``out_dir`` (created if needed)."""
    rundir.write_run(out_dir, records, steps=steps, metadata=metadata)


@dataclass
class RunFolder:
    """A timing run read back: validated records, the step trace (rows under the schema's names), the run
    metadata and its scenario."""

    records: RecordTable
    window_start: float
    window_end: float
    steps: list[dict[str, Any]]
    metadata: dict[str, Any]
    scenario: Scenario


def read_run(run_dir: Path) -> RunFolder:
    """Read a folder written by ``servebench run``: records, step trace and metadata must all be there."""
    folder = rundir.read_folder(run_dir, require=("steps", "metadata"))
    metadata, steps, meta_path = folder.metadata or {}, folder.steps, run_dir / METADATA
    if not isinstance(metadata.get("scenario"), dict):
        raise InputFormatError(f"{meta_path}: no 'scenario' object; was it written by servebench run?")
    table, ws, we = load_table(folder.records_path)
    scenario = parse_scenario(metadata["scenario"], f"{meta_path}, scenario")
    return RunFolder(table, ws, we, steps.to_rows() if steps is not None else [], metadata, scenario)
