"""The spec's diagnosis exercise as five steps: predict each answer, then reveal and score it.

``walkthrough(table)`` turns a profile table (``sample_data/profiles_ab.json``) into the spec's
steps (what to measure, the KV arithmetic, Little's law, the verdict, the experiment), with every
answer computed by ``diagnosis.diagnose_table``; ``score_prediction`` compares a reader's answers
with them. ``servebench.analysis.diagnosis`` re-exports both for the dashboard.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from servebench.analysis.diagnosis import LIMITS, ProfileTable, Verdict, diagnose_table
from servebench.capacity import kv
from servebench.formatting import fmt, fmt_rate, fmt_time

SHARE = "share"  # the unit of an answer that is a fraction: typed as 92 (percent) or 0.92 (fraction)


class NumericAnswer(BaseModel):
    """A number the reader predicts before the reveal; right when within ``tolerance``."""

    name: str = Field(description="Key in the answers mapping, e.g. 'max_concurrent_sequences[B]'.")
    label: str
    value: float
    tolerance: float = Field(ge=0, description="Absolute (a fraction for shares); 0 means exact.")
    unit: str = ""

    @property
    def tolerance_text(self) -> str:
        """Say how close counts as right, in the answer's unit.

        >>> NumericAnswer(name="u", label="u", value=0.92, tolerance=0.025, unit="share").tolerance_text
        'within ±2.5 percentage points'
        >>> NumericAnswer(name="t", label="t", value=8000, tolerance=0, unit="tokens").tolerance_text
        'exact'
        """
        if not self.tolerance:
            return "exact"
        if self.unit == SHARE:
            return f"within ±{self.tolerance * 100:g} percentage points"
        return f"within ±{fmt(self.tolerance)}" + (f" {self.unit}" if self.unit else "")

    @property
    def prompt_label(self) -> str:
        """Return the input's label with its unit and tolerance, e.g. 'B: share of the limit (%, within ±2.5 points)'."""
        if self.unit == SHARE:
            unit = "% or fraction"
        else:
            unit = self.unit or "count"
        return f"{self.label} ({unit}; {self.tolerance_text})"


class ChoiceAnswer(BaseModel):
    """A pick among options (a limit name)."""

    name: str
    label: str
    options: list[str]
    correct: str


class WalkthroughStep(BaseModel):
    """One step of the spec's diagnosis: the question, what to predict, and the explanation to reveal."""

    number: int
    title: str
    question: str
    numbers: list[NumericAnswer] = Field(default_factory=list)
    choices: list[ChoiceAnswer] = Field(default_factory=list)
    explanation: str


class AnswerScore(BaseModel):
    """How close one prediction was."""

    name: str
    label: str
    expected: float | str
    predicted: float | str | None
    error: float | None = Field(description="predicted - expected for numbers; None for choices or no answer.")
    relative_error: float | None = None
    within: bool
    tolerance: str = ""
    closeness: str = Field(default="", description="How close the guess was, in words.")


class StepScore(BaseModel):
    """The scores of one step's predictions."""

    step: int
    scores: list[AnswerScore]
    correct: int
    total: int


PATTERNS: dict[str, str] = {
    "peak active at the KV limit for much of the run, queue wait dominating TTFT, TPOT flat": "kv_memory",
    "TPOT grows as more sequences are active": "decode",
    "prefill dominates TTFT and there is little queueing": "prefill",
    "queue wait dominates TTFT while active sequences stop at a cap below the KV limit": "queueing",
}


