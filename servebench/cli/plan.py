"""``servebench plan``: from a workload and SLOs to GPU type, tensor parallelism, replicas and cost."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from servebench.cli.core import app, console, emit_json, positive_s
from servebench.errors import ConfigError
from servebench.formatting import fmt


def _csv(text: str | None, what: str) -> list[str]:
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    if text is not None and not items:
        raise ConfigError(f"--{what} {text!r}: expected a comma-separated list")
    return items


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in _csv(text, what)]
    except ValueError:
        raise ConfigError(f"--{what} {text!r}: expected whole numbers separated by commas, like 1,2,4") from None
    if any(v < 1 for v in values):
        raise ConfigError(f"--{what} {text!r}: every value must be at least 1")
    return values


# PlanRequest's fields whose option reads otherwise than --field-name
_OPTION_OF = {"requests_per_simulation": "--requests", "tensor_parallel": "--tp", "prices": "--price",
              "weight_bytes_per_parameter": "--weight-dtype", "verify_fleet": "--fleet-check"}


def _option_named(error: dict) -> str:
    """Name the option a PlanRequest refusal is about as the user typed it, with the value: ``--requests 1``."""
    loc = error.get("loc") or ()
    if len(loc) != 1:
        return f"plan option '{'.'.join(str(p) for p in loc).replace('_', '-') or 'options'}'"
    option = _OPTION_OF.get(str(loc[0]), f"--{str(loc[0]).replace('_', '-')}")
    value = error.get("input")
    if isinstance(value, str):
        return f"{option} {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return option
    return f"{option} {value}" if isinstance(value, int) else f"{option} {value:g}"


def _dtype_bytes(name: str, option: str) -> int:
    """Return a dtype's bytes per element, a refusal naming the option: ``--weight-dtype 'int3': unknown dtype``."""
    from servebench.capacity.kv import dtype_bytes
    try:
        return dtype_bytes(name)
    except ConfigError as exc:
        raise ConfigError(f"{option} {name!r}: {exc}") from None


