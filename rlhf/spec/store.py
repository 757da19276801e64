"""Registers the schema and the recipes with Hydra's ConfigStore.

The schema node makes every YAML typed: an unknown key or a wrong type fails at compose time with its full key.
Recipes live in recipes/ (a Hydra group can only be named after its folder, and the top level keeps the plural),
so each recipe file is stored as option NAME of the group ``recipe`` at package ``_global_``; ``+recipe=NAME``
then works from a checkout, from an installed wheel and from the folders of RLHF_RECIPE_PATH alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rlhf.spec.paths import examples_dir, recipe_dirs
from rlhf.spec.schema import ExperimentSpec

SCHEMA_NAME = "rlhf_schema"


@dataclass(frozen=True)
class RecipeInfo:
    name: str
    path: Path
    purpose: str  # the recipe's first comment line after the package header


def _unfreeze(node: DictConfig) -> None:
    # Frozen dataclasses give read-only nodes; Hydra must merge group options into them while composing.
    node._set_flag("readonly", None)
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            _unfreeze(child)
        elif child is not None:
            child._set_flag("readonly", None)


def _purpose(path: Path) -> str:
    for line in path.read_text().splitlines():
        s = line.strip()
        if s.startswith("#") and "@package" not in s:
            return s.lstrip("#").strip()
        if s and not s.startswith("#"):
            break
    return ""


def find_recipes() -> dict[str, RecipeInfo]:
    """Every recipe by name; a later folder of RLHF_RECIPE_PATH overrides a shipped recipe of the same name."""
    found: dict[str, RecipeInfo] = {}
    for d in recipe_dirs():
        for p in sorted(d.glob("*.yaml")):
            found[p.stem] = RecipeInfo(p.stem, p, _purpose(p))
    return found


def register_recipe_file(path: Path, name: str | None = None) -> str:
    """Store one recipe file as option ``name`` (default: the file's stem) of the group ``recipe``."""
    name = name or path.stem
    node = OmegaConf.load(path)
    if not isinstance(node, DictConfig):
        raise ValueError(f"recipe {path} must be a YAML mapping")
    node["recipe"] = name
    ConfigStore.instance().store(group="recipe", name=name, node=node, package="_global_")
    return name


_registered = False


def register() -> None:
    """Idempotent: the schema plus every recipe."""
    global _registered
    if _registered:
        return
    # ${rlhf.examples:} in a recipe: the examples folder wherever the package runs from (checkout or wheel).
    OmegaConf.register_new_resolver("rlhf.examples", lambda: str(examples_dir()), replace=True)
    schema = OmegaConf.structured(ExperimentSpec)
    _unfreeze(schema)
    ConfigStore.instance().store(name=SCHEMA_NAME, node=schema)
    for info in find_recipes().values():
        register_recipe_file(info.path, info.name)
    _registered = True
