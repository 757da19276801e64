"""The toy training backend's own checkpoint layout, which only its answers read (rlhf names nothing of it): in a
trained role's folder of a step checkpoint, the whole model in one file of its own, and the DeepSpeed engine it runs
on saved one folder down, where a resume finds it (toy_train/engine.py writes both)::

    weights.pt     the module's full state dict (its own names, CPU tensors), written by rank 0
    engine/        DeepSpeed's checkpoint (ds/, each rank's RNG state): what the toy's engine loads on resume

No torch at import (the preflight asks :func:`checkpoint_weights`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf.backends.contract.training import SavedWeights

WEIGHTS = "weights.pt"
ENGINE = "engine"


def checkpoint_weights(folder: Path) -> SavedWeights:
    path = Path(folder) / WEIGHTS
    if not path.is_file():
        return SavedWeights(
            path,
            f"{folder} holds no toy weights ({WEIGHTS}, which trainer.backend=toy writes): the checkpoint is "
            "incomplete",
        )
    return SavedWeights(path)


def checkpoint_state_dict(folder: Path) -> dict[str, Any]:
    import torch

    found = checkpoint_weights(folder)
    if found.problem:
        raise FileNotFoundError(found.problem)
    return torch.load(found.where, map_location="cpu", weights_only=True)
