"""From a composed Hydra config to the frozen, typed ExperimentSpec, and the compose API used by the CLIs and tests."""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlhf.spec import names
from rlhf.spec.reasoning_gym_source import quote_sources
from rlhf.spec.required import MissingValues, markers_to_missing, missing_keys
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.validate import SpecError, SpecInvalid

PRIMARY_CONFIG = "config"


# Keys holding local paths, made absolute against the directory the command started from: Ray workers (on any
# node) run elsewhere, and a relative path would mean something else to them.
PATH_KEYS = (
    ("model", "path"),
    ("model", "tokenizer_path"),
    ("reward", "model_path"),
    ("reward", "function"),
    ("critic", "model_path"),
    ("reference", "model_path"),
    ("teacher", "model_path"),
    ("agent", "path"),
    ("checkpoint", "init_from"),
)


def _absolute(path: str) -> str:
    if not path or path.startswith("builtin:") or Path(path).is_absolute():
        return path
    p = Path(path).expanduser()
    return str(p.resolve()) if p.exists() or path.startswith(("./", "../")) else path  # else: a hub name


def absolute_paths(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec with its local paths absolute (hub names and builtin: datasets unchanged)."""
    from dataclasses import replace

    for section, key in PATH_KEYS:
        part = getattr(spec, section)
        value = getattr(part, key)  # reward.function may be a list of references
        value = [_absolute(v) for v in value] if isinstance(value, list) else _absolute(value)
        part = replace(part, **{key: value})
        spec = replace(spec, **{section: part})
    data = replace(
        spec.data,
        train_files=[_absolute(f) for f in spec.data.train_files],
        eval_files=[_absolute(f) for f in spec.data.eval_files],
    )
    warmup = replace(spec.sft_warmup, train_files=[_absolute(f) for f in spec.sft_warmup.train_files])
    spec = replace(spec, sft_warmup=warmup)
    resume = spec.checkpoint.resume
    if resume not in names.RESUME_MODES:
        spec = replace(spec, checkpoint=replace(spec.checkpoint, resume=_absolute(resume)))
    return replace(spec, data=data)


def unknown_keys(cfg: DictConfig, prefix: str = "") -> list[SpecError]:
    """Keys of ``cfg`` that its schema dataclass has no field for, each with the fix (the key it moved to, or the
    section's valid keys)."""
    import dataclasses

    from rlhf.spec.rollout_backend_rules import moved_keys
    from rlhf.spec.suggest import did_you_mean, nearest

    out: list[SpecError] = []
    obj = OmegaConf.get_type(cfg)
    fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else None
    for k in cfg.keys():
        full = f"{prefix}{k}"
        if fields is not None and k not in fields:
            moved = moved_keys().get(full)
            near = did_you_mean([f"{prefix}{n}" for n in nearest(str(k), fields)])
            owner = moved.split(".")[1] if moved else ""
            valid = f"valid: {', '.join(sorted(fields))}"
            fix = f"moved to {moved} (the {owner} backend's own keys)" if moved else valid
            fix = f"{near} {fix}" if near and not moved else fix
            value = OmegaConf.to_container(cfg[k]) if isinstance(cfg[k], DictConfig) else cfg[k]
            out.append(SpecError(full, value, f"no such config key; {fix}"))
            continue
        if OmegaConf.is_missing(cfg, k) or OmegaConf.is_interpolation(cfg, k):
            continue
        node = cfg[k]
        if isinstance(node, DictConfig):
            out.extend(unknown_keys(node, f"{full}."))
    return out


def build(cfg: DictConfig) -> ExperimentSpec:
    """Convert a composed config (already type-checked by the schema) into frozen dataclasses, local paths made
    absolute. A ``???`` value still there raises :class:`rlhf.spec.required.MissingValues` (a SpecInvalid)."""
    if "hydra" in cfg:  # Hydra's own settings go, from a copy (the caller's config is left as it is)
        cfg = cfg.copy()
        with_struct = OmegaConf.is_struct(cfg)
        OmegaConf.set_struct(cfg, False)
        cfg.pop("hydra")
        OmegaConf.set_struct(cfg, with_struct)
    missing = missing_keys(cfg)
    if missing:  # Hydra's ??? left unfilled: one message naming each key, not OmegaConf's traceback
        raise MissingValues(missing)
    unknown = unknown_keys(cfg)
    if unknown:  # added with ``+key=`` (Hydra lets a + add any key): named here, not as a dataclass traceback
        raise SpecInvalid(unknown)
    spec = OmegaConf.to_object(cfg)
    if not isinstance(spec, ExperimentSpec):
        raise TypeError(f"composed config is a {type(spec).__name__}, expected ExperimentSpec")
    return absolute_paths(spec)


def rewrite_recipe_paths(overrides: Sequence[str]) -> list[str]:
    """``+recipe=./mine.yaml`` (a file, e.g. from ``rlhf-recipes cp``) becomes ``+recipe=mine`` after registering it."""
    from rlhf.spec.store import register_recipe_file

    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key.lstrip("+~") == "recipe" and value.endswith((".yaml", ".yml")):
            path = Path(value).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"{o}: no such recipe file {path}")
            o = f"{key}={register_recipe_file(path.resolve())}"
        out.append(o)
    return out


@contextmanager
def initialized(
    config_dir: str | os.PathLike[str] | None = None, recipes: Sequence[str] | None = None
) -> Iterator[Any]:
    """Hydra's compose API set up as ``rlhf-run`` sets up its app: the shipped conf/ as the primary config folder,
    the user's ``-cd`` folder in front of it, the schema and the recipes ``recipes`` (every one when None) in the
    ConfigStore. Yields Hydra's ConfigLoader (group options, sources)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from rlhf.spec.paths import conf_dir, config_dirs_on_search_path
    from rlhf.spec.store import plugins_in_place, register

    register(recipes)
    plugins_in_place()
    with config_dirs_on_search_path(config_dir), initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        yield GlobalHydra.instance().config_loader()


def with_recipe_name(cfg: DictConfig, choices: Any) -> DictConfig:
    """``recipe`` set from the chosen option where the recipe file did not set it (a file in a -cd folder's
    ``recipe/``; stored recipes set it themselves), so runs are named after their recipe either way."""
    chosen = choices.get("recipe") if choices is not None else None
    if chosen and not cfg.get("recipe"):
        with_struct = OmegaConf.is_struct(cfg)
        OmegaConf.set_struct(cfg, False)
        cfg.recipe = str(chosen)
        OmegaConf.set_struct(cfg, with_struct)
    return cfg


def compose(
    overrides: Sequence[str] = (),
    *,
    config_dir: str | os.PathLike[str] | None = None,
    config_name: str | None = None,
    return_hydra_config: bool = False,
) -> DictConfig:
    """Compose with Hydra's compose API (no run directory, no logging set-up): the shipped conf/ and recipes,
    ``config_dir`` (``-cd``) in front, primary config ``config_name`` (``-cn``, default the shipped one), and
    ``hydra.searchpath`` from the overrides or the primary config, exactly as ``rlhf-run`` composes."""

    from rlhf.spec.sections.backends import check_built

    check_built()  # a backend registered too late for the schema is named, cached head or not
    by_name = rewrite_recipe_paths(overrides)
    rewritten = quote_sources(by_name)
    cacheable = not return_hydra_config and by_name == [str(o) for o in overrides]  # a recipe file: as it is now
    if cacheable:
        head, values = _trailing_values(rewritten)
        if values:
            cfg = _composed(head, config_dir, config_name, cache=True)
            _apply_values(values, cfg)
            return markers_to_missing(cfg)
    return _composed(rewritten, config_dir, config_name, cache=cacheable, return_hydra_config=return_hydra_config)


def _trailing_values(overrides: Sequence[str]) -> tuple[list[str], list[Any]]:
    """``overrides`` split into what shapes the composition and the run of plain ``a.b=value`` overrides that ends
    them (parsed). Hydra composes the defaults (recipe, groups) first and then sets each config override in order
    (``ConfigLoaderImpl._apply_overrides_to_config``: ``OmegaConf.update(cfg, key, value, merge=True)``), and a
    dotted key is never a group (groups are ``a/b``): so the config the head composes to, with those values set after
    it, is the config Hydra composes from the whole list, and the head's is composed once per process. Anything
    else (``+``, ``++``, ``~``, a sweep, ``hydra.*``, a key without a dot, which may name a group) stays in the
    head, and so does every value before it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - Hydra's own compose reports it, as it always has
        return list(overrides), []
    cut = len(parsed)
    while cut > 0 and _plain_value(parsed[cut - 1]):
        cut -= 1
    return list(overrides[:cut]), parsed[cut:]


def _plain_value(o: Any) -> bool:
    key = o.key_or_group
    special = o.is_add() or o.is_force_add() or o.is_delete() or o.is_sweep_override() or o.is_hydra_override()
    return o.package is None and not special and "." in key and "/" not in key


def _apply_values(values: Sequence[Any], cfg: DictConfig) -> None:
    """Hydra's own step for plain config overrides (``ConfigLoaderImpl._apply_overrides_to_config``), its errors
    included: a key the schema lacks, or a value it refuses."""
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    for o in values:
        try:
            try:
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
            except (ConfigAttributeError, ConfigKeyError) as ex:
                raise ConfigCompositionException(
                    f"Could not override '{o.key_or_group}'.\nTo append to your config use +{o.input_line}"
                ) from ex
        except OmegaConfBaseException as ex:
            raise ConfigCompositionException(f"Error merging override {o.input_line}") from ex


def _composed(
    rewritten: Sequence[str],
    config_dir: str | os.PathLike[str] | None,
    config_name: str | None,
    *,
    cache: bool,
    return_hydra_config: bool = False,
) -> DictConfig:
    """Hydra's compose of ``rewritten`` (served from the cache where ``cache``), the recipe named, markers made
    ``???``."""
    from hydra import compose as hydra_compose

    key = _cache_key(rewritten, config_dir, config_name) if cache else None
    if key is not None and key in _COMPOSED:
        _COMPOSED.move_to_end(key)
        return copy.deepcopy(_COMPOSED[key])
    from rlhf.spec.store import recipes_named

    with initialized(config_dir, recipes_named(rewritten, config_name)):
        cfg = hydra_compose(
            config_name=config_name or PRIMARY_CONFIG, overrides=list(rewritten), return_hydra_config=True
        )
    with_recipe_name(cfg, cfg.hydra.runtime.choices)
    markers_to_missing(cfg)
    if not return_hydra_config:
        with_struct = OmegaConf.is_struct(cfg)
        OmegaConf.set_struct(cfg, False)
        cfg.pop("hydra")
        OmegaConf.set_struct(cfg, with_struct)
    if key is not None:
        _COMPOSED[key] = copy.deepcopy(cfg)
        while len(_COMPOSED) > _COMPOSED_MAX:
            _COMPOSED.popitem(last=False)
    return cfg


# Composed configs by what decides them: Hydra's compose costs 0.2-0.5 s on 2 cores (most of it copying config
# nodes), and a process that validates, plans and tests composes the same overrides again and again.
_COMPOSED: OrderedDict[tuple, DictConfig] = OrderedDict()
_COMPOSED_MAX = 256


def _cache_key(
    rewritten: Sequence[str], config_dir: str | os.PathLike[str] | None, config_name: str | None
) -> tuple | None:
    """What a composed config depends on: the overrides, the folders' YAML files (paths, sizes, mtimes), the
    working directory. None (compose afresh) when an override reaches into Hydra's own settings (a search path
    names more folders). The folders include those an enclosing ``config_dirs_on_search_path`` holds open, so a
    config composed with a plugin's folder is never served where that folder is not on the path, nor the reverse."""
    from rlhf.spec.paths import active_config_dirs, conf_dir, recipe_dirs

    if any(o.lstrip("+~").startswith("hydra.") for o in rewritten):
        return None
    folders = [conf_dir(), *recipe_dirs(), *active_config_dirs()]
    folders += [Path(config_dir).expanduser().resolve()] if config_dir else []
    return (tuple(rewritten), config_name, os.getcwd(), _yaml_stamp(folders))


def _yaml_stamp(folders: Sequence[Path]) -> tuple:
    out = []
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                if name.endswith((".yaml", ".yml")):
                    st = os.stat(os.path.join(root, name))
                    out.append((root, name, st.st_mtime_ns, st.st_size))
    return tuple(sorted(out))


def load_spec(
    overrides: Sequence[str] = (),
    *,
    config_dir: str | os.PathLike[str] | None = None,
    config_name: str | None = None,
) -> ExperimentSpec:
    return build(compose(overrides, config_dir=config_dir, config_name=config_name))
