"""The guided diagnosis walkthrough: the spec's five steps, their computed answers, scoring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servebench.analysis.diagnosis import LIMITS, ProfileTable
from servebench.analysis.walkthrough import score_prediction, walkthrough

AB = Path(__file__).resolve().parent.parent / "sample_data" / "profiles_ab.json"


def ab() -> ProfileTable:
    return ProfileTable.model_validate_json(AB.read_text())


def test_walkthrough_has_the_spec_steps_and_answers() -> None:
    steps = walkthrough(ab())
    assert [s.number for s in steps] == [1, 2, 3, 4, 5]
    answers = {a.name: a.value for s in steps for a in s.numbers}
    assert answers["bytes_per_token"] == 131_072 and answers["budget_tokens"] == 65_536
    assert answers["tokens_per_request[A]"] == 1200 and answers["tokens_per_request[B]"] == 8000
    assert answers["max_concurrent_sequences[A]"] == 54 and answers["max_concurrent_sequences[B]"] == 8
    assert answers["in_service[A]"] == pytest.approx(6.12) and answers["in_service[B]"] == pytest.approx(7.369)
    assert answers["doubled_budget_max_sequences[B]"] == 16
    choices = {c.name: c.correct for s in steps for c in s.choices}
    assert choices["limit[A]"] == "none" and choices["limit[B]"] == "kv_memory"
    assert set(choices[f"pattern[{i}]"] for i in range(1, 5)) == set(LIMITS) - {"none"}
    assert "131,072" in steps[1].explanation and "7.37" in steps[2].explanation


def test_walkthrough_arithmetic_follows_the_policy_and_shape() -> None:
    doc = ab().model_dump()
    paged = walkthrough(ProfileTable.model_validate({**doc, "policy": "paged", "expected_output_tokens": 100}))
    assert "A: 1000 + 100 in 16-token blocks = 1104 tokens, floor(65536 / 1104) = 59" in paged[1].explanation
    assert "full output cap" not in paged[1].explanation
    mla = {"layers": 61, "kv_heads": 128, "head_dim": 192, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    text = walkthrough(ProfileTable.model_validate({**doc, "model": mla}))[1].explanation
    assert text.startswith("61 layers x (512 + 64) latent x 2 bytes = 70,272 bytes per token.")


def test_score_prediction() -> None:
    steps = walkthrough(ab())
    s = score_prediction(steps[2], {"in_service[A]": 6.1, "in_service[B]": "7.4", "utilization[A]": 0.5})
    by = {x.name: x for x in s.scores}
    assert by["in_service[A]"].within and by["in_service[A]"].error == pytest.approx(6.1 - 6.12)
    assert by["in_service[B]"].within  # 7.4 is within 0.05 of 7.369
    assert not by["utilization[A]"].within
    assert by["utilization[B]"].predicted is None and not by["utilization[B]"].within
    assert (s.correct, s.total) == (2, 4)
    v = score_prediction(steps[3], {"limit[A]": "none", "limit[B]": "queueing"})
    assert {x.name: x.within for x in v.scores if x.name.startswith("limit")} == {"limit[A]": True, "limit[B]": False}
    exact = score_prediction(steps[1], {"bytes_per_token": 131_072, "budget_tokens": 65_535})
    assert [x.within for x in exact.scores[:2]] == [True, False]
    assert np.isclose(exact.scores[1].relative_error, 1 / 65_536)


def test_share_answers_state_tolerance_and_accept_percent_or_fraction() -> None:
    table = ProfileTable.model_validate_json((Path(__file__).resolve().parent.parent / "sample_data"
                                              / "profiles_ab.json").read_bytes())
    step = walkthrough(table)[2]  # Little's law: in service and share of the limit
    share = next(a for a in step.numbers if a.name == "utilization[B]")
    assert share.unit == "share" and "within ±2.5 percentage points" in share.prompt_label
    assert "% or fraction" in share.prompt_label
    for typed in (share.value * 100, share.value, 90.0, 0.9):  # 92.11 %, 0.9211, 90 %, 0.9 all within 2.5 points
        s = next(x for x in score_prediction(step, {"utilization[B]": typed}).scores if x.name == "utilization[B]")
        assert s.within, typed
        assert s.predicted == pytest.approx(typed / 100 if typed > 1.5 else typed)
    s = next(x for x in score_prediction(step, {"utilization[B]": 20}).scores if x.name == "utilization[B]")
    assert not s.within and s.predicted == pytest.approx(0.2) and s.closeness.endswith("% computed)")
    assert "points low" in s.closeness


def test_closeness_reads_large_and_infinite_misses_as_the_one_formatter_writes_them() -> None:
    """The walkthrough's own formatter wrote a miss of 12,345.6 tokens as '1.235e+04' and an infinite one as
    'inf'; servebench.formatting writes '12,346' and '∞'."""
    from servebench.analysis.walkthrough import NumericAnswer, closeness_text

    answer = NumericAnswer(name="t", label="t", value=100.0, tolerance=0, unit="tokens")
    assert closeness_text(answer, 12445.6).startswith("12,346 tokens high")
    assert closeness_text(answer, float("inf")).startswith("∞ tokens high")
    assert closeness_text(answer, 100.5) == "0.5 tokens high (0.5%)"


def test_the_explanations_give_times_in_the_unit_asked() -> None:
    """The dashboard reads TTFT, TPOT and queue wait in ms (issue 36); the answers to predict do not change."""
    in_s, in_ms = walkthrough(ab()), walkthrough(ab(), "ms")
    assert [a.value for s in in_ms for a in s.numbers] == [a.value for s in in_s for a in s.numbers]
    littles, verdict, experiment = (s.explanation for s in in_ms[2:])
    assert littles.startswith("A: 1 request/s x (150 ms + 199 x 30 ms = 6.12 s) = 6.12 in service")
    assert "TTFT p95 260 ms" in verdict and "Prefill takes 150 ms p50 (250 ms p95)" in verdict
    assert "queue wait p95 falls far below 8,700 ms, TPOT stays near 31 ms" in experiment
    assert "0.26 s" not in verdict and "1 requests/s" not in " ".join(s.explanation for s in in_ms)
    assert in_s[2].explanation.startswith("A: 1/s x (0.15 + 199 x 0.03) = 6.12 in service")  # the spec's seconds