@app.command()
def plan(
    model: Optional[str] = typer.Option(None, "--model", help="Model preset (servebench kv --list-models)."),
    config: Optional[Path] = typer.Option(None, "--config", help="A Hugging Face config.json (parameters estimated "
                                          "from its layer sizes)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Traffic to serve, requests/s (with --trace: its "
                                         "busiest minute's rate unless given)."),
    prompt_tokens: Optional[int] = typer.Option(None, "--prompt-tokens", help="Prompt length, tokens."),
    output_tokens: Optional[int] = typer.Option(None, "--output-tokens", help="Output length, tokens."),
    scenario: Optional[Path] = typer.Option(None, "--scenario", help="A scenario file: its request mix, arrival "
                                            "process and scheduler settings replace --prompt/--output-tokens."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="A trace (Mooncake, Azure, BurstGPT or records): "
                                         "size for its busiest minute, replayed with its own bursts, lengths and "
                                         "prefix blocks (docs/planner.md)."),
    trace_format: str = typer.Option("auto", "--trace-format", help="The trace's format: auto, mooncake, azure, "
                                     "burstgpt or records."),
    prefix_caching: Optional[bool] = typer.Option(None, "--prefix-caching/--no-prefix-caching",
                                                  help="Simulate prefix caching (default: on for a trace with "
                                                       "block IDs, off otherwise)."),
    slo_ttft: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on TTFT, s."),
    slo_tpot: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on request TPOT, s."),
    slo_latency: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on latency, s."),
    slo_target: float = typer.Option(0.95, help="Share of requests that must meet every SLO."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU types to consider, e.g. H100,A100-80GB "
                                       "(default: every GPU preset; CPU on request)."),
    price: list[str] = typer.Option([], "--price", help="GPU=USD_PER_HOUR, repeatable, e.g. --price H100=2.10."),
    tensor_parallel: str = typer.Option("1,2,4,8", "--tp", help="Tensor-parallel degrees to try."),
    max_num_seqs: str = typer.Option("16,64,256", "--max-num-seqs", help="Caps on running sequences to try."),
    weight_dtype: str = typer.Option("bf16", help="Weight type: bf16, fp16 or fp8 (fp8 also uses fp8 FLOPs)."),
    kv_dtype: Optional[str] = typer.Option(None, help="KV-cache type (default: the model's, bf16 for presets)."),
    headroom: float = typer.Option(0.2, help="Share of each replica's capacity left unused."),
    requests: Optional[int] = typer.Option(None, help="Requests per simulation (default: 300; with --trace, every "
                                           "request of its busiest minute)."),
    calibrate: Optional[Path] = typer.Option(None, "--calibrate", help="A `servebench run` folder: its fitted "
                                             "step model calibrates the efficiency factors of its device."),
    calibrate_gpu: Optional[str] = typer.Option(None, help="The preset the calibration run's device is "
                                                "(default: read from its metadata)."),
    router: Optional[str] = typer.Option(None, "--router", help="The router in front of the replicas when the plan "
                                         "simulates the whole fleet: round_robin, least_outstanding, power_of_two, "
                                         "prefix_affinity (with prefix caching) or session_affinity (docs/fleet.md; "
                                         "default: a --scenario's fleet.router, else round_robin)."),
    fleet_check: bool = typer.Option(True, "--fleet-check/--no-fleet-check", help="Verify the cheapest options' "
                                     "replica counts by simulating each whole fleet (default on)."),
    disaggregated: bool = typer.Option(False, "--disaggregated", help="Also search prefill and decode instances "
                                       "of the cheapest configurations, simulated together (docs/planner.md)."),
    kv_transfer_gbps: float = typer.Option(50.0, "--kv-transfer-gbps", help="With --disaggregated: each prefill "
                                           "instance's link to the decode instances, GB/s (default 50: a 400 Gb/s "
                                           "NIC)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Plan GPUs, tensor parallelism, replicas and cost for a workload under SLOs (roofline + simulation)."""
    from servebench.analysis.summary import SLO
    from servebench.capacity import DEFAULT_GPUS, parse_prices
    from servebench.capacity.model_presets import get_preset
    from servebench.planning import PlanRequest, Workload
    from servebench.planning.planner import load_calibration, plan_document, shape_from_config_file
    from servebench.planning.planner import plan as run_plan
    from servebench.serving.scenario import DISAGGREGATED_ROUTERS, MAX_TRANSFER_GBPS

    if (model is None) == (config is None):
        raise ConfigError("give the model one way: --model NAME or --config config.json")
    kv_bytes = _dtype_bytes(kv_dtype, "--kv-dtype") if kv_dtype else None
    active = None
    if model is not None:
        shape = get_preset(model, bytes_per_element=kv_bytes)
    else:
        shape, active = shape_from_config_file(str(config), bytes_per_element=kv_bytes)
    lengths_given = prompt_tokens is not None or output_tokens is not None
    router_from = "--router"
    if sum((scenario is not None, trace is not None, lengths_given)) > 1:
        raise ConfigError("give the request lengths one way: --scenario, --trace, or --prompt-tokens and "
                          "--output-tokens")
    if prefix_caching is not None and trace is None:
        raise ConfigError("--prefix-caching/--no-prefix-caching go with --trace (a scenario says prefix_caching "
                          "in its server)")
    if trace is not None:
        workload = Workload.from_trace(str(trace), trace_format, prefix_caching=prefix_caching)
    elif scenario is not None:
        from servebench.serving.scenario import load_scenario
        sc = load_scenario(scenario)
        workload = Workload.from_scenario(sc)
        if router is None and sc.fleet is not None and (disaggregated or not sc.fleet.disaggregated):
            router, router_from = sc.fleet.router, f"{scenario}'s fleet.router"  # its replica count is the plan's
        if sc.fleet is not None and sc.fleet.disaggregated and not disaggregated:
            Console(stderr=True).print(f"note: {escape(str(scenario))}'s fleet is disaggregated; plan sizes colocated "
                                       "replicas unless given --disaggregated", soft_wrap=True)
    else:
        if prompt_tokens is None or output_tokens is None:
            raise ConfigError("give --prompt-tokens and --output-tokens (or a --scenario)")
        workload = Workload.fixed(prompt_tokens, output_tokens)
    if rate is None:
        if workload.trace is None:
            raise ConfigError("give the traffic to serve with --rate (requests/s), or a --trace whose busiest "
                              "minute sets it")
        rate = workload.rate_to_serve_rps()
    if requests is None:
        requests = workload.default_requests()
    router = router or "round_robin"
    if disaggregated and router not in DISAGGREGATED_ROUTERS:
        raise ConfigError(f"{router_from} {router}: --disaggregated routes prefill and decode instances by one of "
                          f"{', '.join(DISAGGREGATED_ROUTERS)} (give --router)")
    if router == "prefix_affinity" and not workload.prefix_caching:
        raise ConfigError("--router prefix_affinity routes by the replicas' cached prefixes: give a --trace with block "
                          "IDs (or --prefix-caching), or a --scenario whose server has prefix_caching")
    if not (kv_transfer_gbps > 0 and kv_transfer_gbps <= MAX_TRANSFER_GBPS):
        raise ConfigError(f"--kv-transfer-gbps {kv_transfer_gbps:g}: a link's GB/s, above 0 and at most "
                          f"{MAX_TRANSFER_GBPS:g}")
    slo = SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, latency_s=slo_latency)
    weight_bytes = _dtype_bytes(weight_dtype, "--weight-dtype")
    calibration = load_calibration(str(calibrate), gpu=calibrate_gpu) if calibrate is not None else None
    try:
        req = PlanRequest(model=shape, weight_bytes_per_parameter=weight_bytes, active_parameters=active,
                          workload=workload, slo=slo, slo_target=slo_target,
                          gpus=_csv(gpus, "gpus") if gpus is not None else list(DEFAULT_GPUS),
                          prices=parse_prices(price), tensor_parallel=_ints(tensor_parallel, "tp"),
                          max_num_seqs=_ints(max_num_seqs, "max-num-seqs"), headroom=headroom,
                          requests_per_simulation=requests, calibration=calibration, router=router,
                          verify_fleet=fleet_check)
    except ValueError as exc:  # pydantic's ValidationError: name the option
        first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
        raise ConfigError(f"{_option_named(first)}: {first['msg']}") from None

    err = Console(stderr=True)
    with Progress(TextColumn("[bold]plan[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True, disable=as_json) as bar:
        task = bar.add_task("screening configurations", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=escape(label))

        evaluation, result = run_plan(req, float(rate), progress)
        if disaggregated:
            from servebench.planning.disaggregated import disaggregated_document, plan_disaggregated
            found = plan_disaggregated(evaluation, result, kv_transfer_gbps=kv_transfer_gbps, progress=progress)
    doc = plan_document(evaluation, result)
    if disaggregated:
        doc["disaggregated"] = disaggregated_document(found, kv_transfer_gbps)
    if as_json:
        emit_json(doc)
        return
    print_plan(console, doc)
    if disaggregated:
        print_disaggregated(console, doc)


def print_disaggregated(out: Console, doc: dict) -> None:
    """Print the disaggregated search: per configuration the fewest prefill and decode instances found."""
    from servebench.planning.disaggregated import cheaper_than_colocated

    dis = doc["disaggregated"]
    t = Table(title=f"Disaggregated prefill and decode ({fmt(dis['kv_transfer_gbps'])} GB/s links)")
    for col in ("GPU", "TP", "max seqs", "prefill", "decode", "GPUs", "colocated GPUs", "$/hour", "simulations"):
        t.add_column(col, justify="left" if col == "GPU" else "right")
    for o in dis["options"]:
        t.add_row(o["gpu"], str(o["tensor_parallel"]), fmt(o["max_num_seqs"]), fmt(o["prefill_replicas"]),
                  fmt(o["decode_replicas"]), fmt(o["gpus_total"]), fmt(o["colocated_gpus"]),
                  "-" if o["cost_per_hour_usd"] is None else f"{o['cost_per_hour_usd']:.2f}", str(len(o["tries"])))
    out.print(t)
    for o in dis["options"]:
        out.print(f"{escape(o['gpu'])} x{o['tensor_parallel']}: {escape(o['note'])}")
    best = doc["best"]
    verdict = cheaper_than_colocated(dis, best["cost_per_hour_usd"] if best else None)
    out.print("[bold]disaggregated:[/] " + escape(verdict or "no configuration tried meets the SLOs disaggregated"))


def print_plan(out: Console, doc: dict) -> None:
    """Print a plan document as a ranked table and the reason for the pick."""
    m, w = doc["model"], doc["workload"]
    out.print(f"[bold]{escape(str(m['name']))}[/] ({fmt(m['parameters'] / 1e9 if m['parameters'] else None)}B "
              f"parameters, {fmt(m['weight_bytes_per_parameter'])} bytes each) at {fmt(w['rate_rps'])} requests/s, "
              f"prompts {w['mean_prompt_tokens']:,.0f} and outputs {w['mean_output_tokens']:,.0f} tokens on average; "
              f"SLOs {escape(str({k: v for k, v in doc['slo'].items() if v is not None}))} for "
              f"{doc['slo_target']:.0%} of requests")
    trace = w.get("trace")
    if trace is not None:
        window = ("its busiest minute" if trace["window_s"] is not None else "the whole trace") + \
            f" ({trace['requests']:,} requests from {fmt(trace['window_start_s'])} s)"
        out.print(f"sized for {window} of {escape(str(trace['path']))}, replayed with its own bursts at "
                  f"{fmt(trace['window_rate_rps'])} requests/s; prefix caching "
                  f"{'on' if trace['prefix_caching'] else 'off'}")
    t = Table(title="Options, cheapest first (meeting the SLOs)")
    for col in ("GPU", "TP", "max seqs", "capacity/replica (req/s)", "replicas", "GPUs", "meets SLOs", "$/hour",
                "$/M output tokens", "limit"):
        t.add_column(col, justify="left" if col in ("GPU", "limit", "meets SLOs") else "right")
    best = doc["best"]
    for o in doc["options"]:
        star = o == best
        t.add_row(("* " if star else "") + o["gpu"], str(o["tensor_parallel"]), fmt(o["max_num_seqs"]),
                  fmt(o["capacity_rps_per_replica"]), fmt(o["replicas"]), fmt(o["gpus_total"]),
                  "yes" if o["meets_slo"] else "[red]no[/]",
                  "-" if o["cost_per_hour_usd"] is None else f"{o['cost_per_hour_usd']:.2f}",
                  "-" if o["cost_per_million_output_tokens_usd"] is None
                  else f"{o['cost_per_million_output_tokens_usd']:.3f}", o["limit"],
                  style="bold green" if star else None)
    out.print(t)
    out.print(f"KV elements: {escape(str(m.get('kv_dtype')))}")
    out.print(("[bold]best:[/] " if best else "[bold red]no option:[/] ") + escape(doc["reason"] or ""))
    s = doc["search"]
    out.print(f"{s['simulations']} simulations of {s['requests_per_simulation']} requests; "
              f"{s['pruned_without_simulating']} configurations ruled out without simulating (no fit, or SLOs "
              f"missed unloaded); {s['skipped_by_cost_bound']} not simulated because even at their throughput "
              "bound they cost more than the best")
    fl = doc.get("fleet")
    if fl is not None and fl["verified"]:
        for o, d in zip(doc["options"], doc["details"]):
            if d.get("fleet") is not None:
                out.print(f"fleet of {escape(o['gpu'])} x{o['tensor_parallel']}, max_num_seqs {o['max_num_seqs']}: "
                          f"{escape(d['fleet']['note'])}" +
                          (f" ({d['fleet']['requests']:,} requests simulated)" if d["fleet"]["tries"] else ""))
        out.print(f"{fl['options_verified']} option(s) verified by simulating the whole fleet behind {fl['router']} "
                  f"({fl['fleet_simulations']} fleet simulations of at most {fl['most_requests_per_fleet']:,} requests; "
                  f"the cheapest first, at most {fl['most_options_verified']}; the others divide)")
    for gpu, how in doc["efficiency"]["used"].items():
        out.print(f"efficiency factors for {escape(gpu)}: {escape(how)}")
    for note in doc["notes"]:
        out.print(f"[yellow]note:[/] {escape(note)}")
    out.print("An estimate from public hardware figures and a simulated server, not a hardware guarantee: "
              "see docs/planner.md; --json has how each number was computed.")
