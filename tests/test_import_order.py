"""The direction of imports DESIGN.md agrees on, read from the source (every import statement, those inside functions
too; nothing is imported): cli -> launch -> pipelines -> workers -> backends/rewards/data/models -> algo, spec under
all of them; planning imported by cli and launch alone; importers by cli alone; no cycle between packages.

A package is a folder of rlhf/ or one of its top-level modules; a package imports only those on a lower floor (or
its own). Backends reached by their registry lines (``module:attr`` strings, rlhf.spec.registry) are not imports: that
is how spec asks a backend's descriptor for its rules without naming it."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import rlhf

PACKAGE = Path(rlhf.__file__).parent

# Top to bottom. A package may import the packages of any floor below its own, and the siblings of its floor where
# named in SIBLINGS; the cycle check covers the rest.
FLOORS: list[set[str]] = [
    {"cli", "api"},  # the entry points: the commands and rlhf.run
    {"importers", "launch"},  # peers' commands -> recipes; the executors (Ray, local)
    {"planning"},  # plan, memory, cost, --auto, preflight: no Ray, no torch
    {"pipelines"},  # the run lifecycle and the loops
    {"workers"},  # the role actors that are not a backend's
    # the backends (one folder each, and what engines share), rewards, data, models, and their neighbours
    {"backends", "rewards", "data", "models", "agents", "tracking", "serve", "compat", "run_files"},
    {"algo"},  # pure tensor math
    {"spec"},  # the typed spec, imported by all
    {"errors", "faults", "waits", "futures", "atomic_save", "filescan"},  # the shared standard-library helpers
]
# Who may import a package, where fewer than every floor above it may.
ONLY_FROM = {"importers": {"cli"}, "planning": {"cli", "api", "launch"}}
# Sibling imports on one floor that the layout wants (each one way; a cycle fails the cycle check).
SIBLINGS = {
    ("backends", "models"),
    ("agents", "backends"),  # an agent's sampling speaks the rollout contract's types
    ("agents", "serve"),  # the agent server's request limits
    ("agents", "compat"),
    ("rewards", "compat"),  # OpenRLHF's stand-ins for a user's file
    ("serve", "models"),
    ("run_files", "models"),
    ("errors", "faults"),
    ("atomic_save", "faults"),
    ("atomic_save", "errors"),
    ("waits", "errors"),
    ("waits", "futures"),
}
FLOOR = {name: i for i, floor in enumerate(FLOORS) for name in floor}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(module, line)`` of each rlhf module ``path`` imports (``from rlhf.x import y``: rlhf.x.y when y is a
    module, else rlhf.x)."""
    here, out = _module(path), []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "rlhf"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + (path.name == "__init__.py")]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "rlhf":
                continue
            subs = [f"{module}.{a.name}" for a in node.names if _exists(f"{module}.{a.name}")]
            out += [(s, node.lineno) for s in subs] or [(module, node.lineno)]
    return out


def _exists(module: str) -> bool:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _package(module: str) -> str | None:
    """The package a module belongs to (None for the root ``rlhf``, whose __init__ only defers to rlhf.api)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        a = _package(_module(path))
        for target, line in _imports(path):
            b = _package(target)
            if a and b and a != b:
                edges[(a, b)].append(f"{path.relative_to(PACKAGE)}:{line} imports {target}")
    return edges


def test_every_package_has_a_floor():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert packages | modules == set(FLOOR), "give each package a floor in FLOORS (DESIGN.md's order)"


def test_no_package_imports_one_above_it_or_beside_it_unless_agreed():
    wrong = []
    for (a, b), where in sorted(_edges().items()):
        if a in ONLY_FROM.get(b, {a}) and (FLOOR[b] > FLOOR[a] or (a, b) in SIBLINGS):
            continue
        why = f"only {sorted(ONLY_FROM[b])} import {b}" if a not in ONLY_FROM.get(b, {a}) else "against the order"
        wrong.append(f"{a} -> {b} ({why}): " + "; ".join(where[:3]))
    assert wrong == [], "\n".join(wrong)


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in _edges():
        graph[a].add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            n = todo.pop()
            if n == goal:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(graph.get(n, ()))
        return False

    cycles = sorted(f"{a} <-> {b}" for a in list(graph) for b in graph[a] if reaches(b, a))
    assert cycles == []


def test_the_check_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """The lazy imports count: a cycle hidden in a function body is still a cycle between packages."""
    pkg = tmp_path / "rlhf" / "algo"
    pkg.mkdir(parents=True)
    (tmp_path / "rlhf" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "loss.py").write_text("def f():\n    from rlhf.pipelines import rl\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "rlhf")
    assert _imports(pkg / "loss.py") == [("rlhf.pipelines", 2)]
