"""``servebench load``: drive an OpenAI-compatible endpoint with open- or closed-loop load and summarize it."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any, List, Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from servebench.cli.core import app, console, emit_json, positive_s
from servebench.errors import ConfigError
from servebench.formatting import fmt
from servebench.output.safetext import safe_markup
from servebench.records import rundir


def _workload_file(path: Optional[Path]) -> dict[str, Any] | None:
    """Return a workload or simulator scenario file as read (None without one), for its workload and its cancel.

    Read as strictly as a scenario: a key given twice, too deep a nesting or a syntax error is one line.
    """
    from servebench.capacity.documents import read_document

    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the workload: {getattr(exc, 'strerror', None) or exc}") from None
    doc = read_document(text, str(path))
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping with 'classes'")
    return doc


def _is_scenario(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("workload"), dict)


def _invalid(section: str, exc: Any) -> ConfigError:
    """Return a section's first validation problem (a pydantic ValidationError) as one line."""
    first = exc.errors()[0]
    return ConfigError(f"{section} {'.'.join(str(p) for p in first['loc']) or section}: {first['msg']}")


def _workload(rate: Optional[float], requests: int, users: Optional[int], arrival: str, cv: float,
              replay: Optional[Path], duration: Optional[float], prompt_tokens: int, output_tokens: int,
              think: float, workload_doc: Mapping[str, Any] | None) -> Any:
    """Build the WorkloadSpec from the options (a workload file, or a scenario's workload, gives the classes and
    defaults)."""
    from pydantic import ValidationError

    from servebench.serving.workload import ArrivalSpec, ClassSpec, ClosedLoopSpec, LengthSpec, WorkloadSpec

    base: dict[str, Any] = {}
    if workload_doc is not None:
        base = dict(workload_doc["workload"] if _is_scenario(workload_doc) else workload_doc)
    if "classes" not in base:
        base["classes"] = [ClassSpec(prompt=LengthSpec(kind="fixed", value=prompt_tokens),
                                     output=LengthSpec(kind="fixed", value=output_tokens)).model_dump()]
    base["num_requests"] = requests
    if duration is not None:
        base["duration_s"] = duration
    if users is not None:
        base["arrival"] = None
        base["closed_loop"] = ClosedLoopSpec(users=users, think_s=think).model_dump()
    else:
        base["closed_loop"] = None
        if replay is not None:
            from servebench.records.loaders import load_table
            table, _, _ = load_table(replay)
            base["arrival"] = ArrivalSpec(kind="replay", start_s=sorted(table.start.tolist())).model_dump()
        elif rate is not None:
            base["arrival"] = ArrivalSpec(kind=arrival, rate_rps=rate, cv=cv).model_dump()
        elif base.get("arrival") is None:
            raise ConfigError("give --rate R (open loop), --users U (closed loop), --replay FILE or --sweep RATES")
    try:
        return WorkloadSpec.model_validate(base)
    except ValidationError as exc:
        raise _invalid("workload", exc) from None


def _check_trace_options(trace: Optional[Path], speedup: Optional[float], max_requests: Optional[int],
                         **others: Any) -> None:
    """Refuse options a trace replay cannot take beside it (it gives the arrivals and lengths), and trace options
    without a trace."""
    if trace is None:
        given = [name for name, value in (("--speedup", speedup), ("--max-requests", max_requests)) if value is not None]
        if given:
            raise ConfigError(f"{' and '.join(given)} go with --trace FILE (a trace to replay)")
        return
    given = ["--" + name for name, value in others.items() if value is not None]
    if given:
        raise ConfigError(f"--trace gives the arrivals and lengths: leave out {', '.join(given)}")


