"""What the Traces page decides beyond layout: where an upload is kept, the stats in words, the plan for its peak.

The rules (``docs/dashboard.md``, "Traces"):

* **An upload is kept as a file** under the system's temporary folder, ``servebench-traces/<digest>/<name>``
  (the first 16 hex digits of its SHA-256, the upload's own name), because the planner replays a trace from
  a path (``TraceSpec.path``). The same bytes land on the same file, written once (atomically, so a second
  session never reads half of it); the name keeps the reader's messages naming the user's file. Each use
  refreshes its folder's time; writing a new upload removes the uploads not used for ``UPLOAD_KEEP_S`` and then,
  least recently used first, those past ``UPLOAD_BUDGET_BYTES`` in all (never the one just written): a dashboard
  left running on a shared machine does not fill its disk with traces.
* **The plan** is ``servebench plan --trace``'s: the busiest minute's rate, every request of that minute per
  simulation (at least 20), prefix caching on for a trace with block IDs.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from servebench.analysis.summary import SLO
from servebench.analysis.trace_stats import PEAK_WINDOW_S, TraceStats
from servebench.capacity.kv import ModelShape
from servebench.formatting import fmt, fmt_share
from servebench.planning import Evaluation, Option, Plan, PlanRequest, Workload

UPLOAD_FOLDER = "servebench-traces"
DIGEST_CHARS = 16
UPLOAD_KEEP_S = 24 * 3600  # an upload not used for a day goes when another is written
UPLOAD_BUDGET_BYTES = 2 * 2**30  # the uploads kept in all; least recently used first beyond it


def kept_upload(name: str, data: bytes, root: Path | None = None) -> Path:
    """Return the path of an uploaded trace, written there once (the module's rule)."""
    digest = hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]
    uploads = root or Path(tempfile.gettempdir()) / UPLOAD_FOLDER
    folder = uploads / digest
    path = folder / (Path(name).name or "upload")
    if path.is_file() and path.stat().st_size == len(data):
        os.utime(folder)  # in use: the last to be pruned
        return path
    folder.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=folder, prefix=".part-")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(partial, path)
    os.utime(folder)
    prune_uploads(uploads, keep=folder)
    return path


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def prune_uploads(uploads: Path, keep: Path, now_s: float | None = None, keep_s: float = UPLOAD_KEEP_S,
                  budget_bytes: int = UPLOAD_BUDGET_BYTES) -> list[Path]:
    """Remove the upload folders under ``uploads`` unused for ``keep_s``, then the least recently used beyond
    ``budget_bytes`` in all, never ``keep``; return those removed (one another session removed first is skipped)."""
    now_s = time.time() if now_s is None else now_s
    found: list[tuple[float, int, Path]] = []
    for folder in uploads.iterdir():
        try:
            if folder.is_dir() and folder != keep:
                found.append((folder.stat().st_mtime, _folder_bytes(folder), folder))
        except FileNotFoundError:
            continue
    total = sum(size for _, size, _ in found) + _folder_bytes(keep)
    removed = []
    for used_s, size, folder in sorted(found):  # least recently used first
        if now_s - used_s <= keep_s and total <= budget_bytes:
            break
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
        total -= size
    return removed


@dataclass(frozen=True)
class Metric:
    """One number of the page's row of metrics: its label, its text (through ``fmt``) and what it means."""

    label: str
    value: str
    help: str


def trace_metrics(stats: TraceStats) -> list[Metric]:
    """Return the metrics a product manager reads first: volume, rates, lengths, reuse (None shows as —)."""
    p, o = stats.prompt_tokens, stats.output_tokens
    reusable = stats.prefix.reusable_token_share if stats.prefix is not None else None
    return [
        Metric("Requests", fmt(stats.requests), "Requests in the trace, failed ones included (the traffic offered)."),
        Metric("Duration (s)", fmt(stats.duration_s), "The last arrival after the first."),
        Metric("Mean rate (req/s)", fmt(stats.rate_rps), "Requests over the duration."),
        Metric("Busiest minute (req/s)", fmt(stats.peak_rate_rps),
               "The most arrivals in any 60 s window, over 60 s (— when the trace spans less than a minute)."),
        Metric("Prompt tokens p50 / p99", f"{fmt(p.p50)} / {fmt(p.p99)}", "Nearest-rank percentiles over every "
               f"request; mean {fmt(p.mean)}, max {fmt(p.max)}."),
        Metric("Output tokens p50 / p99", f"{fmt(o.p50)} / {fmt(o.p99)}", "Nearest-rank percentiles over every "
               f"request; mean {fmt(o.mean)}, max {fmt(o.max)}."),
        Metric("Reusable prefix share", fmt_share(reusable), "Share of prompt tokens an unbounded prefix cache "
               "serves: a request's leading blocks already seen (— for a trace without block IDs)."),
    ]


