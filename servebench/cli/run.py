"""``servebench run`` (a real timing run on the local torch engine) and ``servebench validate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from servebench.cli.core import app, console, emit_json
from servebench.formatting import fmt
from servebench.output.safetext import safe_markup
from servebench.records import rundir


@app.command()
def run(
    scenario: Path = typer.Argument(..., help="Scenario file (.yaml or .json): server limits and workload."),
    out: Path = typer.Option(..., "-o", "--out", help=f"Output folder: {rundir.RECORDS}, {rundir.STEPS}, "
                                                     f"{rundir.METADATA}."),
    model: str = typer.Option("tiny", help="Model preset (seeded random weights): tiny, small, llama-3.2-1b, ..."),
    device: str = typer.Option("auto", help="auto (CUDA with bf16 when present, else CPU with fp32), cpu or cuda."),
    threads: int = typer.Option(1, min=1, help="torch CPU threads."),
    weights_seed: int = typer.Option(0, help="Seed of the random weights."),
    max_wall_s: Optional[float] = typer.Option(None, min=0.1, help="Stop after this many seconds; "
                                               "live requests end as cancelled (run_time_limit)."),
    warmup_steps: int = typer.Option(3, min=0, help="Untimed warm-up steps before the first arrival "
                                     "(0 measures a cold start)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Serve a scenario's workload in real time on the local torch engine; write records, step trace and run metadata."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from servebench.analysis.summary import build_report
    from servebench.serving.engine.readback import read_run
    from servebench.serving.engine.timing_run import execute_run
    from servebench.serving.scenario import load_scenario

    sc = load_scenario(scenario)
    err = Console(stderr=True)
    with Progress(TextColumn("[bold]timing run"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[sent]}"),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("run", total=None, sent="")

        def progress(ended: int, sent: int, total: int) -> None:
            bar.update(task, completed=ended, total=total, sent=f"sent {sent}")

        meta = execute_run(sc, out, scenario_source=str(scenario), model=model, device=device, threads=threads,
                           weights_seed=weights_seed, max_wall_s=max_wall_s, warmup_steps=warmup_steps,
                           progress=progress)
    folder = read_run(out)
    report = build_report(folder.records, 0.0, max(folder.window_end, 1e-9))
    info = {"out_dir": str(out), "files": [rundir.RECORDS, rundir.STEPS, rundir.METADATA],
            "model": meta["model"]["name"], "parameters": meta["model"]["parameters"],
            "device": meta["runtime"]["device_name"], "dtype": meta["runtime"]["dtype"], "run": meta["run"]}
    if as_json:
        data = report.model_dump(mode="json")
        emit_json({"summary": data.pop("summary"), **info, "report": data})
        return
    from servebench.output.terminal import print_report
    r = meta["run"]
    console.print(f"[bold]{safe_markup(meta['model']['name'])}[/] ({meta['model']['parameters']:,} parameters, "
                  f"{meta['runtime']['dtype']}) on {safe_markup(meta['runtime']['device_name'])}: {r['offered_requests']} "
                  f"requests in {fmt(r['wall_s'])} s, {r['steps']} steps, arrival lag p99 "
                  f"{fmt(r['arrival_lag_p99_s'])} s; wrote {safe_markup(str(out))}/{rundir.RECORDS}, {rundir.STEPS}, "
                  f"{rundir.METADATA}")
    for note in r["notes"]:
        console.print(f"[yellow]note:[/] {safe_markup(note)}")
    print_report(console, report)


@app.command()
def validate(
    run_dir: Path = typer.Argument(..., help="Folder written by servebench run."),
    allow_poor_fit: bool = typer.Option(False, "--allow-poor-fit", help="Predict even when the step model fits "
                                        "too poorly (mean relative error over 35%, or R² under 0.30 while step "
                                        "sizes vary); the result says so."),
    least_squares: bool = typer.Option(False, "--least-squares", help="Fit by plain least squares instead of "
                                       "the Huber-robust fit (slow outliers then pull the coefficients)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Fit the step model to a timing run, simulate its scenario, and compare p50/p95 TTFT, TPOT and latency."""
    from servebench.serving.engine.readback import read_run
    from servebench.serving.engine.validation import validate_run

    folder = read_run(run_dir)
    result = validate_run(folder.records, folder.steps, folder.scenario, allow_poor_fit=allow_poor_fit,
                          method="least_squares" if least_squares else "huber",
                          send_lags_s=(folder.metadata.get("run") or {}).get("send_lags_s"))
    if as_json:
        emit_json(result.model_dump(mode="json"))
        return
    print_validation(console, result)


def print_validation(out: Console, result: Any) -> None:
    """Print a validation as tables."""
    fit = result.fit
    m = fit.model
    out.print(f"{safe_markup(fit.summary)}: base {fmt(m.base_s)} s + {fmt(m.per_prefill_token_s)} s/prefill token + "
              f"{fmt(m.per_prefill_seq_s)} s/prefilling seq + {fmt(m.per_decode_seq_s)} s/decoding seq + "
              f"{fmt(m.per_kv_token_s)} s/KV token read; arrival lag {fmt(m.arrival_lag_s)} s, tokens out "
              f"{fmt(m.emit_lead_s)} s before a step ends")
    if m.spread_text:
        out.print(f"replayed spread: {m.spread_text}")
    t = Table(title=f"Measured vs simulated (target within {result.target_rel_error:.0%})")
    for col in ("metric", "measured s", "simulated s", "rel. error", "ok"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for c in result.comparisons:
        ok = "-" if c.within_target is None else ("yes" if c.within_target else "[red]no[/]")
        rel = "-" if c.rel_error is None else f"{c.rel_error:+.1%}"
        t.add_row(f"{c.metric} p{c.q}", fmt(c.measured_s), fmt(c.simulated_s), rel, ok)
    out.print(t)
    statuses = [s for s in result.measured_status if result.measured_status[s] or result.simulated_status.get(s)]
    out.print("outcomes measured / simulated: " + ", ".join(
        f"{s} {result.measured_status[s]}/{result.simulated_status.get(s, 0)}" for s in statuses))
    state = "saturated" if result.saturated else "below saturation"
    out.print(f"{state}: {safe_markup(result.saturation_evidence)}")
    for note in result.notes:
        out.print(f"[yellow]note:[/] {safe_markup(note)}")
    if result.passed is None:
        out.print("verdict: not judged (the run is saturated or has no comparable values)")
    else:
        out.print("verdict: " + ("[green]within target[/]" if result.passed else "[red]outside target[/]"))
