"""``rollout.toy.*``: the toy rollout backend's own keys, named by its registry line (toy_registry.ROLLOUT's
``section``); the schema adds them to ``rollout`` as the sub-section ``toy``. Imports only rlhf.spec.keys."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec.keys import key


@dataclass(frozen=True)
class ToyRolloutSpec:
    """rollout.backend=toy: the toy plug-in's own keys."""

    max_batch: int = key(
        512,
        "sequences per generate call of the toy engine (the hf engine's is 512); more are generated in waves, "
        "which the cost model counts",
        ge=1,
    )
