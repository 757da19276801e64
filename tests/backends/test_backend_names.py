"""A backend is one folder (rlhf/backends/<axis>/<name>/), and nothing outside its folder and the registry compares
its config string or keys a table by it: the planner, the launcher, the CLI and the spec ask the backend's
descriptor (rlhf.backends.contract.training.TrainBackend, rlhf.backends.contract.rollout.RolloutBackend) or its
registry line, so a new
backend is validated, priced, searched and launched without an edit elsewhere. Read statically from the source:
nothing is imported but the registry."""

from __future__ import annotations

import ast
from pathlib import Path

import rlhf
from rlhf.spec.registry import ROLLOUT_BACKENDS, TRAIN_BACKENDS, Backend

PACKAGE = Path(rlhf.__file__).parent
# The backends of rlhf itself (a plug-in's lines, registered through entry points, name modules outside the package).
AXES = {
    "train": {n: b for n, b in TRAIN_BACKENDS.items() if b.target.startswith("rlhf.")},
    "rollout": {n: b for n, b in ROLLOUT_BACKENDS.items() if b.target.startswith("rlhf.")},
}
NAMES = set(AXES["train"]) | set(AXES["rollout"])


def _folder(reference: str) -> str:
    """The folder of the module a registry line names (``module:attr``), relative to the package."""
    module = reference.split(":")[0].removeprefix("rlhf.")
    return str((PACKAGE / module.replace(".", "/")).parent.relative_to(PACKAGE))


def _owner(line: Backend) -> str:
    """The folder that holds a backend (its descriptor's), relative to the package (e.g. backends/rollout/hf)."""
    return _folder(line.target)


# A backend's own files: its folder, all of it.
OWN = {_owner(line) for table in AXES.values() for line in table.values()}
# Peers' commands name peers' backends (veRL's rollout.name=vllm, TRL's distributed type), not ours.
PEERS = ("importers/",)


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(e) for e in node.elts)) if node.elts else set()
    return set()


def _comparisons(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line: comparison`` for each comparison of something named like a backend with a backend's name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = set().union(*(_strings(s) for s in sides)) & NAMES
        others = [ast.unparse(s) for s in sides if not _strings(s)]
        if named and any("backend" in o for o in others):
            out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return out


def _mine(rel: str) -> bool:
    return any(rel.startswith(own + "/") for own in OWN) or rel.startswith(PEERS)


def _tables(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line: key`` for each table (a dict literal) keyed by a backend's name: rules or facts of one backend
    kept outside its folder."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            out += [f"{path.relative_to(root)}:{node.lineno}: {name!r}" for name in sorted(keys & NAMES)]
    return out


def test_no_backend_name_is_compared_outside_its_own_modules():
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _mine(str(path.relative_to(PACKAGE)))
        for hit in _comparisons(path)
    ]
    assert found == [], "ask the backend's descriptor or its registry line instead:\n" + "\n".join(found)


def test_the_check_finds_a_comparison_where_there_is_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('if spec.rollout.backend == "vllm" or t.backend in ("fsdp2",):\n    pass\n')
    hits = [h.split(": ", 1)[1] for h in _comparisons(sample, tmp_path)]
    assert hits == ["spec.rollout.backend == 'vllm'", "t.backend in ('fsdp2',)"]


def test_every_backend_is_one_folder_of_its_own_holding_its_keys():
    for axis, table in AXES.items():
        for name, line in table.items():
            own = _owner(line)
            assert own == f"backends/{axis}/{name}", f"{name}: its descriptor is not in its folder ({line.target})"
            assert (PACKAGE / own / "descriptor.py").is_file() and (PACKAGE / own / "__init__.py").is_file()
            # its own keys: a module of its folder, which the schema reads through the registry line
            assert not line.section or _folder(line.section) == own, f"{name}: {line.section} is outside {own}"
    assert len(OWN) == sum(len(table) for table in AXES.values())  # no two backends share a folder


# The registry itself: its tables are keyed by the names.
REGISTRY = ("spec/registry.py",)


def test_no_table_outside_a_backends_folder_is_keyed_by_its_name():
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _mine(rel := str(path.relative_to(PACKAGE))) and rel not in REGISTRY
        for hit in _tables(path)
    ]
    assert found == [], "a backend's rules and facts belong on its descriptor:\n" + "\n".join(found)


def test_the_table_check_finds_a_table_keyed_by_a_backend(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('RULES = {"deepspeed": 1, "other": 2}\n')
    assert [h.split(": ", 1)[1] for h in _tables(sample, tmp_path)] == ["'deepspeed'"]
