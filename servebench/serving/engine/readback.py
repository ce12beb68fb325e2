"""A timing run read back: the run folder (:class:`servebench.records.rundir.RunFolder`), its records validated
and the scenario its metadata froze.

The folder's files are read and written by :mod:`servebench.records.rundir` alone; this module adds what only
the serving layer knows: the scenario, parsed from the metadata's ``scenario`` object.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.errors import InputFormatError
from servebench.records import rundir
from servebench.records.loaders import load_table
from servebench.records.table import RecordTable
from servebench.serving.scenario import Scenario, parse_scenario


@dataclass(frozen=True)
class MeasuredRun:
    """A folder written by ``servebench run``: its files, its records (validated, with their window) and scenario."""

    folder: rundir.RunFolder
    records: RecordTable
    window_start: float
    window_end: float
    scenario: Scenario

    @property
    def metadata(self) -> dict[str, Any]:
        """The run metadata (``metadata.json``)."""
        return self.folder.metadata or {}

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The step trace as rows under the schema's names."""
        return self.folder.steps.to_rows() if self.folder.steps is not None else []


def read_run(run_dir: Path) -> MeasuredRun:
    """Read a folder written by ``servebench run``: records, step trace and metadata must all be there."""
    folder = rundir.read_folder(run_dir, require=("steps", "metadata"))
    metadata, meta_path = folder.metadata or {}, folder.metadata_path
    if not isinstance(metadata.get("scenario"), dict):
        raise InputFormatError(f"{meta_path}: no 'scenario' object; was it written by servebench run?")
    table, ws, we = load_table(folder.records_path)
    return MeasuredRun(folder, table, ws, we, parse_scenario(metadata["scenario"], f"{meta_path}, scenario"))
