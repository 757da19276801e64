"""pyproject.toml declares what the shipped code needs, and only that: every third-party module imported anywhere in
rlhf/ or hydra_plugins/ (at the top of a file or inside a function) comes from a declared package (a core dependency,
or an extra for the optional backends), and every core dependency is imported by that code, or named with the library
call that needs it."""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (CI's); the check reads the file, not installed metadata

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("rlhf", "hydra_plugins")  # the wheel's code (tests/, bench/ and scripts/ are not installed)
# Core dependencies no shipped file imports, each needed by a library call of ours that the library does not make
# a requirement of its own (pyproject.toml says the same beside each).
NEEDED_BY_A_CALL = {
    "accelerate": "transformers.integrations.HfDeepSpeedConfig (ZeRO-3 loading) subclasses accelerate's",
}


def _normalized(name: str) -> str:
    """PEP 503's form of a distribution name (``Math_Verify`` -> ``math-verify``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalized(re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0])


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_requirement_name(r) for r in project["dependencies"]}
    extras = {_requirement_name(r) for reqs in project.get("optional-dependencies", {}).values() for r in reqs}
    return core, extras


def _imported_modules() -> dict[str, set[str]]:
    """Top-level third-party module -> the shipped files importing it."""
    found: dict[str, set[str]] = defaultdict(set)
    for top in SHIPPED:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    root = module.split(".")[0]
                    if root not in sys.stdlib_module_names and root not in SHIPPED:
                        found[root].add(str(path.relative_to(ROOT)))
    return found


@cache
def _module_distributions() -> dict[str, list[str]]:
    return packages_distributions()  # reads every installed distribution's file list: once


def _distributions(module: str) -> set[str]:
    """The installed distributions providing top-level ``module``; a module not installed here (vllm lives in its
    own venv) is taken to come from the distribution of its own name."""
    return {_normalized(d) for d in _module_distributions().get(module, [])} or {_normalized(module)}


def test_every_imported_third_party_module_comes_from_a_declared_package():
    core, extras = _declared()
    undeclared = {
        module: sorted(files)
        for module, files in _imported_modules().items()
        if not _distributions(module) & (core | extras)
    }
    assert not undeclared, (
        f"imported but not declared in pyproject.toml (add them to [project] dependencies, or to an extra): "
        f"{undeclared}"
    )


def test_every_core_dependency_is_imported_by_the_shipped_code():
    core, _ = _declared()
    provided = set().union(*(_distributions(m) for m in _imported_modules()))
    unused = sorted(core - provided - set(NEEDED_BY_A_CALL))
    assert not unused, f"declared in pyproject.toml but imported nowhere in {', '.join(SHIPPED)}/: {unused}"
