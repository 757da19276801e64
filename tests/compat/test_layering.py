"""The two products that used to share rlhf/compat/ each sit where the direction of imports wants them: the runtime
OpenRLHF fallback low (rewards, agents and the preflight import it), the command converters in rlhf/importers/ (a
package of their own, imported by cli alone; writing and checking a converted recipe is cli's). Read statically:
nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import rlhf

PACKAGE = Path(rlhf.__file__).parent


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _modules_under(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def test_nothing_below_cli_imports_cli():
    below = [p for p in PACKAGE.rglob("*.py") if (PACKAGE / "cli") not in p.parents]
    offenders = {
        str(p.relative_to(PACKAGE)): sorted(m for m in _imports(p) if m == "rlhf.cli" or m.startswith("rlhf.cli."))
        for p in below
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_runtime_fallback_entry_imports_only_the_shared_errors():
    # What rewards/, agents/ and the preflight import; the stand-ins it serves (openrlhf_math here,
    # rlhf.agents.openrlhf_single_turn with the agents) are named as strings in its table and loaded only when a user
    # file asks for one of their names.
    ours = {m for m in _imports(PACKAGE / "compat" / "openrlhf.py") if m.startswith("rlhf.")}
    assert ours == {"rlhf.errors", "rlhf.errors.UserError"}


def test_the_converters_are_a_package_of_their_own_imported_by_cli_alone():
    assert not [p.name for p in _modules_under("compat") if "convert" in p.name or p.name == "shell.py"]
    assert (PACKAGE / "importers" / "openrlhf" / "verb.py").is_file()
    importers = {
        str(p.relative_to(PACKAGE)): sorted(m for m in _imports(p) if m.startswith("rlhf.importers"))
        for p in PACKAGE.rglob("*.py")
        if (PACKAGE / "importers") not in p.parents and (PACKAGE / "cli") not in p.parents
    }
    assert {k: v for k, v in importers.items() if v} == {}


def test_compat_imports_nothing_of_the_packages_that_import_it():
    """rewards/ and agents/ import compat; compat names their stand-ins as strings, never imports them (the cycle
    agents <-> compat is gone: OpenRLHF's single-turn executor lives with the agents)."""
    found = {
        str(p.relative_to(PACKAGE)): sorted(m for m in _imports(p) if m.startswith(("rlhf.agents", "rlhf.rewards")))
        for p in _modules_under("compat")
    }
    assert {k: v for k, v in found.items() if v} == {}
