"""The run folder: one probe order for every command, and folders written by simulate and run read back alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from typer.testing import CliRunner

from servebench.cli.core import app
from servebench.errors import ConfigError, InputFormatError
from servebench.output.site.inputs import load_run
from servebench.records.loaders import encode_records, load_table, read_path
from servebench.records.rundir import (
    RECORD_FILES,
    STEP_FILES,
    read_folder,
    read_sends,
    read_trace,
    records_file,
    write_run,
)
from servebench.records.schema import parse_objects
from servebench.records.steps import NAMES, parse_steps
from servebench.records.table import validate

SCENARIOS = Path(__file__).resolve().parents[1] / "sample_data" / "scenarios"


def _records(n: int) -> list[dict[str, object]]:
    return [{"request_id": f"r{i}", "start": float(i), "first_token": i + 0.5, "end": i + 1.0, "status": "success",
             "prompt_tokens": 10, "output_tokens": 5} for i in range(n)]


def _write_every_format(folder: Path, formats: dict[str, int]) -> None:
    """Write records.<fmt> with a different number of records each, so the file read can be told by its count."""
    folder.mkdir(parents=True, exist_ok=True)
    for fmt, n in formats.items():
        table = validate(parse_objects(_records(n), fmt), 0.0, float(n))
        (folder / f"records.{fmt}").write_bytes(encode_records(table, fmt))


def _summarized_requests(folder: Path) -> int:
    res = CliRunner().invoke(app, ["summarize", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    return int(json.loads(res.stdout)["summary"]["requests"])


@pytest.mark.parametrize("formats", [{"jsonl": 3, "parquet": 4, "csv": 5, "json": 6},
                                     {"parquet": 4, "csv": 5, "json": 6},  # the two old orders disagreed here
                                     {"csv": 5, "json": 6}])
def test_summarize_and_report_read_the_same_file_of_a_folder(tmp_path: Path, formats: dict[str, int]) -> None:
    folder = tmp_path / "run"
    _write_every_format(folder, formats)
    first = next(name for name in RECORD_FILES if name.split(".")[1] in formats)
    assert records_file(folder).name == first
    run = load_run(folder)
    assert run.files[0] == first and run.table is not None
    assert len(run.table) == _summarized_requests(folder) == formats[first.split(".")[1]]
    assert read_path(folder).rows.n == formats[first.split(".")[1]]


def test_a_folder_without_records_names_the_files_it_looked_for(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="a folder without records.jsonl or records.parquet"):
        records_file(tmp_path)
    (tmp_path / "records.jsonl").write_text(json.dumps(_records(1)[0]) + "\n")
    with pytest.raises(InputFormatError, match="missing steps.jsonl, metadata.json"):
        read_folder(tmp_path, require=("steps", "metadata"))
    with pytest.raises(InputFormatError, match=r"no sends\.jsonl"):
        read_sends(tmp_path)
    (tmp_path / "metadata.json").write_text("[1, 2]")
    with pytest.raises(InputFormatError, match=r"metadata\.json: expected a JSON object"):
        read_folder(tmp_path)


def test_write_run_round_trips_records_steps_metadata_and_sends(tmp_path: Path) -> None:
    steps = parse_steps([{"start_s": 0.0, "duration_s": 0.01, "running": 1}], "test")
    sends = [{"request_id": "r0", "intended_s": 0.0, "sent_s": 0.001, "lag_s": 0.001}]
    files = write_run(tmp_path / "run", _records(2), steps=steps, metadata={"kind": "servebench load"}, sends=sends)
    assert sorted(files) == ["metadata", "records", "sends", "steps"]
    folder = read_folder(tmp_path / "run", require=("steps", "metadata", "sends"))
    assert folder.metadata == {"kind": "servebench load"} and folder.steps is not None
    assert folder.steps.to_rows() == steps.to_rows() and read_sends(tmp_path / "run") == sends
    table, _, _ = load_table(tmp_path / "run")
    assert table.request_id.tolist() == ["r0", "r1"]
    assert load_run(tmp_path / "run").kind == "load run"


def _few_requests_of_tiny_cpu(tmp_path: Path) -> Path:
    doc = yaml.safe_load((SCENARIOS / "tiny_cpu.yaml").read_text())
    doc["workload"]["num_requests"] = 6
    doc["workload"]["arrival"]["rate_rps"] = 40
    path = tmp_path / "tiny_few.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_simulate_and_run_of_one_scenario_write_the_same_step_columns(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    scenario = _few_requests_of_tiny_cpu(tmp_path)
    sim, real = tmp_path / "sim", tmp_path / "run"
    res = CliRunner().invoke(app, ["simulate", str(scenario), "-o", str(sim), "--json"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["run", str(scenario), "-o", str(real), "--device", "cpu", "--json"])
    assert res.exit_code == 0, res.output
    headers = []
    for folder in (sim, real):
        lines = (folder / STEP_FILES[0]).read_text().splitlines()
        headers.append([list(json.loads(line)) for line in lines])
        assert all(h == list(NAMES) for h in headers[-1])  # every row, every column, in the schema's order
    sim_trace, run_trace = read_trace(sim), read_trace(real)
    assert sim_trace.compute_s is None and run_trace.has("compute_s")  # null where the simulator cannot know it
    for trace in (sim_trace, run_trace):
        assert all(trace.has(c) for c in NAMES if not c.startswith("compute"))
    # the records of both folders read back through the same reader
    for folder in (sim, real):
        assert read_path(folder).rows.n == 6
        assert load_run(folder).steps is not None


def test_an_older_folder_with_a_renamed_trace_still_reads(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    _write_every_format(folder, {"jsonl": 2})
    (folder / "trace.jsonl").write_text(json.dumps({"time": 0.0, "duration": 0.1, "active": 1, "waiting": 0,
                                                    "kv_tokens_used": 16}) + "\n")
    run = load_run(folder)
    assert run.kind == "simulation" and run.steps is not None and run.steps[0]["running"] == 1
    assert run.files == ["records.jsonl", "trace.jsonl"]
    shutil.copy(folder / "trace.jsonl", tmp_path / "loose.jsonl")
    assert read_trace(tmp_path / "loose.jsonl").to_rows() == read_trace(folder).to_rows()


def test_auto_writes_parquet_from_the_threshold_and_removes_the_other_format(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from servebench.records import rundir
    steps = parse_steps([{"start_s": 0.0, "duration_s": 0.01, "running": 1}], "test")
    monkeypatch.setattr(rundir, "PARQUET_FROM_RECORDS", 3)
    small = write_run(tmp_path / "run", _records(2), steps=steps, records_format="auto", steps_format="auto")
    assert (small["records"].name, small["steps"].name) == ("records.jsonl", "steps.jsonl")
    big = write_run(tmp_path / "run", _records(3), steps=steps, records_format="auto", steps_format="auto")
    assert (big["records"].name, big["steps"].name) == ("records.parquet", "steps.parquet")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["records.parquet", "steps.parquet"]
    assert _summarized_requests(tmp_path / "run") == 3  # the folder's reader takes the new run, not the old one
    assert read_trace(tmp_path / "run").to_rows() == steps.to_rows()
    write_run(tmp_path / "run", _records(2), records_format="jsonl")  # and back: the Parquet file goes
    assert _summarized_requests(tmp_path / "run") == 2 and not (tmp_path / "run" / "records.parquet").exists()


def test_simulate_writes_the_same_records_as_parquet_and_jsonl(tmp_path: Path) -> None:
    scenario = _few_requests_of_tiny_cpu(tmp_path)
    outs = {}
    for fmt in ("jsonl", "parquet"):
        res = CliRunner().invoke(app, ["simulate", str(scenario), "-o", str(tmp_path / fmt), "--records-format", fmt,
                                       "--trace-format", fmt, "--json"])
        assert res.exit_code == 0, res.output
        assert (tmp_path / fmt / f"records.{fmt}").is_file() and (tmp_path / fmt / f"steps.{fmt}").is_file()
        outs[fmt] = load_table(tmp_path / fmt)[0]
    assert outs["jsonl"].to_dicts() == outs["parquet"].to_dicts()
    assert outs["jsonl"].token_times is not None
    for fmt in ("jsonl", "parquet"):  # summarize OUT reads every token time back: simulate's ITL and stalls exactly
        res = CliRunner().invoke(app, ["summarize", str(tmp_path / fmt), "--json"])
        assert res.exit_code == 0, res.output
        read = json.loads(res.stdout)
        written = json.loads((tmp_path / fmt / "summary.json").read_text())["report"]
        assert read["itl_s"] == written["itl_s"] and read["stalls"] == written["stalls"]
        assert read["max_stall_s"] == written["max_stall_s"] and read["itl_s"]["n"] > 0
    assert read_trace(tmp_path / "jsonl").to_rows() == read_trace(tmp_path / "parquet").to_rows()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_simulate_says_in_one_line_when_its_records_cannot_be_written(tmp_path: Path, fmt: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A record file that cannot be written ends the command in one line (exit 2), in either format, with no
    summary.json left claiming records that are not there."""
    scenario = _few_requests_of_tiny_cpu(tmp_path)
    out = tmp_path / "out"
    (out / f"records.{fmt}").mkdir(parents=True)  # a folder where the records file goes
    code, stdout, stderr = run_cli(capsys, "simulate", str(scenario), "-o", str(out), "--records-format", fmt, "--json")
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: cannot write the run to") and stderr.count("\n") == 1, stderr
    assert not (out / "summary.json").exists()


