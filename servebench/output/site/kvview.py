"""The KV-memory and diagnosis section of a run page: the limit a model shape puts on concurrency.

The shape comes from the report options (``--model`` or explicit numbers, plus ``--budget-gib``), or
else from the run's metadata (metadata.json). Numbers come from ``servebench.capacity.kv``; the verdict
from ``servebench.analysis.diagnosis`` when it is installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servebench.analysis.summary import Report
from servebench.capacity.kv import Policy
from servebench.errors import ConfigError, ServebenchError
from servebench.formatting import fmt
from servebench.output.site.html import Markup, join, key_values, note, section, table, tag
from servebench.output.site.inputs import RunInput

GIB = 2**30


class KvOptions(BaseModel):
    """A model shape (a preset, a config.json or explicit numbers) and the memory left for the KV cache."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, description="Preset name, e.g. llama-3.1-8b.")
    config: str | None = Field(None, description="Path of a Hugging Face config.json.")
    layers: int | None = Field(None, ge=1)
    kv_heads: int | None = Field(None, ge=1)
    head_dim: int | None = Field(None, ge=1)
    bytes_per_element: float | None = Field(None, gt=0)
    budget_gib: float | None = Field(None, gt=0, description="Memory left for the KV cache, GiB per GPU.")
    policy: Policy | None = Field(None, description="Default: the run's metadata, else reserve.")
    output_cap: int | None = Field(None, ge=1, description="Output tokens reserved per request (default: max seen).")

    @model_validator(mode="after")
    def _shape_given_once(self) -> "KvOptions":
        explicit = [self.layers, self.kv_heads, self.head_dim]
        if any(v is not None for v in explicit) and not all(v is not None for v in explicit):
            raise ValueError("give all of --layers, --kv-heads and --head-dim, or --model")
        if sum([self.model is not None, self.config is not None, self.layers is not None]) > 1:
            raise ValueError("give the model shape one way: --model, --config, or --layers/--kv-heads/--head-dim")
        return self

    @property
    def has_shape(self) -> bool:
        return self.model is not None or self.config is not None or self.layers is not None


@dataclass
class KvView:
    """What the page shows about KV memory for one run; ``problem`` says why something is missing."""

    shape_name: str
    shape_source: str
    rows: list[tuple[str, object]] = field(default_factory=list)
    verdict: str | None = None
    diagnosis: Any = None  # servebench.analysis.diagnosis.Verdict
    problem: str | None = None


def _find_shape(meta: Mapping[str, Any], depth: int = 0) -> Mapping[str, Any] | None:
    if all(k in meta for k in ("layers", "kv_heads", "head_dim")):
        return meta
    if depth < 3:
        for v in meta.values():
            if isinstance(v, Mapping):
                found = _find_shape(v, depth + 1)
                if found is not None:
                    return found
    return None


def _find_key(meta: Mapping[str, Any], keys: tuple[str, ...], depth: int = 0) -> Any:
    for k in keys:
        if k in meta and meta[k] is not None:
            return meta[k]
    if depth < 3:
        for v in meta.values():
            if isinstance(v, Mapping):
                found = _find_key(v, keys, depth + 1)
                if found is not None:
                    return found
    return None


def resolve(options: KvOptions | None, metadata: Mapping[str, Any] | None) -> tuple[Any, float | None, str, str] | None:
    """Return (ModelShape, budget bytes or None, policy, where it came from), or None without a shape."""
    from servebench.capacity.kv import ModelShape

    policy = (options.policy if options else None) or "reserve"
    budget = options.budget_gib * GIB if options and options.budget_gib else None
    if options is not None and options.has_shape:
        from servebench.capacity.model_presets import resolve_shape
        shape = resolve_shape(model=options.model, config=options.config, layers=options.layers,
                              kv_heads=options.kv_heads, head_dim=options.head_dim,
                              bytes_per_element=options.bytes_per_element)
        return shape, budget, policy, "report options"
    if not metadata:
        return None
    found = _find_shape(metadata)
    if found is None:
        return None
    fields = {k: found[k] for k in ModelShape.model_fields if k in found and found[k] is not None}
    try:
        shape = ModelShape(**fields)
    except ValidationError as exc:
        raise ConfigError(f"metadata model shape is not usable: {exc.errors()[0]['msg']}") from None
    if budget is None:
        b = _find_key(metadata, ("kv_budget_bytes", "budget_bytes"))
        gib = _find_key(metadata, ("kv_budget_gib", "budget_gib"))
        budget = float(b) if isinstance(b, (int, float)) else float(gib) * GIB if isinstance(gib, (int, float)) else None
    meta_policy = _find_key(metadata, ("policy", "admission_policy"))
    if meta_policy in ("reserve", "paged") and not (options and options.policy):
        policy = meta_policy
    return shape, budget, policy, "the run's metadata"


