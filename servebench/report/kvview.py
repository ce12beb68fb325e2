"""The KV-memory and diagnosis section of a run page: the limit a model shape puts on concurrency.

The shape comes from the report options (``--model`` or explicit numbers, plus ``--budget-gib``), or
else from the run's frozen contract (metadata). Numbers come from ``servebench.kv``; the verdict
from ``servebench.diagnosis`` when it is installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ConfigError, ServebenchError
from ..render import fmt
from ..summary import Report
from .html import Markup, join, key_values, note, section, tag, table
from .inputs import RunInput

GIB = 2**30


class KvOptions(BaseModel):
    """A model shape (a preset name or explicit numbers) and the memory left for the KV cache."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, description="Preset name, e.g. llama-3.1-8b.")
    layers: int | None = Field(None, ge=1)
    kv_heads: int | None = Field(None, ge=1)
    head_dim: int | None = Field(None, ge=1)
    bytes_per_element: float | None = Field(None, gt=0)
    budget_gib: float | None = Field(None, gt=0, description="Memory left for the KV cache, GiB per GPU.")
    policy: Literal["reserve", "paged"] = "reserve"
    output_cap: int | None = Field(None, ge=1, description="Output tokens reserved per request (default: max seen).")

    @model_validator(mode="after")
    def _shape_given_once(self) -> "KvOptions":
        explicit = [self.layers, self.kv_heads, self.head_dim]
        if any(v is not None for v in explicit) and not all(v is not None for v in explicit):
            raise ValueError("give all of --layers, --kv-heads and --head-dim, or --model")
        if self.model is not None and any(v is not None for v in explicit):
            raise ValueError("give either --model or --layers/--kv-heads/--head-dim, not both")
        return self

    @property
    def has_shape(self) -> bool:
        return self.model is not None or self.layers is not None


@dataclass
class KvView:
    """What the page shows about KV memory for one run; ``problem`` says why a number is missing."""

    shape_name: str
    shape_source: str
    rows: list[tuple[str, object]] = field(default_factory=list)
    verdict: str | None = None
    diagnosis: dict[str, Any] | None = None
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
    from ..kv import ModelShape

    policy = options.policy if options else "reserve"
    budget = options.budget_gib * GIB if options and options.budget_gib else None
    if options is not None and options.has_shape:
        if options.model is not None:
            from ..model_presets import get_preset
            shape = get_preset(options.model, bytes_per_element=options.bytes_per_element)
        else:
            shape = ModelShape(layers=options.layers, kv_heads=options.kv_heads, head_dim=options.head_dim,
                               bytes_per_element=options.bytes_per_element or 2)
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
    if meta_policy in ("reserve", "paged"):
        policy = meta_policy
    return shape, budget, policy, "the run's metadata"


def kv_view(run: RunInput, report: Report, options: KvOptions | None) -> KvView | None:
    """Return the KV numbers and verdict for one run, or None when no model shape is known."""
    try:
        resolved = resolve(options, run.metadata)
    except ServebenchError as exc:
        return KvView(shape_name="-", shape_source="-", problem=str(exc))
    if resolved is None:
        return None
    from .. import kv

    shape, budget_bytes, policy, origin = resolved
    name = shape.name or f"{shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} dims"
    view = KvView(shape_name=name, shape_source=f"{origin}" + (f"; numbers from {shape.source}" if shape.source else ""))
    per_token = kv.bytes_per_token(shape)
    rows: list[tuple[str, object]] = [("KV bytes per cached token", per_token), ("admission policy", policy)]
    t = run.table
    assert t is not None
    prompt = t.prompt_tokens[t.prompt_tokens >= 0]
    out = t.output_tokens[t.output_tokens >= 0]
    cap = (options.output_cap if options and options.output_cap else None) or (int(out.max()) if out.size else None)
    if budget_bytes is None:
        view.problem = "No KV budget given (--budget-gib), so no concurrency limit."
    elif not prompt.size or cap is None:
        view.problem = "The records have no prompt_tokens (or no output_tokens): tokens per request unknown."
    else:
        tokens = kv.budget_tokens(budget_bytes, shape)
        rows += [("KV budget", f"{fmt(budget_bytes / GIB)} GiB ({int(budget_bytes)} bytes)"),
                 ("tokens the budget holds", tokens), ("output tokens reserved per request", cap)]
        p50 = int(np.sort(prompt)[max(0, -(-len(prompt) // 2) - 1)])
        for label, p in (("median", p50), ("largest", int(prompt.max()))):
            need = kv.tokens_per_request(p, cap, policy)
            rows += [(f"tokens per request, {label} prompt ({p})", need),
                     (f"max concurrent sequences, {label} prompt", kv.max_concurrent_sequences(tokens, need))]
    ins = report.in_service
    if ins is not None:
        rows += [("peak in service (measured)", ins.peak),
                 ("share of the window at that peak", f"{ins.share_of_window_at_peak:.1%}")]
    view.rows = rows
    _add_diagnosis(view, run, shape, budget_bytes, policy, cap)
    return view


def _add_diagnosis(view: KvView, run: RunInput, shape: Any, budget_bytes: float | None, policy: str,
                   cap: int | None) -> None:
    """Fill the verdict from ``servebench.diagnosis`` when it is installed."""
    try:
        from .. import diagnosis  # noqa: F401  (written by another engineer; may not exist yet)
    except ImportError:
        return


def kv_section(view: KvView | None) -> Markup:
    """Return the KV and diagnosis section, or nothing when no shape was given."""
    if view is None:
        return Markup("")
    parts: list[object] = [tag("p", f"Model shape: {view.shape_name} (from {view.shape_source}).", class_="muted")]
    if view.rows:
        parts.append(key_values(view.rows))
    if view.problem:
        parts.append(note(view.problem, "warn"))
    if view.verdict:
        parts.append(tag("p", join(["Verdict: ", tag("span", view.verdict, class_="verdict")])))
    if view.diagnosis:
        evidence = view.diagnosis.get("evidence") or []
        if evidence:
            parts.append(table(["evidence"], [[e] for e in evidence]))
        for key in ("prefill", "experiment", "refuted_by"):
            if view.diagnosis.get(key):
                parts.append(tag("p", f"{key.replace('_', ' ')}: {view.diagnosis[key]}"))
    return section("KV memory and diagnosis", *parts, id_="kv")