def _trace_workload(trace: Path, fmt: str, speedup: Optional[float], max_requests: Optional[int],
                    duration: Optional[float]) -> Any:
    """Return the workload that replays a trace (``--duration`` still ends the run)."""
    from pydantic import ValidationError

    from servebench.serving.workload import WorkloadSpec

    doc = {"path": str(trace), "format": fmt, "speedup": 1.0 if speedup is None else speedup,
           "max_requests": max_requests}
    try:
        return WorkloadSpec.model_validate({"trace": doc, "duration_s": duration})
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = {"speedup": "--speedup", "format": "--trace-format"}.get(str(first["loc"][-1]), "--trace")
        raise ConfigError(f"{flag}: {first['msg']}") from None


def _cancel_spec(workload_doc: Mapping[str, Any] | None, share: Optional[float], after_s: Optional[float]) -> Any:
    """Return the clients that give up: ``--cancel-share`` and ``--cancel-after``, else a scenario's ``cancel``."""
    from pydantic import ValidationError

    from servebench.serving.workload import CancelSpec

    if (share is None) != (after_s is None):
        raise ConfigError("--cancel-share and --cancel-after go together: the share of clients that give up, and "
                          "their mean wait after arrival, s")
    doc: Any = {"probability": share, "after_s": after_s} if share is not None else None
    if doc is None and workload_doc is not None and _is_scenario(workload_doc):
        doc = workload_doc.get("cancel")
    if doc is None:
        return None
    try:
        return CancelSpec.model_validate(doc)
    except ValidationError as exc:
        raise _invalid("cancel", exc) from None


def _client_spec(max_attempts: int, backoff_base_s: float, backoff_multiplier: float, backoff_max_s: Optional[float],
                 jitter: str, retry_on: str, deadline_s: Optional[float]) -> Any:
    """Build the retrying clients' ClientSpec from the options; None when a request gets one attempt and no deadline."""
    from pydantic import ValidationError

    from servebench.serving.retry import BackoffSpec, ClientSpec

    if max_attempts == 1 and deadline_s is None:
        return None
    statuses = [s.strip() for s in retry_on.split(",") if s.strip()]
    try:
        return ClientSpec(max_attempts=max_attempts, retry_on=statuses, deadline_s=deadline_s,
                          backoff=BackoffSpec(base_s=backoff_base_s, multiplier=backoff_multiplier, max_s=backoff_max_s,
                                              jitter=jitter))
    except ValidationError as exc:
        first = exc.errors()[0]
        field_name = str(first["loc"][0]) if first["loc"] else "retry_on"  # the one cross-field check: retry_on
        flag = {"base_s": "--backoff-base-s", "multiplier": "--backoff-multiplier", "max_s": "--backoff-max-s"}.get(
            field_name, "--" + field_name.replace("_", "-"))
        raise ConfigError(f"{flag}: {first['msg']} (got {retry_on if flag == '--retry-on' else first['input']!r})") \
            from None


def _generator_table(stats: Any) -> Table:
    """Return the generator's work counts and own limits as a two-column table."""
    t = Table(title=f"Load generator ({stats.mode} loop)")
    t.add_column("measure")
    t.add_column("value", justify="right")
    lag = stats.schedule_lag_s

    def f(v: float | None) -> str:
        return fmt(v, 3)
    rows = [("planned", stats.planned), ("offered", stats.offered), ("sent", stats.sent),
            ("accepted", stats.accepted), ("completed", stats.completed), ("rejected", stats.rejected),
            ("failed", stats.failed), ("timed out", stats.timed_out), ("cancelled", stats.cancelled),
            ("not sent (duration limit)", stats.not_sent_duration_limit),
            ("impossible usage counts", stats.implausible_usage),
            ("in flight: peak / limit", f"{stats.peak_in_flight} / {stats.max_in_flight}"),
            ("waited for a connection slot", stats.waited_for_slot),
            ("schedule lag p50 / p99 / max, s", f"{f(lag.p50_s)} / {f(lag.p99_s)} / {f(lag.max_s)}"),
            *_ttft_rows(stats, f),
            ("run, s", f(stats.run_s))]
    if stats.logical_offered is not None:  # retrying clients: offered and the statuses count attempts
        rows[1:1] = [("user requests offered", stats.logical_offered),
                     ("user requests completed", stats.logical_completed),
                     ("attempts per user request", fmt(stats.amplification, 3))]
        rows[4] = ("attempts offered", stats.offered)
    for name, value in rows:
        t.add_row(name, str(value))
    return t


