"""One workload draw for the simulator, the engine run and the load generator: one scenario and seed,
the same arrivals, lengths, prompt token ids and clients' cancellations in all three."""

from __future__ import annotations

import numpy as np
import pytest

from servebench.load.generator import PROMPT_WORDS, workload_plan
from servebench.serving import simulate as simulate_module
from servebench.serving.scenario import Scenario, parse_scenario
from servebench.serving.workload import DrawnWorkload, Workload, draw_workload

SCENARIO = {
    "name": "one_draw", "seed": 11,
    "server": {"policy": "paged", "kv_budget_tokens": 4096, "max_num_seqs": 8, "prefix_caching": True},
    "step_model": {"base_s": 0.001},
    "cancel": {"probability": 0.5, "after_s": 0.05},
    "workload": {"arrival": {"kind": "poisson", "rate_rps": 400}, "num_requests": 12, "classes": [
        {"name": "chat", "weight": 2, "prompt": {"kind": "uniform", "low": 40, "high": 90},
         "output": {"kind": "uniform", "low": 2, "high": 8}, "shared_prefix": {"tokens": 32, "groups": 2}},
        {"name": "doc", "prompt": {"kind": "uniform", "low": 100, "high": 160},
         "output": {"kind": "fixed", "value": 4}}]},
}


@pytest.fixture
def scenario() -> Scenario:
    return parse_scenario(SCENARIO)


def _simulator_draw(scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> tuple[Workload, np.ndarray]:
    """Return the workload and cancellations ``simulate`` hands its event loop."""
    seen: list[tuple[Workload, np.ndarray]] = []
    inner = simulate_module.simulate_workload

    def spy(config, model, workload, **kw):  # type: ignore[no-untyped-def]
        seen.append((workload, kw["cancel_after_s"]))
        return inner(config, model, workload, **kw)

    monkeypatch.setattr(simulate_module, "simulate_workload", spy)
    simulate_module.simulate(scenario)
    (drawn,) = seen
    return drawn


def test_the_draw_is_reproducible_and_cancels_some_clients(scenario: Scenario) -> None:
    a = draw_workload(scenario.workload, scenario.rng(), scenario.cancel)
    b = draw_workload(scenario.workload, scenario.rng(), scenario.cancel)
    assert isinstance(a, DrawnWorkload) and a.users is None and a.think_s is None
    np.testing.assert_array_equal(a.requests.arrival_s, b.requests.arrival_s)
    np.testing.assert_array_equal(a.cancel_after_s, b.cancel_after_s)
    cancels = np.isfinite(a.cancel_after_s)
    assert cancels.any() and not cancels.all()  # the fixture exercises both kinds of client
    assert draw_workload(scenario.workload, scenario.rng()).cancel_after_s is None  # no rule: nobody cancels


def test_simulator_engine_and_load_generator_serve_the_same_draw(scenario: Scenario,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from servebench.serving.engine import runner
    from servebench.serving.engine.model import Decoder, preset

    torch.set_num_threads(1)
    wl, cancel_after_s = _simulator_draw(scenario, monkeypatch)
    n = len(wl)
    contents = wl.prompt_contents()

    producers: list[runner._Producer] = []

    class SpyProducer(runner._Producer):
        def start(self) -> None:
            producers.append(self)
            super().start()

    monkeypatch.setattr(runner, "_Producer", SpyProducer)
    tiny = preset("tiny")
    run = runner.run_scenario(Decoder(tiny, seed=1), scenario, warmup_steps=0)
    (engine,) = producers
    assert len(run.records) == n
    assert [s.arrival_s for s in engine.specs] == wl.arrival_s.tolist()
    assert [s.prompt_tokens for s in engine.specs] == wl.prompt_tokens.tolist()
    assert [s.output_tokens for s in engine.specs] == wl.output_tokens.tolist()
    assert [s.max_output_tokens for s in engine.specs] == wl.max_output_tokens.tolist()
    assert [s.slice for s in engine.specs] == [wl.class_names[c] for c in wl.class_index.tolist()]
    assert engine.prompt_ids == [c.token_ids(tiny.vocab) for c in contents]  # the same prompts, token for token
    np.testing.assert_array_equal(np.asarray(engine.cancel_after_s), cancel_after_s)  # NaN where nobody cancels

    plan = workload_plan(scenario.workload, np.random.default_rng(scenario.seed))
    assert [p.intended_s for p in plan] == wl.arrival_s.tolist()
    assert [p.prompt_words for p in plan] == np.maximum(wl.prompt_tokens, 1).tolist()
    assert [p.max_tokens for p in plan] == wl.output_tokens.tolist()
    words = [" ".join(PROMPT_WORDS[t % len(PROMPT_WORDS)] for t in c.token_ids(2**31)) for c in contents]
    assert [p.prompt for p in plan] == words  # token id t is word t mod the word list: shared prefixes stay shared
