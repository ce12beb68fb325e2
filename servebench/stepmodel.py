"""How long one engine step takes, as a linear model, and its least-squares fit from a step trace.

    step_s = base_s + per_prefill_token_s x prefill tokens + per_decode_seq_s x decoding sequences
             + per_kv_token_s x KV tokens read by the decoding sequences

All coefficients are >= 0. The spec's flat profile ("prefill of this prompt takes X s, each decode
step takes TPOT") is ``per_prefill_token_s = X / prompt_tokens``, ``base_s = TPOT``, the rest 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import nnls

from .errors import ConfigError

COEFFICIENTS: tuple[str, ...] = ("base_s", "per_prefill_token_s", "per_decode_seq_s", "per_kv_token_s")


class StepModel(BaseModel):
    """Linear step-time model; every coefficient in seconds (per unit where named)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_s: float = Field(0.0, ge=0, description="Fixed cost of every step, s.")
    per_prefill_token_s: float = Field(0.0, ge=0, description="Cost per prompt token computed, s.")
    per_decode_seq_s: float = Field(0.0, ge=0, description="Cost per decoding sequence, s.")
    per_kv_token_s: float = Field(0.0, ge=0, description="Cost per KV token read by decoding sequences, s.")

    def step_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens_read: int) -> float:
        """Return the duration of one step.

        >>> StepModel(base_s=0.03, per_prefill_token_s=1e-4).step_s(1000, 4, 0)
        0.13
        """
        return (self.base_s + self.per_prefill_token_s * prefill_tokens + self.per_decode_seq_s * decode_seqs
                + self.per_kv_token_s * kv_tokens_read)

    def prefill_s(self, prefill_tokens: int) -> float:
        """Return the time of a prefill run on its own lane (no base, no decode)."""
        return self.per_prefill_token_s * prefill_tokens

    def decode_run_ends(self, start_s: float, decode_seqs: int, kv_tokens_read: int, steps: int) -> np.ndarray:
        """Return the end times of ``steps`` pure decode steps; each step reads ``decode_seqs`` more KV tokens.

        Bit for bit what adding ``step_s`` one step at a time gives (same operations, same order),
        so a simulation that jumps over a run breaks ties exactly as one that steps through it.
        """
        fixed = self.base_s + self.per_prefill_token_s * 0 + self.per_decode_seq_s * decode_seqs
        times = np.empty(steps + 1)
        times[0] = start_s
        if self.per_kv_token_s == 0:
            times[1:] = fixed  # x + 0.0 == x: the same value step_s gives
        else:
            kv = kv_tokens_read + decode_seqs * np.arange(steps, dtype=np.int64)
            times[1:] = fixed + self.per_kv_token_s * kv.astype(np.float64)
        return np.cumsum(times)[1:]

    @classmethod
    def flat(cls, prefill_s: float, prompt_tokens: int, tpot_s: float) -> "StepModel":
        """Return the spec's flat model: a prompt's prefill takes ``prefill_s``, a decode step ``tpot_s``.

        >>> StepModel.flat(1.2, 7800, 0.031).step_s(7800, 0, 0) - 0.031
        1.2
        """
        if prompt_tokens <= 0:
            raise ConfigError(f"prompt_tokens {prompt_tokens} must be positive for a flat step model")
        return cls(base_s=tpot_s, per_prefill_token_s=prefill_s / prompt_tokens)


class StepFit(BaseModel):
    """A step model fitted by non-negative least squares, with how well it fits."""

    model_config = ConfigDict(extra="forbid")

    model: StepModel
    steps: int = Field(description="Steps fitted.")
    rmse_s: float = Field(description="Root mean square error of the step time, s.")
    mean_abs_error_s: float = Field(description="Mean absolute error of the step time, s.")
    max_abs_error_s: float = Field(description="Largest absolute error of one step, s.")
    mean_abs_pct_error: float | None = Field(description="Mean absolute error relative to step time (None if a step took 0 s).")
    r2: float | None = Field(description="Coefficient of determination (None when step times do not vary).")
    stderr: dict[str, float | None] = Field(description="Standard error of each coefficient left free (None: pinned at 0 or unknown).")


