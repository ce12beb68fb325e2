"""``servebench validate-sweep``: a measured offered-load sweep on the local engine against the simulator's."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from servebench.cli.core import app, console, emit_json, positive_s
from servebench.errors import ConfigError
from servebench.formatting import NO_DATA, fmt
from servebench.output.safetext import safe_markup


def parse_rates(text: str) -> list[float]:
    """Return the rates of a comma-separated list, or raise ConfigError naming the bad one."""
    rates = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            rates.append(float(part))
        except ValueError:
            raise ConfigError(f"--rates: {part!r} is not a number (give e.g. --rates 10,20,40)") from None
    if len(rates) < 2:
        raise ConfigError(f"--rates: give at least two rates to find a knee, got {text!r}")
    if any(not r > 0 for r in rates):
        raise ConfigError(f"--rates: every rate must be positive, got {text!r}")
    return rates


@app.command("validate-sweep")
def validate_sweep_command(
    scenario: Path = typer.Argument(..., help="Scenario file (.yaml or .json), open loop or a trace replay."),
    rates: str = typer.Option(..., "--rates", help="Offered rates, requests/s, comma-separated (e.g. 10,20,40,60,80); "
                              "a trace is replayed at the speedup that offers each."),
    out: Path = typer.Option(..., "-o", "--out", help="Output folder: validate_sweep.json, validate_sweep.html and "
                             "one run folder per rate."),
    long: bool = typer.Option(False, "--long", help="The scenario's full request count per rate and up to 300 s "
                              "per rate (default: CPU-sized, at most 200 requests and 30 s per rate)."),
    requests: Optional[int] = typer.Option(None, "--requests-per-rate", "--requests", min=10,
                                           help="Requests per rate (overrides the default; more: steadier p95s)."),
    engine_repeats: int = typer.Option(2, "--engine-repeats", min=1, max=2, help="Serve each rate this many times: "
                                       "with 2 the second run measures the engine's own run-to-run spread, the "
                                       "noise floor under every simulated error."),
    replicas: int = typer.Option(8, "--replicas", min=1, help="Seeded simulated replays pooled per rate."),
    model: str = typer.Option("tiny", help="Model preset (seeded random weights)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    threads: int = typer.Option(1, min=1, help="torch CPU threads."),
    weights_seed: int = typer.Option(0, help="Seed of the random weights."),
    slo_ttft: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on TTFT, s (then the knee is where the SLOs fail)."),
    slo_tpot: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on request TPOT, s."),
    slo_latency: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on latency, s."),
    allow_poor_fit: bool = typer.Option(False, "--allow-poor-fit", help="Simulate even from a step model that "
                                        "fits too poorly (the result says so)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Run the engine at each rate, fit the step model on the traces, simulate the same rates, compare the knees."""
    import torch

    from servebench.analysis.summary import SLO
    from servebench.output.figures.validate_sweep import measured_vs_simulated
    from servebench.records.rundir import rate_folder, write_run, write_validation
    from servebench.serving.engine.model import Decoder, configure_cpu, pick_device, preset
    from servebench.serving.engine.run_metadata import build_run_metadata
    from servebench.serving.engine.sweep_validation import (
        CPU_MAX_WALL_S_PER_RATE,
        CPU_REQUESTS_PER_RATE,
        LONG_MAX_WALL_S_PER_RATE,
        REPORT,
        validate_sweep,
    )
    from servebench.serving.scenario import Scenario, load_scenario

    grid = parse_rates(rates)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {out} exists and is not a directory")
    sc = load_scenario(scenario)
    n = requests if requests is not None else (sc.workload.num_requests if long else
                                               min(sc.workload.num_requests or CPU_REQUESTS_PER_RATE,
                                                   CPU_REQUESTS_PER_RATE))
    wall = LONG_MAX_WALL_S_PER_RATE if long else CPU_MAX_WALL_S_PER_RATE
    dev, dtype = pick_device(device)
    previous = torch.get_num_threads()
    configure_cpu(threads)
    err = Console(stderr=True)
    try:
        decoder = Decoder(preset(model), seed=weights_seed, device=dev, dtype=dtype)

        def write(rate: float, run, served: Scenario) -> None:  # each rate as a run folder (validate, diagnose, report)
            meta = build_run_metadata(served, decoder, run, seed_weights=weights_seed, threads=threads,
                                      scenario_source=str(scenario), warmup_steps=3)
            write_run(rate_folder(out, rate), run.records, steps=run.steps, metadata=meta)

        with err.status("validate-sweep") as status:
            def progress(stage: str, rate: float) -> None:
                status.update(f"{'timing run' if stage == 'run' else 'simulating'} at {rate:g} requests/s")

            result = validate_sweep(decoder, sc, grid, requests=n, max_wall_s_per_rate=wall,
                                    slo=SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, latency_s=slo_latency),
                                    allow_poor_fit=allow_poor_fit, progress=progress, on_run=write,
                                    engine_repeats=engine_repeats, replicas=replicas)
    finally:
        torch.set_num_threads(previous)
    doc = result.model_dump(mode="json")
    from servebench.output.strict_json import dumps
    write_validation(out, dumps(doc, indent=2) + "\n")
    try:
        measured_vs_simulated(doc).write_html(out / REPORT, include_plotlyjs=True, full_html=True)
    except OSError as exc:
        raise ConfigError(f"cannot write to {out}: {exc.strerror or exc}") from None
    if as_json:
        emit_json(doc)
        return
    print_sweep_validation(console, result, out)