def walkthrough(table: ProfileTable, unit: str = "s") -> list[WalkthroughStep]:
    """Return the spec's five diagnosis steps for a profile table, with answers computed from it.

    ``unit`` ('s' or 'ms'): the unit of the times in the explanations (the dashboard reads TTFT and TPOT in ms).
    """
    verdicts = diagnose_table(table, unit)
    n = [p.name for p in table.profiles]
    steps = [WalkthroughStep(
        number=1, title="What to measure",
        question=("Before reading the numbers: which measurements tell a queueing, a prefill, a decode and a KV "
                  "memory limit apart? Match each pattern to the limit it points to."),
        choices=[ChoiceAnswer(name=f"pattern[{i + 1}]", label=p, options=list(LIMITS[:4]), correct=lim)
                 for i, (p, lim) in enumerate(PATTERNS.items())],
        explanation=("Split TTFT into queue wait (arrival to admission) and prefill (admission to first token); "
                     "track request TPOT against the number of active sequences; record peak active sequences "
                     "and the share of the run spent there; compute the KV limit on concurrent sequences. "
                     "KV memory: peak active at the KV limit for much of the run, queue wait dominating TTFT, "
                     "TPOT flat. Decode: TPOT grows with active sequences. Prefill: prefill dominates TTFT with "
                     "little queueing. Queueing: queue wait dominates while active sequences stop at a cap below "
                     "the KV limit."))]
    v_first = verdicts[0]
    kv_numbers: list[NumericAnswer] = []
    if v_first.bytes_per_token is not None:
        kv_numbers.append(NumericAnswer(name="bytes_per_token", label="KV bytes per cached token",
                                        value=v_first.bytes_per_token, tolerance=0, unit="bytes"))
    if v_first.budget_tokens is not None:
        kv_numbers.append(NumericAnswer(name="budget_tokens", label="tokens the KV budget holds",
                                        value=v_first.budget_tokens, tolerance=0, unit="tokens"))
    for v in verdicts:
        if v.tokens_per_request is not None:
            kv_numbers.append(NumericAnswer(name=f"tokens_per_request[{v.profile}]", unit="tokens", tolerance=0,
                                            label=f"{v.profile}: tokens reserved per request",
                                            value=v.tokens_per_request))
        if v.max_concurrent_sequences is not None:
            kv_numbers.append(NumericAnswer(name=f"max_concurrent_sequences[{v.profile}]", tolerance=0,
                                            label=f"{v.profile}: maximum concurrent sequences",
                                            value=v.max_concurrent_sequences, unit="sequences"))
    shape = table.model
    formula = ""
    if shape is not None and v_first.bytes_per_token:
        product = (f"{shape.layers} layers x ({shape.kv_lora_rank} + {shape.qk_rope_head_dim}) latent" if shape.is_mla
                   else f"2 x {shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim}")
        formula = (f"{product} x {shape.bytes_per_element:g} bytes = {v_first.bytes_per_token:,} bytes per token. ")
    paged = table.policy == "paged"

    def held(v: Verdict) -> str:
        m = v.measurements
        out = m.output_cap if m.output_cap is not None else m.output_tokens
        if paged and table.expected_output_tokens is not None:
            out = min(out, table.expected_output_tokens)
        return f"{m.prompt_tokens} + {out}" + (f" in {kv.DEFAULT_BLOCK_SIZE}-token blocks" if paged else "")

    per = "; ".join(f"{v.profile}: {held(v)} = {v.tokens_per_request} tokens, floor({v.budget_tokens} / "
                    f"{v.tokens_per_request}) = {v.max_concurrent_sequences} sequences"
                    for v in verdicts if v.max_concurrent_sequences)
    rule = ("blocks for its prompt plus its expected output" if paged
            else "its prompt plus its full output cap")
    budget = f"The budget holds {v_first.budget_tokens:,} tokens. " if v_first.budget_tokens is not None else ""
    steps.append(WalkthroughStep(
        number=2, title="KV arithmetic",
        question=("Compute the KV bytes per cached token, the tokens the budget holds, each profile's reservation "
                  "per request, and the maximum number of concurrent sequences."),
        numbers=kv_numbers,
        explanation=(f"{formula}{budget}Under the {table.policy} policy a request holds {rule}"
                     + (f": {per}." if per else " (give the model shape and KV budget to compute the limits)."))))
    lit: list[NumericAnswer] = []
    for v in verdicts:
        if v.in_service is not None:
            lit.append(NumericAnswer(name=f"in_service[{v.profile}]", label=f"{v.profile}: average in service",
                                     value=round(v.in_service, 4), tolerance=0.05, unit="requests"))
        if v.utilization is not None:
            lit.append(NumericAnswer(name=f"utilization[{v.profile}]", label=f"{v.profile}: share of the limit",
                                     value=round(v.utilization, 4), tolerance=0.025, unit=SHARE))
    def little(v: Verdict) -> str:
        """Return Little's law for one profile: rate x (prefill p50 + (N - 1) x TPOT p50) = in service."""
        m = v.measurements
        if unit == "s":  # the spec's table gives seconds: its numbers as written
            product = f"{m.arrival_rate_per_s:g}/s x ({m.prefill_p50_s:g} + {m.output_tokens - 1} x {m.tpot_p50_s:g})"
        else:
            product = (f"{fmt_rate(m.arrival_rate_per_s)} x ({fmt_time(m.prefill_p50_s, unit)} + "
                       f"{m.output_tokens - 1} x {fmt_time(m.tpot_p50_s, unit)} = {fmt_time(v.time_in_service_s)})")
        return (f"{v.profile}: {product} = {v.in_service:.2f} in service"
                + (f", {v.utilization:.0%} of {v.max_concurrent_sequences}" if v.utilization is not None else ""))

    littles = "; ".join(little(v) for v in verdicts if v.in_service is not None and v.measurements.prefill_p50_s
                        is not None and v.measurements.tpot_p50_s is not None)
    steps.append(WalkthroughStep(
        number=3, title="Little's law",
        question=("Estimate the average number of requests in service for each profile as arrival rate x time in "
                  "service, where time in service is the median prefill plus (N - 1) median TPOT intervals."),
        numbers=lit,
        explanation=(f"{littles}. As the number in service approaches how many requests the server can hold at "
                     "once, waits rise sharply.")))
    shares: list[NumericAnswer] = []
    for v in verdicts:
        if v.limit != "none" and v.queue_share_of_ttft is not None and v.prefill_share_of_ttft is not None:
            shares += [NumericAnswer(name=f"queue_share_of_ttft[{v.profile}]", tolerance=0.03,
                                     label=f"{v.profile}: queue wait p95 / TTFT p95", unit=SHARE,
                                     value=round(v.queue_share_of_ttft, 4)),
                       NumericAnswer(name=f"prefill_share_of_ttft[{v.profile}]", tolerance=0.03,
                                     label=f"{v.profile}: prefill p95 / TTFT p95", unit=SHARE,
                                     value=round(v.prefill_share_of_ttft, 4))]
    steps.append(WalkthroughStep(
        number=4, title="The verdict",
        question=(f"Name what limits each profile ({', '.join(n)}) at this load, citing the measurements, and say "
                  "what prefill contributes."),
        choices=[ChoiceAnswer(name=f"limit[{v.profile}]", label=f"{v.profile}: what limits it?",
                              options=list(LIMITS), correct=v.limit) for v in verdicts],
        numbers=shares,
        explanation=" ".join(f"{v.profile}: {v.summary} {v.prefill}" for v in verdicts)))
    target = next((v for v in verdicts if v.limit != "none"), verdicts[0])
    exp_numbers: list[NumericAnswer] = []
    if target.limit == "kv_memory" and shape is not None and table.kv_budget_gib and target.tokens_per_request:
        doubled = kv.max_sequences_in_budget(2 * int(table.kv_budget_gib * kv.GIB), shape, target.tokens_per_request)
        exp_numbers.append(NumericAnswer(name=f"doubled_budget_max_sequences[{target.profile}]", tolerance=0,
                                         label=f"{target.profile}: max sequences with twice the KV budget",
                                         value=doubled, unit="sequences"))
        if target.in_service is not None and doubled:
            exp_numbers.append(NumericAnswer(name=f"doubled_budget_utilization[{target.profile}]", tolerance=0.03,
                                             label=f"{target.profile}: share of that limit in service",
                                             value=round(target.in_service / doubled, 4), unit=SHARE))
    steps.append(WalkthroughStep(
        number=5, title="The experiment",
        question=f"Propose one experiment that would confirm the diagnosis of {target.profile}, and the result "
                 "that would refute it.",
        numbers=exp_numbers,
        explanation=(f"{target.experiment.action} It confirms the diagnosis if: {target.experiment.confirm} "
                     f"It refutes it if: {target.experiment.refute}")))
    return steps


