"""How long one engine step takes, as a linear model, and its robust fit from a step trace.

    step_s = base_s + per_prefill_token_s x prefill tokens + per_prefill_seq_s x sequences prefilling
             + per_decode_seq_s x decoding sequences + per_kv_token_s x KV tokens read by the decoders

Two terms add time to a step for what came before it, as the real engine shows: ``wake_s`` to the
first step after the engine sat idle (``wake_s x (1 - exp(-idle / wake_tau_s))``: caches and the CPU
cool down while it waits), and ``after_prefill_s`` to a step that follows one with prompt tokens
(the decode kernels run cold after the prefill's). Both are 0 in a model you write.

All coefficients are >= 0. Two more terms place a request in time around the steps: a request
reaches the scheduler ``arrival_lag_s`` after it arrives (the real engine notices an arrival a
little late: the arrival thread's wake-up, the interpreter lock, the idle engine's wake-up), and a
step's tokens come out ``emit_lead_s`` before the step ends (the engine emits them when the model
finishes, then does its bookkeeping and plans the next step). Both are 0 in a model you write;
``servebench.serving.engine.validation.fit_trace`` measures them from a timing run.

Real steps scatter around the model: the machine's jitter, another process taking the CPU, work
the linear terms do not see. A fitted model carries that scatter as seconds added to each step
(``noise_excess_s``, ``noise_autocorrelation``): each simulated step takes the model's time plus an
excess drawn from the fitted excesses measured - modelled, with slow steps following slow steps as
often as in the trace, so the simulation's tails widen as the run's did. The engine's excess is
independent jitter plus a slow drift (its normal scores correlate about 0.5 at lag 1 and still 0.1
at lag 64): ``noise_jitter_share`` of the noise is drawn afresh each step, the rest follows an
AR(1) drift with coefficient ``noise_autocorrelation``, both fitted to the correlation at lags 1 to
``NOISE_MAX_LAG`` (``fit_noise_memory``). One AR(1) coefficient alone, matched on 32-step windows,
made neighbouring steps far more alike than the engine's and longer windows less so. The excess is additive
because the engine's trace says so: its slowest 2% of decode steps are about 4 ms over the model
whatever the step's size (a stall: the interpreter lock handed to another thread, the OS taking
the CPU), so a factor fitted on short steps blew long steps up several-fold. A model may instead
carry ``noise_factors`` (each step's time multiplied by a factor drawn from measured / modelled),
as older fits did. ``fit_noise`` measures the scatter; ``StepNoise`` draws it from a seeded
generator, so a simulation stays deterministic for its seed.

The spec's flat profile ("prefill of this prompt takes X s, each decode step takes TPOT") is
``per_prefill_token_s = X / prompt_tokens``, ``base_s = TPOT``, the rest 0.

The fit is Huber-robust by default (iteratively reweighted non-negative least squares): a step
slowed by another process on the machine counts less the further it is off, so a few stalls do
not drag the coefficients. Every fit carries its quality (R², mean relative error) and a verdict,
``quality.usable``, against documented thresholds; ``require_usable`` refuses a poor fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from scipy.special import ndtr, ndtri

from servebench.capacity.documents import as_tuple
from servebench.errors import ConfigError, InputFormatError
from servebench.records.steps import LANES, NAMES, StepTrace, as_trace

COEFFICIENTS: tuple[str, ...] = ("base_s", "per_prefill_token_s", "per_prefill_seq_s", "per_decode_seq_s",
                                 "per_kv_token_s", "wake_s", "after_prefill_s")
FitMethod = Literal["huber", "least_squares"]
HUBER_K = 3.0  # residuals beyond 3 robust standard deviations count less: stalls, not ordinary jitter
MAD_TO_SIGMA = 1.4826  # median absolute deviation -> standard deviation for normal noise
MAX_MEAN_REL_ERROR = 0.35  # a fit whose steps are off by more than this on average is refused
MIN_R2 = 0.30  # ... and one explaining less of the step-time variation than this, when the steps vary
MIN_SPREAD_FOR_R2 = 0.10  # R² is judged only when predicted step times vary (coefficient of variation)
NOISE_BINS = 50  # step-time noise factors: the mean ratio of each 2% of the steps, fastest to slowest
EXCESS_BINS = 200  # step-time excess: the mean of each 0.5% of the steps; finer, so that one rare long stall
#                   (70 ms among 200 prefill steps of 5 ms) stays one step's, not averaged into a 2% bin's
NOISE_WINDOW_STEPS = 32  # the noise's autocorrelation makes windows of this many steps vary as in the trace
MAX_NOISE_AUTOCORRELATION = 0.99
# the coefficients of the step time; the other fields are its noise, lags and wake-up
STEP_COEFFICIENTS = ("base_s", "per_prefill_token_s", "per_prefill_seq_s", "per_decode_seq_s", "per_kv_token_s")
MIN_NOISE_STEPS = 200  # fewer steps than this: no noise is fitted
NOISE_MAX_LAG = 64  # the noise's memory is fitted to its autocorrelation at lags 1 to this (a request's life)
NoiseFactor = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # measured / modelled step time
NoiseExcess = Annotated[float, Field(allow_inf_nan=False)]  # measured - modelled step time, s
MIN_NOISE_SHARE = 0.2  # an additive excess never makes a step shorter than this share of the model's time
FEW_STEPS = 64  # decode_run_ends adds a run this short in Python: numpy's per-call cost is more than its additions
# (a run of 33 steps 3.7 us against 7.8 through numpy, of 64 6.5 against 8.0, of 96 9.7 against 8.2)
LagS = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# the tuples of them; a document's list fills one under strict validation (a scenario file)
NoiseFactors = Annotated[tuple[NoiseFactor, ...], BeforeValidator(as_tuple)]
NoiseExcesses = Annotated[tuple[NoiseExcess, ...], BeforeValidator(as_tuple)]
LagsS = Annotated[tuple[LagS, ...], BeforeValidator(as_tuple)]
IDLE_EPS_S = 1e-7  # a step starting more than this after the previous one ended found the engine idle
WAKE_TAU_GRID_S: tuple[float, ...] = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # wake_tau_s tried
MIN_WAKE_STEPS = 5  # steps after idle needed to fit wake_s


class PoorFitError(ConfigError):
    """A step model fitted too poorly to predict from (override with allow_poor_fit)."""


class StepModel(BaseModel):
    """Linear step-time model; every coefficient in seconds (per unit where named)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_s: float = Field(0.0, ge=0, description="Fixed cost of every step, s.")
    per_prefill_token_s: float = Field(0.0, ge=0, description="Cost per prompt token computed, s.")
    per_prefill_seq_s: float = Field(0.0, ge=0, description="Cost per sequence with a prompt chunk in the step "
                                                           "(its set-up), s.")
    per_decode_seq_s: float = Field(0.0, ge=0, description="Cost per decoding sequence, s.")
    per_kv_token_s: float = Field(0.0, ge=0, description="Cost per KV token read by decoding sequences, s.")
    arrival_lag_s: float = Field(0.0, ge=0, description="Delay from a request's arrival to the scheduler seeing "
                                                       "it, s.")
    emit_lead_s: float = Field(0.0, ge=0, description="How long before a step's end its tokens are emitted, s.")
    wake_s: float = Field(0.0, ge=0, description="Extra time of the first step after the engine sat idle long, s.")
    wake_tau_s: float = Field(0.0, ge=0, description="How fast an idle engine cools: after t s idle its first step "
                                                    "takes wake_s x (1 - exp(-t / wake_tau_s)) more (0: wake_s "
                                                    "after any idle), s.")
    after_prefill_s: float = Field(0.0, ge=0, description="Extra time of a step that directly follows a step with "
                                                         "prompt tokens, s.")
    noise_factors: NoiseFactors = Field((), description="Step-time noise: measured / modelled step time, the "
                                             "mean of each equal share of the fitted steps from fastest to "
                                             "slowest; a simulated step's time is multiplied by one, drawn at "
                                             "random (empty: every step takes exactly the model's time).")
    prefill_noise_factors: NoiseFactors = Field((), description="Noise factors of steps with prompt "
                                                     "tokens, fitted apart when the trace has enough of them "
                                                     "(a stall is a smaller share of a long step); empty: "
                                                     "noise_factors.")
    noise_excess_s: NoiseExcesses = Field((), description="Step-time noise in seconds: measured - "
                                               "modelled step time, the mean of each equal share of the fitted "
                                               "steps from fastest to slowest; a simulated step takes the "
                                               "model's time plus one, drawn at random (at least "
                                               f"{MIN_NOISE_SHARE:g} x the model's time). Not with "
                                               "noise_factors.")
    prefill_noise_excess_s: NoiseExcesses = Field((), description="noise_excess_s of steps with prompt "
                                                       "tokens, fitted apart when the trace has enough of them; "
                                                       "empty: noise_excess_s.")
    noise_autocorrelation: float = Field(0.0, ge=0, le=MAX_NOISE_AUTOCORRELATION,
                                         description="Correlation of one step's noise with the next's (normal "
                                                     "scores; 0: independent steps); with noise_jitter_share, "
                                                     "of the drift's.")
    noise_jitter_share: float = Field(0.0, ge=0, le=1,
                                      description="Share of the noise (variance of its normal scores) drawn afresh "
                                                  "each step; the rest drifts with noise_autocorrelation (0: all "
                                                  "of it drifts, as older fits).")
    arrival_lags_s: LagsS = Field((), description="The arrival lag's spread: the mean lag of each "
                                              "equal share of the measured lags, shortest to longest; each "
                                              "request draws one at random (empty: every request is seen "
                                              "arrival_lag_s late).")
    busy_arrival_lags_s: LagsS = Field((), description="The lag of a request that arrives while a step "
                                                   "runs, as arrival_lags_s (the load generator's thread waits for "
                                                   "the engine's); empty: the same lags as at an idle engine.")

    @model_validator(mode="after")
    def _one_kind_of_noise(self) -> "StepModel":
        if self.noise_excess_s and self.noise_factors:
            raise ValueError("give noise_excess_s (seconds added to a step) or noise_factors (a step's time "
                             "multiplied), not both")
        if self.prefill_noise_excess_s and not self.noise_excess_s:
            raise ValueError("prefill_noise_excess_s needs noise_excess_s (the other steps' excess)")
        return self

    def draw_arrival_lags_s(self, n: int, rng: np.random.Generator, *, busy: bool = False) -> np.ndarray:
        """Return ``n`` requests' arrival lags: drawn from ``arrival_lags_s`` (``busy``: ``busy_arrival_lags_s``)
        by ``rng``, else ``arrival_lag_s``."""
        lags = self.busy_arrival_lags_s if busy and self.busy_arrival_lags_s else self.arrival_lags_s
        if not lags:
            return np.full(n, self.arrival_lag_s)
        return np.asarray(lags)[rng.integers(0, len(lags), size=n)]

    @property
    def noise_mean(self) -> float:
        """Return the mean noise factor (1 without noise): simulated steps take this times the model's time."""
        return float(np.mean(self.noise_factors)) if self.noise_factors else 1.0

    @property
    def spread_text(self) -> str:
        """Return the noise and the arrival lag's spread in one phrase ("" when the model has neither)."""
        parts = []
        if self.noise_excess_s:
            e = self.noise_excess_s
            parts.append(f"step-time noise {e[len(e) // 10] * 1e3:+.2f} to {e[len(e) * 9 // 10] * 1e3:+.2f} ms "
                         f"(10th to 90th percentile, mean {float(np.mean(e)) * 1e3:+.2f} ms), step-to-step "
                         f"correlation {self.noise_autocorrelation:.2f}"
                         + (f" on a drift of {1 - self.noise_jitter_share:.0%}" if self.noise_jitter_share else ""))
        if self.noise_factors:
            f = self.noise_factors
            parts.append(f"step-time noise x{f[len(f) // 10]:.2f} to x{f[len(f) * 9 // 10]:.2f} (10th to 90th "
                         f"percentile, mean x{self.noise_mean:.2f}), step-to-step correlation "
                         f"{self.noise_autocorrelation:.2f}")
        if self.arrival_lags_s:
            lags = self.arrival_lags_s
            parts.append(f"arrival lags {lags[0] * 1e3:.3g} to {lags[-1] * 1e3:.3g} ms")
        return "; ".join(parts)

    def noise(self, rng: np.random.Generator) -> "StepNoise | None":
        """Return a stream of this model's step-time noise drawn from ``rng`` (None without noise)."""
        if self.noise_excess_s:
            return StepNoise(self.noise_excess_s, self.noise_autocorrelation, rng, self.prefill_noise_excess_s,
                             jitter_share=self.noise_jitter_share,
                             additive=True)
        if not self.noise_factors:
            return None
        return StepNoise(self.noise_factors, self.noise_autocorrelation, rng, self.prefill_noise_factors,
                         jitter_share=self.noise_jitter_share)

    def step_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens_read: int, prefill_seqs: int = 0) -> float:
        """Return the duration of one step.

        >>> StepModel(base_s=0.03, per_prefill_token_s=1e-4).step_s(1000, 4, 0)
        0.13
        """
        return (self.base_s + self.per_prefill_token_s * prefill_tokens + self.per_decode_seq_s * decode_seqs
                + self.per_kv_token_s * kv_tokens_read + self.per_prefill_seq_s * prefill_seqs)

    def extra_s(self, idle_s: float, after_prefill: bool) -> float:
        """Return the time a step adds for what came before it: ``idle_s`` of idle engine (0: it started as
        the previous step ended), or a previous step with prompt tokens.

        >>> StepModel(wake_s=0.001, after_prefill_s=0.0002).extra_s(0.0, True)
        0.0002
        """
        extra = 0.0
        if idle_s > IDLE_EPS_S:
            if self.wake_s:  # 0 x the share is 0: no numpy call per step after idle without a wake term
                extra += self.wake_s * float(wake_share(np.asarray(idle_s), self.wake_tau_s))
        elif after_prefill:
            extra += self.after_prefill_s
        return extra

    def prefill_s(self, prefill_tokens: int) -> float:
        """Return the time of one prompt's prefill on its own lane (no base, no decode)."""
        return self.per_prefill_token_s * prefill_tokens + self.per_prefill_seq_s

    def decode_run_ends(self, start_s: float, decode_seqs: int, kv_tokens_read: int, steps: int,
                        factors: np.ndarray | None = None, first_extra_s: float = 0.0,
                        additive: bool = False) -> np.ndarray:
        """Return the end times of ``steps`` pure decode steps; each step reads ``decode_seqs`` more KV tokens.

        Bit for bit what adding ``step_s`` (plus ``first_extra_s`` to the first, then its noise, one
        value per step from ``factors``: times it, or with ``additive`` plus it as
        ``StepNoise.apply``) one step at a time gives (same operations, same order), so a simulation
        that jumps over a run breaks ties exactly as one that steps through it. A short run without
        noise is added up in Python (the same float operations as numpy's cumulative sum).
        """
        if factors is None and steps <= FEW_STEPS:  # numpy's calls cost more than a few additions
            return np.array(self.decode_run_ends_until(start_s, decode_seqs, kv_tokens_read, steps, first_extra_s))
        fixed = self.base_s + self.per_prefill_token_s * 0 + self.per_decode_seq_s * decode_seqs
        times = np.empty(steps + 1)
        times[0] = start_s
        if self.per_kv_token_s == 0:
            times[1:] = fixed + self.per_prefill_seq_s * 0  # x + 0.0 == x: the same value step_s gives
        else:
            kv = kv_tokens_read + decode_seqs * np.arange(steps, dtype=np.int64)
            times[1:] = fixed + self.per_kv_token_s * kv.astype(np.float64) + self.per_prefill_seq_s * 0
        if first_extra_s:
            times[1] += first_extra_s
        if factors is not None:
            times[1:] = noisy_s(times[1:], factors[:steps], additive)
        return np.cumsum(times)[1:]

    def decode_run_ends_until(self, start_s: float, decode_seqs: int, kv_tokens_read: int, steps: int,
                              first_extra_s: float = 0.0, stop_s: float = math.inf) -> list[float]:
        """Return :meth:`decode_run_ends` without noise as a list, added up in Python, and only as far as the
        first step that ends after ``stop_s`` (that one included): a short run costs no numpy call, and a run
        cut by an event costs no step past it."""
        fixed = self.base_s + self.per_prefill_token_s * 0 + self.per_decode_seq_s * decode_seqs
        zero, per_kv = self.per_prefill_seq_s * 0, self.per_kv_token_s
        # step j reads kv_tokens_read + decode_seqs * j tokens (an int: exact, as the float product of step_s reads it)
        kv, t = kv_tokens_read, start_s
        out: list[float] = []
        step = fixed + zero if per_kv == 0 else fixed + per_kv * float(kv) + zero
        if first_extra_s:
            step += first_extra_s
        append = out.append
        if per_kv == 0:  # every step alike after the first
            for _ in range(steps):
                t += step
                append(t)
                if t > stop_s:
                    break
                step = fixed + zero
            return out
        if zero == 0.0 and kv + decode_seqs * steps < 2**53:
            # the float kv counts whole tokens below 2**53, so adding decode_seqs is exact (the int sum's float), and
            # "+ zero" adds +0.0 to a sum of non-negative terms, which leaves it as it is: both left out of the loop
            kv_f, seqs_f = float(kv), float(decode_seqs)
            for _ in range(steps):
                t += step
                append(t)
                if t > stop_s:
                    break
                kv_f += seqs_f
                step = fixed + per_kv * kv_f
            return out
        for _ in range(steps):
            t += step
            append(t)
            if t > stop_s:
                break
            kv += decode_seqs
            step = fixed + per_kv * kv + zero  # float * int: the int converted as float(kv) would
        return out

    @classmethod
    def from_flat(cls, prefill_s: float, prompt_tokens: int, tpot_s: float) -> "StepModel":
        """Return the spec's flat model: a prompt's prefill takes ``prefill_s``, a decode step ``tpot_s``.

        >>> StepModel.from_flat(1.2, 7800, 0.031).step_s(7800, 0, 0) - 0.031
        1.2
        """
        if prompt_tokens <= 0:
            raise ConfigError(f"prompt_tokens {prompt_tokens} must be positive for a flat step model")
        return cls(base_s=tpot_s, per_prefill_token_s=prefill_s / prompt_tokens)


