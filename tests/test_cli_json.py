"""Every command's ``--json`` is strict JSON: no NaN or Infinity tokens, even when requests fail.

The rule (``servebench.output.strict_json``): +/-infinity is the string "Infinity"/"-Infinity", NaN is null.
Each command runs through its real entry point and its stdout goes through a parser that refuses
the non-standard tokens Python's ``json`` module would otherwise accept.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from conftest import SAMPLE_DATA
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import stop
from pydantic import BaseModel, ConfigDict

from servebench.output.strict_json import dumps, jsonable


def _refuse(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


def strict_loads(text: str) -> Any:
    """Parse JSON as any strict parser would: NaN, Infinity and -Infinity are errors."""
    return json.loads(text, parse_constant=_refuse)


def run_strict(*args: str, timeout_s: float = 300) -> Any:
    """Run ``servebench ARGS``; return its stdout parsed strictly."""
    res = subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True,
                         timeout=timeout_s)
    assert res.returncode == 0, f"servebench {' '.join(args)}: exit {res.returncode}: {res.stderr[-2000:]}"
    return strict_loads(res.stdout)


def run_json(*args: str, timeout_s: float = 300) -> Any:
    """Run ``servebench ARGS --json``; return its stdout parsed strictly."""
    return run_strict(*args, "--json", timeout_s=timeout_s)


def strings_equal_to(doc: Any, value: str) -> int:
    """Count the strings equal to ``value`` anywhere in a parsed document."""
    if isinstance(doc, dict):
        return sum(strings_equal_to(v, value) for v in doc.values())
    if isinstance(doc, list):
        return sum(strings_equal_to(v, value) for v in doc)
    return int(doc == value)


def non_success(doc: dict) -> int:
    return sum(n for status, n in doc["by_status"].items() if status != "success")


# ---------------------------------------------------------------- the helper itself

class _Percentile(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="strings")
    value: float | None


def test_infinity_is_a_string_and_nan_is_null() -> None:
    data = {"p99": math.inf, "low": -math.inf, "mean": math.nan, "n": np.int64(3), "x": np.float64(0.5),
            "arr": np.array([1.0, np.inf, np.nan]), "ok": np.bool_(True), "t": (1, 2), "m": _Percentile(value=math.inf)}
    assert jsonable(data) == {"p99": "Infinity", "low": "-Infinity", "mean": None, "n": 3, "x": 0.5,
                              "arr": [1.0, "Infinity", None], "ok": True, "t": [1, 2], "m": {"value": "Infinity"}}
    assert strict_loads(dumps(data))["m"] == {"value": "Infinity"}


def test_a_model_dumped_in_json_mode_keeps_infinity_as_a_string() -> None:
    # pydantic's model_dump(mode="json") leaves inf a float: the cause of `servebench run --json` crashing
    assert math.isinf(_Percentile(value=math.inf).model_dump(mode="json")["value"])
    assert strict_loads(dumps({"report": _Percentile(value=math.inf).model_dump(mode="json")})) == \
        {"report": {"value": "Infinity"}}


def test_an_unknown_object_is_refused() -> None:
    with pytest.raises(TypeError, match="object"):
        dumps({"x": object()})


_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=5))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.recursive(_leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                         max_size=4), max_leaves=20))
def test_any_nesting_of_floats_dumps_strictly(doc: Any) -> None:
    back = strict_loads(dumps(doc))

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and math.isnan(a):
            return b is None
        if isinstance(a, float) and math.isinf(a):
            return b == ("Infinity" if a > 0 else "-Infinity")
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    assert same(doc, back)


# ---------------------------------------------------------------- commands on files

def test_schema_summarize_kv_diagnose(tmp_path: Path) -> None:
    assert run_strict("schema")["additionalProperties"] is False  # always JSON: no --json flag
    doc = run_json("summarize", str(SAMPLE_DATA / "r1_r4.json"), "--window-start", "0", "--window-end", "10")
    assert non_success(doc) == 2 and strings_equal_to(doc, "Infinity") >= 1
    kv = run_json("kv", "--model", "llama-3.1-8b", "--budget-gib", "8", "--prompt-tokens", "7800", "--output-cap", "200")
    assert kv["bytes_per_token"] == 131_072
    assert len(run_json("kv", "--list-models")) >= 11
    profiles = run_json("diagnose", str(SAMPLE_DATA / "profiles_ab.json"))
    assert profiles["input"] == "profile table" and len(profiles["profiles"]) == 2
    # timing records where every request failed: percentiles have no data, failure-aware ones are infinite
    failed = tmp_path / "all_failed.csv"
    failed.write_text("start,admitted,end,status,output_tokens\n0,0.5,2,timeout,3\n1,1.5,3,failed,0\n2,,2,rejected,\n")
    assert run_json("summarize", str(failed))["summary"]["success_latency_p95_s"] is None
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("start,admitted,first_token,end,status,output_tokens\n0,0.1,0.5,2,success,20\n"
                     "1,1.5,,3,timeout,3\n2,,,2,rejected,\n")
    assert run_json("diagnose", str(mixed))["input"] == "records"


def _tight_scenario(tmp_path: Path) -> Path:
    """The profile-B scenario with a short deadline and a short queue: timeouts and rejections."""
    sc = yaml.safe_load((SAMPLE_DATA / "scenarios" / "profile_b.yaml").read_text())
    sc["server"].update(timeout_s=20, max_waiting=2)
    sc["workload"]["num_requests"] = 40
    sc["workload"].pop("duration_s", None)
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


def test_simulate_and_sweep_with_failures(tmp_path: Path) -> None:
    scenario = _tight_scenario(tmp_path)
    doc = run_json("simulate", str(scenario), "-o", str(tmp_path / "sim"))
    assert non_success(doc["report"]) > 0 and strings_equal_to(doc["report"], "Infinity") >= 1
    assert strict_loads((tmp_path / "sim" / "summary.json").read_text()) == doc  # the file is what --json prints
    sweep = run_json("sweep", str(scenario), "-o", str(tmp_path / "sweep"), "--rates", "0.5,3", "--requests", "40",
                     "--slo-ttft", "5", "--no-search")
    assert len(sweep["points"]) == 2
    assert sweep["points"][-1]["rejected"] + sweep["points"][-1]["timed_out"] > 0  # the overloaded point
    run_json("report", str(tmp_path / "sim"), "-o", str(tmp_path / "site"))


# ---------------------------------------------------------------- a real timing run where requests fail

@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A tiny CPU timing run: short requests succeed, 200-token ones cannot meet their 50 ms deadline."""
    d = tmp_path_factory.mktemp("failing_run")
    sc = yaml.safe_load((SAMPLE_DATA / "scenarios" / "tiny_cpu.yaml").read_text())
    sc["server"].update(timeout_s=10)
    prompt = {"kind": "uniform", "low": 16, "high": 64}
    sc["workload"] = {"arrival": {"kind": "poisson", "rate_rps": 40}, "num_requests": 12,
                      "classes": [{"name": "short", "prompt": prompt, "output": {"kind": "fixed", "value": 3}},
                                  {"name": "long", "prompt": prompt, "output": {"kind": "fixed", "value": 200},
                                   "timeout_s": 0.05}]}
    scenario = d / "failing.yaml"
    scenario.write_text(yaml.safe_dump(sc))
    doc = run_json("run", str(scenario), "-o", str(d / "run"), "--model", "tiny", "--device", "cpu", "--threads", "1",
                   "--warmup-steps", "1")
    return d / "run", doc