def print_sweep_validation(out: Console, result, folder: Path) -> None:
    """Print a sweep validation as tables."""
    from servebench.serving.engine.sweep_validation import COMPARED

    out.print(safe_markup(result.fit_summary))
    t = Table(title=f"Measured vs simulated ({result.requests_per_rate} requests per rate; target below the knee "
                    f"within {result.target_below_knee_rel_error:.0%})")
    for col in ("rate/s", "TTFT p50", "TTFT p95", "latency p50", "latency p95", "throughput/s", "queue p95",
                "below knee", "engine run to run"):
        t.add_column(col, justify="right")

    def cell(p, key: str) -> str:
        e = p.rel_error[key]
        return f"{fmt(p.measured[key])} / {fmt(p.simulated[key])}" + ("" if e is None else f" ({e:+.0%})")

    def spread(p) -> str:  # the engine's own difference between two runs of the rate, largest of the four
        if p.engine_rel_diff is None:
            return NO_DATA
        worst = max((abs(v) for k, v in p.engine_rel_diff.items() if v is not None and k in COMPARED), default=None)
        return NO_DATA if worst is None else f"up to {worst:.0%}"

    for p in result.points:
        rate = f"{p.rate_rps:g}" + ("" if p.speedup is None else f" ({fmt(p.speedup)}x)")  # a trace: its speedup
        t.add_row(rate, cell(p, "ttft_p50_s"), cell(p, "ttft_p95_s"), cell(p, "latency_p50_s"),
                  cell(p, "latency_p95_s"), cell(p, "throughput_rps"), cell(p, "queue_wait_p95_s"),
                  "yes" if p.below_knee else "no", spread(p))
    out.print(t)
    err = result.knee_relative_error
    out.print(f"knee ({safe_markup(result.knee_rule)}): measured {fmt(result.measured_knee_rps)}/s, simulated "
              f"{fmt(result.simulated_knee_rps)}/s" + ("" if err is None else f", error {err:+.1%} (target "
                                                     f"{result.target_knee_rel_error:.0%})"))
    if result.max_below_knee_rel_error is not None:
        floor = result.max_below_knee_engine_rel_diff
        out.print(f"largest TTFT/latency error below the knee: {result.max_below_knee_rel_error:.1%}"
                  + ("" if floor is None else f"; the engine's own run-to-run difference there: up to {floor:.1%}"))
    for note in result.notes:
        out.print(f"[yellow]note:[/] {safe_markup(note)}")
    from servebench.records.rundir import VALIDATION, VALIDATION_REPORT

    out.print(f"wrote {safe_markup(str(folder))}/{VALIDATION}, {VALIDATION_REPORT} and one run folder per rate "
              "(rate_<r>)")

