"""From a composed Hydra config to the frozen, typed ExperimentSpec, and the compose API used by the CLIs and tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from rlhf.spec.reasoning_gym_source import quote_sources
from rlhf.spec.schema import ExperimentSpec

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
    ("agent", "path"),
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
        part = replace(part, **{key: _absolute(getattr(part, key))})
        spec = replace(spec, **{section: part})
    data = replace(
        spec.data,
        train_files=[_absolute(f) for f in spec.data.train_files],
        eval_files=[_absolute(f) for f in spec.data.eval_files],
    )
    resume = spec.checkpoint.resume
    if resume not in ("auto", "never"):
        spec = replace(spec, checkpoint=replace(spec.checkpoint, resume=_absolute(resume)))
    return replace(spec, data=data)


def build(cfg: DictConfig) -> ExperimentSpec:
    """Convert a composed config (already type-checked by the schema) into frozen dataclasses, local paths made
    absolute."""
    cfg = cfg.copy()
    with_struct = OmegaConf.is_struct(cfg)
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    OmegaConf.set_struct(cfg, with_struct)
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


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose conf/ + recipes with Hydra's compose API (no run directory, no logging set-up)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from rlhf.spec.paths import conf_dir
    from rlhf.spec.store import register

    register()
    overrides = quote_sources(rewrite_recipe_paths(overrides))
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        return hydra_compose(config_name=PRIMARY_CONFIG, overrides=list(overrides))


def load_spec(overrides: Sequence[str] = ()) -> ExperimentSpec:
    return build(compose(overrides))
