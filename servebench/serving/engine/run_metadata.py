"""The metadata of a timing run, frozen beside its records as ``metadata.json``.

It names everything a reader needs to know what was measured: the model's shape and weights,
the runtime and hardware, the KV budget and admission policy, the workload distributions and
arrival pattern, the seed, the deadline, the success definition, and the servebench version and
git commit. ``servebench validate`` rebuilds the scenario from the ``scenario`` key.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from servebench import __version__
from servebench.serving.engine.loop import cache_capacity_tokens
from servebench.serving.engine.model import Decoder, device_name
from servebench.serving.engine.runner import TimingRun
from servebench.serving.scenario import Scenario
from servebench.serving.scheduler import SchedulerConfig

KIND = "servebench run"
SUCCESS_DEFINITION = ("status 'success': every output token the workload asked for was generated before the "
                      "request's deadline; timeouts, rejections (queue full or larger than the KV budget) and "
                      "cancellations are kept as records with their cause")


def git_state(start: Path | None = None) -> dict[str, Any]:
    """Return the git commit and whether the tree had uncommitted changes (None when unknown)."""
    cwd = start or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                capture_output=True, text=True, timeout=5)
        dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
        return {"commit": commit.stdout.strip(), "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def arrival_pattern(scenario: Scenario) -> str:
    """Describe the arrival process in a few words."""
    wl = scenario.workload
    if wl.closed_loop is not None:
        cl = wl.closed_loop
        return f"closed loop: {cl.users} users, {cl.think} think time of mean {cl.think_s:g} s"
    if wl.trace is not None:
        return f"open loop: replay of the trace {wl.trace.path} at {wl.trace.speedup:g}x speed"
    a = wl.arrival
    assert a is not None  # WorkloadSpec allows exactly one of arrival, closed_loop and trace
    if a.kind == "replay":
        return f"open loop: replay of {len(a.start_s or [])} arrival times at {a.speed:g}x speed"
    extra = f", cv {a.cv:g}" if a.kind == "gamma" else ""
    return f"open loop: {a.kind} arrivals at {a.rate_rps:g} requests/s{extra}"


def build_run_metadata(scenario: Scenario, model: Decoder, run: TimingRun, *, seed_weights: int, threads: int,
                       scenario_source: str | None = None, warmup_steps: int = 3) -> dict[str, Any]:
    """Return the metadata of a timing run as plain JSON values."""
    cfg: SchedulerConfig = scenario.server.scheduler_config()
    shape = model.config
    element = model.embed.element_size()
    bytes_per_token = shape.kv_bytes_per_token(element)
    capacity = cache_capacity_tokens(cfg)
    git = git_state()
    dev = model.device
    return {
        "kind": KIND,
        "servebench_version": __version__,
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        # the shape comes first: readers look for layers / kv_heads / head_dim depth-first
        "model": {
            "name": shape.name, "layers": shape.layers, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim,
            "bytes_per_element": element, "num_attention_heads": shape.heads, "hidden_size": shape.hidden,
            "parameters": shape.param_count, "ffn": shape.ffn, "vocab": shape.vocab,
            "max_positions": shape.max_positions, "rope_theta": shape.rope_theta,
            "tie_embeddings": shape.tie_embeddings,
            "architecture": "decoder-only: RMSNorm, grouped-query attention with RoPE, SwiGLU MLP",
            "weights": f"random normal, seed {seed_weights} (no checkpoint: the outputs carry no meaning)",
            "tokenizer": "none: prompt token ids drawn uniformly from the vocabulary",
        },
        "runtime": {
            "engine": "servebench.serving.engine: torch eager, paged KV cache, continuous batching with the shared scheduler",
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "device": str(dev),
            "device_name": device_name(dev),
            "cuda_version": torch.version.cuda if dev.type == "cuda" else None,
            "dtype": str(model.dtype).removeprefix("torch."),
            "threads": threads,
            "platform": platform.platform(),
        },
        "kv": {
            "policy": cfg.policy,
            "kv_budget_tokens": cfg.kv_budget_tokens,
            "kv_budget_bytes": cfg.kv_budget_tokens * bytes_per_token,
            "bytes_per_token": bytes_per_token,
            "block_size_tokens": cfg.block_size_tokens,
            "cache_capacity_tokens": capacity,
            "cache_bytes": capacity * bytes_per_token,
        },
        "scheduler": {
            "max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "chunked_prefill": cfg.chunked_prefill, "max_waiting": cfg.max_waiting,
            "prefill_lane": "shared (prompt chunks run inside the batched step)",
        },
        "workload": scenario.workload.model_dump(mode="json", exclude_none=True),
        "arrival_pattern": arrival_pattern(scenario),
        "seed": scenario.seed,
        "deadline_s": cfg.timeout_s,
        "cancel": scenario.cancel.model_dump(mode="json") if scenario.cancel is not None else None,
        "sampling": {"method": "greedy", "ignore_eos": True,
                     "output_tokens": "exactly the workload's output length (capped by max_output_tokens)"},
        "success_definition": SUCCESS_DEFINITION,
        "clock": "seconds on time.monotonic() from the run's start (the first arrival is due at 0)",
        "record_start": ("intended arrival time (as simulated); how late the arrival thread sent requests is "
                         "run.arrival_lag_p99_s / arrival_lag_max_s, and that lag is inside TTFT and latency"),
        "service_state": (f"warmed: {warmup_steps} untimed warm-up steps before the first arrival"
                          if warmup_steps else "cold: no warm-up, the first steps include lazy initialisation"),
        "run": {
            "wall_s": run.wall_s, "planned_requests": run.planned, "offered_requests": run.offered,
            "records": len(run.records), "steps": len(run.steps),
            "arrival_lag_p99_s": run.arrival_lag_p99_s, "arrival_lag_max_s": run.arrival_lag_max_s,
            "send_lags_s": run.send_lags_s,  # request ID -> how late the arrival thread submitted it
            "end_state": run.end_state, "notes": run.notes,
        },
        "scenario_source": scenario_source,
        "scenario": scenario.model_dump(mode="json", exclude_none=True),
    }
