"""servebench.serving.native and .compiled: the compiled scheduler and event loop give the Python's results to the bit,
and are used only when built for the sources on disk.

The rest of the suite runs the Python (conftest sets SERVEBENCH_NATIVE=0); here each scenario is simulated in two
child processes, one with the compiled modules and one without, and their records (token times included), step
traces and counts are compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servebench.serving import compiled

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "sample_data" / "scenarios"

_CHILD = """
import hashlib, json, sys
from servebench.serving import compiled
from servebench.serving.fleet import FleetSpec, simulate_scenario
from servebench.serving.scenario import load_scenario, with_request_count
path, n, router = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sc = with_request_count(load_scenario(path), n)
if router != "-":
    sc = sc.model_copy(update={"fleet": FleetSpec(replicas=3, router=router)})
r = simulate_scenario(sc)
digest = hashlib.sha256()
for row in r.records.to_dicts():
    digest.update(json.dumps(row, sort_keys=True, default=repr).encode())
for row in r.trace.to_rows():
    digest.update(json.dumps(row, sort_keys=True, default=repr).encode())
print(json.dumps({"compiled": compiled.active(), "records": len(r.records), "digest": digest.hexdigest(),
                  "events": int(r.events), "engine_steps": int(r.engine_steps), "preemptions": int(r.preemptions)}))
"""

CASES = [("paged_chat.yaml", 1500, "-"), ("profile_b.yaml", 400, "-"), ("retry_storm.yaml", 400, "-"),
         ("two_tenants.yaml", 400, "-"), ("prefix_cache.yaml", 400, "-"), ("prefill_interference.yaml", 400, "-"),
         ("mixed_hint_review.yaml", 400, "-"), ("paged_chat.yaml", 900, "least_outstanding"),
         ("prefix_cache.yaml", 400, "prefix_affinity")]


def _run(case: tuple[str, int, str], native: bool) -> dict[str, object]:
    name, n, router = case
    env = {**os.environ, compiled.OFF_ENV: "1" if native else "0"}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(SCENARIOS / name), str(n), router], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_build = pytest.mark.skipif(not compiled.built_for(),
                                 reason="no compiled build for these sources: ./dev.sh native (needs a C compiler)")


@needs_build
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{c}-{r}" for n, c, r in CASES])
def test_the_compiled_simulator_gives_the_pythons_records_and_trace_to_the_bit(case: tuple[str, int, str]) -> None:
    fast, plain = _run(case, native=True), _run(case, native=False)
    assert fast["compiled"] is True and plain["compiled"] is False
    assert fast == {**plain, "compiled": True}


def test_a_build_is_used_only_for_the_sources_it_was_built_from(tmp_path: Path) -> None:
    folder, native = tmp_path / "serving", tmp_path / "serving" / "_native"
    native.mkdir(parents=True)
    for module in compiled.MODULES:
        (folder / f"{module}.py").write_text(f"# {module}\n")
    assert not compiled.built_for(native, folder)  # no stamp: no build
    (native / compiled.STAMP).write_text(json.dumps(compiled.build_stamp(folder)))
    assert compiled.built_for(native, folder)
    (folder / f"{compiled.MODULES[0]}.py").write_text("# edited after the build\n")
    assert not compiled.built_for(native, folder)  # an edited source is never shadowed by an older build
    (native / compiled.STAMP).write_text("not json")
    assert not compiled.built_for(native, folder)


def test_the_suite_runs_the_python_it_reads() -> None:
    assert os.environ.get(compiled.OFF_ENV) == "0" and not compiled.active()


def test_building_without_mypy_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    from servebench.errors import ConfigError
    from servebench.serving import native

    monkeypatch.setitem(sys.modules, "mypyc", None)  # as if mypy were not installed
    with pytest.raises(ConfigError, match="needs mypyc: pip install mypy"):
        native.build(tmp_path / "_native")
    assert not (tmp_path / "_native").exists()