def _ttft_rows(stats: Any, f: Any) -> list[tuple[str, str]]:
    """Return TTFT from the intended and from the actual send beside the lag, and who kept the schedule."""
    nice = "" if stats.sender_nice is None else f" (nice {stats.sender_nice})"
    rows = [] if stats.sender is None else [("schedule kept by", f"sender process{nice}" if stats.sender == "process"
                                             else "event loop")]
    if stats.warmup is not None:
        rows.append(("warm-up requests (untimed): ok / sent", f"{stats.warmup.succeeded} / {stats.warmup.requests}"))
    if stats.ttft is not None:
        for name, t in (("intended", stats.ttft.from_intended_s), ("actual", stats.ttft.from_sent_s)):
            rows.append((f"TTFT from the {name} send p50 / p95 / p99, s", f"{f(t.p50_s)} / {f(t.p95_s)} / {f(t.p99_s)}"))
    return rows


def _worker_table(stats: Any) -> Table:
    """Return each worker's share, send lag and clock offset against the coordinator."""
    t = Table(title="Workers (one shared schedule)")
    for col in ("worker", "host", "sent", "lag p50 / p99 / max, ms", "clock offset ± uncertainty, ms", "drift, ms"):
        t.add_column(col, justify="right")

    def ms(v: float | None) -> str:
        return fmt(None if v is None else v * 1e3, 3)
    for w in stats.workers:
        lag = w.schedule_lag_s
        t.add_row(str(w.worker), safe_markup(w.host), f"{w.sent} / {w.planned}",
                  f"{ms(lag.p50_s)} / {ms(lag.p99_s)} / {ms(lag.max_s)}",
                  f"{ms(w.clock_offset_s)} ± {ms(w.clock_uncertainty_s)}", ms(w.clock_drift_s))
    lag = stats.schedule_lag_s
    t.add_row("all", "", f"{stats.sent} / {stats.planned}", f"{ms(lag.p50_s)} / {ms(lag.p99_s)} / {ms(lag.max_s)}",
              "", "", style="bold")
    return t


def _run_workers(config: Any, plan: list[Any], spec: Any, seed: int, out_dir: Path, workers: int,
                 ray_address: str | None, use_ray: bool, show_progress: bool, source: str, cancel: Any = None,
                 scrape: Any = None) -> Any:
    """Send the plan from several workers (processes, or Ray actors) sharing its schedule; write the run.

    Ctrl-C or SIGTERM stops the worker processes' runs and writes what they gathered, marked interrupted, as one
    process does; Ray actors cannot be stopped midway, so nothing is written then.
    """
    from servebench.load.generator import RunStopped, discover_model_sync, run_metadata, trace_rows, write_run
    from servebench.load.workers import raising_on

    model = discover_model_sync(config)
    where = "Ray actors" if use_ray else "processes"
    status = Console(stderr=True).status(f"{len(plan)} requests from {workers} worker {where}")
    with status if show_progress else contextlib.nullcontext():
        try:
            with raising_on((signal.SIGTERM,)):
                if use_ray:
                    from servebench.load.ray_runner import ray_session, run_with_actors
                    with ray_session(ray_address) as cluster:
                        result = run_with_actors(config, plan, workers, model, cluster)
                else:
                    from servebench.load.workers import run_with_processes
                    result = run_with_processes(config, plan, workers, model)
        except (KeyboardInterrupt, RunStopped) as exc:
            name = exc.signal_name if isinstance(exc, RunStopped) else "SIGINT"
            console.print(f"[yellow]interrupted ({name}):[/] the workers were stopped; nothing was written")
            if scrape is not None:
                scrape.finish(None)
            raise SystemExit(_signal_exit(name)) from None
    result.trace_rows = trace_rows(plan)
    samples, metrics_meta = _scraped(scrape, result)
    if result.stopped_by is not None:
        _write_interrupted(out_dir, result, run_metadata(result, spec, seed, source, cancel) | metrics_meta, samples)
        raise SystemExit(_signal_exit(result.stopped_by))
    write_run(out_dir, result, run_metadata(result, spec, seed, source, cancel) | metrics_meta, samples)
    return result


