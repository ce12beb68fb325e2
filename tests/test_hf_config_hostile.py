"""Hostile model configs in `kv --config` and `plan --config`: one line each; the KV dtype a server would use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA
from typer.testing import CliRunner

from servebench.capacity.hf_config import load_config
from servebench.capacity.kv import ModelShape, bytes_per_token
from servebench.cli import app, main
from servebench.errors import ConfigError

LLAMA = json.loads((SAMPLE_DATA / "configs" / "llama-3.1-8b.json").read_text())
GEMMA = json.loads((SAMPLE_DATA / "configs" / "gemma-2-27b.json").read_text())
PLAN = ["--rate", "1", "--prompt-tokens", "100", "--output-tokens", "10", "--slo-ttft", "5", "--gpus", "H100"]


def run(capsys: pytest.CaptureFixture[str], command: str, config: Path) -> tuple[int, str]:
    """Run the CLI as ``servebench`` would; return (exit code, stderr)."""
    try:
        main([command, "--config", str(config), *(PLAN if command == "plan" else ["--tokens", "1000"])])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def one_line_error(result: tuple[int, str], *needles: str) -> None:
    code, err = result
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", ["kv", "plan"])
@pytest.mark.parametrize("layers,shown", [(10**18, "1,000,000,000,000,000,000"), (1e18, "1e+18"), (1025, "1,025")])
def test_a_layer_count_past_the_bound_is_one_line_in_both(command, layers, shown, tmp_path, capsys):
    path = write(tmp_path, json.dumps({**LLAMA, "num_hidden_layers": layers}))
    one_line_error(run(capsys, command, path), "'num_hidden_layers'", shown, "at most 1,024")


@pytest.mark.parametrize("command", ["kv", "plan"])
def test_a_deeply_nested_config_is_one_line(command, tmp_path, capsys):
    path = write(tmp_path, '{"x":' * 100_000 + "1" + "}" * 100_000)
    one_line_error(run(capsys, command, path), "nested too deeply")


@pytest.mark.parametrize("command", ["kv", "plan"])
@pytest.mark.parametrize("heads,kv_heads,says", [(32, 7, "is not a multiple of num_key_value_heads 7"),
                                                 (8, 32, "num_key_value_heads 32 is more than num_attention_heads 8")])
def test_heads_that_do_not_group_are_refused(command, heads, kv_heads, says, tmp_path, capsys):
    path = write(tmp_path, json.dumps({**LLAMA, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                                       "head_dim": 128}))
    one_line_error(run(capsys, command, path), says)


@pytest.mark.parametrize("command", ["kv", "plan"])
def test_a_key_given_twice_is_refused(command, tmp_path, capsys):
    body = json.dumps(LLAMA)
    path = write(tmp_path, body[:-1] + ', "num_hidden_layers": 64}')
    one_line_error(run(capsys, command, path), "key 'num_hidden_layers' appears twice")


def test_an_explicit_shape_obeys_the_same_rules():
    with pytest.raises(ValueError, match="multiple"):
        ModelShape(layers=2, kv_heads=7, head_dim=8, num_attention_heads=32)
    with pytest.raises(ConfigError, match="less than or equal to 1024"):
        from servebench.capacity.model_presets import resolve_shape
        resolve_shape(layers=2000, kv_heads=8, head_dim=128)


def test_a_float32_checkpoint_is_sized_as_served_in_16_bit(tmp_path):
    """The public gemma-2-27b config says float32; engines serve and cache it in 16-bit: 376,832 B/token."""
    path = write(tmp_path, json.dumps({**GEMMA, "torch_dtype": "float32"}))
    shape = load_config(path)
    assert shape.bytes_per_element == 2 and bytes_per_token(shape) == 376_832
    assert "float32" in (shape.kv_dtype_note or "") and "16-bit" in (shape.kv_dtype_note or "")
    res = CliRunner().invoke(app, ["kv", "--config", str(path), "--json"])
    doc = json.loads(res.stdout)
    assert doc["bytes_per_token"] == 376_832 and "vLLM --dtype auto" in doc["kv_dtype"]
    shown = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["kv", "--config", str(path)]).stdout
    assert "KV element" in shown and "float32" in shown
    override = CliRunner().invoke(app, ["kv", "--config", str(path), "--kv-dtype", "fp32", "--json"])
    assert json.loads(override.stdout)["bytes_per_token"] == 753_664
    plan = CliRunner().invoke(app, ["plan", "--config", str(path), *PLAN, "--tp", "2", "--max-num-seqs", "16", "--json"])
    assert plan.exit_code == 0, plan.output
    model = json.loads(plan.stdout)["model"]
    assert model["kv_bytes_per_element"] == 2 and "float32" in model["kv_dtype"]


def test_the_spec_formula_stays_exact():
    assert bytes_per_token(ModelShape(layers=32, kv_heads=8, head_dim=128, bytes_per_element=2)) == 131_072
    assert bytes_per_token(load_config(SAMPLE_DATA / "configs" / "llama-3.1-8b.json")) == 131_072


def test_parameter_estimate_sizes_are_bounded(tmp_path, capsys):
    path = write(tmp_path, json.dumps({**LLAMA, "intermediate_size": 10**15}))
    one_line_error(run(capsys, "plan", path), "'intermediate_size'", "at most 1,048,576")
    with pytest.raises(ConfigError, match="vocab_size"):
        from servebench.capacity.roofline import estimate_parameters
        estimate_parameters({**LLAMA, "vocab_size": True})
