"""The registry lines of the three backend axes (DESIGN.md, "Backends: three axes"): each config string names the
object that implements its axis's Protocol by import path (a training or rollout backend's
``rlhf.backends.<axis>.<name>.descriptor:BACKEND``), and the package it needs with the pip extra that installs it.
Declared here, in spec/, because validation checks the names and the packages before anything starts; spec reaches
a backend's rules through its line (:func:`load`), never by importing it by name, and each axis's runtime registry
(e.g. rlhf.tracking.registry) reads its table from here.
Adding a backend: its folder, its conf/ file and one line in its axis's table below.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Backend:
    target: str  # "module:Class" implementing the axis's Protocol
    package: str = ""  # the module it imports ("" when the core install has all it needs)
    extra: str = ""  # the pip extra that installs ``package`` ("" when a core dependency does)
    # rollout axis: its engines hold the base model plus a LoRA adapter and a sync may replace the adapter alone
    # (rollout.weight_sync_lora=adapter; validation refuses it for a backend without). Declared on the registry line,
    # not on the backend object, because validation reads it without importing the backend.
    lora_adapter: bool = False
    # rollout axis: its engine runs in the trainer's own interpreter, so the local executor can host it beside the
    # policy in one process (vLLM runs in a venv of its own: Ray's)
    in_process: bool = False


# trainer.backend: rlhf.backends.contract.training.TrainBackend (the object the module exposes as BACKEND)
TRAIN_BACKENDS: dict[str, Backend] = {
    "deepspeed": Backend("rlhf.backends.train.deepspeed.descriptor:BACKEND", "deepspeed"),
    "fsdp2": Backend("rlhf.backends.train.fsdp2.descriptor:BACKEND"),
}

# rollout.backend: rlhf.backends.contract.rollout.RolloutBackend (the object the module exposes as BACKEND). vLLM's
# package is
# looked for in the engine's own interpreter (rlhf.spec.paths), not in this one: its rule is in rollout_backends.
ROLLOUT_BACKENDS: dict[str, Backend] = {
    "hf": Backend("rlhf.backends.rollout.hf.descriptor:BACKEND", lora_adapter=True, in_process=True),
    "vllm": Backend("rlhf.backends.rollout.vllm.descriptor:BACKEND", extra="vllm", lora_adapter=True),
}

# logging.trackers: rlhf.tracking.protocol.Tracker
TRACKERS: dict[str, Backend] = {
    "mlflow": Backend("rlhf.tracking.mlflow_tracker:MlflowTracker", "mlflow"),
    "tensorboard": Backend("rlhf.tracking.tensorboard_tracker:TensorBoardTracker", "tensorboard", "tensorboard"),
    "wandb": Backend("rlhf.tracking.wandb_tracker:WandbTracker", "wandb", "wandb"),
    "console": Backend("rlhf.tracking.console_tracker:ConsoleTracker"),
}


class Names(Sequence[str]):
    """The config strings of one registry table, read from the table each time (a key's ``choices``,
    rlhf.spec.names): a line added to the table after import, as a plug-in registering itself does, is a valid
    value at once, as on the tracker axis, instead of being refused by a tuple copied when rlhf.spec.names loaded."""

    def __init__(self, table: Mapping[str, Backend]) -> None:
        self._table = table

    def __getitem__(self, i: Any) -> Any:
        return tuple(self._table)[i]

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._table))

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __repr__(self) -> str:
        return repr(tuple(self._table))


def load(key: str, what: str, table: Mapping[str, Backend], name: str) -> Any:
    """The object a registry line of ``table`` names (``module:attr``: a backend's descriptor), imported on first
    use; a ValueError naming ``key`` and the valid names when ``name`` has no line. How the spec reaches a
    backend's rules without naming the backend: by its config string, through its line."""
    try:
        target = table[name]
    except KeyError:
        raise ValueError(f"{key}={name!r}: not {what}; valid: {', '.join(sorted(table))}") from None
    module, attr = target.target.split(":")
    return getattr(importlib.import_module(module), attr)


def train_backend(name: str) -> Any:
    """``trainer.backend`` ``name``'s descriptor (rlhf.backends.contract.training.TrainBackend); ValueError if
    unregistered."""
    return load("trainer.backend", "a training backend", TRAIN_BACKENDS, name)


def rollout_backend(name: str) -> Any:
    """``rollout.backend`` ``name``'s descriptor (rlhf.backends.contract.rollout.RolloutBackend); ValueError if
    unregistered."""
    return load("rollout.backend", "a rollout backend", ROLLOUT_BACKENDS, name)


def missing_package(axis: str, table: dict[str, Backend], name: str) -> str | None:
    """Why backend ``name`` of ``axis`` cannot start here (its package is not installed, with the command that
    installs it), or None."""
    entry = table[name]
    if not entry.package or importlib.util.find_spec(entry.package) is not None:
        return None
    how = f"pip install 'rlhf[{entry.extra}]'" if entry.extra else f"pip install {entry.package}"
    return f"the {name} {axis} needs the {entry.package} package: {how}"


def unused_sections(parent: str, holder: Any, sections: dict[str, type], selected: str) -> list[tuple[str, Any, str]]:
    """``(full key, value, fix)`` for every key of a backend sub-section (``<parent>.<name>.*`` of ``holder``)
    changed from its default while another backend is selected: a key that would be ignored is never silently
    accepted (the training axis refuses it, the rollout axis warns: rlhf.spec.rollout_backend_rules)."""
    out = []
    for name, cls in sections.items():
        if name == selected:
            continue
        section, default = getattr(holder, name), cls()
        for f in fields(cls):
            value = getattr(section, f.name)
            if value != getattr(default, f.name):
                out.append(
                    (
                        f"{parent}.{name}.{f.name}",
                        value,
                        f"applies to {parent}.backend={name} only (this run uses {selected}); remove it or set "
                        f"{parent}.backend={name}",
                    )
                )
    return out
