"""Every module path the README and docs name exists, so a reorganisation cannot leave them stale."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "sample_data" / "README.md"]
# servebench/records/rundir.py or servebench.records.loaders.read_bytes; not an HTTP path (/servebench/engine)
REFERENCE = re.compile(r"(?<![/\w])servebench(?:/[A-Za-z_]+)+(?:\.py)?|(?<![/\w])servebench(?:\.[A-Za-z_]+)+")
ASSETS = {"servebench.js", "servebench.css"}  # the report site's own files


def _resolves(ref: str) -> bool:
    if "/" in ref:
        return (REPO / ref).exists() or (REPO / ref).with_suffix(".py").exists()
    parts = ref.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for name in parts[k:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _references() -> list[tuple[str, int, str]]:
    found = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            found += [(doc.name, i, m.group().rstrip(".")) for m in REFERENCE.finditer(line)
                      if m.group().rstrip(".") not in ASSETS]
    return found


def test_the_docs_name_modules_at_all() -> None:
    refs = {r for _, _, r in _references()}
    assert "servebench.records.loaders" in refs and "servebench/records/rundir.py" in refs


@pytest.mark.parametrize(("doc", "line", "ref"), _references())
def test_every_module_path_in_the_docs_exists(doc: str, line: int, ref: str) -> None:
    assert _resolves(ref), f"{doc}, line {line}: {ref} does not exist"
