"""The toy backends' registry lines: what a backend written inside rlhf adds to rlhf/spec/registry.py's tables, one
line per axis. Written outside rlhf, a backend's package declares its lines as entry points (this folder's
rlhf_toy_plugin-0.1.dist-info/entry_points.txt: ``toy = toy_registry:TRAIN`` in group ``rlhf.train_backends``, and
the same for ROLLOUT in ``rlhf.rollout_backends``), which rlhf.spec.registry reads when it is imported: in every
process that has this folder on its import path (PYTHONPATH), before the schema adds each line's section
(``trainer.toy``, ``rollout.toy``). Imports nothing of rlhf but the registry, as an entry point's module should."""

from __future__ import annotations

from rlhf.spec.registry import Backend

TRAIN = Backend("toy_train.descriptor:BACKEND", "deepspeed", section="toy_train.config:ToyTrainSpec")
ROLLOUT = Backend("toy_rollout.descriptor:BACKEND", section="toy_rollout.config:ToyRolloutSpec")