def kv_view(run: RunInput, report: Report, options: KvOptions | None) -> KvView | None:
    """Return the KV numbers and verdict for one run, or None when no model shape is known.

    The verdict comes from ``diagnosis.diagnose_records`` (it needs ``admitted`` times); without it
    the view still gives the KV arithmetic at the median and the largest prompt.
    """
    try:
        resolved = resolve(options, run.metadata)
    except ServebenchError as exc:
        return KvView(shape_name="-", shape_source="-", problem=str(exc))
    if resolved is None:
        return None

    shape, budget_bytes, policy, origin = resolved
    name = shape.name or f"{shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} dims"
    view = KvView(shape_name=name, shape_source=origin + (f"; numbers from {shape.source}" if shape.source else ""))
    t = run.table
    assert t is not None and run.window_start is not None and run.window_end is not None
    out = t.output_tokens[t.output_tokens >= 0]
    cap = (options.output_cap if options and options.output_cap else None) or (int(out.max()) if out.size else None)
    try:
        from servebench.analysis.diagnosis import diagnose_records
        verdict = diagnose_records(t, run.window_start, run.window_end, shape=shape,
                                   budget_bytes=int(budget_bytes) if budget_bytes is not None else None,
                                   policy=policy, output_cap=cap, name=run.name, server_metrics=run.server_metrics)
    except ServebenchError as exc:
        view.problem = f"No diagnosis: {exc}"
    else:
        view.verdict = verdict.limit
        view.diagnosis = verdict
        view.rows = _verdict_rows(verdict, policy, budget_bytes)
        if budget_bytes is None:
            view.problem = "No KV budget given (--budget-gib), so no concurrency limit to compare against."
        return view
    view.rows = _kv_rows(t, shape, budget_bytes, policy, cap)
    if budget_bytes is None:
        view.problem = (view.problem + " " if view.problem else "") + "No KV budget given (--budget-gib)."
    return view


def _verdict_rows(v: Any, policy: str, budget_bytes: float | None) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [
        ("KV bytes per cached token", v.bytes_per_token), ("admission policy", policy),
        ("KV budget", f"{fmt(budget_bytes / GIB)} GiB" if budget_bytes is not None else None),
        ("tokens the budget holds", v.budget_tokens), ("tokens per request", v.tokens_per_request),
        ("max concurrent sequences", v.max_concurrent_sequences),
        ("peak in service (measured)", v.measurements.peak_active),
        ("share of the run at that peak", _share(v.measurements.share_at_peak)),
        ("time in service, s (prefill p50 + (N - 1) x TPOT p50)", v.time_in_service_s),
        ("in service, Little's law (rate x time in service)", v.in_service),
        ("utilization of the limit", _share(v.utilization)), ("saturation rate, requests/s", v.saturation_rate_per_s),
        ("queue wait p95 / TTFT p95", v.queue_share_of_ttft), ("prefill p95 / TTFT p95", v.prefill_share_of_ttft),
        ("TPOT growth with load", v.tpot_growth),
    ]
    return rows


def _share(x: float | None) -> str | None:
    return None if x is None else "under 0.1%" if 0 < x < 0.0005 else f"{x:.1%}"


def _kv_rows(t: Any, shape: Any, budget_bytes: float | None, policy: str, cap: int | None) -> list[tuple[str, object]]:
    from servebench.capacity import kv

    rows: list[tuple[str, object]] = [("KV bytes per cached token", kv.bytes_per_token(shape)),
                                      ("admission policy", policy)]
    prompt = t.prompt_tokens[t.prompt_tokens >= 0]
    if budget_bytes is None or not prompt.size or cap is None:
        return rows
    tokens = kv.budget_tokens(budget_bytes, shape)
    rows += [("KV budget", f"{fmt(budget_bytes / GIB)} GiB ({int(budget_bytes)} bytes)"),
             ("tokens the budget holds", tokens), ("output tokens reserved per request", cap)]
    p50 = int(np.sort(prompt)[max(0, -(-len(prompt) // 2) - 1)])
    for label, p in (("median", p50), ("largest", int(prompt.max()))):
        need = kv.tokens_per_request(p, cap, policy)  # type: ignore[arg-type]
        rows += [(f"tokens per request, {label} prompt ({p})", need),
                 (f"max concurrent sequences, {label} prompt", kv.max_concurrent_sequences(tokens, need))]
    return rows


def kv_section(view: KvView | None) -> Markup:
    """Return the KV and diagnosis section, or nothing when no shape was given."""
    if view is None:
        return Markup("")
    parts: list[object] = [tag("p", f"Model shape: {view.shape_name} (from {view.shape_source}).", class_="muted")]
    v = view.diagnosis
    if v is not None:
        parts.append(tag("p", join(["Limit: ", tag("span", v.limit, class_="verdict"), ". ", v.summary])))
    if view.problem:
        parts.append(note(view.problem, "warn"))
    if view.rows:
        parts.append(key_values([(k, val) for k, val in view.rows if val is not None]))
    if v is not None:
        ev_rows = [[e.measurement, e.value, e.rule, e.threshold,
                    "-" if e.crossed is None else ("yes" if e.crossed else "no"), e.note] for e in v.evidence]
        parts.append(table(["measurement", "value", "rule", "threshold", "met", "note"], ev_rows,
                           caption="Evidence"))
        parts.append(key_values([("what prefill contributes", v.prefill),
                                 ("experiment", v.experiment.action),
                                 ("confirms the verdict if", v.experiment.confirm),
                                 ("refutes it if", v.experiment.refute)]))
    return section("KV memory and diagnosis", *parts, id_="kv")