def test_write_sweep_writes_the_files_the_site_reads_back(tmp_path: Path) -> None:
    """A sweep's folder (sweep.json, sweep.csv, a measured sweep's metadata.json) is read back as one sweep."""
    from servebench.analysis.summary import SLO
    from servebench.records.rundir import METADATA, SWEEP, SWEEP_CSV, write_sweep
    from servebench.serving.scenario import load_scenario
    from servebench.serving.sweep import sweep, sweep_csv

    result = sweep(load_scenario(SCENARIOS / "paged_chat.yaml"), [0.5, 1.0], slo=SLO(ttft_s=2.0), requests=40,
                   search=False)
    out = tmp_path / "new" / "sweep"
    files = write_sweep(out, result, sweep_csv(result), metadata={"kind": "test", "runs": {}})
    assert files == {"sweep": out / SWEEP, "csv": out / SWEEP_CSV, "metadata": out / METADATA}
    assert json.loads(files["sweep"].read_text()) == json.loads(result.model_dump_json())
    assert files["csv"].read_text() == sweep_csv(result)
    assert json.loads(files["metadata"].read_text()) == {"kind": "test", "runs": {}}
    run = load_run(out)
    assert run.kind == "sweep" and run.files == [SWEEP, METADATA]
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        write_sweep(tmp_path / "a_file", result, "")


