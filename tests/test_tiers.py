"""The test tiers: a test is marked by what it starts, and the fast selection leaves those out (tests/tiers.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tiers import TIERS, tiers_of


def _engine_helper() -> None:
    from servebench.serving.engine.service import EngineService
    EngineService("tiny")


def _uses_helper() -> None:
    _engine_helper()


def _pure() -> None:
    assert sum([1, 2]) == 3


def _server_fixture() -> None:
    from asgi_server import serve_in_background  # noqa: F401


def _spawns() -> None:
    import subprocess
    subprocess.run(["true"], check=True)


def test_a_test_is_marked_by_what_it_or_its_helpers_and_fixtures_start() -> None:
    assert tiers_of(_pure) == set()
    assert tiers_of(_engine_helper) == {"engine"}
    assert tiers_of(_uses_helper) == {"engine"}  # through a helper of its own module
    assert tiers_of(_pure, [_server_fixture]) == {"server"}  # through a fixture
    assert tiers_of(_spawns) == {"process"}


def test_every_tier_is_a_registered_marker() -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    registered = {m.split(":")[0] for m in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(TIERS) | {"slow", "browser"} <= registered


def test_every_measured_slow_test_still_exists() -> None:
    # a renamed or removed test would leave its name in SLOW doing nothing
    import ast

    from tiers import SLOW

    root = Path(__file__).resolve().parent.parent
    for nodeid in SLOW:
        path, name = nodeid.split("::")
        tree = ast.parse((root / path).read_text())
        assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, nodeid
