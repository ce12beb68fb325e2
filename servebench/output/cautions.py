"""Warnings for unsafe choices, with the numbers and a suggestion (shown by the dashboard, testable without it)."""

from __future__ import annotations

from servebench.capacity.stepmodel import StepFit
from servebench.formatting import NO_DATA

CPU_PARAMS_LIMIT = 1_000_000_000  # above this, a CPU timing run takes minutes per request batch


def fit_warning(fit: StepFit) -> str | None:
    """Return a warning when a step-model fit is too poor to predict from, or None when it is usable."""
    if fit.quality is None or fit.quality.usable:
        return None
    r2 = NO_DATA if fit.r2 is None else f"{fit.r2:.2f}"
    rel = NO_DATA if fit.mean_abs_pct_error is None else f"{fit.mean_abs_pct_error:.0%}"
    return (f"This step model fits poorly (R² {r2}, mean error {rel} over {fit.steps:,} steps; usable needs R² at "
            f"least {fit.quality.min_r2:g} and mean error at most {fit.quality.max_mean_rel_error:.0%}), so the "
            f"sweep below may be far off: {fit.quality.reason.rstrip('.')}. Suggestion: record a longer timing run with more "
            "varied load (several rates, longer prompts) on a quiet machine, or use the scenario's step model.")


def cpu_model_warning(model: str, parameters: int, device: str) -> str | None:
    """Return a warning when a large model is picked for a CPU timing run, or None.

    >>> cpu_model_warning("tiny", 5_000_000, "cpu") is None
    True
    >>> cpu_model_warning("llama-3.1-8b", 8_030_000_000, "cpu").startswith("llama-3.1-8b has 8.0 billion")
    True
    """
    if device != "cpu" or parameters <= CPU_PARAMS_LIMIT:
        return None
    gib = parameters * 4 / 2**30  # fp32 on a CPU
    return (f"{model} has {parameters / 1e9:.1f} billion parameters: on a CPU (fp32) its weights take about "
            f"{gib:,.0f} GiB of memory and each decoding step takes seconds, so a run of even a few requests can "
            "take many minutes and time out. Suggestion: pick tiny or small for a CPU run, or run this model "
            "on a GPU.")