def noisy_s(duration_s: Any, noise: Any, additive: bool) -> Any:
    """Return a step's time with its noise: ``duration_s x noise``, or with ``additive``
    ``max(duration_s + noise, MIN_NOISE_SHARE x duration_s)`` (scalars or arrays, the same operations).

    >>> noisy_s(0.002, 0.004, True), noisy_s(0.002, -0.003, True), noisy_s(0.002, 1.5, False)
    (0.006, 0.0004, 0.003)
    """
    if not additive:
        return duration_s * noise
    return np.maximum(duration_s + noise, duration_s * MIN_NOISE_SHARE) if isinstance(duration_s, np.ndarray) \
        else max(duration_s + noise, duration_s * MIN_NOISE_SHARE)


def wake_share(idle_s: np.ndarray, tau_s: float) -> np.ndarray:
    """Return the share of ``wake_s`` a step pays after ``idle_s`` of idle engine: 1 - exp(-idle / tau), 0 when
    it started straight after the previous step, 1 for any idle when ``tau_s`` is 0.

    >>> wake_share(np.array([0.0, 0.01, 1.0]), 0.01).round(3).tolist()
    [0.0, 0.632, 1.0]
    """
    idle = np.asarray(idle_s, dtype=np.float64)
    was_idle = idle > IDLE_EPS_S
    if tau_s <= 0:
        return was_idle.astype(np.float64)
    return np.where(was_idle, -np.expm1(-np.maximum(idle, 0.0) / tau_s), 0.0)


