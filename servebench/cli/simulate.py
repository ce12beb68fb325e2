"""``servebench simulate``, ``servebench sweep`` and ``servebench fit-steps``: the modelled server."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, cast

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from servebench.cli.allocator import map_large_blocks
from servebench.cli.core import app, console, emit_json, positive_s
from servebench.errors import ConfigError
from servebench.formatting import fmt
from servebench.output import strict_json
from servebench.output.safetext import safe_markup


def _out_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _arrow_returns_memory() -> None:
    """Give Arrow's buffers back to the system as they are freed: writing a big run folder a part at a time
    otherwise leaves Arrow's own allocator (mimalloc) holding its peak."""
    import pyarrow as pa
    pa.set_memory_pool(pa.system_memory_pool())


def _return_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere), between
    the phases of a big simulation: the simulation's and the report's temporaries are freed, but glibc keeps
    them, and the next phase's peak would come on top (100,000 requests: 371 MB at the write instead of 414).
    """
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # not glibc: its allocator returns memory its own way
        pass


def _parse_list(text: str | None, what: str, integer: bool = False) -> list[float]:
    if text is None:
        return []
    try:
        values = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(f"--{what} {text!r}: expected numbers separated by commas, like 0.5,1,2") from None
    if integer and any(v != int(v) for v in values):
        raise ConfigError(f"--{what} {text!r}: expected whole numbers")
    return values


@app.command()
def simulate(
    scenario: Path = typer.Argument(..., help="Scenario file (.yaml, .yml or .json)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory for the records, the step trace and "
                                                     "summary.json."),
    seed: Optional[int] = typer.Option(None, help="Override the scenario's seed."),
    rate: Optional[float] = typer.Option(None, help="Override the open-loop arrival rate, requests/s."),
    requests: Optional[int] = typer.Option(None, help="Override the number of requests."),
    trace_format: str = typer.Option("auto", help="Step trace format: auto, jsonl, csv or parquet (auto: Parquet "
                                                  "from 10,000 records on, else JSONL)."),
    records_format: str = typer.Option("auto", help="Record file format: auto, jsonl or parquet (auto: Parquet "
                                                    "from 10,000 records on, else JSONL)."),
    figures: bool = typer.Option(False, "--figures", help="Also write trace.html: running, waiting and KV over time."),
    prefill: Optional[str] = typer.Option(None, "--prefill", metavar="chunked|whole",
                                          help="Override the prefill policy: chunked (the scenario's step budget, "
                                               "or 512 tokens) or whole (whole prompts, no step budget)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Simulate a continuous-batching server on a scenario; write records, step trace and summary."""
    from servebench.analysis.summary import build_report
    from servebench.records import rundir
    from servebench.records.steps import StepTrace
    from servebench.serving.disagg import simulate_deployment as run_simulation  # one replica, a fleet, or P/D
    from servebench.serving.scenario import load_scenario, with_request_count
    from servebench.serving.sweep import scenario_at

    if trace_format not in ("auto", "jsonl", "csv", "parquet"):
        raise ConfigError(f"--trace-format {trace_format!r}: expected auto, jsonl, csv or parquet")
    if records_format not in ("auto", "jsonl", "parquet"):
        raise ConfigError(f"--records-format {records_format!r}: expected auto, jsonl or parquet")
    sc = load_scenario(scenario)
    if prefill is not None:
        from servebench.serving.experiments import prefill_variants
        if prefill not in ("chunked", "whole"):
            raise ConfigError(f"--prefill {prefill!r}: expected chunked or whole")
        sc = prefill_variants(sc)[prefill == "whole"]
    if seed is not None:
        sc = sc.model_copy(update={"seed": seed})
    if rate is not None or requests is not None:
        if rate is not None:
            if sc.workload.trace is not None:  # scenario_at's words are the sweep's flags
                raise ConfigError(f"--rate: {scenario} replays a trace, whose arrivals are its own; set the "
                                  "trace's speedup in the scenario (workload.trace.speedup), or sweep --speedups")
            if sc.workload.arrival is None:
                raise ConfigError(f"--rate: {scenario} is closed loop (its users send as they finish); set "
                                  "workload.closed_loop.users in the scenario, or sweep --concurrency")
            sc = scenario_at(sc, rate, "rate", requests)
        else:
            sc = with_request_count(sc, requests)
    notes = [n for n in [sc.workload.trace.left_out_note() if sc.workload.trace is not None else None] if n]
    for note in notes:
        Console(stderr=True, soft_wrap=True).print(f"[cyan]note:[/] {safe_markup(note)}")
    map_large_blocks()  # its big arrays grow in place and go back between phases (servebench.cli.allocator)
    result = run_simulation(sc, token_times="runs")  # the token times as runs of step times: a float per step
    _arrow_returns_memory()
    _return_freed_memory()
    if len(result.records) == 0:
        raise ConfigError(f"{scenario}: the workload produced no requests")
    d = _out_dir(out)
    tr = result.trace  # written first and let go: the report and the records do not read it
    steps_path = rundir.write_run_steps(d, tr, len(result.records), cast(rundir.FileFormat, trace_format))
    figure_path = None
    files: dict[str, str] = {}  # filled below, once the records are written
    if figures:
        from servebench.output.figures.sweep import trace_over_time
        fig = trace_over_time(tr, result.kv_budget_tokens, title=f"{sc.name}: engine over time")
        fig.write_html(d / "trace.html", include_plotlyjs="directory")  # plotly.min.js beside it: works offline
        figure_path = d / "trace.html"
        del fig
    sim = {
        "scenario": sc.name, "seed": sc.seed, "kv_budget_tokens": result.kv_budget_tokens,
        "policy": sc.server.policy, "prefill_lane": sc.server.prefill_lane,
        "offered": len(result.records), "by_status": result.status_counts(),
        "engine_steps": result.engine_steps, "trace_rows": len(tr), "events": result.events,
        "preemptions": result.preemptions,
        "peak_running": int(tr.running.max()) if len(tr) else 0,
        "peak_waiting": int(tr.waiting.max()) if len(tr) else 0,
        "max_kv_tokens_used": int(tr.kv_tokens_used.max()) if len(tr) else 0,
        "files": files, "notes": notes,
    }
    del tr
    result = dataclasses.replace(result, trace=StepTrace())
    _return_freed_memory()
    report = build_report(result.records, result.window_start_s, result.window_end_s, token_runs=result.token_runs)
    if sc.fleet is not None and not sc.fleet.disaggregated:  # the records name only the replicas that served
        from servebench.analysis.fleet import with_idle_replicas
        report = report.model_copy(update={"fleet": with_idle_replicas(report.fleet, sc.fleet.replicas)})
    _return_freed_memory()
    written = rundir.write_run(d, result.records, records_format=cast(rundir.FileFormat, records_format),
                               token_runs=result.token_runs)
    files.update(records=str(written["records"]), steps=str(steps_path), summary=str(d / rundir.SUMMARY))
    if figure_path is not None:
        files["figure"] = str(figure_path)
    doc = {"simulation": sim, "report": report}
    rundir.write_summary(d, strict_json.dumps(doc, indent=2))  # what --json prints
    if as_json:
        emit_json(doc)
        return
    t = Table(title=f"Simulated {safe_markup(sc.name)} ({sc.server.policy}, prefill lane {sc.server.prefill_lane})")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for key in ("offered", "kv_budget_tokens", "peak_running", "peak_waiting", "max_kv_tokens_used",
                "preemptions", "engine_steps"):
        t.add_row(key.replace("_", " "), fmt(sim[key]))
    for status, n in sim["by_status"].items():
        t.add_row(f"  {status}", fmt(n))
    console.print(t)
    from servebench.output.terminal import print_report
    print_report(console, report)
    console.print(safe_markup(f"wrote {', '.join(files.values())}"))