@pytest.mark.slow
def test_run_json_with_failed_requests(failing_run: tuple[Path, Any]) -> None:
    _, doc = failing_run
    assert non_success(doc["report"]) > 0 and doc["report"]["by_status"]["success"] > 0
    assert strings_equal_to(doc["report"]["failure_aware_latency_s"], "Infinity") >= 1


@pytest.mark.slow
def test_validate_fit_steps_summarize_diagnose_on_the_run(failing_run: tuple[Path, Any]) -> None:
    run_dir, _ = failing_run
    assert "comparisons" in run_json("validate", str(run_dir), "--allow-poor-fit")
    assert run_json("fit-steps", str(run_dir / "steps.jsonl"))["steps"] > 0
    assert non_success(run_json("summarize", str(run_dir))) > 0
    assert run_json("diagnose", str(run_dir / "records.jsonl"))["input"] == "records"


# ---------------------------------------------------------------- serve-engine and load over loopback

def _read_json_object(proc: subprocess.Popen, timeout_s: float) -> str:
    """Read an indented JSON object (up to a closing brace in column 0) from a child's stdout."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.rstrip("\n") == "}":
            return "".join(lines)
    raise AssertionError(f"serve-engine printed no JSON object: {''.join(lines)!r}")


def _wait_until_serving(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


@pytest.mark.slow
def test_serve_engine_and_load_with_failures(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "servebench", "serve-engine", "--preset", "tiny", "--port", "0",
                             "--device", "cpu", "--threads", "1", "--max-num-seqs", "2", "--max-waiting", "1", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        info = strict_loads(_read_json_object(proc, 120))
        assert info["url"].startswith("http://127.0.0.1:") and info["max_waiting"] == 1
        _wait_until_serving(info["url"], 60)
        # 200 tokens each against a 50 ms client deadline, 10 arriving at once into a one-request queue
        doc = run_json("load", info["url"], "-o", str(tmp_path / "load"), "--rate", "200", "--arrival", "constant",
                       "--requests", "10", "--prompt-tokens", "16", "--output-tokens", "200", "--deadline", "0.05")
    finally:
        stop(proc)
    assert non_success(doc) > 0
    assert strings_equal_to(doc["failure_aware_latency_s"], "Infinity") >= 1
