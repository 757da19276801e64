"""Values a recipe leaves to the command line: Hydra's own ``???`` (a mandatory value, OmegaConf's MISSING).

A recipe that needs something only its user can give (the teacher of ``opd_tiny_cpu``, a path an imported script
took from a variable set outside it) writes ``key: ???``. OmegaConf's merge keeps an existing value when the value
merged in is ``???`` (so a recipe alone could never unset a default); a recipe file is therefore stored with each
``???`` as a marker (:data:`MARKER`), which a later value (the command line) replaces like any other, and which
:func:`markers_to_missing` turns back into ``???`` once Hydra has composed. Composing works; building the spec
stops with :class:`MissingValues` naming each such key and the override that fills it, so ``rlhf-run`` and
``rlhf-plan`` print one message, no traceback. ``rlhf-recipes validate`` and the importers' ``--check`` instead
report them as needs ("needs teacher.model_path") and validate everything else with a stand-in in their place
(:func:`check_with_stand_ins`): a recipe whose only gaps are these is valid.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlhf.errors import UserError
from rlhf.spec.keys import find_key, walk
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.validate import SpecError, SpecInvalid, validate

MISSING = "???"
MARKER = "${rlhf.required:}"  # a recipe's ??? while Hydra composes; resolving it means it was never turned back


def unconverted_marker() -> str:
    """The resolver behind :data:`MARKER`: only reached if a config is used without :func:`markers_to_missing`."""
    raise UserError("a value the recipe leaves to the command line (???) was not given; give it as key=VALUE")


def as_markers(node: Any) -> Any:
    """A recipe file's config with each ``???`` leaf replaced by :data:`MARKER` (in place; returned)."""
    if isinstance(node, DictConfig):
        for k in list(node.keys()):
            if OmegaConf.is_missing(node, k):
                node[k] = MARKER
            else:
                as_markers(node._get_node(k))
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            if OmegaConf.is_missing(node, i):
                node[i] = MARKER
            else:
                as_markers(node._get_node(i))
    return node


def _marker_paths(node: Any, prefix: str) -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _marker_paths(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _marker_paths(v, f"{prefix}[{i}]")]
    return [prefix] if node == MARKER else []


def markers_to_missing(cfg: DictConfig) -> DictConfig:
    """After composition: every :data:`MARKER` still there (nothing later gave the value) becomes ``???``."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    for path in _marker_paths(plain, ""):
        OmegaConf.update(cfg, path, MISSING, merge=False)
    return cfg


class MissingValues(SpecInvalid):
    """The config still holds ``???`` values; ``keys`` are their full keys, in schema order."""

    def __init__(self, keys: list[str], context: str = "") -> None:
        self.keys = keys
        errors = [SpecError(k, MISSING, f"required: give it on the command line, e.g. {k}=VALUE") for k in keys]
        super().__init__(errors, context)


@functools.cache
def _schema_order() -> dict[str, int]:
    return {k.path: i for i, k in enumerate(walk(ExperimentSpec))}


def missing_keys(cfg: DictConfig) -> list[str]:
    """Full keys whose value is ``???`` (``data.train_files[0]`` for a list item), in schema order."""
    order = _schema_order()
    found = OmegaConf.missing_keys(cfg)
    return sorted(found, key=lambda k: (order.get(k.split("[")[0], len(order)), k))


def escaped(value: Any) -> Any:
    """``value`` as OmegaConf must hold it to keep it literal: ``${`` escaped, so it is never an interpolation."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    if isinstance(value, dict):
        return {k: escaped(v) for k, v in value.items()}
    return value


def _default(key: str) -> Any:
    info = find_key(ExperimentSpec, key.split("[")[0])
    if info is None:
        return None
    if "[" in key:  # one item of a list: the empty value of its element type
        return "" if "str" in info.type else 0
    return copy.deepcopy(info.default)  # the schema's own (shared) default is never handed out to be changed


def with_stand_ins(cfg: DictConfig, fills: Mapping[str, Any] | None = None) -> DictConfig:
    """A copy of ``cfg`` with every ``???`` replaced: by ``fills[key]`` where given, else by the key's default (a
    fill that is itself ``???``, as a script's own ``--input_template ???`` carried as text, stands in for nothing:
    the default then)."""
    out = cfg.copy()
    for key in missing_keys(cfg):
        fill = fills.get(key, MISSING) if fills else MISSING
        OmegaConf.update(out, key, escaped(fill) if fill != MISSING else _default(key), merge=False)
    return out


def _about(error_key: str, keys: list[str]) -> bool:
    return any(error_key == k or error_key.startswith((k + "[", k + ".")) for k in keys)


@dataclass(frozen=True)
class Checked:
    spec: ExperimentSpec  # built with the stand-ins
    needs: list[str]  # the ??? keys, in schema order
    errors: list[SpecError]  # every other problem


def check_with_stand_ins(cfg: DictConfig, fills: Mapping[str, Any] | None = None) -> Checked:
    """Validate ``cfg`` as if its ``???`` values were given: problems about those keys are the stand-ins' own, so
    they are left out; what remains is wrong whatever the user gives."""
    from rlhf.spec.build import build

    needs = missing_keys(cfg)
    spec = build(with_stand_ins(cfg, fills))
    errors = [e for e in validate(spec) if not _about(e.key, needs)]
    return Checked(spec, needs, errors)