def read_prediction(answer: NumericAnswer, raw: float | str | None) -> float | None:
    """Return the prediction as a number in the answer's unit; a share typed as a percent (92) becomes 0.92.

    A share is read as a percent when that is nearer the answer than the number as typed.

    >>> a = NumericAnswer(name="u", label="u", value=0.92, tolerance=0.025, unit="share")
    >>> read_prediction(a, 92), read_prediction(a, 0.9), read_prediction(a, "x")
    (0.92, 0.9, None)
    """
    try:
        pred = float(raw) if raw is not None and raw != "" else None
    except (TypeError, ValueError):
        return None
    if pred is None or answer.unit != SHARE:
        return pred
    as_percent = pred / 100
    return as_percent if abs(as_percent - answer.value) < abs(pred - answer.value) else pred


def closeness_text(answer: NumericAnswer, pred: float | None) -> str:
    """Say how far a prediction was from the answer, in its unit.

    >>> a = NumericAnswer(name="u", label="u", value=0.9211, tolerance=0.025, unit="share")
    >>> closeness_text(a, 0.9)
    '2.1 points low (92.1% computed)'
    >>> closeness_text(NumericAnswer(name="t", label="t", value=8000, tolerance=0, unit="tokens"), 7800)
    '200 tokens low (2.5%)'
    """
    if pred is None:
        return "no prediction"
    err = pred - answer.value
    if abs(err) <= 1e-9 * max(1.0, abs(answer.value)):
        return "exact"
    side = "high" if err > 0 else "low"
    if answer.unit == SHARE:
        return f"{abs(err) * 100:.2g} points {side} ({answer.value * 100:.3g}% computed)"
    rel = f" ({abs(err) / abs(answer.value) * 100:.2g}%)" if answer.value else ""
    unit = f" {answer.unit}" if answer.unit else ""
    return f"{fmt(abs(err))}{unit} {side}{rel}"


def score_prediction(step: WalkthroughStep, answers: dict[str, float | str | None]) -> StepScore:
    """Score predicted answers (by name) against a step's; a missing answer counts as wrong."""
    scores: list[AnswerScore] = []
    for a in step.numbers:
        pred = read_prediction(a, answers.get(a.name))
        err = None if pred is None else pred - a.value
        scores.append(AnswerScore(
            name=a.name, label=a.label, expected=a.value, predicted=pred, error=err,
            relative_error=abs(err) / abs(a.value) if err is not None and a.value else None,
            within=err is not None and abs(err) <= a.tolerance + 1e-9 * max(1.0, abs(a.value)),
            tolerance=a.tolerance_text, closeness=closeness_text(a, pred)))
    for c in step.choices:
        picked = answers.get(c.name)
        right = picked is not None and str(picked) == c.correct
        scores.append(AnswerScore(name=c.name, label=c.label, expected=c.correct,
                                  predicted=None if picked is None else str(picked), error=None,
                                  within=right, tolerance="exact",
                                  closeness="no prediction" if picked is None else "right" if right else "wrong"))
    return StepScore(step=step.number, scores=scores, correct=sum(s.within for s in scores), total=len(scores))
