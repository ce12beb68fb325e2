"""The planner's step model against published serving figures (issue 33, section 6), and what binds at the bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.analysis.summary import SLO
from servebench.capacity.model_presets import get_preset
from servebench.capacity.roofline import Efficiency
from servebench.planning import PlanRequest, Workload
from servebench.planning.planner import plan
from servebench.planning.published import FIGURES, TOLERANCE, comparisons, markdown_table

DOCS = Path(__file__).resolve().parent.parent / "docs" / "planner.md"
BEFORE = Efficiency(bandwidth=0.7, compute=0.5, step_overhead_per_layer_s=0, half_batch_tokens=0)  # one factor each


@pytest.mark.parametrize("comparison", comparisons(), ids=[f.name for f in FIGURES])
def test_every_published_figure_is_planned_within_ten_percent(comparison):
    assert abs(comparison.ratio - 1) <= TOLERANCE, (comparison.figure.name, comparison.planned)


def test_one_factor_each_could_not_fit_both_ends():
    """The old factors: about 20 % optimistic at batch 8, 13-20 % pessimistic at saturation."""
    old = {c.figure.name: c.ratio for c in comparisons(BEFORE)}
    assert old["vLLM CI, Llama-3.1-8B, H200, batch-8 latency"] < 0.8
    assert old["TensorRT-LLM, 70B fp8, H200, 5000/500"] < 0.85


def test_the_saturated_nim_run_is_kv_bound_at_its_fp8_cache():
    """NIM's ITL of 93 ms at 920 tok/s means about 86 running sequences: the fp8-KV fit (87), not bf16's (43)."""
    sat = next(c for c in comparisons() if c.figure.name.endswith("saturated (150 clients)"))
    assert sat.batch == 87


def test_docs_hold_the_table_the_code_computes():
    assert markdown_table(before=BEFORE) in DOCS.read_text()


def test_limit_says_throughput_when_the_engine_bound_sets_capacity():
    """A 5 s TPOT target binds nothing: the engine's throughput does (the plan said 'decode' at 21 ms a token)."""
    req = PlanRequest(model=get_preset("llama-3.1-8b"), workload=Workload.fixed(1000, 200), slo=SLO(tpot_s=5.0),
                      gpus=["H100"], tensor_parallel=[1], max_num_seqs=[64])
    _, result = plan(req, 10.0)
    (option,) = result.options
    assert option.limit == "throughput"
    assert "the throughput bound sets it" in result.details[0].note
