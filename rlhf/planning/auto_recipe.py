"""The layout ``rlhf-plan --auto`` chose, written as a recipe: a Hydra experiment file holding the command's group
choices (``override /group: option``) and every value that differs from what those groups give, so it composes to
exactly the spec the search planned (checked after writing: the file is composed again, compared field by field,
validated and planned).

Composition only (Hydra's compose API, no Ray, no torch).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlhf.planning.auto import Candidate, placement_options
from rlhf.spec.build import build, compose
from rlhf.spec.registry import ROLLOUT_BACKENDS, rollout_backend, train_backend

# Groups of the composed config the recipe names in its defaults list; nested ones (trainer/backend) and Hydra's own
# are carried as values (trainer.backend: fsdp2 is the same choice).
_SKIP_GROUPS = ("recipe", "hydra")


def _choices(overrides: Sequence[str], config_dir: str | None, config_name: str | None) -> dict[str, str]:
    cfg = compose(overrides, config_dir=config_dir, config_name=config_name, return_hydra_config=True)
    out = {}
    for group, option in cfg.hydra.runtime.choices.items():
        if "/" in group or group.split("/")[0] in _SKIP_GROUPS or option is None:
            continue
        out[group] = str(option)
    return out


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for part in path:
        tree = tree.setdefault(part, {})
    tree[last] = value


def _diff(target: Any, base: Any) -> Any:
    """The part of ``target`` that differs from ``base`` (mappings compared key by key, anything else whole)."""
    if isinstance(target, dict) and isinstance(base, dict):
        out = {}
        for k, v in target.items():
            if k not in base:
                out[k] = v
                continue
            d = _diff(v, base[k])
            if d is not _SAME:
                out[k] = d
        return out if out else _SAME
    return _SAME if target == base else target


_SAME = object()


def _shown() -> list[str]:
    own = [k for n in ROLLOUT_BACKENDS for k in rollout_backend(n).scan_keys]
    return [k for s in _SHOWN for k in (own if s == "rollout.*" else [s])]


_GROUP_ORDER = ("algorithm", "model", "hardware", "placement", "rollout", "trainer", "data", "logging")
# Layout keys the recipe always spells out (when the candidate sets them), so a reader sees the whole layout.
_SHOWN = (
    "rollout.num_engines",
    "rollout.tensor_parallel_size",
    "rollout.*",  # each rollout backend's scan_keys, here
    "rollout.enable_sleep",
    "rollout.micro_batch_per_device",
    "trainer.backend",
    "trainer.micro_batch_per_device",
    "trainer.gradient_checkpointing",
    "trainer.max_tokens_per_micro_batch",
)


def shown_keys(chosen: Candidate) -> list[str]:
    """The keys of the chosen layout the recipe writes even where the group's default already says so: the layout
    keys above, the devices of each group, the training engine's own keys and every key the search changed."""
    v, s = chosen.values, chosen.spec
    keys = [k for k in _shown() if k in v]
    keys += [k for k in v if k.startswith("placement.devices.") and v[k] is not None]
    keys += train_backend(s.trainer.backend).layout_keys(v)
    keys += [k for k in chosen.changed if v[k] is not None]
    return list(dict.fromkeys(keys))


def recipe_text(
    overrides: Sequence[str],
    chosen: Candidate,
    *,
    header: Sequence[str] = (),
    config_dir: str | None = None,
    config_name: str | None = None,
) -> str:
    """The recipe of ``chosen`` (a candidate of the search run on the spec ``overrides`` compose to)."""
    choices = _choices(overrides, config_dir, config_name)
    name = chosen.values.get("placement.name")
    if name in {n for n, _ in placement_options()}:
        choices["placement"] = name
    cfg = compose(overrides, config_dir=config_dir, config_name=config_name)
    target = OmegaConf.to_container(cfg, resolve=True)
    for key, value in chosen.values.items():
        _set(target, key, value)
    target.pop("recipe", None)  # the file names its own recipe
    groups = [f"{g}={o}" for g, o in choices.items()]
    base = OmegaConf.to_container(compose(groups, config_dir=config_dir, config_name=config_name), resolve=True)
    base.pop("recipe", None)
    values = _diff(target, base)
    values = {} if values is _SAME else values
    for key in shown_keys(chosen):  # the layout stays readable where a value equals the group's default
        _set(values, key, chosen.values[key])
    order = {g: i for i, g in enumerate(_GROUP_ORDER)}
    lines = ["# @package _global_", *[f"# {h}" for h in header], "", "defaults:"]
    lines += [f"  - override /{g}: {o}" for g, o in sorted(choices.items(), key=lambda x: order.get(x[0], 99))]
    body = OmegaConf.to_yaml(OmegaConf.create(values)) if values else ""
    return "\n".join(lines) + "\n\n" + body


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if is_dataclass(a) and is_dataclass(b):
        out = []
        for f in fields(a):
            out += _differences(getattr(a, f.name), getattr(b, f.name), f"{prefix}{f.name}.")
        return out
    return [] if a == b else [f"{prefix.rstrip('.')}: {a!r} != {b!r}"]


def write_recipe(
    path: Path,
    overrides: Sequence[str],
    chosen: Candidate,
    *,
    header: Sequence[str] = (),
    config_dir: str | None = None,
    config_name: str | None = None,
) -> None:
    """Write the recipe of ``chosen`` to ``path``, then check that it composes to the chosen spec, validates and
    fits (a RuntimeError naming the keys that differ otherwise: a bug of this module, never the user's)."""
    from rlhf.planning.plan import plan
    from rlhf.spec.validate import validate

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(recipe_text(overrides, chosen, header=header, config_dir=config_dir, config_name=config_name))
    again = build(compose([f"+recipe={path.resolve()}"], config_dir=config_dir))
    diffs = _differences(replace(again, recipe=""), replace(chosen.spec, recipe=""))
    if diffs:
        raise RuntimeError(f"the written recipe {path} composes to another spec: {'; '.join(diffs[:5])}")
    errors = validate(again)
    if errors:
        raise RuntimeError(f"the written recipe {path} does not validate: {'; '.join(map(str, errors))}")
    p = plan(again)
    if not p.fits:
        raise RuntimeError(f"the written recipe {path} does not fit: {p.verdict()}")


def header_lines(recipe: str, hardware: str, chosen: Candidate, given: float | None, command: str) -> list[str]:
    """The comment lines a written recipe starts with: what it is (``rlhf-recipes ls`` shows the first) and how it
    was made."""
    vs = f" (the recipe as given: {given:.1f} s)" if given is not None else ""
    today = datetime.date.today().isoformat()
    return [
        f"{recipe} on {hardware}, layout chosen by rlhf-plan --auto: estimated {chosen.seconds:.1f} s per step{vs}.",
        f"Written {today} by: {command}",
        "The estimate is the cost model's (rlhf/planning/cost.py); rlhf-plan +recipe=THIS_FILE shows its memory.",
    ]
