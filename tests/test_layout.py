"""The package's shape: few root modules, domain packages in layers, and no import cycles (lazy imports too)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "servebench"
LAYERS = ("errors", "formatting", "records", "capacity", "analysis", "serving", "load", "planning", "output", "dashboard", "cli")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of servebench by dotted name, and whether it is a package's ``__init__``."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(modules: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Module -> the servebench modules it imports anywhere in its body (functions included)."""
    edges: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    targets.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        targets = {t for t in targets if t in modules and t != name}
        for target in list(targets):  # importing a.b.c runs a/__init__ and a/b/__init__ first
            parts = target.split(".")
            targets.update(".".join(parts[:i]) for i in range(2, len(parts))
                           if not name.startswith(".".join(parts[:i]) + "."))
        edges[name] = targets - {name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_lazy_imports_included() -> None:
    assert _cycles(_imports(_modules())) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_at_most_eight_modules_at_the_package_root() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(root) <= 8, root


def test_packages_import_only_from_their_own_layer_or_below() -> None:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upward = []
    for module, targets in _imports(_modules()).items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in rank:
            continue
        for target in targets:
            layer = target.split(".")[1] if target.count(".") else None
            if layer in rank and rank[layer] > rank[parts[1]]:
                upward.append(f"{module} -> {target}")
    assert upward == []
