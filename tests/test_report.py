"""The static report site: pages, offline assets, escaping, folders of every kind, zip, CLI."""

from __future__ import annotations

import io
import json
import re
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servebench.analysis.percentiles import percentile
from servebench.analysis.summary import SLO
from servebench.cli.core import app
from servebench.errors import ConfigError, InputFormatError
from servebench.output.figures import records as rfig
from servebench.output.site import KvOptions, RunInput, SiteOptions, build_site, load_run, site_zip_bytes, write_site
from servebench.output.site.html import esc, json_for_script
from servebench.records.loaders import load_table
from servebench.records.schema import parse_objects
from servebench.records.table import validate

EVIL = "<script>alert(1)</script>"
EVIL_ID = "<img src=x onerror=alert(2)>"
EVIL_ERROR = "</script><script>alert(3)</script>"
EVIL_TITLE = "<b>T</b> & \"co\""


class Tags(HTMLParser):
    """Collect script and link tags, the text of scripts, and the page's visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.links: list[dict[str, str | None]] = []
        self.script_bodies: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._in_script = True
            self.script_bodies.append("")
        elif tag == "link":
            self.links.append(dict(attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_bodies[-1] += data
        else:
            self.text.append(data)


def parse(html_text: str) -> Tags:
    p = Tags()
    p.feed(html_text)
    return p


def evil_records() -> list[dict]:
    return [
        {"request_id": EVIL_ID, "start": 0.0, "admitted": 0.1, "first_token": 0.5, "end": 2.5, "status": "success",
         "prompt_tokens": 100, "output_tokens": 9, "slice": EVIL},
        {"request_id": "r2", "start": 1.0, "admitted": 1.0, "first_token": 1.25, "end": 1.25, "status": "success",
         "prompt_tokens": 50, "output_tokens": 1, "slice": "plain"},
        {"request_id": "r3", "start": 2.0, "end": 7.0, "status": "timeout", "output_tokens": 4, "slice": EVIL,
         "error": EVIL_ERROR},
        {"request_id": "r4", "start": 3.0, "end": 3.0, "status": "rejected", "slice": "plain", "error": "queue full"},
    ]


def run_from(records: list[dict], name: str = "run.json", **kw: object) -> RunInput:
    table = validate(parse_objects(records, name), 0.0, 10.0)
    return RunInput(name=name, path=name, kind="records", table=table, window_start=0.0, window_end=10.0, **kw)


def html_pages(files: dict[str, bytes]) -> dict[str, str]:
    return {k: v.decode() for k, v in files.items() if k.endswith(".html")}


@pytest.fixture
def evil_site() -> dict[str, bytes]:
    run = run_from(evil_records(), name=f"file {EVIL}.json", warnings=[f"dropped field {EVIL}"],
                   metadata={"model": {"name": EVIL}, "seed": 7})
    return build_site([run], SiteOptions(title=EVIL_TITLE, slo=SLO(ttft_s=1.0)))


# --------------------------------------------------------------------------- offline assets


def test_site_has_index_run_page_and_assets(r1_r4: list[dict]) -> None:
    from plotly.offline import get_plotlyjs

    files = build_site([run_from(r1_r4, "r1_r4.json")])
    assert set(files) == {"index.html", "run-01-r1-r4-json.html", "assets/plotly.min.js", "assets/servebench.js",
                          "assets/servebench.css"}
    assert files["assets/plotly.min.js"] == get_plotlyjs().encode()
    index = files["index.html"].decode()
    assert 'href="run-01-r1-r4-json.html"' in index
    # the spec's R1-R4 summary over 0..10 s, side by side on the index
    assert ">0.2<" in index and ">0.5<" in index and ">2.5<" in index and ">0.25<" in index


def test_no_url_in_any_script_or_link_and_every_asset_is_in_the_site(evil_site: dict[str, bytes]) -> None:
    for name, text in html_pages(evil_site).items():
        tags = parse(text)
        refs = [t.get("src") for t in tags.scripts if t.get("src")] + [t.get("href") for t in tags.links]
        assert refs, name
        for ref in refs:
            assert ref is not None
            assert not re.match(r"^\s*(https?:)?//", ref, re.I), (name, ref)
            assert ref in evil_site, (name, ref)  # relative, and written into the site
        assert "cdn." not in text.lower()
        assert [t.get("src") for t in tags.scripts if t.get("src")] == ["assets/plotly.min.js",
                                                                         "assets/servebench.js"]
    assert not re.search(rb"https?://", evil_site["assets/servebench.js"] + evil_site["assets/servebench.css"])


def test_plotly_is_written_once_even_for_many_runs(r1_r4: list[dict]) -> None:
    files = build_site([run_from(r1_r4, "a.json"), run_from(r1_r4, "a.json")])
    assert sum(1 for k in files if k.endswith(".js") and "plotly" in k) == 1
    assert "run-02-a-json-2.html" in files and b"a.json (2)" in files["index.html"]


# --------------------------------------------------------------------------- escaping


def test_user_strings_are_escaped_in_html(evil_site: dict[str, bytes]) -> None:
    pages = html_pages(evil_site)
    for name, text in pages.items():
        for raw in (EVIL, EVIL_ID, EVIL_ERROR, "<b>T</b>"):
            assert raw not in text, (name, raw)
        tags = parse(text)
        # only our own script tags: two external ones plus one JSON block per chart
        for attrs in tags.scripts:
            assert attrs.get("src") or (attrs.get("type") == "application/json"
                                        and attrs.get("class") == "figure-data"), attrs
    run_page = pages["run-01-file-script-alert-1-script-json.html"]
    visible = "".join(parse(run_page).text)
    for raw in (EVIL, EVIL_ID, EVIL_ERROR, EVIL_TITLE, f"file {EVIL}.json", f"dropped field {EVIL}"):
        assert raw in visible, raw
    assert EVIL_TITLE in "".join(parse(pages["index.html"]).text)


def test_user_strings_are_escaped_inside_figure_json(evil_site: dict[str, bytes]) -> None:
    text = evil_site["run-01-file-script-alert-1-script-json.html"].decode()
    blocks = parse(text).script_bodies
    json_blocks = [b for b in blocks if b.strip()]
    assert len(json_blocks) >= 6
    labels = []
    for body in json_blocks:
        assert "</" not in body and "<" not in body  # nothing can close the script element early
        fig = json.loads(body)
        for trace in fig["data"]:
            labels += [str(v) for v in (trace.get("y") or []) if isinstance(v, str)]
    # the stage and cause charts name the slice and the cause, escaped for plotly's label markup
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in v for v in labels), labels
    assert any("&lt;/script&gt;&lt;script&gt;alert(3)" in v for v in labels), labels


def test_json_for_script_round_trips_and_esc_escapes_quotes() -> None:
    value = {"a": "</script><!-- & \u2028 >", "b": [1, 2.5, None]}
    safe = json_for_script(json.dumps(value))
    assert "<" not in safe and ">" not in safe and "&" not in safe and "\u2028" not in safe
    assert json.loads(safe) == value
    assert esc('"x" \'y\'') == "&quot;x&quot; &#x27;y&#x27;"


# --------------------------------------------------------------------------- figures


def test_cdf_marks_are_nearest_rank_percentiles() -> None:
    values = np.arange(1, 21, dtype=float)
    fig = rfig.cdf_figure(values, "latency")
    marks = {t.name: (t.x[0], t.y[0]) for t in fig.data if t.name.startswith("p")}
    assert marks == {"p50": (10.0, 0.5), "p95": (19.0, 0.95), "p99": (20.0, 1.0)}
    assert marks["p95"][0] == percentile(values, 95)


def test_cdf_thins_large_inputs_but_keeps_the_marked_points() -> None:
    rng = np.random.default_rng(3)
    values = rng.exponential(1.0, 100_001)
    fig = rfig.cdf_figure(values, "ttft", max_points=500)
    curve = fig.data[0]
    assert len(curve.x) <= 504  # 500 spread + 3 marks + the curve's foot at 0
    xs = set(np.asarray(curve.x).tolist())
    for q in (50, 95, 99):
        assert percentile(values, q) in xs


def test_cdf_panel_puts_the_three_cdfs_in_one_figure_with_their_marks() -> None:
    rng = np.random.default_rng(18)
    figs = {m: rfig.cdf_figure(rng.exponential(1.0, 500), m) for m in ("latency", "ttft", "tpot")}
    figs["tpot"] = rfig.cdf_figure(np.array([]), "tpot", left_out=4, left_out_reason="non-success")
    panel = rfig.cdf_panel(figs)
    assert {t.xaxis for t in panel.data} == {"x", "x2"}  # the empty TPOT has no trace, only its note
    assert [t.name for t in panel.data if t.xaxis == "x2"] == ["CDF", "p50", "p95", "p99"]
    assert sorted(s.xref for s in panel.layout.shapes) == ["x"] * 3 + ["x2"] * 3
    titles = [a.text for a in panel.layout.annotations]
    assert any(t.startswith("Latency<br>") for t in titles) and any(t.startswith("Request TPOT<br>") for t in titles)
    assert any("no values" in t and a.xref == "x3 domain" for t, a in zip(titles, panel.layout.annotations))


def test_cdf_of_no_values_says_so() -> None:
    fig = rfig.cdf_figure(np.array([]), "tpot", left_out=4, left_out_reason="non-success")
    assert not fig.data
    assert "no values" in fig.layout.annotations[0].text
    assert "4 requests not in the curve" in fig.layout.title.text


def test_timeline_counts_active_in_service_and_waiting() -> None:
    records = [
        {"start": 0.0, "admitted": 1.0, "first_token": 1.5, "end": 3.0, "status": "success", "output_tokens": 2},
        {"start": 0.5, "admitted": 0.5, "first_token": 1.0, "end": 2.0, "status": "success", "output_tokens": 2},
        {"start": 1.0, "end": 4.0, "status": "timeout"},
    ]
    table = validate(parse_objects(records), 0.0, 4.0)
    fig = rfig.timeline_figure(table, 0.0, 4.0)
    traces = {t.name.split(" ")[0]: dict(zip(t.x, t.y)) for t in fig.data}
    assert traces["active"][1.0] == 3 and traces["active"][2.0] == 2 and traces["active"][4.0] == 0
    assert traces["in"][1.0] == 2 and traces["in"][3.0] == 0
    assert traces["waiting"][0.0] == 1 and traces["waiting"][1.0] == 1 and traces["waiting"][3.0] == 1


def test_stage_breakdown_means_add_up_to_mean_latency() -> None:
    table, _, _ = load_table(Path(__file__).resolve().parent.parent / "sample_data" / "requests_sample.csv")
    fig = rfig.stage_figure(table)
    assert fig is not None
    total = sum(t.x[0] for t in fig.data)  # the "all" bar
    keep = table.is_success & np.isfinite(table.admitted)
    assert total == pytest.approx(float(np.mean(table.end[keep] - table.start[keep])))
    assert rfig.stage_figure(validate(parse_objects([{"start": 0, "end": 1, "status": "failed"}]), 0, 1)) is None


def test_every_status_is_shown_even_at_zero(r1_r4: list[dict]) -> None:
    fig = rfig.status_figure({"success": 2, "timeout": 1, "rejected": 1})
    assert list(fig.data[0].x) == ["success", "failed", "timeout", "cancelled", "rejected"]
    assert list(fig.data[0].y) == [2, 0, 1, 0, 1]


# --------------------------------------------------------------------------- run pages


def test_run_page_sections(evil_site: dict[str, bytes]) -> None:
    text = evil_site["run-01-file-script-alert-1-script-json.html"].decode()
    for section_id in ("warnings", "summary", "outcomes", "work", "percentiles", "cdfs", "timeline", "stages",
                       "slices", "metadata", "quality"):
        assert f'id="{section_id}"' in text, section_id
    assert "wasted (by non-success requests)" in text and ">4<" in text  # the timeout's 4 tokens
    assert "Goodput under the SLO" in text


def test_all_failed_run_renders_without_percentiles() -> None:
    run = run_from([{"start": 0, "end": 1, "status": "failed", "error": "boom"},
                    {"start": 1, "end": 2, "status": "rejected"}])
    files = build_site([run])
    text = files["run-01-run-json.html"].decode()
    assert "no values" in text and "boom" in text


def test_kv_section_with_a_diagnosis_when_records_have_admission_times() -> None:
    run = run_from(evil_records())
    kv = KvOptions(layers=32, kv_heads=8, head_dim=128, budget_gib=8, output_cap=200)
    files = build_site([run], SiteOptions(kv=kv))
    text = files["run-01-run-json.html"].decode()
    assert 'id="kv"' in text and "Evidence" in text and "experiment" in text
    assert ">131,072<" in text and ">65,536<" in text  # the spec: bytes per token, tokens in 8 GiB
    limit = re.search(r'Limit: <span class="verdict">(\w+)</span>', text)
    assert limit is not None and limit.group(1) in ("kv_memory", "queueing", "prefill", "decode", "none")
    assert f'<span class="verdict">{limit.group(1)}</span>' in files["index.html"].decode()


def test_kv_section_without_admission_times_still_gives_the_limit() -> None:
    rows = [{k: v for k, v in r.items() if k != "admitted"} for r in evil_records()]
    kv = KvOptions(layers=32, kv_heads=8, head_dim=128, budget_gib=8, output_cap=200)
    text = build_site([run_from(rows)], SiteOptions(kv=kv))["run-01-run-json.html"].decode()
    # without admitted times the verdict is the one the data supports, and it says what it cannot tell
    assert re.search(r'Limit: <span class="verdict">undetermined</span>', text)
    assert "without admitted times queue wait cannot be told from prefill" in text
    assert ">131,072<" in text and ">65,536<" in text
    # mean prompt ceil((100 + 50) / 2) = 75 + 200 reserved = 275 tokens: 65536 // 275 = 238 sequences
    assert ">275<" in text and ">238<" in text


def test_no_kv_section_without_a_shape(r1_r4: list[dict]) -> None:
    text = build_site([run_from(r1_r4)])["run-01-run-json.html"].decode()
    assert 'id="kv"' not in text


def test_kv_options_must_name_a_whole_shape() -> None:
    with pytest.raises(ValueError, match="--layers"):
        KvOptions(layers=32)


# --------------------------------------------------------------------------- folders


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_timing_run_folder(tmp_path: Path, r1_r4: list[dict]) -> None:
    folder = tmp_path / "tiny-run"
    folder.mkdir()
    write_jsonl(folder / "records.jsonl", evil_records())
    (folder / "metadata.json").write_text(json.dumps({
        "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "bytes_per_element": 2},
        "kv_budget_bytes": 8 * 2**30, "policy": "reserve", "torch": "2.13.0", "device": EVIL}))
    write_jsonl(folder / "steps.jsonl", [{"time_s": 0.1 * i, "active": i % 3, "waiting": 1, "kv_tokens": 10 * i}
                                         for i in range(50)])
    run = load_run(folder)
    assert run.kind == "timing run" and run.name == "tiny-run" and run.steps and len(run.steps) == 50
    text = build_site([run])["run-01-tiny-run.html"].decode()
    assert 'id="metadata"' in text and "2.13.0" in text and EVIL not in text
    assert 'id="steps"' in text and 'id="kv"' in text and ">131,072<" in text
    assert "admission policy</td><td>reserve<" in text
    # options win over the metadata
    text = build_site([run], SiteOptions(kv=KvOptions(policy="paged")))["run-01-tiny-run.html"].decode()
    assert "admission policy</td><td>paged<" in text


def test_simulation_folder_and_sweep_folder(tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    sim.mkdir()
    write_jsonl(sim / "records.jsonl", evil_records())
    write_jsonl(sim / "steps.jsonl", [{"time": 1.0, "active": 1}])
    assert load_run(sim).kind == "simulation"
    sweep = tmp_path / "sweep-out"
    sweep.mkdir()
    points = [{"rate": r, "offered": 100, "completed": 100 - r, "ttft_p95_s": 0.1 * r, "latency_p95_s": r}
              for r in (1, 2, 4)]
    (sweep / "sweep.json").write_text(json.dumps({"points": points, "capacity": 3.1}))
    run = load_run(sweep)
    assert run.kind == "sweep" and run.sweep_points == points
    files = build_site([load_run(sim), run])
    assert "sweep-02-sweep-out.html" in files
    index = files["index.html"].decode()
    assert 'href="sweep-02-sweep-out.html"' in index and 'id="sweeps"' in index
    sweep_text = files["sweep-02-sweep-out.html"].decode()
    assert 'class="figure-data"' in sweep_text and "ttft_p95_s" in sweep_text


def test_folder_without_records_or_sweep_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="found no records"):
        load_run(tmp_path)
    with pytest.raises(InputFormatError, match="no such file"):
        load_run(tmp_path / "missing")
    with pytest.raises(ConfigError, match="nothing to report"):
        build_site([])


# --------------------------------------------------------------------------- writing and zipping


def test_write_site_and_zip_hold_the_same_files(tmp_path: Path, r1_r4: list[dict]) -> None:
    files = build_site([run_from(r1_r4)])
    written = write_site(files, tmp_path / "site")
    assert sorted(p.relative_to(tmp_path / "site").as_posix() for p in written) == sorted(files)
    data = site_zip_bytes(files)
    assert data == site_zip_bytes(files)  # reproducible
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert sorted(zf.namelist()) == sorted(f"servebench-report/{k}" for k in files)
        assert zf.read("servebench-report/index.html") == files["index.html"]


# --------------------------------------------------------------------------- CLI


def test_cli_report_writes_a_site(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parent.parent / "sample_data"
    out = tmp_path / "site"
    result = CliRunner().invoke(app, ["report", str(sample / "r1_r4.json"), str(sample / "requests_sample.csv"),
                                      "-o", str(out), "--title", EVIL, "--slo-ttft", "1", "--zip",
                                      str(tmp_path / "site.zip"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["pages"] == ["index.html", "run-01-r1-r4-json.html", "run-02-requests-sample-csv.html"]
    assert (out / "assets" / "plotly.min.js").is_file() and (tmp_path / "site.zip").is_file()
    index = (out / "index.html").read_text()
    assert "goodput, requests/s" in index and EVIL not in index


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from servebench.cli.core import main

    for args in (["report", str(tmp_path / "nope"), "-o", str(tmp_path / "s")],
                 ["report", str(tmp_path), "-o", str(tmp_path / "s"), "--layers", "3"],
                 ["report", str(tmp_path), "-o", str(tmp_path / "s"), "--model", "no-such-model"]):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists()


def test_cli_report_help_documents_every_option() -> None:
    result = CliRunner().invoke(app, ["report", "--help"])
    assert result.exit_code == 0
    for opt in ("--out", "--title", "--slo-ttft", "--model", "--budget-gib", "--zip", "--json"):
        assert opt in result.output


# --------------------------------------------------------------------------- other producers


def test_foreign_export_shows_its_warnings_and_what_it_cannot_give() -> None:
    export = Path(__file__).resolve().parent / "data" / "importers" / "llmperf-individual.json"
    if not export.is_file():
        pytest.skip("the llmperf test export is not in this checkout")
    run = load_run(export)
    assert run.warnings and run.format == "llmperf"
    files = build_site([run], SiteOptions(slo=SLO(ttft_s=1.0)))
    page = next(v.decode() for k, v in files.items() if k.startswith("run-01"))
    visible = "".join(parse(page).text)
    assert 'id="warnings"' in page and run.warnings[0] in visible
    assert "not available" in visible and "records (llmperf export)" in visible
    index = "".join(parse(files["index.html"].decode()).text)
    assert index.count("not available") >= 4  # two contract rates, window, peak active, goodput


def test_simulated_profile_b_folder_is_diagnosed_kv_memory(tmp_path: Path) -> None:
    from servebench.records.loaders import write_records
    from servebench.serving.scenario import load_scenario
    from servebench.serving.simulate import simulate

    scenario = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "profile_b.yaml"
    result = simulate(load_scenario(scenario))
    folder = tmp_path / "profile_b"
    folder.mkdir()
    write_records(result.records, folder / "records.jsonl")
    write_jsonl(folder / "steps.jsonl", result.trace.to_rows())
    (folder / "scenario.yaml").write_text(scenario.read_text())
    run = load_run(folder)
    assert run.kind == "simulation" and "scenario.yaml" in run.files
    files = build_site([run])
    page = files["run-01-profile-b.html"].decode()
    # shape, 8 GiB and the reserve policy come from the scenario; the spec's numbers follow
    assert '<span class="verdict">kv_memory</span>' in page and ">8,000<" in page
    assert re.search(r"max concurrent sequences</td><td[^>]*>8<", page)
    assert '<span class="verdict">kv_memory</span>' in files["index.html"].decode()
    assert 'id="steps"' in page


def test_sweep_json_from_servebench_sweep_uses_its_figures(tmp_path: Path) -> None:
    from servebench.serving.scenario import load_scenario
    from servebench.serving.sweep import sweep

    scenario = load_scenario(Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "profile_a.yaml")
    result = sweep(scenario, [0.5, 2.0], slo=SLO(ttft_s=2.0), requests=60, search=False)
    folder = tmp_path / "sweep-a"
    folder.mkdir()
    (folder / "sweep.json").write_text(result.model_dump_json(indent=2))
    run = load_run(folder)
    assert run.kind == "sweep" and len(run.sweep_points or []) == 2
    page = build_site([run])["sweep-01-sweep-a.html"].decode()
    figures = [json.loads(b) for b in parse(page).script_bodies if b.strip()]
    titles = [f["layout"]["title"]["text"] for f in figures]
    assert any("latency and TTFT against offered load" in t for t in titles), titles
    assert any("offered vs completed vs rejected" in t for t in titles), titles
    assert "ttft_s p95" in page and 'id="settings"' in page and "capacity" in page


def test_sweep_files_themselves_are_runs(tmp_path: Path) -> None:
    from servebench.serving.scenario import load_scenario
    from servebench.serving.sweep import sweep, sweep_csv

    scenario = load_scenario(Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "profile_a.yaml")
    result = sweep(scenario, [0.5, 2.0], slo=SLO(ttft_s=2.0), requests=40, search=False)
    folder = tmp_path / "sw"
    folder.mkdir()
    (folder / "sweep.json").write_text(result.model_dump_json())
    (tmp_path / "renamed.csv").write_text(sweep_csv(result))
    by_name = load_run(folder / "sweep.json")  # the file `servebench sweep` says it wrote
    assert by_name.kind == "sweep" and by_name.name == "sw" and len(by_name.sweep_points or []) == 2
    by_content = load_run(tmp_path / "renamed.csv")
    assert by_content.kind == "sweep" and len(by_content.sweep_points or []) == 2
    (tmp_path / "junk.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputFormatError, match="missing columns"):
        load_run(tmp_path / "junk.csv")  # neither records nor a sweep: the records error stands


def test_multi_run_export_gives_one_run_per_benchmark_unless_one_is_named() -> None:
    from servebench.output.site import load_runs

    data = Path(__file__).resolve().parent / "data" / "importers"
    runs = load_runs(data / "vllm-append-result.json")
    assert [r.name for r in runs] == ["vllm-append-result.json [run 0]", "vllm-append-result.json [run 1]"]
    assert [r.metadata["run_index"] for r in runs] == [0, 1]  # type: ignore[index]
    assert len({len(r.table) for r in runs}) == 2  # type: ignore[arg-type]  # two different result lines
    (one,) = load_runs(data / "vllm-append-result.json", "vllm:run=1")
    assert one.metadata["run_index"] == 1  # type: ignore[index]
    assert len(one.table) == len(runs[1].table)  # type: ignore[arg-type]
    assert [r.name for r in load_runs(data / "llmperf-individual.json")] == ["llmperf-individual.json"]


def test_rows_from_bytes_reads_csv_json_jsonl_and_names_the_bad_line() -> None:
    from servebench.records.rows import rows_from_bytes

    assert rows_from_bytes(b"a,b\n1,x\n2.5,\n", "t.csv") == [{"a": 1, "b": "x"}, {"a": 2.5, "b": None}]
    assert rows_from_bytes(b'{"steps": [{"a": 1}]}', "t.json") == [{"a": 1}]
    assert rows_from_bytes(b'{"a": 1}\n\n{"a": 2}\n', "trace.txt") == [{"a": 1}, {"a": 2}]  # JSONL by shape
    with pytest.raises(InputFormatError, match=r"t.jsonl: line 2: invalid JSON"):
        rows_from_bytes(b'{"a": 1}\n{"a": \n', "t.jsonl")
    with pytest.raises(InputFormatError, match=r"t.jsonl: line 1: expected a JSON object, got list"):
        rows_from_bytes(b"[1, 2]\n", "t.jsonl")
    with pytest.raises(InputFormatError, match=r"t.csv: not UTF-8 text \(byte 0xff at offset 0\)"):
        rows_from_bytes(b"\xff\xfe", "t.csv")


def test_simulate_folder_with_its_summary(tmp_path: Path) -> None:
    folder = tmp_path / "sim-out"
    folder.mkdir()
    write_jsonl(folder / "records.jsonl", evil_records())
    write_jsonl(folder / "steps.jsonl", [{"time": 0.5 * i, "duration": 0.5, "active": i % 3, "waiting": i % 2,
                                          "kv_tokens_used": 100 * (i % 3)} for i in range(20)])
    (folder / "summary.json").write_text(json.dumps({"simulation": {"scenario": "x", "kv_budget_tokens": 400},
                                                     "report": {"huge": "not shown"}}))
    run = load_run(folder)
    assert run.kind == "simulation" and run.metadata == {"simulation": {"scenario": "x", "kv_budget_tokens": 400}}
    page = build_site([run])["run-01-sim-out.html"].decode()
    steps = [json.loads(b) for b in parse(page).script_bodies if b.strip() and "Engine over time" in b]
    assert len(steps) == 1  # figures.sweep.trace_over_time, with the budget line
    assert any(s.get("y0") == 400 for s in steps[0]["layout"].get("shapes", []))


def test_index_chart_bars_are_the_reports_percentiles(r1_r4: list[dict]) -> None:
    index = build_site([run_from(r1_r4, "a.json"), run_from(r1_r4[:2], "b.json")])["index.html"].decode()
    fig = json.loads(next(b for b in parse(index).script_bodies if b.strip()))
    bars = {(t["name"], t["xaxis"]): t["y"] for t in fig["data"]}
    assert bars[("p95", "x")] == [2.5, 2.5]  # latency p95 of R1, R2 by nearest rank
    assert bars[("p50", "x2")] == [0.25, 0.25]  # TTFT p50: R2's 0.25 s
    assert bars[("p99", "x3")] == [0.25, 0.25]  # request TPOT: R1 alone, (2.5 - 0.5) / 8


def test_report_zip_bytes_is_the_zipped_site(r1_r4: list[dict]) -> None:
    from servebench.output.site import report_zip_bytes

    runs = [run_from(r1_r4)]
    assert report_zip_bytes(runs) == site_zip_bytes(build_site(runs))


def test_load_run_folder_is_named_by_its_metadata(tmp_path: Path) -> None:
    folder = tmp_path / "load"
    folder.mkdir()
    write_jsonl(folder / "records.jsonl", evil_records())
    write_jsonl(folder / "sends.jsonl", [{"request_id": "r2", "lag_s": 0.001}])
    (folder / "metadata.json").write_text(json.dumps({"kind": "servebench load",
                                                      "endpoint": {"url": "http://127.0.0.1:8000"}}))
    run = load_run(folder)
    assert run.kind == "load run" and run.steps is None
    page = build_site([run])["run-01-load.html"].decode()
    assert "Run metadata" in page and "http://127.0.0.1:8000" in page
    tags = parse(page)
    assert not any(re.match(r"https?:", (t.get("href") or "")) for t in tags.links)
