"""The registry lines of the three backend axes (DESIGN.md, "Backends: three axes"): each config string names the
class that implements its axis's Protocol by import path, and the package it needs with the pip extra that installs
it. Declared here, in spec/, because validation checks the names and the packages before anything starts, and spec
imports no other part of rlhf; each axis's runtime registry (e.g. rlhf.tracking.registry) reads its table from here.
Adding a backend: its module, its conf/ file and one line in its axis's table below.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    target: str  # "module:Class" implementing the axis's Protocol
    package: str = ""  # the module it imports ("" when the core install has all it needs)
    extra: str = ""  # the pip extra that installs ``package`` ("" when a core dependency does)


# trainer.backend: rlhf.engines.training.TrainBackend (the object the module exposes as BACKEND)
TRAIN_BACKENDS: dict[str, Backend] = {
    "deepspeed": Backend("rlhf.engines.deepspeed_backend:BACKEND", "deepspeed"),
    "fsdp2": Backend("rlhf.engines.fsdp2:BACKEND"),
}

# logging.trackers: rlhf.tracking.protocol.Tracker
TRACKERS: dict[str, Backend] = {
    "mlflow": Backend("rlhf.tracking.mlflow_tracker:MlflowTracker", "mlflow"),
    "tensorboard": Backend("rlhf.tracking.tensorboard_tracker:TensorBoardTracker", "tensorboard", "tensorboard"),
    "wandb": Backend("rlhf.tracking.wandb_tracker:WandbTracker", "wandb", "wandb"),
    "console": Backend("rlhf.tracking.console_tracker:ConsoleTracker"),
}


def missing_package(axis: str, table: dict[str, Backend], name: str) -> str | None:
    """Why backend ``name`` of ``axis`` cannot start here (its package is not installed, with the command that
    installs it), or None."""
    entry = table[name]
    if not entry.package or importlib.util.find_spec(entry.package) is not None:
        return None
    how = f"pip install 'rlhf[{entry.extra}]'" if entry.extra else f"pip install {entry.package}"
    return f"the {name} {axis} needs the {entry.package} package: {how}"
