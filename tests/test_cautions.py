"""Warnings for unsafe choices: a poorly fitted step model, a large model on a CPU timing run."""

from __future__ import annotations

import numpy as np

from servebench.capacity.stepmodel import fit_step_model
from servebench.output.cautions import cpu_model_warning, fit_warning


def _trace(noise: float, seed: int = 7) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    n = 400
    prefill = rng.integers(0, 2000, n).astype(float)
    decode = rng.integers(1, 32, n).astype(float)
    kv = decode * rng.integers(100, 4000, n)
    duration = 0.005 + 2e-5 * prefill + 1e-3 * decode + 1e-7 * kv
    duration = duration * np.exp(rng.normal(0, noise, n)) if noise else duration
    return {"duration": duration.tolist(), "prefill_tokens": prefill.tolist(), "decode_seqs": decode.tolist(),
            "kv_tokens_read": kv.tolist()}


def test_a_good_fit_is_not_flagged_and_a_poor_one_is_with_its_numbers() -> None:
    assert fit_warning(fit_step_model(_trace(0.0))) is None
    poor = fit_step_model({**_trace(0.0), "duration": np.random.default_rng(3).uniform(0.001, 0.5, 400).tolist()})
    text = fit_warning(poor)
    assert text is not None and text.startswith("This step model fits poorly (R² ")
    assert "Suggestion:" in text


def test_an_8b_model_on_a_cpu_is_flagged_and_not_on_a_gpu() -> None:
    text = cpu_model_warning("llama-3.1-8b", 8_030_000_000, "cpu")
    assert "8.0 billion parameters" in text and "30 GiB" in text and "tiny or small" in text
    assert cpu_model_warning("llama-3.1-8b", 8_030_000_000, "cuda") is None