def fit_step_model(rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[float]],
                   fit: Sequence[str] = COEFFICIENTS) -> StepFit:
    """Fit the step model to a step trace by non-negative least squares.

    ``rows`` is a list of trace rows or a dict of columns with ``duration`` (s), ``prefill_tokens``,
    ``decode_seqs`` and ``kv_tokens_read`` (``kv_tokens_used`` if that is missing), and optionally
    ``steps`` (a row that covers several decode steps, as the simulator writes: its duration is
    their total and ``kv_tokens_read`` is its first step's) and ``lane`` (rows on the simulator's
    ``prefill`` lane have no step base). ``fit``
    names the coefficients left free; the others are held at 0.
    """
    cols = _columns(rows)
    unknown = [c for c in fit if c not in COEFFICIENTS]
    if unknown or not fit:
        raise ConfigError(f"fit {list(fit)!r}: expected some of {', '.join(COEFFICIENTS)}")
    steps = cols.get("steps", np.ones_like(cols["duration"]))
    if np.any(steps < 1):
        raise ConfigError("step trace: 'steps' must be at least 1 in every row")
    y = cols["duration"] / steps
    features = {
        "base_s": cols["base"],
        "per_prefill_token_s": cols["prefill_tokens"] / steps,
        "per_decode_seq_s": cols["decode_seqs"],
        # a run's decoders read ``decode_seqs`` more tokens each step: use the run's mean
        "per_kv_token_s": cols["kv_tokens_read"] + cols["decode_seqs"] * (steps - 1) / 2,
    }
    names = [c for c in COEFFICIENTS if c in fit]
    n = y.size
    if n < len(names):
        raise ConfigError(f"step trace has {n} rows; fitting {len(names)} coefficients needs at least that many")
    w = np.sqrt(steps)
    x = np.column_stack([features[c] for c in names])
    scale = np.maximum(np.abs(x).max(axis=0), 1e-300)
    coef_scaled, _ = nnls((x / scale) * w[:, None], y * w)
    coef = coef_scaled / scale
    model = StepModel(**{c: float(v) for c, v in zip(names, coef)})
    resid = y - x @ coef
    total_w = float(steps.sum())
    rmse = float(np.sqrt(np.sum(steps * resid ** 2) / total_w))
    abs_err = np.abs(resid)
    mape = None if np.any(y <= 0) else float(np.sum(steps * abs_err / y) / total_w)
    mean_y = float(np.sum(steps * y) / total_w)
    ss_tot = float(np.sum(steps * (y - mean_y) ** 2))
    r2 = None if ss_tot <= 0 else 1.0 - float(np.sum(steps * resid ** 2)) / ss_tot
    return StepFit(model=model, steps=int(total_w), rmse_s=rmse, mean_abs_error_s=float(np.sum(steps * abs_err) / total_w),
                   max_abs_error_s=float(abs_err.max()), mean_abs_pct_error=mape, r2=r2,
                   stderr=_stderr(x * w[:, None], resid * w, coef, names))


def _stderr(x: np.ndarray, resid: np.ndarray, coef: np.ndarray, names: list[str]) -> dict[str, float | None]:
    """Return OLS standard errors of the coefficients not pinned at 0 (None for pinned ones)."""
    out: dict[str, float | None] = {c: None for c in COEFFICIENTS}
    free = coef > 0
    k = int(free.sum())
    dof = x.shape[0] - k
    if k == 0 or dof <= 0:
        return out
    xf = x[:, free]
    sigma2 = float(resid @ resid) / dof
    try:
        cov = sigma2 * np.linalg.inv(xf.T @ xf)
    except np.linalg.LinAlgError:
        return out
    for name, var in zip([c for c, f in zip(names, free) if f], np.diag(cov)):
        out[name] = float(np.sqrt(max(var, 0.0)))
    return out


def _columns(rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[float]]) -> dict[str, np.ndarray]:
    if isinstance(rows, Mapping):
        raw = {}
        for k, v in rows.items():
            try:
                raw[k] = np.asarray(v, dtype=np.float64)
            except (TypeError, ValueError):
                continue  # a text column (the simulator's ``lane``), not a feature
    else:
        keys = set().union(*(r.keys() for r in rows)) if rows else set()
        raw = {}
        for k in keys:
            try:
                raw[k] = np.array([r.get(k, np.nan) for r in rows], dtype=np.float64)
            except (TypeError, ValueError):
                continue  # a text column, not a feature
    # a row on the simulator's separate prefill lane runs beside the decode batch: no step base
    lanes = rows.get("lane") if isinstance(rows, Mapping) else [r.get("lane") for r in rows]
    n_rows = len(next(iter(raw.values()))) if raw else 0
    raw["base"] = np.ones(n_rows)
    if lanes is not None and len(lanes) == n_rows:
        raw["base"][np.array([lane == "prefill" for lane in lanes], dtype=bool)] = 0.0
    if "kv_tokens_read" not in raw and "kv_tokens_used" in raw:
        raw["kv_tokens_read"] = raw["kv_tokens_used"]
    need = ("duration", "prefill_tokens", "decode_seqs", "kv_tokens_read")
    present = set(rows) if isinstance(rows, Mapping) else set().union(*(r.keys() for r in rows)) if rows else set()
    columns = rows if isinstance(rows, Mapping) else {k: [r.get(k) for r in rows] for k in need}
    for c in need:
        if c not in raw and c in present:  # present, but not all numbers: name the first bad row
            for i, v in enumerate(columns[c]):
                try:
                    float(v)
                except (TypeError, ValueError):
                    raise ConfigError(f"step trace row {i + 1}, column '{c}': {v!r} is not a number") from None
    missing = [c for c in need if c not in raw]
    if missing:
        raise ConfigError(f"step trace lacks column(s) {', '.join(missing)}; expected {', '.join(need)}")
    for c in need + (("steps",) if "steps" in raw else ()):
        bad = ~np.isfinite(raw[c])
        if bad.any():
            raise ConfigError(f"step trace row {int(np.argmax(bad)) + 1}, column '{c}': not a finite number")
    if raw["duration"].size == 0:
        raise ConfigError("step trace is empty")
    return raw
