"""The options of the shipped conf/ groups an importer chooses among (algorithm, model, placement, rollout,
hardware, trainer), each as a full section: what recipe.py matches mapped values against and common.py reads the
hardware's device type from."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlhf.spec import schema
from rlhf.spec.paths import conf_dir

GROUPS = ("algorithm", "model", "placement", "rollout", "hardware", "trainer")
_SECTIONS = {
    "algorithm": schema.AlgorithmSpec,
    "model": schema.ModelSpec,
    "placement": schema.PlacementSpec,
    "rollout": schema.RolloutSpec,
    "hardware": schema.HardwareSpec,
    "trainer": schema.TrainerSpec,
}

def options(group: str) -> dict[str, dict[str, Any]]:
    """Each option of a conf/ group as a full section (schema defaults under the option's values). Read once per
    process (the shipped conf/ does not change while a command runs); callers must not modify what they get."""
    return _options(group, str(conf_dir()))


@functools.cache
def _options(group: str, folder: str) -> dict[str, dict[str, Any]]:
    out = {}
    # As plain data: the frozen dataclasses would give read-only nodes.
    defaults = OmegaConf.to_container(OmegaConf.structured(_SECTIONS[group]))
    for path in sorted((Path(folder) / group).glob("*.yaml")):
        merged = OmegaConf.merge(OmegaConf.create(defaults), OmegaConf.load(path))
        out[path.stem] = OmegaConf.to_container(merged)
    return out
