"""Nothing outside a backend's own modules and the registry compares a backend's config string: the planner, the
launcher, the CLI and the spec ask the backend's descriptor (rlhf.engines.training.TrainBackend,
rlhf.engines.protocol.RolloutBackend) or its registry line, so a new backend is priced, searched and launched
without an edit elsewhere. Read statically from the source: nothing is imported but the registry."""

from __future__ import annotations

import ast
from pathlib import Path

import rlhf
from rlhf.spec.backends import ROLLOUT_BACKENDS, TRAIN_BACKENDS

PACKAGE = Path(rlhf.__file__).parent
NAMES = set(TRAIN_BACKENDS) | set(ROLLOUT_BACKENDS)


def _owner(name: str) -> str:
    """The module that holds backend ``name``'s descriptor, relative to the package (e.g. engines/hf_backend.py)."""
    entry = TRAIN_BACKENDS.get(name) or ROLLOUT_BACKENDS[name]
    module = entry.target.split(":")[0].removeprefix("rlhf.")
    path = PACKAGE / module.replace(".", "/")
    return str((path if path.is_dir() else path.with_suffix(".py")).relative_to(PACKAGE))


# A backend's own files: its descriptor's module (or folder) and the modules of its engine beside it.
OWN = {_owner(n) for n in NAMES} | {
    "engines/deepspeed_engine.py",
    "engines/deepspeed_import.py",
    "engines/ds_config.py",
    "engines/hf_engine.py",
    "engines/vllm_engine.py",
    "engines/vllm_worker.py",
    "engines/vllm_logprobs.py",
    "engines/vllm_placement.py",
    "engines/vllm_version.py",
}
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
    return any(rel == own or rel.startswith(own.rstrip("/") + "/") for own in OWN) or rel.startswith(PEERS)


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

