"""Registers the schema and the recipes with Hydra's ConfigStore.

The schema node makes every YAML typed: an unknown key or a wrong type fails at compose time with its full key.
Recipes live in recipes/ (a Hydra group can only be named after its folder, and the top level keeps the plural),
so each recipe file is stored as option NAME of the group ``recipe`` at package ``_global_``; ``+recipe=NAME``
then works from a checkout, from an installed wheel and from the folders of RLHF_RECIPE_PATH alike. The ConfigStore
is the last entry of Hydra's search path, so a user's ``recipe/NAME.yaml`` in a ``-cd`` folder or a
``hydra.searchpath`` entry is found there too and wins over a stored recipe of the same name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rlhf.spec.paths import examples_dir, recipe_dirs
from rlhf.spec.required import as_markers, unconverted_marker
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.sections.backends import check_built

SCHEMA_NAME = "rlhf_schema"
RECIPE_GROUP = "recipe"


@dataclass(frozen=True)
class RecipeInfo:
    name: str
    path: Path
    purpose: str  # the recipe's first comment line after the package header


def _unfreeze(node: DictConfig) -> None:
    # Frozen dataclasses give read-only nodes (one per section); Hydra must merge group options into them.
    OmegaConf.set_readonly(node, False)
    for key in node:
        child = node[key]
        if isinstance(child, DictConfig):
            _unfreeze(child)


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


def recipes_on_search_path(loader: Any) -> dict[str, RecipeInfo]:
    """Every option of the group ``recipe`` that ``loader`` (a Hydra ConfigLoader) finds on its search path, with
    its file where the option is a file (shipped, RLHF_RECIPE_PATH, or ``recipe/`` of a -cd/searchpath folder)."""
    stored = find_recipes()
    found: dict[str, RecipeInfo] = {}
    for name in loader.get_group_options(RECIPE_GROUP):
        for source in loader.get_sources():
            if source.scheme() != "file" or not source.is_config(f"{RECIPE_GROUP}/{name}"):
                continue
            path = Path(source.path) / RECIPE_GROUP / f"{name}.yaml"
            if path.is_file():
                found[name] = RecipeInfo(name, path, _purpose(path))
                break
        else:
            if name in stored:
                found[name] = stored[name]
    return found


def register_recipe_file(path: Path, name: str | None = None) -> str:
    """Store one recipe file as option ``name`` (default: the file's stem) of the group ``recipe``."""
    name = name or path.stem
    node = OmegaConf.load(path)
    if not isinstance(node, DictConfig):
        raise ValueError(f"recipe {path} must be a YAML mapping")
    node["recipe"] = name
    as_markers(node)  # its ??? values must survive Hydra's merge over the defaults (rlhf.spec.required)
    ConfigStore.instance().store(group=RECIPE_GROUP, name=name, node=node, package="_global_")
    _stored.add(name)
    return name


def recipes_named(overrides: Iterable[str], config_name: str | None = None) -> list[str] | None:
    """The stored recipes a composition of ``overrides`` reads (``+recipe=NAME``), or None when it may read any:
    no recipe named (a primary config of the user's may choose one), a sweep or an interpolation over recipes, or
    a name that is no stored recipe (Hydra's error then lists every option). A recipe file (``+recipe=FILE.yaml``)
    needs none: rlhf.spec.build.rewrite_recipe_paths stores it."""
    if config_name:
        return None
    names, files = [], 0
    for o in overrides:
        key, sep, value = str(o).partition("=")
        if not sep or key.lstrip("+~") != RECIPE_GROUP:
            continue
        if value.endswith((".yaml", ".yml")):
            files += 1
            continue
        if not re.fullmatch(r"[\w.-]+", value):
            return None
        names.append(value)
    if not names:
        return [] if files else None
    known = find_recipes()
    return names if all(n in known for n in names) else None


_registered = False  # the schema and the resolvers
_all_stored = False  # every recipe stored
_stored: set[str] = set()  # the recipe options stored so far


def expose_hydra_plugins() -> None:
    """Make rlhf's Hydra plugins (hydra_plugins/rlhf_plugins: the -cd search path, the ray_cluster launcher)
    discoverable from a source checkout. Hydra finds plugins by listing the ``hydra_plugins`` namespace package's
    path; an editable install maps our folder through an import hook that such a listing cannot see, so the folder
    is added to the namespace path here. A wheel installs it beside the other plugins, where it is found anyway."""
    from rlhf.spec.paths import source_root

    root = source_root()
    folder = root / "hydra_plugins" if root is not None else None
    if folder is not None and (folder / "rlhf_plugins").is_dir():
        import hydra_plugins

        if str(folder) not in list(hydra_plugins.__path__):
            hydra_plugins.__path__.append(str(folder))
    _register_plugin_classes()


def _register_plugin_classes() -> None:
    """Hydra scans for plugins once per process, at its first use: a process that used Hydra before rlhf's first
    compose (a test session, a notebook, another Hydra app) has a scan without our folder, and the -cd folders
    and the ray_cluster launcher would be silently missing. So the classes are registered by hand as well, after
    the scan. A name already registered is left alone: a scan that found our folder re-executes its modules,
    making new classes, and registering the old ones beside them would put the -cd folders on the path twice."""
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()  # the scan, if not yet done
    from hydra_plugins.rlhf_plugins.ray_cluster_launcher import RayClusterLauncher
    from hydra_plugins.rlhf_plugins.search_path import RlhfConfigDirSearchPath

    for clazz in (RlhfConfigDirSearchPath, RayClusterLauncher):
        if f"{clazz.__module__}.{clazz.__name__}" not in plugins.class_name_to_class:
            plugins.register(clazz)


def plugins_in_place() -> None:
    """Called before every compose: Hydra may have scanned for plugins again since :func:`register` (Hydra's
    ``Singleton.set_state``, which every launcher's job calls, drops the plugins and scans afresh), and a change to
    ``sys.path`` recomputes the ``hydra_plugins`` namespace path without the folder added here. CI composed a -cd
    recipe as 'Could not find recipe/mine' after a launcher test had done both."""
    expose_hydra_plugins()


def _store_shared_by_copies() -> None:
    """Every compose deep-copies Hydra's config repository (``CachingConfigRepository``, so that setting up its
    sources cannot change the original), and with it the ConfigStore it reads: the schema and every recipe, about
    40% of a compose and 109 times over for ``rlhf-run --help``. The store needs no copy: ``ConfigStore.load``
    already returns a copy of each node it hands out, and nothing writes to it while composing. So a copy of the
    (singleton) store is the store."""
    ConfigStore.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]


