"""Ray actor classes per role: thin hosts of engines; what they compute comes from the pipelines.

One class, :class:`EngineWorker`, serves every role of the training backend (``trainer.backend``: DeepSpeed or
FSDP2): a rank hosts at most one trained model (``init_trained``: policy, critic, SFT/RM/DPO model) and any number of
frozen ones (``init_frozen``: reference, reward), so colocated roles can share one process. ``TrainerWorker`` and
``ModelWorker`` name the two uses (the names load lazily). A rollout engine's actor is its backend's
(rlhf.backends.rollout.<name>.actor).
"""

from typing import Any

__all__ = ["EngineWorker", "ModelWorker", "TrainerWorker"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlhf.workers.model_worker import EngineWorker

        # a rank with a trained model (and possibly frozen ones fused in), or with frozen models only
        return EngineWorker
    raise AttributeError(name)
