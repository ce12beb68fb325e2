"""The roofline step model by hand, tensor parallelism, parameter estimates, and calibration from a fitted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servebench.capacity import Efficiency, calibrate, get_accelerator, kv, roofline
from servebench.capacity.gpus import accelerator_for_device, parse_prices
from servebench.capacity.model_presets import get_preset
from servebench.capacity.roofline import estimate_parameters, unloaded_times_s
from servebench.errors import ConfigError
from servebench.planning.planner import load_calibration
from servebench.records.loaders import write_records
from servebench.serving.scenario import parse_scenario
from servebench.serving.simulate import simulate

REPO = Path(__file__).resolve().parent.parent
H100 = get_accelerator("H100")
LLAMA_8B = get_preset("llama-3.1-8b")


def test_8b_fp16_on_one_h100_decodes_one_sequence_in_weights_over_bandwidth() -> None:
    # 8.03e9 parameters x 2 bytes = 16.06 GB read per step; / 3.35 TB/s = 4.79 ms at 100% of peak
    ideal = roofline(LLAMA_8B, H100, efficiency=Efficiency.ideal()).step_model
    assert ideal.base_s == pytest.approx(16.06e9 / 3.35e12, rel=1e-9)
    assert ideal.base_s == pytest.approx(4.8e-3, rel=0.01)
    real = roofline(LLAMA_8B, H100, prompt_tokens=1000)  # default efficiency 0.85 of bandwidth, 0.6 of compute
    step = real.step_model
    # the weights at 0.85 of peak, 60 us of step overhead per layer, 16 tokens' matmuls (batch-dependent efficiency)
    assert step.base_s == pytest.approx(16.06e9 / (3.35e12 * 0.85) + 32 * 60e-6 + 16 * 2 * 8.03e9 / (989e12 * 0.6))
    assert real.terms.small_batch_s == pytest.approx(0.433e-3, rel=0.01)
    assert real.terms.step_overhead_s == pytest.approx(1.92e-3)
    assert step.step_s(0, 1, 1000) == pytest.approx(step.base_s, rel=0.02)  # the fixed costs dominate one sequence
    assert step.per_kv_token_s == pytest.approx(131_072 / (3.35e12 * 0.85))  # the KV calculator's bytes per token
    # a prompt token costs 2 x parameters FLOPs (plus attention) at 0.6 of the peak
    assert step.per_prefill_token_s == pytest.approx((2 * 8.03e9 + 4 * 32 * 4096 * 500.5) / (989e12 * 0.6))
    assert "step overhead" in real.how["base_s"] and "batch-dependent" in real.how["base_s"]


def test_a_step_of_n_tokens_reaches_the_compute_efficiency_times_n_over_n_plus_half_batch() -> None:
    """The batch-dependent efficiency: n tokens' matmuls take as long as n + 16 would at full efficiency."""
    eff = Efficiency(step_overhead_per_layer_s=0)
    step = roofline(LLAMA_8B, H100, efficiency=eff).step_model
    flat = roofline(LLAMA_8B, H100, efficiency=eff.model_copy(update={"half_batch_tokens": 0})).step_model
    per_token_s = 2 * 8.03e9 / (989e12 * 0.6)
    for n in (1, 8, 16, 512):
        compute_s = step.step_s(0, n, 0) - flat.base_s  # beyond the weights' read
        assert compute_s == pytest.approx(n * per_token_s / (n / (n + 16)), rel=1e-9)
    assert (step.step_s(0, 16, 0) - flat.base_s) == pytest.approx(2 * 16 * per_token_s)  # half efficiency at 16


def test_tensor_parallelism_splits_weights_and_kv_and_adds_all_reduce() -> None:
    one = roofline(LLAMA_8B, H100).step_model
    two = roofline(LLAMA_8B, H100, tensor_parallel=2)
    overhead = 32 * Efficiency().step_overhead_per_layer_s  # the same on every GPU; weights and matmuls split
    assert two.step_model.base_s == pytest.approx((one.base_s - overhead) / 2 + overhead
                                                  + 2 * 32 * H100.allreduce_latency_s)
    assert two.step_model.per_kv_token_s == pytest.approx(one.per_kv_token_s / 2)
    # each GPU sends 2 (tp - 1) / tp of two hidden states per layer and token
    assert two.terms.allreduce_bytes_per_token == 2 * 32 * 4096 * 2 * 1.0
    assert two.step_model.per_decode_seq_s > one.per_decode_seq_s / 2
    assert "all-reduce" in two.how["base_s"]
    with pytest.raises(ConfigError, match="does not divide"):
        roofline(get_preset("qwen2.5-7b"), H100, tensor_parallel=3)


def test_fp8_weights_use_fp8_throughput_where_the_gpu_has_it() -> None:
    bf16 = roofline(LLAMA_8B, H100, weight_bytes_per_parameter=2).step_model
    fp8 = roofline(LLAMA_8B, H100, weight_bytes_per_parameter=1).step_model
    overhead = 32 * Efficiency().step_overhead_per_layer_s
    assert fp8.base_s - overhead == pytest.approx((bf16.base_s - overhead) / 2, rel=1e-3)
    assert fp8.per_decode_seq_s == pytest.approx(bf16.per_decode_seq_s / 2, rel=1e-3)  # 1979 vs 2 x 989 TFLOP/s
    a100 = get_accelerator("a100")  # no fp8 units: fp8 weights still run at the fp16 rate
    assert a100.flops(1) == a100.fp16_flops


