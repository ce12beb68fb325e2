"""A whole timing run: build the decoder, serve a scenario on the wall clock, write the run folder.

``servebench run`` (after reading the scenario file) and the dashboard's Timing run page both call
:func:`execute_run`, so the two write the same folder from the same :class:`Scenario`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from servebench.errors import ConfigError
from servebench.records.rundir import write_run
from servebench.serving.engine.model import Decoder, configure_cpu, pick_device, preset
from servebench.serving.engine.run_metadata import build_run_metadata
from servebench.serving.engine.runner import run_scenario
from servebench.serving.scenario import Scenario

Progress = Callable[[int, int, int], None]  # (requests ended, sent, total), called between steps


def execute_run(scenario: Scenario, out: Path, *, scenario_source: str | None = None, model: str = "tiny",
                device: str = "auto", threads: int = 1, weights_seed: int = 0, max_wall_s: float | None = None,
                warmup_steps: int = 3, progress: Progress | None = None,
                stop: threading.Event | None = None) -> dict[str, Any]:
    """Run ``scenario`` on the local engine, write the run folder ``out``, and return its metadata.

    ``scenario_source`` (a file name or path) is recorded in the metadata as where the scenario came from.
    The caller's torch thread count is restored afterwards, so a long-lived process (the dashboard) keeps its own.
    Setting ``stop`` from another thread ends the run early; what ran is written (``run_workload``).
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {out} exists and is not a directory")
    shape = preset(model)
    dev, dtype = pick_device(device)
    previous_threads = torch.get_num_threads()
    configure_cpu(threads)
    try:
        decoder = Decoder(shape, seed=weights_seed, device=dev, dtype=dtype)
        run = run_scenario(decoder, scenario, max_wall_s=max_wall_s, warmup_steps=warmup_steps, progress=progress,
                           stop=stop)
    finally:
        torch.set_num_threads(previous_threads)
    if scenario.server.prefill_lane != "shared":
        run.notes.append("the scenario asks for a separate prefill lane; the engine computes prompts inside "
                         "the batched step (shared)")
    meta = build_run_metadata(scenario, decoder, run, seed_weights=weights_seed, threads=threads,
                              scenario_source=scenario_source, warmup_steps=warmup_steps)
    write_run(out, run.records, steps=run.steps, metadata=meta)
    return meta
