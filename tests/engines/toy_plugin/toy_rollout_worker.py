"""The toy rollout backend's engine actor (toy_rollout_backend.py names it): the hf engine under the toy's name."""

from __future__ import annotations

from rlhf.workers.rollout_worker import HFRolloutWorker


class ToyRolloutWorker(HFRolloutWorker):
    backend = "toy"  # what ready() and ping() report