def test_unloaded_times_chunk_the_prompt() -> None:
    step = roofline(LLAMA_8B, H100).step_model
    ttft, tpot, latency = unloaded_times_s(step, 4000, 100, max_num_batched_tokens=1000)
    assert ttft == pytest.approx(4 * step.base_s + 4000 * step.per_prefill_token_s)
    assert latency == pytest.approx(ttft + 99 * tpot)


def test_parameter_estimate_from_config_matches_the_preset() -> None:
    cfg = json.loads((REPO / "sample_data" / "configs" / "llama-3.1-8b.json").read_text())
    total, active = estimate_parameters(cfg)
    assert total == pytest.approx(LLAMA_8B.parameters, rel=0.01)
    assert total == active
    # Mixtral-8x7B's shape: 46.7B parameters, 12.9B of them per token
    mixtral = {**cfg, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}
    total, active = estimate_parameters(mixtral)
    assert total == pytest.approx(46.7e9, rel=0.02)
    assert active == pytest.approx(12.9e9, rel=0.02)
    with pytest.raises(ConfigError, match="vocab_size"):
        estimate_parameters({"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1})


def test_presets_names_prices_and_devices() -> None:
    assert get_accelerator("h100-sxm").name == "H100"
    assert parse_prices(["H100=2.5"]) == {"H100": 2.5}
    for bad in ("H100", "H100=cheap", "H100=-1", "TPU=1"):
        with pytest.raises(ConfigError):
            parse_prices([bad])
    assert accelerator_for_device("NVIDIA H100 80GB HBM3").name == "H100"
    assert accelerator_for_device("NVIDIA A100-SXM4-40GB").name == "A100-40GB"
    assert accelerator_for_device("Some TPU") is None


def test_calibration_recovers_the_factors_of_a_known_step_model() -> None:
    cpu = get_accelerator("CPU")
    shape = kv.ModelShape(name="small", layers=4, kv_heads=2, head_dim=32, num_attention_heads=8, hidden_size=256,
                          parameters=5_000_000, bytes_per_element=4)
    truth = roofline(shape, cpu, weight_bytes_per_parameter=4, prompt_tokens=300,  # a run's fixed costs sit in its
                     efficiency=Efficiency(bandwidth=0.25, compute=0.1, step_overhead_per_layer_s=0,  # bandwidth factor
                                           half_batch_tokens=0)).step_model
    cal = calibrate(truth, shape, cpu, weight_bytes_per_parameter=4, prompt_tokens=300)
    assert cal.efficiency.bandwidth == pytest.approx(0.25)
    assert cal.efficiency.compute == pytest.approx(0.1)
    assert cal.efficiency.interconnect == Efficiency().interconnect
    assert (cal.efficiency.step_overhead_per_layer_s, cal.efficiency.half_batch_tokens) == (0, 0)  # in bandwidth
    # a fit with no prefill cost leaves compute at the default, and says so
    flat = calibrate(truth.model_copy(update={"per_prefill_token_s": 0.0}), shape, cpu,
                     weight_bytes_per_parameter=4, prompt_tokens=300)
    assert flat.efficiency.compute == Efficiency().compute
    assert any("no prefill cost" in n for n in flat.notes)


def _fake_run(tmp_path: Path, efficiency: Efficiency) -> tuple[Path, kv.ModelShape]:
    """Write a run folder whose step trace follows a roofline step model exactly (simulated)."""
    shape = kv.ModelShape(name="small", layers=4, kv_heads=2, head_dim=32, num_attention_heads=8, hidden_size=256,
                          parameters=5_000_000, bytes_per_element=4)
    step = roofline(shape, get_accelerator("CPU"), weight_bytes_per_parameter=4, prompt_tokens=200,
                    efficiency=efficiency).step_model
    scenario = parse_scenario({
        "seed": 3, "server": {"policy": "paged", "kv_budget_tokens": 20000, "max_num_seqs": 16,
                              "max_num_batched_tokens": 256},
        "step_model": step.model_dump(),
        "workload": {"arrival": {"rate_rps": 20}, "num_requests": 60,
                     "classes": [{"prompt": {"kind": "uniform", "low": 100, "high": 300},
                                  "output": {"kind": "uniform", "low": 8, "high": 24}}]}})
    sim = simulate(scenario)
    run = tmp_path / "run"
    run.mkdir()
    write_records(sim.records, run / "records.jsonl")
    with (run / "steps.jsonl").open("w") as f:
        for row in sim.trace.to_rows():
            f.write(json.dumps(row) + "\n")
    meta = {"model": {"name": "small", "layers": 4, "kv_heads": 2, "head_dim": 32, "bytes_per_element": 4,
                      "num_attention_heads": 8, "hidden_size": 256, "parameters": 5_000_000},
            "runtime": {"device": "cpu", "device_name": "cpu", "dtype": "float32"}}
    (run / "metadata.json").write_text(json.dumps(meta))
    return run, shape


def test_calibration_from_a_run_folder_fits_its_steps(tmp_path: Path) -> None:
    run, _ = _fake_run(tmp_path, Efficiency(bandwidth=0.3, compute=0.2, step_overhead_per_layer_s=0, half_batch_tokens=0))
    cal = load_calibration(str(run))
    assert cal.accelerator == "CPU"
    assert cal.efficiency.bandwidth == pytest.approx(0.3, rel=0.02)
    # the fit sees prompts of 100 to 300 tokens (mean near the 200 of the truth): attention moves it a little
    assert cal.efficiency.compute == pytest.approx(0.2, rel=0.05)
    assert str(run) in cal.source
    (run / "metadata.json").write_text(json.dumps({"model": {}, "runtime": {"device_name": "TPU v5"}}))
    with pytest.raises(Exception, match="metadata.json"):
        load_calibration(str(run))
