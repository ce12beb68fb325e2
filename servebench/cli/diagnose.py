"""``servebench diagnose``: what limits a load profile (KV memory, queueing, prefill, decode or none)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import ValidationError
from rich.table import Table

from servebench.analysis.diagnosis import (
    PRECEDENCE,
    ProfileTable,
    Thresholds,
    Verdict,
    diagnose_records,
    diagnose_table,
)
from servebench.capacity.kv import GIB, POLICIES
from servebench.capacity.model_presets import resolve_shape
from servebench.cli.core import app, console, emit_json
from servebench.errors import ConfigError, InputFormatError
from servebench.formatting import NO_DATA, fmt
from servebench.output.safetext import safe_markup
from servebench.output.terminal import print_headline


def _read_profile_table(path: Path) -> ProfileTable | None:
    """Return the file as a profile table, or None when it is not one (then it holds records)."""
    if path.suffix.lower() != ".json" or not path.is_file():
        return None
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or "profiles" not in doc:
        return None
    try:
        return ProfileTable.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InputFormatError(f"{path}: profile table field '{where}': {err['msg']}") from None


def _print_verdict(v: Verdict) -> None:
    console.rule(f"[bold]{safe_markup(v.profile)}[/]: limit = [bold]{v.limit}[/]")
    print_headline(console, v.headline)  # the answer first, as --json's headline; the numbers behind it follow
    console.print(safe_markup(v.summary))
    t = Table(show_header=False, box=None)
    for label, value in (("KV bytes per token", v.bytes_per_token), ("tokens in the budget", v.budget_tokens),
                         ("tokens per request", v.tokens_per_request),
                         ("max concurrent sequences", v.max_concurrent_sequences),
                         ("time in service, s", v.time_in_service_s), ("in service (Little's law)", v.in_service),
                         ("utilization of the limit", v.utilization),
                         ("saturation rate, /s", v.saturation_rate_per_s),
                         ("queue wait share of TTFT p95", v.queue_share_of_ttft),
                         ("prefill share of TTFT p95", v.prefill_share_of_ttft), ("TPOT growth", v.tpot_growth)):
        t.add_row(label, fmt(value))
    console.print(t)
    e = Table(title="evidence")
    for col in ("measurement", "value", "rule", "threshold", "met", "note"):
        e.add_column(col)
    for ev in v.evidence:
        e.add_row(ev.measurement, fmt(ev.value), safe_markup(ev.rule), fmt(ev.threshold),
                  NO_DATA if ev.crossed is None else ("yes" if ev.crossed else "no"), safe_markup(ev.note))
    console.print(e)
    console.print(f"[bold]why:[/] {safe_markup(v.explanation)}")
    r = Table(title=f"rules, in precedence order ({' > '.join(PRECEDENCE)}; the first that holds wins)")
    for col in ("limit", "holds", "conditions"):
        r.add_column(col)
    for rule in v.rules:
        conds = "; ".join(f"{c.measurement} {c.rule} {fmt(c.threshold)}: "
                          + (NO_DATA if c.crossed is None else ("yes" if c.crossed else "no")) for c in rule.conditions)
        r.add_row(rule.limit, "yes" if rule.holds else "no", safe_markup(conds))
    console.print(r)
    if v.bindings:
        b = Table(title="where each limit binds as load grows")
        for col in ("limit", "rate /s", "in service", "x measured rate", "how"):
            b.add_column(col)
        for bind in v.bindings:
            first = " (first)" if v.first_to_bind is not None and bind.limit == v.first_to_bind.limit else ""
            b.add_row(bind.limit + first, fmt(bind.rate_per_s), fmt(bind.in_service), fmt(bind.headroom),
                      safe_markup(bind.basis))
        console.print(b)
    for gap in v.cannot_tell:
        console.print(f"[yellow]cannot tell:[/] {safe_markup(gap)}")
    console.print(f"[bold]prefill:[/] {safe_markup(v.prefill)}")
    console.print(f"[bold]experiment:[/] {safe_markup(v.experiment.action)}")
    console.print(f"  confirms if: {safe_markup(v.experiment.confirm)}")
    console.print(f"  refuted if: {safe_markup(v.experiment.refute)}")


def _timing_run_server(path: Path, records: Any, use_budget: bool) -> dict[str, Any]:
    """Return a timing run folder's server limits and fitted step model ({} for anything else).

    A folder written by ``servebench run`` knows its KV budget in tokens (used when no shape and
    budget are given), its policy, its cap on running sequences and its step trace; the step
    model is used only when its fit is good enough to predict from.
    """
    from servebench.records.rundir import METADATA, STEP_FILES, find_file
    from servebench.serving.engine.readback import read_run
    if not (path.is_dir() and find_file(path, STEP_FILES) is not None and (path / METADATA).is_file()):
        return {}
    from servebench.serving.engine.validation import fit_trace
    folder = read_run(path)
    config = folder.scenario.server.scheduler_config()
    out: dict[str, Any] = {"policy": config.policy, "max_num_seqs": config.max_num_seqs}
    if use_budget:
        out["budget_tokens"] = config.kv_budget_tokens
    try:
        fit = fit_trace(folder.steps, folder.records)
    except ConfigError:
        return out
    if fit.quality is not None and fit.quality.usable:
        out["step_model"] = fit.model
    return out


@app.command("diagnose")
def diagnose_command(
    file: Path = typer.Argument(..., help="A profile table (JSON with 'profiles'), a record file with admitted times, "
                                          "or a run folder (a load run's server metrics stand in for admitted times)."),
    model: Optional[str] = typer.Option(None, "--model", help="Preset model shape (see servebench kv --list-models)."),
    config: Optional[Path] = typer.Option(None, "--config", help="A Hugging Face config.json."),
    layers: Optional[int] = typer.Option(None, help="Layers (explicit shape)."),
    kv_heads: Optional[int] = typer.Option(None, help="KV heads (explicit shape)."),
    head_dim: Optional[int] = typer.Option(None, help="Head dimension (explicit shape)."),
    bytes_per_element: Optional[float] = typer.Option(None, help="Bytes per cached element (default 2)."),
    budget_gib: Optional[float] = typer.Option(None, help="Memory left for the KV cache, GiB per GPU."),
    policy: Optional[str] = typer.Option(None, help="Admission policy: reserve (default) or paged."),
    output_cap: Optional[int] = typer.Option(None, help="Output token cap per request (records; default: max seen)."),
    expected_output_tokens: Optional[int] = typer.Option(None, help="Paged policy: expected output length."),
    deadline_s: Optional[float] = typer.Option(None, help="Request deadline, s (records)."),
    ttft_objective_s: Optional[float] = typer.Option(None, help="TTFT p95 above this is a symptom (default 2 s)."),
    window_start: Optional[float] = typer.Option(None, help="Observation window start, s (records)."),
    window_end: Optional[float] = typer.Option(None, help="Observation window end, s (records)."),
    name: Optional[str] = typer.Option(None, help="Profile name for records (default: the file name)."),
    format: str = typer.Option("auto", "--format", help="Record file format (auto-detected by default)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Diagnose what limits each load profile: kv_memory, queueing, prefill, decode or none."""
    if policy is not None and policy not in POLICIES:
        raise ConfigError(f"unknown admission policy {policy!r}; expected 'reserve' or 'paged'")
    shape = resolve_shape(model=model, config=str(config) if config else None, layers=layers, kv_heads=kv_heads,
                          head_dim=head_dim, bytes_per_element=bytes_per_element, required=False)
    table = _read_profile_table(file)
    if table is not None:
        updates: dict[str, Any] = {}
        if shape is not None:
            updates["model"] = shape
        if budget_gib is not None:
            updates["kv_budget_gib"] = budget_gib
        if policy is not None:
            updates["policy"] = policy
        if expected_output_tokens is not None:
            updates["expected_output_tokens"] = expected_output_tokens
        if ttft_objective_s is not None:
            updates["thresholds"] = table.thresholds.model_copy(update={"ttft_objective_s": ttft_objective_s})
        table = table.model_copy(update=updates)
        verdicts = diagnose_table(table)
        kind = "profile table"
    else:
        from servebench.records.loaders import read_path, to_table
        from servebench.records.rundir import server_samples  # a load run's scrapes of the server's metrics
        loaded = read_path(file, format)
        records, ws, we = to_table(loaded, window_start, window_end)
        th = Thresholds(ttft_objective_s=ttft_objective_s) if ttft_objective_s is not None else None
        server = _timing_run_server(file, records, shape is None and budget_gib is None)
        verdicts = [diagnose_records(records, ws, we, shape=shape,
                                     budget_bytes=int(budget_gib * GIB) if budget_gib is not None else None,
                                     policy=policy or server.get("policy") or "reserve",  # type: ignore[arg-type]
                                     output_cap=output_cap, expected_output_tokens=expected_output_tokens,
                                     deadline_s=deadline_s, thresholds=th, name=name or file.name,
                                     budget_tokens=server.get("budget_tokens"),
                                     max_num_seqs=server.get("max_num_seqs"), step_model=server.get("step_model"),
                                     server_metrics=server_samples(file))]
        kind = "records"
    if as_json:
        emit_json({"source": str(file), "input": kind,
                   "profiles": {v.profile: v.model_dump(mode="json") for v in verdicts}})
        return
    for v in verdicts:
        _print_verdict(v)