class StepNoise:
    """A seeded stream of step-time noise: one factor (or, ``additive``, one excess in seconds) per simulated
    step, drawn in step order.

    A Gaussian AR(1) process (coefficient ``autocorrelation``), mixed with ``jitter_share`` of
    independent normal noise (variance shares; the sum stays standard normal), is mapped through the normal CDF to
    a probability, which picks one of ``factors`` (equal shares), or of ``prefill_factors`` for a
    step with prompt tokens when given: each step's noise has the fitted distribution of its
    kind, and a slow step is followed by a slow one as often as fitted. ``apply`` puts a value on
    a step's time (``noisy_s``). ``peek`` looks ahead
    without drawing (a decode run looks at more steps than it keeps), ``advance`` consumes, so a
    run of k steps uses exactly the factors k single steps would.
    """

    CHUNK = 4096

    def __init__(self, factors: Sequence[float], autocorrelation: float, rng: np.random.Generator,
                 prefill_factors: Sequence[float] = (), *, additive: bool = False, jitter_share: float = 0.0) -> None:
        self.factors = np.asarray(factors, dtype=np.float64)
        if not self.factors.size:
            raise ConfigError("step noise needs at least one factor")
        self.prefill_factors = np.asarray(prefill_factors, dtype=np.float64) if len(prefill_factors) else self.factors
        self.additive = additive
        self.min_value = float(min(self.factors.min(), self.prefill_factors.min()))
        self.rho = float(autocorrelation)
        if not 0.0 <= jitter_share <= 1.0:
            raise ConfigError(f"step noise jitter share {jitter_share!r}: expected 0 to 1")
        self.jitter_share = float(jitter_share)
        self.rng = rng
        self._z = float(rng.standard_normal())  # the process starts in its stationary distribution
        self._buf = np.empty(0)
        self._pos = 0

    def _fill(self, need: int) -> None:
        left = self._buf[self._pos:]
        count = max(self.CHUNK, need - left.size)
        e = self.rng.standard_normal(count)
        if self.rho > 0:  # z[t] = rho z[t-1] + sqrt(1 - rho^2) e[t], continuing from the last z
            from scipy.signal import lfilter  # here, not at the top: scipy.signal takes 0.4 s to import

            z, _ = lfilter([math.sqrt(1 - self.rho ** 2)], [1.0, -self.rho], e, zi=[self.rho * self._z])
        else:
            z = e
        self._z = float(z[-1])  # the drift's state
        if self.jitter_share > 0:
            z = math.sqrt(1 - self.jitter_share) * z + math.sqrt(self.jitter_share) * self.rng.standard_normal(count)
        self._buf = np.concatenate([left, ndtr(z)])  # probabilities; the step's kind picks the table
        self._pos = 0

    def peek(self, k: int, prefill: bool = False) -> np.ndarray:
        """Return the next ``k`` factors (of steps with prompt tokens: ``prefill``) without consuming them."""
        if self._pos + k > self._buf.size:
            self._fill(k)
        table = self.prefill_factors if prefill else self.factors
        return table[np.minimum((self._buf[self._pos:self._pos + k] * table.size).astype(np.int64), table.size - 1)]

    def advance(self, k: int) -> None:
        """Consume ``k`` factors (after ``peek`` of at least ``k``)."""
        if self._pos + k > self._buf.size:
            self._fill(k)
        self._pos += k

    def take(self, k: int = 1, prefill: bool = False) -> np.ndarray:
        """Return and consume the next ``k`` factors."""
        out = self.peek(k, prefill)
        self.advance(k)
        return out

    def apply(self, duration_s: float, value: float) -> float:
        """Return a step's time with one drawn value on it (``noisy_s``)."""
        return float(noisy_s(duration_s, value, self.additive))

    def shortest_s(self, duration_s: float) -> float:
        """Return the least time a step of ``duration_s`` can take with any value of this stream on it."""
        return float(noisy_s(duration_s, self.min_value, self.additive))