def test_read_settings_gives_metadata_then_scenario_files_and_leaves_out_what_it_cannot_read(tmp_path: Path) -> None:
    """Tenant weights come from a run's metadata.json, else a scenario file beside it; a broken file gives none."""
    from servebench.analysis.retries import read_tenant_weights
    from servebench.records.rundir import read_settings

    tenants = {"server": {"tenants": {"a": {"weight": 3}, "b": {"weight": 1}}}}
    assert read_settings(tmp_path / "missing") == [] and read_tenant_weights(tmp_path / "missing") is None
    (tmp_path / "metadata.json").write_text("{not json")
    (tmp_path / "scenario.yml").write_text("- a list, not a mapping\n")
    (tmp_path / "scenario.json").write_text(json.dumps(tenants))
    assert read_settings(tmp_path) == [tenants]
    assert read_tenant_weights(tmp_path) == {"a": 3.0, "b": 1.0}
    (tmp_path / "metadata.json").write_text(json.dumps({"kind": "servebench run", "scenario": {"server": {}}}))
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump({"server": {"tenants": {"a": {"weight": 2}}}}))
    docs = read_settings(tmp_path)
    assert [d.get("kind") for d in docs] == ["servebench run", None, None]  # metadata, scenario.yaml, scenario.json
    assert read_tenant_weights(tmp_path) == {"a": 2.0}  # the metadata's scenario names none: scenario.yaml's