@app.command()
def sweep(
    scenario: Path = typer.Argument(..., help="Scenario file (.yaml, .yml or .json)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory for sweep.json and sweep.csv."),
    rates: Optional[str] = typer.Option(
        None, help="Arrival rates to sweep, requests/s, e.g. 0.5,1,2,4 (default: 10 from 0.25x to 2.5x the scenario's)."),
    concurrency: Optional[str] = typer.Option(None, help="Closed-loop user counts to sweep, e.g. 1,2,4,8."),
    speedups: Optional[str] = typer.Option(
        None, help="A trace replay's speedups to sweep, e.g. 0.5,1,2 (its arrival times divided by each; default: 10 "
                   "from 0.25x to 2.5x the scenario's)."),
    requests: Optional[int] = typer.Option(2000, help="Requests per point (0: the scenario's own count; a trace: "
                                                      "the first of its window)."),
    slo_ttft: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on TTFT, s."),
    slo_tpot: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on request TPOT, s."),
    slo_latency: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on latency, s."),
    slo_target: float = typer.Option(0.95, help="Share of offered requests that must meet every SLO."),
    search: bool = typer.Option(True, "--search/--no-search", help="Bisect for the capacity between grid points."),
    seeds: int = typer.Option(1, min=1, max=1000, help="Repeat the sweep over this many seeds (the scenario's and "
                              "the next ones) and report the range of each point and of the capacity."),
    ray: bool = typer.Option(False, "--ray", help="Run each point as a Ray task: on a local Ray started for the "
                             "call, or on --ray-address."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS",
                                              help="An existing Ray cluster (auto, HOST:PORT or ray://HOST:PORT); "
                                                   "implies --ray."),
    figures: bool = typer.Option(False, "--figures", help="Also write the sweep figures as HTML."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Sweep offered load (rates, users, or a trace's speedup); report per-point outcomes and the usable capacity."""
    from servebench.analysis.summary import SLO
    from servebench.records import rundir
    from servebench.serving.scenario import load_scenario
    from servebench.serving.sweep import LOAD_AXES, check_loads, default_rates, default_speedups, sweep_csv, sweep_mode
    from servebench.serving.sweep import sweep as run_sweep

    if sum(x is not None for x in (rates, concurrency, speedups)) > 1:
        raise ConfigError("give one of --rates, --concurrency and --speedups, not both")
    sc = load_scenario(scenario)
    mode = sweep_mode(sc, users=concurrency is not None)
    if mode == "speedup" and rates is not None:
        raise ConfigError(f"{scenario} replays a trace: sweep its speedup with --speedups, not --rates")
    if mode != "speedup" and speedups is not None:
        raise ConfigError(f"--speedups: {scenario} replays no trace (its workload has no 'trace'); give --rates")
    if concurrency is not None:
        loads = _parse_list(concurrency, "concurrency", True)
    elif mode == "speedup":
        loads = _parse_list(speedups, "speedups") if speedups is not None else default_speedups(sc)
    else:
        loads = _parse_list(rates, "rates") if rates is not None else default_rates(sc)
    check_loads(sc, loads, mode, requests or None)  # a bad rate is one line, before the progress bar starts
    slo = SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, latency_s=slo_latency)
    err = Console(stderr=True)
    with Progress(TextColumn("[bold]sweep[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True, disable=as_json) as bar:
        task = bar.add_task(safe_markup(sc.name), total=len(loads))

        def progress(done: int, total: int, point: Any) -> None:
            bar.update(task, completed=done, total=max(total, done),
                       description=f"{safe_markup(sc.name)}: {point.load:g} -> {point.slo_attainment:.0%} within SLOs")

        def run(runner: Any = None) -> Any:
            return run_sweep(sc, loads, mode=mode, slo=slo, slo_target=slo_target, requests=requests or None,
                             search=search, progress=progress, seeds=seeds, runner=runner)

        if ray or ray_address is not None:
            from servebench.load.ray_runner import RayRunner, ray_session
            bar.update(task, description=f"{safe_markup(sc.name)}: starting Ray")
            with ray_session(ray_address) as cluster:
                bar.update(task, description=f"{safe_markup(sc.name)}: Ray with {cluster.cpus:g} CPUs")
                result = run(RayRunner())
        else:
            result = run()
    d = _out_dir(out)
    written = rundir.write_sweep(d, result, sweep_csv(result))
    files = [str(written["sweep"]), str(written["csv"])]
    if figures:
        from servebench.output.figures.sweep import latency_vs_load, outcomes_vs_load
        for name, fig in (("sweep_latency.html", latency_vs_load(result)), ("sweep_outcomes.html", outcomes_vs_load(result))):
            fig.write_html(d / name, include_plotlyjs="directory")  # plotly.min.js beside it: works offline
            files.append(str(d / name))
    if as_json:
        emit_json({**result.model_dump(mode="json"), "files": files})
        return
    by = {"rate": "arrival rate", "users": "users", "speedup": "trace speedup"}[mode]
    t = Table(title=f"Sweep of {safe_markup(sc.name)} by {by} ({LOAD_AXES[mode][1]})")
    t.add_column("load", justify="right", no_wrap=True)
    for col in ("offered/s", "done/s", "rejected", "timeout", "TTFT p95", "TPOT p95", "latency p95",
                "queue p95", "within SLOs", "peak run"):
        t.add_column(col, justify="right")
    retried = any(p.attempted is not None and p.attempted > p.offered for p in result.points)
    if retried:  # retrying clients: attempts per second beside the user requests offered
        t.add_column("tried/s", justify="right")
    for p in result.points:
        style = None if p.meets_slo else "red"
        t.add_row(f"{p.load:g}" + ("*" if p.source == "search" else ""), fmt(p.offered_rps), fmt(p.throughput_rps),
                  fmt(p.rejected), fmt(p.timed_out), fmt(p.ttft_s["p95"]), fmt(p.tpot_s["p95"]),
                  fmt(p.latency_s["p95"]), fmt(p.queue_wait_s["p95"]), f"{p.slo_attainment:.1%}",
                  fmt(p.peak_active), *([fmt(p.attempted_rps)] if retried else []), style=style)
    console.print(t)
    cap = result.capacity
    console.print(f"usable capacity: [bold]{fmt(cap.load)}[/] ({cap.note}); knee at {fmt(result.knee_load)}; "
                  f"* = found by search; red = misses the SLOs (target {slo_target:.0%})")
    if result.spread is not None:
        _print_spread(result.spread)
    console.print(safe_markup(f"wrote {', '.join(files)}"))


def _print_spread(spread: Any) -> None:
    """Print each grid point's range over seeds and the capacity's."""
    def span(iv: Any, pct: bool = False) -> str:
        if iv.min is None:
            return "-"
        f = (lambda v: f"{v:.1%}") if pct else fmt
        return f(iv.min) if iv.min == iv.max else f"{f(iv.min)} - {f(iv.max)}"
    n = len(spread.seeds)
    t = Table(title=f"Range over {n} seeds ({spread.seeds[0]} to {spread.seeds[-1]})")
    for col in ("load", "seeds meeting", "within SLOs", "goodput/s", "TTFT p95", "latency p95"):
        t.add_column(col, justify="right")
    for p in spread.points:
        t.add_row(f"{p.load:g}", f"{p.seeds_meeting_slo}/{n}", span(p.slo_attainment, True), span(p.goodput_rps),
                  span(p.ttft_p95_s), span(p.latency_p95_s))
    console.print(t)
    cap = spread.capacity
    low = "below the lowest load tried" if cap.min is None and cap.max is not None else fmt(cap.min)
    console.print(f"capacity over {n} seeds: [bold]{low} to {fmt(cap.max)}[/] (per seed: "
                  f"{', '.join(fmt(c) for c in spread.capacity_by_seed)})")


@app.command("fit-steps")
def fit_steps(
    trace: Path = typer.Argument(..., help="Step trace (JSONL, JSON or CSV; or a run folder holding one) with "
                                           "duration_s, prefill_tokens, decode_seqs, kv_tokens_read (older "
                                           "names read too)."),
    fit: str = typer.Option("base_s,per_prefill_token_s,per_decode_seq_s,per_kv_token_s",
                            help="Coefficients to fit (the rest are held at 0)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Fit the step-time model to a step trace by non-negative least squares, with its error."""
    from servebench.capacity.stepmodel import fit_step_model
    from servebench.records.rundir import read_trace

    result = fit_step_model(read_trace(trace), [c.strip() for c in fit.split(",") if c.strip()])
    if as_json:
        emit_json(result)
        return
    t = Table(title=f"Step-time model fitted to {result.steps:,} steps")
    t.add_column("coefficient")
    t.add_column("value", justify="right")
    t.add_column("std. error", justify="right")
    for name, value in result.model.model_dump().items():
        if isinstance(value, float):  # the noise fields are tuples, empty here
            t.add_row(name, f"{value:.6g}", fmt(result.stderr.get(name)))
    console.print(t)
    console.print(f"RMSE {result.rmse_s:.4g} s, mean abs error {result.mean_abs_error_s:.4g} s, "
                  f"max {result.max_abs_error_s:.4g} s, R² {fmt(result.r2)}, "
                  f"mean abs % error {fmt(None if result.mean_abs_pct_error is None else 100 * result.mean_abs_pct_error)}")