def answers(stats: TraceStats) -> list[str]:
    """Say in one sentence each how busy the trace is, how long its requests are, and what a prefix cache saves.

    >>> from servebench.analysis.trace_stats import TokenStats
    >>> s = TraceStats(300, 102.0, 300 / 102, TokenStats(8000.0, 7000, 15000, 60000, 70000),
    ...                TokenStats(340.0, 300, 600, 900, 1000), 3.0666, None)
    >>> for line in answers(s): print(line)  # doctest: +NORMALIZE_WHITESPACE
    300 requests over 102 s: 2.941 requests/s on average and 3.067 in the busiest minute (1.04 times the mean).
    Half the prompts are at most 7,000 tokens and 99% at most 60,000; half the outputs at most 300 tokens
    and 99% at most 900.
    The trace names no prefix blocks, so it replays without prefix reuse.
    """
    busy = (f"{fmt(stats.requests)} requests over {fmt(stats.duration_s)} s: {fmt(stats.rate_rps)} requests/s on "
            "average")
    if stats.peak_rate_rps is None:
        busy += "; it spans less than a minute, so it has no busiest minute (the planner sizes for all of it)."
    else:
        ratio = stats.peak_rate_rps / stats.rate_rps if stats.rate_rps else None
        busy += f" and {fmt(stats.peak_rate_rps)} in the busiest minute ({fmt(ratio, 3)} times the mean)."
    p, o = stats.prompt_tokens, stats.output_tokens
    lengths = (f"Half the prompts are at most {fmt(p.p50)} tokens and 99% at most {fmt(p.p99)}; half the outputs at "
               f"most {fmt(o.p50)} tokens and 99% at most {fmt(o.p99)}.")
    if stats.prefix is None:
        reuse = "The trace names no prefix blocks, so it replays without prefix reuse."
    else:
        reuse = (f"An unbounded prefix cache would serve {fmt_share(stats.prefix.reusable_token_share)} of the prompt "
                 "tokens")
        enough = [h for h in stats.prefix.hit_rate_by_capacity if h.token_hit_rate is not None
                  and stats.prefix.reusable_token_share
                  and h.token_hit_rate >= 0.9 * stats.prefix.reusable_token_share]
        reuse += (f"; a cache of {fmt(enough[0].capacity_tokens)} tokens serves {fmt_share(enough[0].token_hit_rate)}."
                  if enough else ".")
    return [busy, lengths, reuse]


def plan_request(path: str, fmt_name: str, model: ModelShape, slo: SLO, *, slo_target: float, gpus: list[str],
                 tensor_parallel: list[int], max_num_seqs: list[int], headroom: float) -> tuple[PlanRequest, float]:
    """Return the plan of a trace's busiest minute and the rate to serve (the module's rule), as ``plan --trace``."""
    workload = Workload.from_trace(path, fmt_name)
    rate = workload.rate_to_serve_rps()
    assert rate is not None  # from_trace sets the trace and its rate
    request = PlanRequest(model=model, workload=workload, slo=slo, slo_target=slo_target, gpus=gpus,
                          tensor_parallel=tensor_parallel, max_num_seqs=max_num_seqs, headroom=headroom,
                          requests_per_simulation=workload.default_requests())
    return request, rate


def option_text(option: Option | None) -> str:
    """Say what a trace needs: replicas of a GPU at a tensor-parallel degree, and the cost per hour.

    >>> o = Option(gpu="H100", tensor_parallel=2, max_num_seqs=64, capacity_rps_per_replica=4.0, replicas=3,
    ...            gpus_total=6, meets_slo=True, cost_per_hour_usd=17.94, cost_per_million_output_tokens_usd=1.2,
    ...            limit="decode")
    >>> option_text(o), option_text(None)
    ('3 replicas of H100 ×2, $17.94/h', 'no configuration meets the SLOs')
    """
    if option is None:
        return "no configuration meets the SLOs"
    replicas = option.replicas or 0
    cost = option.cost_per_hour_usd
    money = "—" if cost is None or not math.isfinite(cost) else f"${cost:,.2f}"
    return (f"{fmt(replicas)} replica{'' if replicas == 1 else 's'} of {option.gpu} ×{option.tensor_parallel}, "
            f"{money}/h")


def plan_rows(result: Plan) -> list[dict[str, str]]:
    """Return the plan's options as rows of text, cheapest meeting the SLOs first (no data: —)."""
    return [{"GPU": o.gpu, "TP": fmt(o.tensor_parallel), "max_num_seqs": fmt(o.max_num_seqs),
             "capacity/replica (req/s)": fmt(o.capacity_rps_per_replica), "replicas": fmt(o.replicas),
             "GPUs": fmt(o.gpus_total), "meets SLOs": "yes" if o.meets_slo else "no",
             "$/hour": fmt(o.cost_per_hour_usd), "limit": o.limit or fmt(None)} for o in result.options]


def plan_notes(request: PlanRequest, evaluation: Evaluation) -> list[str]:
    """Return what the plan left out or could not try: requests of 0 output tokens in the window, skipped GPUs."""
    spec = request.workload.trace
    left_out = spec.left_out_note() if spec is not None else None
    return [*([left_out] if left_out else []), *evaluation.notes]


def plan_window_text(request: PlanRequest, rate_rps: float) -> str:
    """Say which requests the plan replayed: the busiest minute (or the whole trace) and its rate."""
    spec = request.workload.trace
    if spec is None:
        return f"Sized for {fmt(rate_rps)} requests/s."
    where = ("the whole trace (it spans less than a minute)" if spec.duration_s is None else
             f"the busiest minute, {fmt(spec.start_s)} to {fmt(spec.start_s + PEAK_WINDOW_S)} s after the first "
             "request")
    caching = "on" if request.workload.prefix_caching else "off"
    return (f"Sized for {where}: {fmt(request.requests_per_simulation)} requests per simulation, replayed with their "
            f"own bursts at {fmt(rate_rps)} requests/s; prefix caching {caching}.")