def bin_means(values: np.ndarray, bins: int) -> np.ndarray:
    """Return the mean of each of ``bins`` equal shares of ``values`` sorted; a value on a share's edge is
    split between the two, so the bins' mean is the values' mean.

    >>> bin_means(np.array([4.0, 1.0, 3.0, 2.0]), 2).tolist()
    [1.5, 3.5]
    >>> [round(float(x), 3) for x in bin_means(np.array([1.0, 2.0, 6.0]), 2)]  # 2 is split half and half
    [1.333, 4.667]
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    n = v.size
    cumulative = np.concatenate([[0.0], np.cumsum(v)])  # the sum of the smallest k values, k = 0..n
    edges = np.interp(np.linspace(0.0, n, bins + 1), np.arange(n + 1), cumulative)
    return np.diff(edges) * bins / n


def fit_noise(ratio: np.ndarray, total_ratio: float | None = None, *, bins: int = NOISE_BINS,
              window: int = NOISE_WINDOW_STEPS) -> tuple[tuple[float, ...], float]:
    """Return ``noise_factors`` and ``noise_autocorrelation`` for steps' measured / modelled ratios, in step order.

    The factors are the mean ratio of each of ``bins`` equal shares of the steps, sorted, scaled so
    that their mean is ``total_ratio`` (total measured over total modelled time; default the mean
    ratio): the simulated busy time is the run's. The autocorrelation is the one under which the
    mean factor of ``window`` consecutive steps spreads as in the trace (90th over 10th percentile
    of the windows' means): what a request's TPOT, an average over its steps, sees. It is found by
    bisection on a seeded stream of ``NOISE_FIT_WINDOWS`` windows, so the fit is deterministic.
    """
    r = np.asarray(ratio, dtype=np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    if r.size < max(MIN_NOISE_STEPS, bins):
        return (), 0.0
    factors = bin_means(r, bins)
    if total_ratio is not None and total_ratio > 0:
        factors *= total_ratio / factors.mean()
    return tuple(float(f) for f in factors), _autocorrelation_for_windows(r, factors, window)


def fit_excess_noise(excess_s: np.ndarray, *, bins: int = EXCESS_BINS, kinds: np.ndarray | None = None,
                     max_lag: int = NOISE_MAX_LAG) -> tuple[tuple[float, ...], float, float]:
    """Return ``noise_excess_s``, ``noise_autocorrelation`` and ``noise_jitter_share`` for steps' measured -
    modelled times, in step order.

    The table is the mean excess of each of ``bins`` equal shares of the steps, sorted (its mean is
    the steps' mean excess: the simulated busy time is the run's). The noise's memory is
    ``fit_noise_memory``'s (``kinds``: each step's kind, ranked apart).
    """
    e = np.asarray(excess_s, dtype=np.float64)
    ok = np.isfinite(e)
    if int(ok.sum()) < MIN_NOISE_STEPS:
        return (), 0.0, 0.0
    table = bin_means(e[ok], bins)
    jitter, rho = fit_noise_memory(e[ok], None if kinds is None else np.asarray(kinds)[ok], max_lag=max_lag)
    if 0.0 < jitter < 1.0:
        jitter = _jitter_for_seconds(e[ok], None if kinds is None else np.asarray(kinds)[ok], table, rho, max_lag)
    return tuple(float(x) for x in table), rho, jitter


JITTER_GRID = np.round(np.arange(0.0, 1.0 + 1e-9, 0.02), 2)  # jitter shares tried against the excess in seconds
NOISE_FIT_STEPS = 100_000  # steps of a seeded stream per jitter share tried


def _standardized(values: np.ndarray, kinds: np.ndarray | None) -> np.ndarray:
    """Return ``values`` less their kind's mean, over their kind's standard deviation."""
    v = np.asarray(values, dtype=np.float64).copy()
    groups = np.zeros(v.size, dtype=np.int64) if kinds is None else np.unique(kinds, return_inverse=True)[1]
    for g in np.unique(groups):
        at = groups == g
        sd = float(v[at].std())
        v[at] = (v[at] - v[at].mean()) / (sd if sd > 0 else 1.0)
    return v


def _jitter_for_seconds(excess_s: np.ndarray, kinds: np.ndarray | None, table: np.ndarray, rho: float,
                        max_lag: int) -> float:
    """Return the jitter share under which the stream's excess in seconds correlates as the trace's at lags 1 to
    ``max_lag`` (least squares), the drift's ``rho`` held: the normal scores give the memory's shape, but a
    stall (the tail) carries over less than the body, and a request's TPOT averages seconds, not scores."""
    lags = min(max_lag, excess_s.size // 4)
    target = autocorrelation(_standardized(excess_s, kinds), lags)
    best: tuple[float, float] | None = None
    for share in JITTER_GRID:
        stream = StepNoise(table, rho, np.random.default_rng(NOISE_FIT_SEED), additive=True,
                           jitter_share=float(share)).take(NOISE_FIT_STEPS)
        sse = float(np.sum((autocorrelation(stream, lags) - target) ** 2))
        if best is None or sse < best[0]:
            best = (sse, float(share))
    assert best is not None
    return best[1]


def normal_scores(values: np.ndarray, kinds: np.ndarray | None = None) -> np.ndarray:
    """Return each value's normal score (the standard normal quantile of its rank), ranked within its kind.

    >>> normal_scores(np.array([5.0, 1.0, 3.0])).round(3).tolist()
    [0.967, -0.967, 0.0]
    """
    from scipy.stats import rankdata  # here, not at the top: scipy.stats takes 0.3 s to import

    v = np.asarray(values, dtype=np.float64)
    groups = np.zeros(v.size, dtype=np.int64) if kinds is None else np.unique(kinds, return_inverse=True)[1]
    out = np.empty(v.size)
    for g in np.unique(groups):
        at = groups == g
        out[at] = ndtri((rankdata(v[at]) - 0.5) / int(at.sum()))
    return out


def autocorrelation(values: np.ndarray, max_lag: int) -> np.ndarray:
    """Return the autocorrelation of ``values`` at lags 1 to ``max_lag`` (0 where it has no variance).

    >>> autocorrelation(np.array([1.0, -1.0] * 50), 2).round(2).tolist()
    [-0.99, 0.98]
    """
    x = np.asarray(values, dtype=np.float64)
    x = x - x.mean()
    var = float(np.dot(x, x))
    if var <= 0:
        return np.zeros(max_lag)
    return np.array([float(np.dot(x[:-k], x[k:])) / var for k in range(1, max_lag + 1)])


DRIFT_GRID = np.round(np.arange(0.0, MAX_NOISE_AUTOCORRELATION + 5e-4, 0.001), 3)  # drift coefficients tried


def fit_noise_memory(excess_s: np.ndarray, kinds: np.ndarray | None = None, *,
                     max_lag: int = NOISE_MAX_LAG) -> tuple[float, float]:
    """Return ``(noise_jitter_share, noise_autocorrelation)``: the noise as independent jitter plus an AR(1)
    drift, fitted by least squares to the autocorrelation of the steps' normal scores at lags 1 to ``max_lag``.

    Jitter plus drift correlates ``(1 - jitter) x rho^k`` at lag k: for each ``rho`` on a grid the
    best share is closed-form, and the pair with the least squared error wins. Normal scores,
    because ``StepNoise`` draws a Gaussian process through the fitted table (``kinds`` ranks each
    kind of step apart, so a prefill step's larger excess is not mistaken for drift).
    """
    e = np.asarray(excess_s, dtype=np.float64)
    lags = min(max_lag, e.size // 4)
    if lags < 1:
        return 0.0, 0.0
    acf = autocorrelation(normal_scores(e, kinds), lags)
    k = np.arange(1, lags + 1)
    basis = DRIFT_GRID[:, None] ** k[None, :]  # one row per rho tried
    norm = np.einsum("ij,ij->i", basis, basis)
    drift = np.clip(np.divide(basis @ acf, norm, out=np.zeros_like(norm), where=norm > 0), 0.0, 1.0)
    sse = np.sum((acf[None, :] - drift[:, None] * basis) ** 2, axis=1)
    best = int(np.argmin(sse))
    if drift[best] <= 2.0 / math.sqrt(e.size):  # within two standard errors of an autocorrelation of 0
        return 1.0, 0.0  # nothing carries over from step to step
    return round(1.0 - float(drift[best]), 4), float(DRIFT_GRID[best])


MIN_PREFILL_NOISE_STEPS = 100  # steps with prompt tokens needed for their own noise


def kind_excess(excess_s: np.ndarray, *, bins: int = EXCESS_BINS,
                min_steps: int = MIN_PREFILL_NOISE_STEPS) -> tuple[float, ...]:
    """Return the excess table of one kind of step (empty with fewer than ``min_steps``), as ``fit_excess_noise``."""
    e = np.asarray(excess_s, dtype=np.float64)
    e = e[np.isfinite(e)]
    if e.size < max(min_steps, 1):
        return ()
    return tuple(float(x) for x in bin_means(e, bins))


def window_spread(values: np.ndarray, window: int) -> float | None:
    """Return the 90th over the 10th percentile of the means of consecutive ``window``-value windows (None:
    fewer than 8 windows).

    >>> window_spread(np.array([1.0, 1.0, 3.0, 3.0] * 8), 2)
    3.0
    """
    blocks = values.size // window
    if blocks < 8:
        return None
    means = values[:blocks * window].reshape(blocks, window).mean(axis=1)
    low, high = np.percentile(means, [10, 90])
    return float(high / low) if low > 0 else None


NOISE_FIT_WINDOWS = 2000  # windows of a seeded stream per autocorrelation tried
NOISE_FIT_SEED = 0


def _autocorrelation_for_windows(ratio: np.ndarray, factors: np.ndarray, window: int) -> float:
    target = window_spread(ratio, window)
    if target is None:
        return 0.0

    def spread(rho: float) -> float:
        stream = StepNoise(factors, rho, np.random.default_rng(NOISE_FIT_SEED)).take(window * NOISE_FIT_WINDOWS)
        return window_spread(stream, window) or 1.0

    low, high = 0.0, MAX_NOISE_AUTOCORRELATION
    if spread(low) >= target:
        return 0.0
    if spread(high) <= target:
        return high
    for _ in range(20):  # the spread grows with the autocorrelation: bisect to about 1e-6
        mid = (low + high) / 2
        low, high = (mid, high) if spread(mid) < target else (low, mid)
    return round((low + high) / 2, 4)


class FitQuality(BaseModel):
    """Whether a fit is good enough to predict from, with the thresholds it was judged against."""

    model_config = ConfigDict(extra="forbid")

    usable: bool
    reason: str = Field(description="Why it is usable or not, with the numbers.")
    max_mean_rel_error: float = MAX_MEAN_REL_ERROR
    min_r2: float = MIN_R2
    r2_judged: bool = Field(description="False when predicted step times barely vary, so R² says little.")


class StepFit(BaseModel):
    """A fitted step model, how well it fits, and whether it is good enough to predict from."""

    model_config = ConfigDict(extra="forbid")

    model: StepModel
    method: FitMethod = "huber"
    steps: int = Field(description="Steps fitted.")
    rmse_s: float = Field(description="Root mean square error of the step time, s.")
    mean_abs_error_s: float = Field(description="Mean absolute error of the step time, s.")
    max_abs_error_s: float = Field(description="Largest absolute error of one step, s.")
    mean_abs_pct_error: float | None = Field(
        description="Mean relative error: mean |measured - fitted| / measured (None if a step took 0 s).")
    r2: float | None = Field(description="Coefficient of determination (None when step times do not vary).")
    stderr: dict[str, float | None] = Field(description="Standard error of each coefficient left free (None: pinned at 0 or unknown).")
    outlier_share: float = Field(0.0, description="Share of steps the robust fit down-weighted (far slower or "
                                                  "faster than the model).")
    excess_share: float | None = Field(None, description="Total measured step time over total fitted, minus 1: "
                                                         "time the fit leaves to outliers (another process on a "
                                                         "shared machine).")
    quality: FitQuality | None = None

    @property
    def summary(self) -> str:
        """Return the fit's quality in one line (shown beside every prediction that uses it)."""
        r2 = "-" if self.r2 is None else f"{self.r2:.3f}"
        rel = "-" if self.mean_abs_pct_error is None else f"{self.mean_abs_pct_error:.1%}"
        text = f"step model fitted to {self.steps:,} steps ({self.method}): R² {r2}, mean relative error {rel}"
        if self.outlier_share:
            text += f", {self.outlier_share:.1%} of steps down-weighted as outliers"
        return text


def fit_step_model(rows: StepTrace | Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]],
                   fit: Sequence[str] = COEFFICIENTS, *, method: FitMethod = "huber", noise: bool = False) -> StepFit:
    """Fit the step model to a step trace, robustly (``huber``) or by plain ``least_squares``; never negative.

    ``rows`` is a step trace (``records.steps``), or its rows or columns under the schema's names or the
    old ones. It needs ``duration_s``, ``prefill_tokens``, ``decode_seqs`` and ``kv_tokens_read``
    (``kv_tokens_used`` if that is missing), and uses ``prefill_seqs`` (without it ``per_prefill_seq_s``
    stays 0), ``steps`` (a row that covers several decode steps, as the simulator writes: its duration
    is their total and ``kv_tokens_read`` is its first step's) and ``lane`` (rows on the simulator's
    ``prefill`` lane have no step base). ``fit``
    names the coefficients left free; the others are held at 0. Only the step-time coefficients are
    fitted here; ``engine.validation.fit_trace`` adds the arrival lag and emit lead of a timing run.
    With ``noise`` the model also carries the steps' scatter around it (``fit_noise``; rows in the
    order the steps ran).
    """
    cols = _columns(rows)
    unknown = [c for c in fit if c not in COEFFICIENTS]
    if unknown or not fit:
        raise ConfigError(f"fit {list(fit)!r}: expected some of {', '.join(COEFFICIENTS)}")
    if method not in ("huber", "least_squares"):
        raise ConfigError(f"fit method {method!r}: expected 'huber' or 'least_squares'")
    steps = cols.get("steps", np.ones_like(cols["duration_s"]))
    if np.any(steps < 1):
        raise ConfigError("step trace: 'steps' must be at least 1 in every row")
    y = cols["duration_s"] / steps
    features = {
        "base_s": cols["base"],
        "per_prefill_token_s": cols["prefill_tokens"] / steps,
        "per_prefill_seq_s": cols["prefill_seqs"] / steps if "prefill_seqs" in cols else None,
        "per_decode_seq_s": cols["decode_seqs"],
        # a run's decoders read ``decode_seqs`` more tokens each step: use the run's mean
        "per_kv_token_s": cols["kv_tokens_read"] + cols["decode_seqs"] * (steps - 1) / 2,
        "wake_s": None,  # set per wake_tau_s tried, below
        "after_prefill_s": cols["after_prefill"] / steps if "after_prefill" in cols else None,
    }
    idle = cols.get("idle_before_s")
    wake = "wake_s" in fit and idle is not None and int(np.sum(idle > IDLE_EPS_S)) >= MIN_WAKE_STEPS
    if wake:
        features["wake_s"] = np.zeros_like(y)  # a placeholder column, replaced for each time constant
    names = [c for c in COEFFICIENTS if c in fit and features[c] is not None]
    n = y.size
    if n < len(names):
        raise ConfigError(f"step trace has {n} rows; fitting {len(names)} coefficients needs at least that many")
    x = np.column_stack([features[c] for c in names])
    weights = steps.astype(np.float64)
    tau = 0.0
    if wake:
        assert idle is not None
        col = names.index("wake_s")
        ref, _ = _fit(np.delete(x, col, axis=1), y, weights, method)
        ref_resid = y - np.delete(x, col, axis=1) @ ref
        scale = HUBER_K * MAD_TO_SIGMA * float(np.median(np.abs(ref_resid - np.median(ref_resid))))
        best = None
        for candidate in WAKE_TAU_GRID_S:  # the time constant by a robust loss on one common scale
            x[:, col] = wake_share(idle, candidate) / steps
            c, _ = _fit(x, y, weights, method)
            loss = float(np.sum(weights * _huber_loss(y - x @ c, scale)))
            if best is None or loss < best[0]:
                best = (loss, candidate)
        assert best is not None
        tau = best[1]
        x[:, col] = wake_share(idle, tau) / steps
    coef, robust_w = _fit(x, y, weights, method)
    model = StepModel(**{c: float(v) for c, v in zip(names, coef)}, wake_tau_s=tau if wake else 0.0)
    resid = y - x @ coef
    total_w = float(steps.sum())
    rmse = float(np.sqrt(np.sum(steps * resid ** 2) / total_w))
    abs_err = np.abs(resid)
    mape = None if np.any(y <= 0) else float(np.sum(steps * abs_err / y) / total_w)
    mean_y = float(np.sum(steps * y) / total_w)
    ss_tot = float(np.sum(steps * (y - mean_y) ** 2))
    r2 = None if ss_tot <= 0 else 1.0 - float(np.sum(steps * resid ** 2)) / ss_tot
    predicted = x @ coef
    total_pred = float(np.sum(steps * predicted))
    excess = float(np.sum(steps * y)) / total_pred - 1.0 if total_pred > 0 else None
    if noise and total_pred > 0:
        prefill = cols["prefill_tokens"] > 0
        over_s = y - predicted  # each step's excess over the model (a row of several steps: per step)
        table, rho, jitter = fit_excess_noise(over_s, kinds=prefill)
        prefill_table = kind_excess(over_s[prefill]) if table else ()
        if prefill_table:  # the decode steps get their own too (a longer step meets more stalls)
            table = kind_excess(over_s[~prefill], min_steps=0) or table
        model = model.model_copy(update={"noise_excess_s": table, "noise_autocorrelation": rho,
                                         "noise_jitter_share": jitter,
                                         "prefill_noise_excess_s": prefill_table})
    w = np.sqrt(steps * robust_w)
    result = StepFit(model=model, method=method, steps=int(total_w), rmse_s=rmse,
                     mean_abs_error_s=float(np.sum(steps * abs_err) / total_w),
                     max_abs_error_s=float(abs_err.max()), mean_abs_pct_error=mape, r2=r2,
                     stderr=_stderr(x * w[:, None], resid * w, coef, names),
                     outlier_share=float(np.sum(steps * (robust_w < 1)) / total_w), excess_share=excess)
    result.quality = judge(result, predicted, steps)
    return result


