"""The toy backends' registry lines: what a new backend adds to rlhf/spec/registry.py, one line per axis (with
``trainer.backend``'s and ``rollout.backend``'s valid names read from those tables). Applied in every process of a
test job by sitecustomize.py (this folder on PYTHONPATH), since the line cannot be written into rlhf's source for
one test."""

from __future__ import annotations

from rlhf.spec.registry import ROLLOUT_BACKENDS, TRAIN_BACKENDS, Backend

LINES = {
    "train": ("toy", Backend("toy_train.descriptor:BACKEND", "deepspeed")),
    "rollout": ("toy", Backend("toy_rollout.descriptor:BACKEND")),
}


def register() -> None:
    TRAIN_BACKENDS.setdefault(*LINES["train"])
    ROLLOUT_BACKENDS.setdefault(*LINES["rollout"])