def _scraped(scrape: Any, result: Any) -> tuple[Any, dict[str, Any]]:
    """Finish a run's scraping: its samples on the run's clock and metadata.json's ``server_metrics`` entry."""
    if scrape is None:
        return None, {}
    samples, report = scrape.finish(result.t0_monotonic_s)
    return samples, {"server_metrics": report.model_dump(mode="json", exclude_none=True)}


def _signal_exit(signal_name: str) -> int:
    """Return the exit code of a command a signal stopped: 128 + the signal's number, as a shell reports it."""
    return 128 + signal.Signals[signal_name].value


def _write_interrupted(out_dir: Path, result: Any, metadata: dict[str, Any], server_metrics: Any = None) -> None:
    """Write a run a signal cut short (if any request had ended), marked so in its metadata, and say so.

    The caller then exits with :func:`_signal_exit` (typer.Exit would be swallowed by cli.main, standalone_mode off).
    """
    from servebench.load.generator import write_run

    if not result.outcomes:
        console.print(f"[yellow]interrupted ({result.stopped_by}):[/] no request had ended; nothing was written")
        return
    write_run(out_dir, result, {**metadata, "interrupted": True, "interrupted_by": result.stopped_by}, server_metrics)
    console.print(f"[yellow]interrupted ({result.stopped_by}):[/] wrote the {len(result.outcomes)} outcomes gathered "
                  f"to {safe_markup(str(out_dir))}")


def _run_one(url: str, spec: Any, seed: int, out_dir: Path, cfg_kwargs: dict[str, Any], show_progress: bool,
             label: str = "requests", workers: int = 1, ray_address: str | None = None,
             use_ray: bool = False, cancel: Any = None,
             metrics: Any = None) -> tuple[Any, Any, float, float, Any]:
    """Plan, send, write the run directory; return (result, table, window start, window end, scrape).

    ``scrape`` is (the server's samples on the run's clock or None, the ScrapeReport saying how they were gathered).

    Ctrl-C or SIGTERM cancels the requests in flight; what was gathered is still written, marked interrupted, then
    exit 130 (SIGINT) or 143 (SIGTERM).
    With ``workers`` > 1 or ``use_ray`` the plan is shared by several workers (:mod:`servebench.load.workers`).
    ``cancel``: the clients that give up (a CancelSpec), drawn into the plan as the simulator draws them.
    ``metrics`` (a MetricsOptions): the server's Prometheus metrics scraped through the run
    (:mod:`servebench.load.server_metrics`; None: none), written beside the records.
    """
    from servebench.load.generator import (
        LoadConfig,
        RunState,
        RunStopped,
        records_table,
        result_from_state,
        run_load_sync,
        run_metadata,
        workload_plan,
        write_run,
    )

    plan = workload_plan(spec, np.random.default_rng(seed), cancel)
    users = spec.closed_loop.users if spec.closed_loop is not None else None
    config = LoadConfig(url=url, users=users, duration_s=spec.duration_s, **cfg_kwargs)
    source = "--model" if cfg_kwargs.get("model") else "/v1/models"
    if (workers > 1 or use_ray) and users is not None:
        raise ConfigError("--workers and --ray share one open-loop schedule; closed loop (--users) runs in "
                          "one process")
    from servebench.load.server_metrics import RunScrape
    scrape = RunScrape(url, metrics)  # its own thread: it never waits on, nor delays, a send
    if workers > 1 or use_ray:
        try:
            result = _run_workers(config, plan, spec, seed, out_dir, workers, ray_address, use_ray, show_progress,
                                  source, cancel, scrape)
        finally:
            scrape.finish(None)  # already finished unless the run failed
        table, ws, we = records_table(result.outcomes, str(out_dir / rundir.RECORDS), result.trace_rows)
        return result, table, ws, we, scrape.finish(None)
    state = RunState()
    progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[bad]} not ok"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True, disable=not show_progress)
    try:
        with progress:
            task = progress.add_task(label, total=len(plan), bad=0)
            bad = [0]

            def tick(o: Any) -> None:
                if o.retry_at_s is not None:
                    return  # a retry follows: the user request is not done yet
                bad[0] += o.status != "success"
                progress.update(task, advance=1, bad=bad[0])
            result = run_load_sync(config, plan, on_outcome=tick, state=state)
    except (KeyboardInterrupt, RunStopped):
        state.interrupted, state.stopped_by = True, state.stopped_by or "SIGINT"
        partial = result_from_state(config, len(plan), state)
        samples, metrics_meta = _scraped(scrape, partial)
        _write_interrupted(out_dir, partial, run_metadata(partial, spec, seed, source, cancel) | metrics_meta, samples)
        raise SystemExit(_signal_exit(state.stopped_by)) from None
    finally:
        scrape.finish(state.t0_monotonic_s)  # stops the thread whatever happened (a second call is a no-op)
    samples, metrics_meta = _scraped(scrape, result)
    write_run(out_dir, result, run_metadata(result, spec, seed, source, cancel) | metrics_meta, samples)
    table, ws, we = records_table(result.outcomes, str(out_dir / rundir.RECORDS), result.trace_rows)
    return result, table, ws, we, scrape.finish(None)