def _huber_loss(resid: np.ndarray, c: float) -> np.ndarray:
    """Return the Huber loss of each residual at threshold ``c`` (squared error when ``c`` is 0)."""
    a = np.abs(resid)
    if c <= 0:
        return a ** 2
    return np.where(a <= c, 0.5 * a ** 2, c * (a - 0.5 * c))


def _fit(x: np.ndarray, y: np.ndarray, steps: np.ndarray, method: FitMethod,
         max_iter: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Return non-negative coefficients and each row's robust weight (1 everywhere for least squares).

    Huber by iteratively reweighted NNLS: a row whose residual r exceeds c = HUBER_K x sigma gets
    weight c / |r|, sigma re-estimated each round as 1.4826 x the median absolute deviation of the
    residuals. HUBER_K is 3, not the textbook 1.345: a request's TPOT averages its steps, so the
    ordinary jitter must keep full weight (the fitted step is the mean step); only stalls count less.
    """
    scale = np.maximum(np.abs(x).max(axis=0), 1e-300)
    xs = x / scale

    from scipy.optimize import nnls  # here, not at the top: every importer of servebench.capacity would pay for it

    def solve(weights: np.ndarray) -> np.ndarray:
        w = np.sqrt(weights)
        return nnls(xs * w[:, None], y * w, maxiter=50 * x.shape[1])[0]

    robust = np.ones_like(y)
    coef = solve(steps)
    if method == "huber":
        for _ in range(max_iter):
            resid = y - xs @ coef
            sigma = MAD_TO_SIGMA * float(np.median(np.abs(resid - np.median(resid))))
            if sigma <= 0:
                break
            c = HUBER_K * sigma
            robust = np.minimum(1.0, c / np.maximum(np.abs(resid), 1e-300))
            new = solve(steps * robust)
            done = np.allclose(new, coef, rtol=1e-7, atol=1e-12)
            coef = new
            if done:
                break
    return coef / scale, robust


def judge(fit: StepFit, predicted: np.ndarray | None = None, weights: np.ndarray | None = None) -> FitQuality:
    """Return whether a fit is good enough to predict from.

    Refused when the mean relative error exceeds ``MAX_MEAN_REL_ERROR`` (35%), or when R² is below
    ``MIN_R2`` (0.30) while the fitted step times vary (coefficient of variation at least 10%;
    with steps all alike R² measures noise, not the model, and only the relative error is judged).
    """
    spread = None
    if predicted is not None and predicted.size:
        w = np.ones_like(predicted) if weights is None else weights
        mean = float(np.sum(w * predicted) / np.sum(w))
        spread = float(np.sqrt(np.sum(w * (predicted - mean) ** 2) / np.sum(w))) / mean if mean > 0 else 0.0
    r2_judged = fit.r2 is not None and (spread is None or spread >= MIN_SPREAD_FOR_R2)
    rel = fit.mean_abs_pct_error
    r2_text = "-" if fit.r2 is None else f"{fit.r2:.3f}"
    rel_text = "-" if rel is None else f"{rel:.1%}"
    problems = []
    if rel is not None and rel > MAX_MEAN_REL_ERROR:
        problems.append(f"mean relative error {rel_text} is above {MAX_MEAN_REL_ERROR:.0%}")
    if r2_judged and fit.r2 is not None and fit.r2 < MIN_R2:
        problems.append(f"R² {r2_text} is below {MIN_R2:.2f}")
    if problems:
        return FitQuality(usable=False, r2_judged=r2_judged,
                          reason=" and ".join(problems) + " (a machine busy with other work, or too few distinct "
                          "step sizes): the step model cannot be trusted to predict")
    note = "" if r2_judged else " (R² not judged: the steps are nearly all alike)"
    return FitQuality(usable=True, r2_judged=r2_judged,
                      reason=f"R² {r2_text}, mean relative error {rel_text}: within the thresholds{note}")


def require_usable(fit: StepFit, *, allow_poor_fit: bool = False, what: str = "the step trace") -> None:
    """Raise ``PoorFitError`` when the fit is too poor to predict from, unless ``allow_poor_fit``."""
    q = fit.quality
    if q is None or q.usable or allow_poor_fit:
        return
    raise PoorFitError(f"{what}: {q.reason}; rerun on a quieter machine, or pass --allow-poor-fit to predict anyway")


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


def _columns(rows: StepTrace | Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]) -> dict[str, np.ndarray]:
    """Return the columns the fit uses as floats (and ``base``: 0 on the prefill lane, else 1)."""
    try:
        trace = as_trace(rows)
    except InputFormatError as exc:  # rows handed over in memory: the trace, not a file, is at fault
        raise ConfigError(str(exc)) from None
    raw = {c: getattr(trace, c).astype(np.float64) for c in NAMES if c != "lane" and getattr(trace, c) is not None}
    # a row on the simulator's separate prefill lane runs beside the decode batch: no step base
    raw["base"] = np.ones(len(trace))
    if trace.lane is not None:
        raw["base"][trace.lane == LANES.index("prefill")] = 0.0
    if "prefill_seqs" in raw and np.isnan(raw["prefill_seqs"]).any():
        del raw["prefill_seqs"]  # an older trace (or rows mixing old and new): the coefficient stays 0
    if "steps" in raw and np.isnan(raw["steps"]).any():
        del raw["steps"]  # rows that do not say how many steps they cover stand for one
    if "kv_tokens_read" not in raw and "kv_tokens_used" in raw:
        raw["kv_tokens_read"] = raw["kv_tokens_used"]
    need = ("duration_s", "prefill_tokens", "decode_seqs", "kv_tokens_read")
    missing = [c for c in need if c not in raw]
    if missing:
        raise ConfigError(f"step trace lacks column(s) {', '.join(missing)}; expected {', '.join(need)}")
    for c in need:
        bad = np.isnan(raw[c])
        if bad.any():
            raise ConfigError(f"step trace row {int(np.argmax(bad)) + 1}, column '{c}': no value")
    if raw["duration_s"].size == 0:
        raise ConfigError("step trace is empty")
    separate = trace.lane is not None and bool(np.any(trace.lane == LANES.index("prefill")))
    start = raw.get("start_s")
    if start is not None and not np.isnan(start).any() and not separate:  # what came before each step
        order = np.argsort(start, kind="stable")
        s, d = start[order], raw["duration_s"][order]
        previous_end = np.concatenate([[0.0], s[:-1] + d[:-1]])  # the engine starts idle at 0
        idle = np.maximum(s - previous_end, 0.0)
        prefill = raw["prefill_tokens"][order]
        after = np.concatenate([[False], prefill[:-1] > 0]) & (idle <= IDLE_EPS_S)
        raw["idle_before_s"] = np.empty_like(idle)
        raw["idle_before_s"][order] = idle
        raw["after_prefill"] = np.empty_like(idle)
        raw["after_prefill"][order] = after.astype(np.float64)
    return raw
