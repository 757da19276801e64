"""The SFT warm-up before RL (``sft_warmup.*``) as a phase of the run lifecycle (rlhf.pipelines.lifecycle.Phase):
the run's first ``sft_warmup.steps`` steps are the SFT pipeline's step (rlhf.pipelines.supervised.train_rows with
the shipped SFT task's collate and loss) on the warm-up pairs, through the policy's own train_step (the same engine
and optimizer; trainer.global_batch samples per step), logged as ``sft/*``. The RL recipe that owns the actors adds
what the hand-over needs (evals with its engines, the warmed-up reference) through ``after_step``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rlhf.errors import UserError
from rlhf.spec.schema import ExperimentSpec

# The checkpoint's driver-state key of the warm-up's data position (checkpoints written before the phase existed
# used the same key, so they resume alike).
STATE_KEY = "sft_sampler"


class SFTWarmup:
    """Phase ``sft warm-up``: data built (and checked) at construction, before any process starts; ``roles`` (the
    recipe's rlhf.pipelines.role_set.RoleSet) set once the actors run."""

    name = "sft warm-up"
    state_key = STATE_KEY

    def __init__(
        self,
        spec: ExperimentSpec,
        tokenizer: Any,
        after_step: Callable[[int, dict[str, float]], dict[str, float]] | None = None,
    ) -> None:
        from dataclasses import replace

        from rlhf.data import DataError, build_datasets
        from rlhf.pipelines.sft import make_task

        w = spec.sft_warmup
        data = replace(
            spec.data,
            train_files=list(w.train_files),
            train_probs=None,
            eval_files=[],
            eval_fraction=0.0,
            input_key=w.input_key,
            output_key=w.output_key,
            label_key=None,
        )
        sft_spec = replace(spec, data=data)
        self.task = make_task(sft_spec, tokenizer)
        try:
            self.train = build_datasets(sft_spec, tokenizer, "sft").train
        except DataError as e:  # the loader names data.*_key; here the columns are the warm-up's own keys
            msg = str(e)
            for k in ("input_key", "output_key"):
                msg = msg.replace(f"data.{k}", f"sft_warmup.{k}")
            raise DataError(msg) from None
        print(f"sft warm-up: {w.steps} steps over {len(self.train)} pairs", file=sys.stderr)
        if len(self.train) < spec.trainer.global_batch:
            raise UserError(
                f"sft_warmup.train_files: {len(self.train)} pairs cannot fill one trainer.global_batch="
                f"{spec.trainer.global_batch}; add pairs or lower the batch"
            )
        self.spec, self.steps = spec, w.steps
        self.after_step = after_step
        self.roles: Any = None
        self.reset()

    def reset(self) -> None:
        from rlhf.data import ResumableSampler

        self.lr_set = False
        t = self.spec.trainer
        self.sampler = ResumableSampler(
            len(self.train), t.global_batch, seed=self.spec.seed, shuffle=True, drop_last=True
        )

    def step(self, step: int) -> dict[str, float]:
        """Run step ``step`` (1..steps): one SFT step at sft_warmup.lr (trainer.lr again after the last)."""
        from rlhf.pipelines.supervised import train_rows

        policy, lr = self.roles.policy, self.spec.sft_warmup.lr
        if lr is not None and not self.lr_set:
            policy.run_all("set_peak_lr", lr)
            self.lr_set = True
        rows = self.train.rows(self.sampler.next_indices())
        result = train_rows(self.roles, self.task, rows, self.spec.trainer.micro_batch_per_device)
        out = {f"sft/{k}": v for k, v in result.items()}
        if step == self.steps and lr is not None:
            policy.run_all("set_peak_lr", self.spec.trainer.lr)
        return self.after_step(step, out) if self.after_step is not None else out

    def state(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)
