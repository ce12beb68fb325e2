"""Usage errors (bad option values, missing options, unknown commands) are one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import SAMPLE_DATA
from typer.testing import CliRunner

from servebench.cli import app

SCENARIO = str(SAMPLE_DATA / "scenarios" / "profile_a.yaml")


@pytest.mark.parametrize("args,says", [
    (["plan", "--rate", "1", "--prompt-tokens", "10", "--output-tokens", "10", "--slo-ttft", "nan"],
     "Invalid value for '--slo-ttft': must be a positive number of seconds, got nan"),
    (["sweep", SCENARIO, "-o", "unused", "--seeds", "0"], "Invalid value for '--seeds'"),
    (["simulate", SCENARIO], "Missing option '-o' / '--out'"),  # plan's --rate is optional since plan --trace
    (["no-such-command"], "No such command 'no-such-command'"),
    (["--no-such-option"], "No such option: --no-such-option"),
])
def test_a_usage_error_is_one_line_on_stderr_and_exit_code_2(args, says, tmp_path):
    res = subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    assert says in res.stderr and "--help" in res.stderr
    assert not any(c in res.stderr for c in "╭│╰") and res.stdout == ""


def test_the_rule_holds_through_a_test_runner_too():
    res = CliRunner().invoke(app, ["sweep", SCENARIO, "-o", "unused", "--seeds", "0"])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: Invalid value for '--seeds'") and res.stderr.count("\n") == 1


def test_help_and_the_bare_command_still_print_help():
    assert "Usage:" in CliRunner().invoke(app, ["plan", "--help"]).stdout
    bare = subprocess.run([sys.executable, "-m", "servebench"], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and "Usage:" in bare.stdout  # click's rule for a group run bare, unchanged
