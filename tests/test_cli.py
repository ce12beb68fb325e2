"""The command line through its real entry point: exit codes, JSON shape, one-line errors, help texts."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
import typer.main
from conftest import SAMPLE_DATA

from servebench.analysis.contract import CONTRACT_FIELDS
from servebench.cli.core import app


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True, timeout=120)


def test_summarize_json_holds_the_contract_under_summary():
    res = run("summarize", str(SAMPLE_DATA / "r1_r4.json"), "--window-start", "0", "--window-end", "10", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert tuple(doc["summary"]) == CONTRACT_FIELDS
    assert doc["summary"]["successful_requests_per_second"] == 0.2
    assert doc["by_status"]["timeout"] == 1 and doc["rejected"] == 1
    assert doc["failure_aware_latency_s"]["percentiles"][-1]["value"] == "Infinity"


def test_summarize_table_for_people_with_slo():
    res = run("summarize", str(SAMPLE_DATA / "requests_sample.csv"), "--slo-ttft", "1", "--slo-tpot", "0.05")
    assert res.returncode == 0, res.stderr
    assert "successful_requests_per_second" in res.stdout and "attainment" in res.stdout


def test_bad_input_is_one_line_and_exit_code_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("start,first_token,end,status,output_tokens\n0,0.5,2.5,success,9.0\n")
    res = run("summarize", str(bad))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert "bad.csv, row 1, field 'output_tokens'" in res.stderr and "Traceback" not in res.stderr
    missing = run("summarize", str(tmp_path / "nope.csv"))
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_schema_is_the_record_json_schema():
    res = run("schema")
    doc = json.loads(res.stdout)
    assert set(doc["required"]) == {"start", "end", "status"}
    assert doc["additionalProperties"] is False


def _commands(group, prefix=""):
    """Every command by its full name, a group's subcommands included (``trace stats``)."""
    for name, command in group.commands.items():
        yield f"{prefix}{name}", command
        if hasattr(command, "commands"):
            yield from _commands(command, f"{prefix}{name} ")


def test_every_command_has_help_text():
    group = typer.main.get_command(app)
    assert group.commands, "no commands registered"
    for name, command in _commands(group):
        assert (command.help or "").strip(), f"command {name!r} has no help text"
        if hasattr(command, "commands"):
            continue  # a group: its subcommands are checked
        params = {p.name for p in command.params}
        if name not in ("schema",):
            assert "as_json" in params or "json" in params, f"command {name!r} has no --json"


def test_user_strings_are_printed_verbatim_not_as_markup(tmp_path):
    path = tmp_path / "a[red]x.csv"
    path.write_text("request_id,start,end,status,slice,error\n[/],0,1,failed,[red]x,[bold]boom[/]\n")
    res = run("summarize", str(path))
    assert res.returncode == 0, res.stderr
    assert "a[red]x.csv" in res.stdout and "[bold]boom[/]" in res.stdout and "Slice '[red]x'" in res.stdout


def test_metrics_a_file_cannot_support_are_null_in_json():
    res = run("summarize", str(SAMPLE_DATA.parent / "tests" / "data" / "importers" / "llmperf-individual.json"), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert tuple(doc["summary"]) == CONTRACT_FIELDS
    assert doc["summary"]["successful_requests_per_second"] is None  # llmperf records no timestamps
    assert doc["summary"]["success_latency_p95_s"] is not None
    assert "successful_requests_per_second" in doc["unavailable_metrics"]


@pytest.mark.parametrize("command", [
    ["summarize", str(SAMPLE_DATA / "requests_sample.csv")],
    ["sweep", str(SAMPLE_DATA / "scenarios" / "profile_a.yaml"), "-o", "unused-site"],
    ["report", str(SAMPLE_DATA / "requests_sample.csv"), "-o", "unused-site"],
])
@pytest.mark.parametrize("option,value", [("--slo-ttft", "0"), ("--slo-tpot", "-1"), ("--slo-latency", "inf")])
def test_an_slo_that_is_not_a_positive_time_is_a_usage_error(command, option, value, tmp_path):
    res = subprocess.run([sys.executable, "-m", "servebench", *command, option, value], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2
    assert f"Invalid value for '{option}'" in res.stderr and "positive number of seconds" in res.stderr
    assert "Traceback" not in res.stderr and "pydantic" not in res.stderr
    assert not (tmp_path / "unused-site").exists()


def test_importing_servebench_loads_no_numpy_and_the_cli_asks_openblas_for_no_threads():
    """The CLI's OpenBLAS setting only works if numpy starts after it: ``import servebench`` must not start it."""
    code = ("import os, sys, servebench\n"
            "print('numpy' in sys.modules)\n"
            "import servebench.cli\n"
            "import numpy\n"
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), servebench.build_report.__name__, 'build_report' in dir(servebench))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "1", "build_report", "True"]
    mine = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=env | {"OPENBLAS_NUM_THREADS": "2"})
    assert mine.stdout.split()[1] == "2"  # a user's own setting is kept
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        getattr(importlib.import_module("servebench"), "nonesuch")


def test_only_a_real_command_line_freezes_what_it_imported():
    """A command's process ends with it, so its imports are frozen out of the collector; a caller's are not."""
    code = ("import gc, sys\n"
            "from servebench.cli.core import main\n"
            "def frozen(argv):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "    return gc.get_freeze_count()\n"
            "sys.argv = ['servebench', 'kv', '--help']\n"
            "print(frozen(['kv', '--help']) == 0, frozen(None) > 1000)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-2:] == ["True", "True"]


def test_a_summary_from_the_command_line_imports_no_heavy_module_it_does_not_use():
    """scipy's signal, stats and optimize (the step model's fits), torch, plotly and the servers cost a second
    and more of every command's start; summarize needs none of them."""
    heavy = ("scipy.signal", "scipy.stats", "scipy.optimize", "torch", "plotly", "fastapi", "httpx", "streamlit")
    code = ("import sys, servebench.cli.core\n"
            f"try:\n    servebench.cli.core.main(['summarize', {str(SAMPLE_DATA / 'requests_sample.csv')!r}, '--json'])\n"
            "except SystemExit:\n    pass\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert '"requests": 3000' in res.stdout
    assert res.stderr.strip().splitlines()[-1] == "[]"
