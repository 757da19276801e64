"""``trainer.toy.*``: the toy training backend's own keys, named by its registry line (toy_registry.TRAIN's
``section``); the schema adds them to ``trainer`` as the sub-section ``toy``. Imports only rlhf.spec.keys."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec.keys import key


@dataclass(frozen=True)
class ToyTrainSpec:
    """trainer.backend=toy: the toy plug-in's own keys (DeepSpeed's keys stay DeepSpeed's, at trainer.*)."""

    label: str = key(
        "toy",
        "the word the toy backend's plan line and --auto label start with (what the plug-in reads)",
        nonempty=True,
    )
