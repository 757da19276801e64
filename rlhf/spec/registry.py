"""The registry lines of the three backend axes (DESIGN.md, "Backends: three axes"): each config string names the
object that implements its axis's Protocol by import path (a training or rollout backend's
``rlhf.backends.<axis>.<name>.descriptor:BACKEND``), and the package it needs with the pip extra that installs it.
Declared here, in spec/, because validation checks the names and the packages before anything starts; spec reaches
a backend's rules through its line (:func:`load`), never by importing it by name, and each axis's runtime registry
(e.g. rlhf.tracking.registry) reads its table from here.
Adding a backend: its folder, its conf/ file and one line in its axis's table below; a package outside rlhf adds
its line through an entry point of the axis's group (:data:`ENTRY_POINTS`), read when this module is imported, so
before the schema (rlhf.spec.schema) builds ``trainer`` and ``rollout`` with a sub-section per line that names one.
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
    # training and rollout axes: the frozen dataclass of its own keys, "module:Class" ("" when it has none), a module
    # importing only rlhf.spec.keys; the schema adds it as the sub-section <trainer|rollout>.<name>. Named by a string
    # so that the schema loads it without importing the descriptor (which imports the schema).
    section: str = ""


# trainer.backend: rlhf.backends.contract.training.TrainBackend (the object the module exposes as BACKEND)
# The order of a table is the order of its backends' sub-sections in the schema (and in docs/reference/config.md).
TRAIN_BACKENDS: dict[str, Backend] = {
    "deepspeed": Backend("rlhf.backends.train.deepspeed.descriptor:BACKEND", "deepspeed"),
    "fsdp2": Backend(
        "rlhf.backends.train.fsdp2.descriptor:BACKEND", section="rlhf.backends.train.fsdp2.config:FSDP2Spec"
    ),
}

# rollout.backend: rlhf.backends.contract.rollout.RolloutBackend (the object the module exposes as BACKEND). vLLM's
# package is looked for in the engine's own interpreter (rlhf.backends.rollout.vllm.interpreter), not in this one.
ROLLOUT_BACKENDS: dict[str, Backend] = {
    "vllm": Backend(
        "rlhf.backends.rollout.vllm.descriptor:BACKEND",
        extra="vllm",
        lora_adapter=True,
        section="rlhf.backends.rollout.vllm.config:VLLMSpec",
    ),
    "hf": Backend(
        "rlhf.backends.rollout.hf.descriptor:BACKEND",
        lora_adapter=True,
        in_process=True,
        section="rlhf.backends.rollout.hf.config:HFRolloutSpec",
    ),
}

# logging.trackers: rlhf.tracking.protocol.Tracker
TRACKERS: dict[str, Backend] = {
    "mlflow": Backend("rlhf.tracking.mlflow_tracker:MlflowTracker", "mlflow"),
    "tensorboard": Backend("rlhf.tracking.tensorboard_tracker:TensorBoardTracker", "tensorboard", "tensorboard"),
    "wandb": Backend("rlhf.tracking.wandb_tracker:WandbTracker", "wandb", "wandb"),
    "console": Backend("rlhf.tracking.console_tracker:ConsoleTracker"),
}


class Names(Sequence[str]):
    """The config strings of one registry table in alphabetical order (as messages list them), read from the table
    each time (a key's ``choices``, rlhf.spec.names): a line added to the table after import is a valid value at
    once, as on the tracker axis, instead of being refused by a tuple copied when rlhf.spec.names loaded."""

    def __init__(self, table: Mapping[str, Backend]) -> None:
        self._table = table

    def __getitem__(self, i: Any) -> Any:
        return tuple(sorted(self._table))[i]

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._table))

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __repr__(self) -> str:
        return repr(tuple(sorted(self._table)))


def load(key: str, what: str, table: Mapping[str, Backend], name: str) -> Any:
    """The object a registry line of ``table`` names (``module:attr``: a backend's descriptor), imported on first
    use; a ValueError naming ``key`` and the valid names when ``name`` has no line. How the spec reaches a
    backend's rules without naming the backend: by its config string, through its line."""
    try:
        target = table[name]
    except KeyError:
        raise ValueError(f"{key}={name!r}: not {what}; valid: {', '.join(sorted(table))}") from None
    if target.target not in _LOADED:  # the planner's search asks hundreds of thousands of times
        module, attr = target.target.split(":")
        _LOADED[target.target] = getattr(importlib.import_module(module), attr)
    return _LOADED[target.target]


_LOADED: dict[str, Any] = {}  # registry target ("module:attr") -> the object it names


def section_class(line: Backend) -> type | None:
    """The dataclass of a line's own keys (its ``section``, imported), or None when it has none."""
    if not line.section:
        return None
    module_name, attr = line.section.split(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, attr, None)
    if cls is None and getattr(getattr(module, "__spec__", None), "_initializing", False):
        # Importing the section's module first imports the rlhf.spec package, which builds the schema, which needs
        # the class this module has not yet defined.
        raise ImportError(
            f"{line.section}: its module was imported before rlhf.spec.schema, which adds it to the schema; import "
            "rlhf.spec.schema (or reach the section through the schema) first"
        )
    if cls is None:
        raise ImportError(f"{line.section}: {module_name} has no {attr} (the registry line of {line.target})")
    return cls


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


#: The entry-point group of each table. A package outside rlhf registers a backend by declaring, in its metadata, an
#: entry point named by the config string in the axis's group and pointing at its :class:`Backend` line, e.g. in
#: entry_points.txt::
#:
#:     [rlhf.rollout_backends]
#:     sglang = rlhf_sglang.lines:SGLANG
#:
#: Read once, when this module is imported (the module the entry point names should import no more of rlhf than
#: this module): before rlhf.spec.schema is built, so that the line's ``section`` is a sub-section of the schema.
ENTRY_POINTS: dict[str, dict[str, Backend]] = {
    "rlhf.train_backends": TRAIN_BACKENDS,
    "rlhf.rollout_backends": ROLLOUT_BACKENDS,
    "rlhf.trackers": TRACKERS,
}


def group_of(table: Mapping[str, Backend]) -> str:
    """The entry-point group through which a package outside rlhf adds lines to ``table``."""
    return next(group for group, t in ENTRY_POINTS.items() if t is table)


def _register_entry_points() -> None:
    from importlib.metadata import entry_points

    declared = entry_points()  # one scan of the installed distributions (each costs tens of ms), then each group
    for group, table in ENTRY_POINTS.items():
        for ep in declared.select(group=group):
            dist = f" of {ep.dist.name}" if ep.dist is not None else ""
            where = f"entry point {ep.name} = {ep.value} (group {group}{dist})"
            try:
                line = ep.load()
            except Exception as e:  # a plug-in that cannot load is named, not skipped
                raise ImportError(f"{where} cannot be loaded: {type(e).__name__}: {e}") from e
            if not isinstance(line, Backend):
                raise TypeError(f"{where} names a {type(line).__name__}, not an rlhf.spec.registry.Backend line")
            if table.get(ep.name, line) != line:
                raise ValueError(f"{where}: {ep.name!r} is registered already, by {table[ep.name].target}: rename it")
            table[ep.name] = line


_register_entry_points()
