"""``servebench report``: a static HTML site comparing runs, readable offline and zippable."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import List, Optional

import typer
from pydantic import ValidationError

from servebench.cli.core import app, console, emit_json, positive_s
from servebench.errors import ConfigError


@app.command()
def report(
    runs: List[Path] = typer.Argument(..., help="Record files (any format servebench reads; each benchmark of a "
                                                "multi-run export is its own run unless --format says run=N), "
                                                "timing-run or simulation folders, or sweep outputs."),
    out: Path = typer.Option(..., "-o", "--out", help="Folder to write the site into (created if needed)."),
    title: str = typer.Option("servebench report", "--title", help="Title shown on every page."),
    slo_ttft: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on TTFT, s (goodput is shown when any SLO is set)."),
    slo_tpot: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on request TPOT, s."),
    slo_latency: Optional[float] = typer.Option(None, callback=positive_s, help="SLO on latency, s."),
    model: Optional[str] = typer.Option(None, "--model", help="Model preset for the KV section (servebench kv "
                                                             "--list-models)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Model shape from a Hugging Face config.json."),
    layers: Optional[int] = typer.Option(None, help="Model shape: decoder layers."),
    kv_heads: Optional[int] = typer.Option(None, help="Model shape: KV heads (not query heads)."),
    head_dim: Optional[int] = typer.Option(None, help="Model shape: head dimension."),
    bytes_per_element: Optional[float] = typer.Option(None, help="KV bytes per element (2 for bf16/fp16)."),
    budget_gib: Optional[float] = typer.Option(None, help="Memory left for the KV cache, GiB."),
    policy: Optional[str] = typer.Option(None, help="Admission policy for the KV limit: reserve or paged "
                                                    "(default: the run's metadata, else reserve)."),
    output_cap: Optional[int] = typer.Option(None, help="Output tokens reserved per request (default: max seen)."),
    window_start: Optional[float] = typer.Option(None, help="Observation window start, s, for every run "
                                                            "(default: each run's min start)."),
    window_end: Optional[float] = typer.Option(None, help="Observation window end, s (default: max end)."),
    format: str = typer.Option("auto", "--format", help="Input format of record files (auto-detected)."),
    slice_by: Optional[str] = typer.Option(None, "--slice-by", metavar="COLUMN",
                                           help="Break each run down by this column's values instead of 'slice': "
                                                "any column the schema does not know (gpu, model)."),
    zip_path: Optional[Path] = typer.Option(None, "--zip", help="Also write the site as a zip file here."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object describing the site."),
) -> None:
    """Write a static HTML report site: index.html compares the runs, one page per run, sweep charts."""
    from servebench.analysis.summary import SLO
    from servebench.output.safetext import safe_text
    from servebench.output.site import KvOptions, SiteOptions, build_site, load_runs, site_zip_bytes, write_site

    try:
        slo = SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, latency_s=slo_latency)
        kv = KvOptions(model=model, config=str(config) if config else None, layers=layers, kv_heads=kv_heads, head_dim=head_dim,
                       bytes_per_element=bytes_per_element, budget_gib=budget_gib, policy=policy,
                       output_cap=output_cap)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{where + ': ' if where else ''}{err['msg'].removeprefix('Value error, ')}") from None
    if kv.has_shape:  # an unknown preset or a bad config.json stops here, not on every page
        from servebench.capacity.model_presets import resolve_shape
        resolve_shape(model=kv.model, config=kv.config, layers=kv.layers, kv_heads=kv.kv_heads,
                      head_dim=kv.head_dim, bytes_per_element=kv.bytes_per_element)
    loaded = [run for p in runs for run in load_runs(p, format, window_start, window_end)]
    options = SiteOptions(title=title, slo=slo if slo.any else None, slice_by=slice_by,
                          kv=kv if kv.has_shape or budget_gib is not None else None,
                          generated_at=datetime.now(timezone.utc).strftime("generated %Y-%m-%d %H:%M UTC"))
    files = build_site(loaded, options)
    written = write_site(files, out)
    if zip_path is not None:
        zip_path.write_bytes(site_zip_bytes(files))
    pages = sorted(p for p in files if p.endswith(".html"))
    if as_json:
        emit_json({
            "site": str(out), "index": str(out / "index.html"), "pages": pages,
            "files": len(written), "bytes": sum(len(b) for b in files.values()),
            "zip": str(zip_path) if zip_path is not None else None,
            "runs": [{"name": r.name, "path": r.path, "kind": r.kind, "warnings": r.warnings,
                      "extra_columns": list(r.table.extra) if r.table is not None else []} for r in loaded],
        })
        return
    for r in loaded:
        if r.warnings:
            console.print(f"warning: {safe_text(r.name)}: {len(r.warnings)} import warning(s), listed on its page",
                          style="yellow", markup=False, highlight=False)
    console.print(f"Wrote {len(pages)} pages for {len(loaded)} run(s) to {safe_text(out)}/ "
                  f"(open {safe_text(out / 'index.html')}; it works offline).", markup=False, highlight=False)
    if zip_path is not None:
        console.print(f"Zipped the site to {safe_text(zip_path)}.", markup=False, highlight=False)
