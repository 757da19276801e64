"""Ray actor classes per role: thin hosts of engines; what they compute comes from the pipelines.

One class, :class:`EngineWorker`, serves every DeepSpeed role: a rank hosts at most one trained model
(``init_trained``: policy, critic, SFT/RM/DPO model) and any number of frozen ones (``init_frozen``: reference,
reward), so colocated roles can share one process. ``TrainerWorker`` and ``ModelWorker`` name the two uses.
"""

from rlhf.workers.model_worker import EngineWorker

TrainerWorker = EngineWorker  # a rank with a trained model (and possibly frozen ones fused in)
ModelWorker = EngineWorker  # a rank with frozen models only (reference, reward)

__all__ = ["EngineWorker", "ModelWorker", "TrainerWorker"]