def register(recipes: Iterable[str] | None = None) -> None:
    """Idempotent: the schema plus the recipes named (every recipe when None; :func:`recipes_named` says which a
    composition reads), and rlhf's Hydra plugins made discoverable. Storing a recipe parses its YAML: all 57 took
    0.37 s of every command's start (2026-12-07, this 2-core machine), where a run reads one."""
    global _registered, _all_stored
    check_built()  # a backend registered too late to have its keys in the schema is named, with how to register it
    if not _registered:
        expose_hydra_plugins()
        _store_shared_by_copies()
        # ${rlhf.examples:} in a recipe: the examples folder wherever the package runs from (checkout or wheel).
        OmegaConf.register_new_resolver("rlhf.examples", lambda: str(examples_dir()), replace=True)
        OmegaConf.register_new_resolver("rlhf.required", unconverted_marker, replace=True)
        schema = OmegaConf.structured(ExperimentSpec)
        _unfreeze(schema)
        ConfigStore.instance().store(name=SCHEMA_NAME, node=schema)
        _registered = True
    if recipes is None and _all_stored:
        return
    wanted = None if recipes is None else {n for n in recipes if n not in _stored}  # one added to the path since
    if wanted is not None and not wanted:
        return
    for name, info in find_recipes().items():
        # a name stored already may be a user's recipe file of that name (rewrite_recipe_paths): it stays
        if name not in _stored and (wanted is None or name in wanted):
            register_recipe_file(info.path, name)
    _all_stored = recipes is None
