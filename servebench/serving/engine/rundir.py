"""A timing run's folder: ``records.jsonl``, ``steps.jsonl`` and ``metadata.json`` (the contract)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servebench.errors import ConfigError, InputFormatError
from servebench.records.loaders import load_table
from servebench.records.table import RecordTable
from servebench.records.rows import read_rows
from servebench.serving.scenario import Scenario, parse_scenario
from servebench.serving.engine.loop import StepRow

RECORDS = "records.jsonl"
STEPS = "steps.jsonl"
METADATA = "metadata.json"


def step_row_dict(row: StepRow) -> dict[str, Any]:
    """Return a trace row for steps.jsonl.

    ``kv_tokens`` (KV tokens read by the decoding sequences) is also written as
    ``kv_tokens_read`` and ``duration_s`` as ``duration``, the names ``stepmodel.fit_step_model``
    reads, so a reader that fits the raw file gets the right columns.
    """
    d = asdict(row)
    d["duration"] = d["duration_s"]
    d["kv_tokens_read"] = d["kv_tokens"]
    return d


def write_run(out_dir: Path, records: list[dict[str, Any]], steps: list[StepRow], metadata: dict[str, Any]) -> None:
    """Write the three files of a timing run into ``out_dir`` (created if needed)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / RECORDS, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec) + "\n")
        with open(out_dir / STEPS, "w", encoding="utf-8") as fh:
            for row in steps:
                fh.write(json.dumps(step_row_dict(row)) + "\n")
        (out_dir / METADATA).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the run to {out_dir}: {exc.strerror or exc}") from None


@dataclass
class RunFolder:
    """A timing run read back: validated records, the step trace, the contract and its scenario."""

    records: RecordTable
    window_start: float
    window_end: float
    steps: list[dict[str, Any]]
    metadata: dict[str, Any]
    scenario: Scenario


def read_run(run_dir: Path) -> RunFolder:
    """Read a folder written by ``servebench run``."""
    if not run_dir.is_dir():
        raise InputFormatError(f"{run_dir}: not a folder (give the -o folder of servebench run)")
    missing = [n for n in (RECORDS, STEPS, METADATA) if not (run_dir / n).is_file()]
    if missing:
        raise InputFormatError(f"{run_dir}: missing {', '.join(missing)}; is it a folder written by servebench run?")
    table, ws, we = load_table(run_dir / RECORDS)
    steps = read_rows(run_dir / STEPS)
    try:
        metadata = json.loads((run_dir / METADATA).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFormatError(f"{run_dir / METADATA}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("scenario"), dict):
        raise InputFormatError(f"{run_dir / METADATA}: no 'scenario' object; was it written by servebench run?")
    scenario = parse_scenario(metadata["scenario"], f"{run_dir / METADATA}, scenario")
    return RunFolder(table, ws, we, steps, metadata, scenario)
