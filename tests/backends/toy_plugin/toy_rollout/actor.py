"""The toy rollout backend's engine actor (descriptor.py names it): the hf engine under the toy's name."""

from __future__ import annotations

from rlhf.backends.rollout.hf.actor import HFRolloutWorker


class ToyRolloutWorker(HFRolloutWorker):
    backend = "toy"  # what ready() and ping() report