@app.command()
def load(
    url: str = typer.Argument(..., help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000."),
    out: Path = typer.Option(..., "-o", "--out", help=f"Output directory: {rundir.RECORDS}, {rundir.SENDS}, "
                                                     f"{rundir.METADATA}."),
    rate: Optional[float] = typer.Option(None, help="Open loop: mean arrival rate, requests/s."),
    requests: int = typer.Option(100, min=1, max=1_000_000, help="Requests to send (per sweep point)."),
    users: Optional[int] = typer.Option(None, min=1, help="Closed loop: this many users instead of --rate."),
    sweep: Optional[str] = typer.Option(None, help="Comma-separated rates (req/s): one open-loop run per rate."),
    arrival: str = typer.Option("poisson", help="Arrival process: poisson, gamma or constant."),
    cv: float = typer.Option(1.0, min=0.01, help="Gamma arrivals: coefficient of variation (burstiness)."),
    replay: Optional[Path] = typer.Option(None, help="Replay the start times of a record file (open loop)."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Replay a trace (Mooncake, Azure, BurstGPT or "
                                         "records): each request at its time with its prompt and output lengths, "
                                         "block-hashed prompts sharing their blocks' text (docs/load.md)."),
    trace_format: str = typer.Option("auto", "--trace-format", help="The trace's format: auto, mooncake, azure, "
                                     "burstgpt or records."),
    speedup: Optional[float] = typer.Option(None, "--speedup", help="--trace: divide its arrival times by this "
                                            "(2: twice the traffic)."),
    max_requests: Optional[int] = typer.Option(None, "--max-requests", min=1, help="--trace: send only its first "
                                               "N requests (--requests does not apply to a trace)."),
    workload: Optional[Path] = typer.Option(None, help="Workload YAML/JSON (classes, lengths); a scenario works."),
    prompt_tokens: int = typer.Option(32, min=1, help="Prompt length in words (tokens on serve-engine)."),
    output_tokens: int = typer.Option(16, min=1, help="Output tokens per request (max_tokens, ignore_eos)."),
    think: float = typer.Option(0.0, min=0, help="Closed loop: think time between a user's requests, s."),
    duration: Optional[float] = typer.Option(None, min=0.001, help="Hard end of each run, s: later arrivals "
                                             "are not sent, in-flight requests are cancelled."),
    deadline: float = typer.Option(30.0, min=0.001, help="Per-request deadline from its intended send time, s."),
    seed: int = typer.Option(0, help="Seed of arrivals, lengths and prompts."),
    cancel_share: Optional[float] = typer.Option(None, "--cancel-share", min=0, max=1,
                                                 help="Share of clients that give up (close the connection) before "
                                                      "their answer ends; with --cancel-after. A scenario file's "
                                                      "'cancel' is used otherwise, drawn as the simulator draws it."),
    cancel_after: Optional[float] = typer.Option(None, "--cancel-after", min=0.001, help="Mean wait after arrival "
                                                 "before such a client gives up, s (exponential)."),
    max_attempts: int = typer.Option(1, min=1, max=100, help="Attempts per user request, the first included "
                                     "(1: no retry). Each attempt is a record with logical_id and attempt."),
    backoff_base_s: float = typer.Option(0.0, min=0, help="Wait before the first retry, s (0: at once)."),
    backoff_multiplier: float = typer.Option(2.0, min=1, help="Each later retry waits this many times longer."),
    backoff_max_s: Optional[float] = typer.Option(None, min=0.001, help="Longest wait between attempts, s."),
    jitter: str = typer.Option("full", help="full: wait uniformly in [0, backoff]; none: the backoff itself."),
    retry_on: str = typer.Option("rejected,timeout,failed", help="Attempt statuses that are retried."),
    deadline_s: Optional[float] = typer.Option(None, min=0.001, help="A user request's deadline from its first "
                                               "attempt's start, s: no attempt starts after it."),
    max_retry_wait_s: float = typer.Option(60.0, callback=positive_s, help="Longest wait before a retry, s: a "
                                           "server's Retry-After above it (or a longer backoff) is cut to it."),
    warmup_requests: int = typer.Option(0, "--warmup-requests", min=0, max=10_000, help="Untimed requests sent one "
                                        "at a time before the measured schedule; they are never records."),
    sender: str = typer.Option("process", "--sender", help="Open loop: process (a sender process keeps the schedule; "
                               "plain http without retries) or loop (the event loop that also parses the streams)."),
    api: str = typer.Option("completions", help="completions or chat."),
    model: Optional[str] = typer.Option(None, help="Model name (default: the first one /v1/models lists)."),
    stream: bool = typer.Option(True, "--stream/--no-stream", help="Stream tokens (SSE) or wait for the body."),
    ignore_eos: bool = typer.Option(True, "--ignore-eos/--no-ignore-eos", help="Ask for exactly max_tokens."),
    max_in_flight: int = typer.Option(256, min=1, help="Generator capacity: connections open at once (per worker)."),
    workers: int = typer.Option(1, min=1, max=1024, help="Open-loop workers sharing one arrival schedule: OS "
                                "processes here, or Ray actors with --ray."),
    ray: bool = typer.Option(False, "--ray", help="Run the workers as Ray actors (a local Ray, or --ray-address)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS",
                                              help="An existing Ray cluster (auto, HOST:PORT or ray://HOST:PORT); "
                                                   "implies --ray."),
    api_key: Optional[str] = typer.Option(None, envvar="OPENAI_API_KEY", help="Bearer token, if the server wants one."),
    server_metrics: Optional[List[str]] = typer.Option(
        None, "--server-metrics", metavar="URL", help="Prometheus endpoints to scrape through the run (repeat, or "
        "comma-separate; a URL without a path gets /metrics). Default: the server's own /metrics when it answers."),
    no_server_metrics: bool = typer.Option(False, "--no-server-metrics", help="Scrape no server metrics."),
    metrics_interval_s: float = typer.Option(0.5, "--metrics-interval-s", help="Seconds between scrapes of the "
                                             "server's metrics (0.05 to 60)."),
    slo_ttft: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on TTFT, s."),
    slo_tpot: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on request TPOT, s."),
    slo_latency: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on latency, s."),
    slo_target: float = typer.Option(0.95, help="Sweep: share of offered requests that must meet every SLO."),
    search: bool = typer.Option(False, "--search/--no-search", help="Sweep: bisect for the capacity with extra runs."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Send open-loop (--rate) or closed-loop (--users) load to an endpoint; write records; summarize."""
    from servebench.analysis.server_metrics import attach
    from servebench.analysis.summary import SLO, build_report

    if api not in ("completions", "chat"):
        raise ConfigError(f"--api {api!r}: expected completions or chat")
    if sender not in ("process", "loop"):
        raise ConfigError(f"--sender {sender!r}: expected process or loop")
    if arrival not in ("poisson", "gamma", "constant"):
        raise ConfigError(f"--arrival {arrival!r}: expected poisson, gamma or constant")
    client = _client_spec(max_attempts, backoff_base_s, backoff_multiplier, backoff_max_s, jitter, retry_on,
                          deadline_s)
    cfg_kwargs = dict(api=api, model=model, stream=stream, ignore_eos=ignore_eos, deadline_s=deadline,
                      max_in_flight=max_in_flight, api_key=api_key, client=client, jitter_seed=seed,
                      max_retry_wait_s=max_retry_wait_s, warmup_requests=warmup_requests, sender=sender)
    use_ray = ray or ray_address is not None
    metrics = _metrics_options(server_metrics, no_server_metrics, metrics_interval_s)
    workload_doc = _workload_file(workload)
    # how each run is sent: from how many workers, and which of its clients give up
    per_run = dict(workers=workers, ray_address=ray_address, use_ray=use_ray,
                   cancel=_cancel_spec(workload_doc, cancel_share, cancel_after), metrics=metrics)
    slo = SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, latency_s=slo_latency)
    _check_trace_options(trace, speedup, max_requests, rate=rate, users=users, sweep=sweep, replay=replay,
                         workload=workload)
    if sweep is not None:
        if users is not None or replay is not None:
            raise ConfigError("--sweep sweeps open-loop rates; it cannot be combined with --users or --replay")
        with contextlib.ExitStack() as stack:
            if use_ray:  # one Ray for every rate of the sweep
                from servebench.load.ray_runner import ray_session
                stack.enter_context(ray_session(ray_address))
            _sweep(url, sweep, out, requests, arrival, cv, workload_doc, prompt_tokens, output_tokens, duration, seed,
                   cfg_kwargs, slo, slo_target, search, as_json, per_run)
        return
    spec = _trace_workload(trace, trace_format, speedup, max_requests, duration) if trace is not None else \
        _workload(rate, requests, users, arrival, cv, replay, duration, prompt_tokens, output_tokens, think,
                  workload_doc)
    left_out = spec.trace.left_out_note() if spec.trace is not None else None
    if left_out:
        Console(stderr=True, soft_wrap=True).print(f"[cyan]note:[/] {safe_markup(left_out)}")
    result, table, ws, we, (samples, scraped) = _run_one(url, spec, seed, out, cfg_kwargs,
                                                          show_progress=not as_json, **per_run)
    report = attach(build_report(table, ws, we, slo), samples)
    if as_json:
        doc = report.model_dump(mode="json")  # emit_json writes infinities as "Infinity", as in summarize
        emit_json({"summary": doc.pop("summary"), **doc, "generator": result.stats.model_dump(mode="json"),
                   "scrape": scraped.model_dump(mode="json"), "model": result.model, "out": str(out)})
        return
    from servebench.output.terminal import print_report
    print_report(console, report)
    console.print(_generator_table(result.stats))
    if result.stats.workers is not None:
        console.print(_worker_table(result.stats))
    for warning in [*result.stats.warnings, *scraped.warnings()]:
        console.print(f"[yellow]warning:[/] {safe_markup(warning)}")
    metrics_file = f", {scraped.file}" if scraped.file else ""
    if scraped.note and not scraped.file:
        console.print(f"[cyan]note:[/] {safe_markup(scraped.note)}")
    console.print(f"model {safe_markup(repr(result.model))}; wrote {safe_markup(str(out))}/{rundir.RECORDS}, "
                  f"{rundir.SENDS}, {rundir.METADATA}{metrics_file}")


def _metrics_options(urls: Optional[List[str]], off: bool, interval_s: float) -> Any:
    """Return what to scrape from the server-metrics options (a usage error names the option at fault)."""
    from servebench.load.server_metrics import MAX_INTERVAL_S, MIN_INTERVAL_S, MetricsOptions, metrics_url, split_urls

    given = split_urls(urls)
    if off and given:
        raise ConfigError("--server-metrics and --no-server-metrics: give one or the other")
    if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
        raise ConfigError(f"--metrics-interval-s {interval_s:g}: must be between {MIN_INTERVAL_S:g} and "
                          f"{MAX_INTERVAL_S:g} s")
    return MetricsOptions(urls=[metrics_url(u) for u in given], enabled=not off, interval_s=interval_s)


def _parse_rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--sweep {text!r}: expected comma-separated rates such as 1,2,4") from None
    if not rates or any(not (r > 0) or r == float("inf") for r in rates):
        raise ConfigError(f"--sweep {text!r}: every rate must be a positive number")
    return sorted(set(rates))


def _sweep(url: str, rates_text: str, out: Path, requests: int, arrival: str, cv: float,
           workload_doc: Mapping[str, Any] | None, prompt_tokens: int, output_tokens: int, duration: Optional[float],
           seed: int, cfg_kwargs: dict[str, Any], slo: Any, slo_target: float, search: bool, as_json: bool,
           per_run: dict[str, Any] | None = None) -> None:
    """Run one open-loop load per rate into OUT/rate_<r>/ (:func:`servebench.load.sweep.measured_sweep`), then
    write the simulator's sweep output into OUT and show it."""
    from servebench.load.sweep import measured_sweep

    rates = _parse_rates(rates_text)
    if not 0 < slo_target <= 1:
        raise ConfigError(f"--slo-target {slo_target}: must be in (0, 1]")
    base = _workload(rates[0], requests, None, arrival, cv, None, duration, prompt_tokens, output_tokens, 0.0,
                     workload_doc)

    def run_rate(rate: float, spec: Any, folder: Path) -> Any:
        result, _, _, _, _ = _run_one(url, spec, seed, folder, cfg_kwargs, show_progress=not as_json,
                                      label=f"rate {rate:g}/s", **(per_run or {}))
        return result

    swept = measured_sweep(url, rates, base, out, run_rate, seed=seed, slo=slo, slo_target=slo_target, search=search)
    result, capacity, ordered = swept.result, swept.result.capacity, swept.result.points
    if as_json:
        emit_json({**result.model_dump(mode="json"), "runs": swept.runs,
                   "files": [str(swept.files["sweep"]), str(swept.files["csv"])]})
        return
    t = Table(title=safe_markup(f"Measured sweep of {swept.model} at {url}"))
    for col in ("rate", "offered/s", "done/s", "rejected", "timeout", "failed", "TTFT p95", "TPOT p95",
                "latency p95", "within SLOs"):
        t.add_column(col, justify="right")
    for p in ordered:
        t.add_row(f"{p.load:g}" + ("*" if p.source == "search" else ""), fmt(p.offered_rps), fmt(p.throughput_rps),
                  fmt(p.rejected), fmt(p.timed_out), fmt(p.failed), fmt(p.ttft_s["p95"]), fmt(p.tpot_s["p95"]),
                  fmt(p.latency_s["p95"]), f"{p.slo_attainment:.1%}", style=None if p.meets_slo else "red")
    console.print(t)
    console.print(f"usable capacity: [bold]{fmt(capacity.load)}[/] ({safe_markup(capacity.note)}); knee at "
                  f"{fmt(result.knee_load)}; wrote {safe_markup(str(out))}/{rundir.SWEEP}, {rundir.SWEEP_CSV} and one run "
                  "directory per rate")

