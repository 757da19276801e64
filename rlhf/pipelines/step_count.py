"""How many steps a run trains, and why: one pass over the training data gives ``rows // per_step`` steps, the
passes (``trainer.num_episodes`` for RL, ``trainer.epochs`` for SFT/RM/DPO) multiply it, and ``trainer.max_steps``
caps it. When the data gives fewer steps than ``trainer.max_steps`` asks for, the run trains fewer, and the line
printed before the first step (and logged as the ``run.steps`` / ``run.steps_why`` parameters) says so."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.errors import UserError


@dataclass(frozen=True)
class StepCount:
    """The steps of one run and what decided them."""

    steps: int  # what the run trains, an SFT warm-up included
    rows: int  # training rows: prompts (RL) or samples / pairs (SFT, RM, DPO)
    unit: str  # what a row is, for the line: "prompts", "samples", "pairs"
    per_step: int  # rows one step takes
    per_step_key: str  # the key that says so: rollout.prompts_per_step or trainer.global_batch
    passes: int  # passes over the data
    passes_key: str  # trainer.num_episodes or trainer.epochs
    max_steps: int | None  # trainer.max_steps (null: the passes decide)
    warmup: int = 0  # sft_warmup.steps before the first RL step

    @property
    def per_pass(self) -> int:
        return self.rows // self.per_step

    @property
    def from_data(self) -> int:
        """The steps the data and the passes give, before trainer.max_steps."""
        return self.per_pass * self.passes

    @property
    def main(self) -> int:
        """The steps after the warm-up (RL steps; every step outside RL)."""
        return self.steps - self.warmup

    def _data(self) -> str:
        left = self.rows - self.per_pass * self.per_step
        unused = f" ({left} left over each pass)" if left else ""
        passes = "pass" if self.passes == 1 else "passes"
        return (
            f"{self.rows} {self.unit} / {self.per_step} per step ({self.per_step_key}) = {self.per_pass} per pass"
            f"{unused} x {self.passes} {passes} ({self.passes_key})"
        )

    def why(self) -> str:
        """What decided the count, in one phrase (the ``run.steps_why`` parameter)."""
        if self.max_steps and self.max_steps <= self.from_data:
            return f"trainer.max_steps={self.max_steps} (the data would give {self.from_data}: {self._data()})"
        if self.max_steps:
            return (
                f"not trainer.max_steps={self.max_steps}: the data gives only {self._data()}; raise "
                f"{self.passes_key} (or add data) to train longer"
            )
        return self._data()

    def line(self) -> str:
        """The line printed before the first step."""
        if self.warmup:
            return f"steps: {self.steps} = {self.warmup} SFT warm-up (sft_warmup.steps) + {self.main} RL, {self.why()}"
        return f"steps: {self.steps}, {self.why()}"

    def params(self) -> dict[str, str]:
        """What every tracker keeps with a new run, beside the resolved config."""
        return {"run.steps": str(self.steps), "run.steps_why": self.why()}


def count_steps(
    rows: int,
    per_step: int,
    per_step_key: str,
    passes: int,
    passes_key: str,
    max_steps: int | None,
    *,
    unit: str,
    warmup: int = 0,
) -> StepCount:
    """The steps ``rows`` training rows give at ``per_step`` a step; a UserError naming the keys when they cannot
    fill one step."""
    if rows // per_step == 0:
        raise UserError(
            f"data.train_files: {rows} {unit} cannot fill one {per_step_key}={per_step}; lower it or add data"
        )
    per_pass = rows // per_step
    main = min(per_pass * passes, max_steps) if max_steps else per_pass * passes
    return StepCount(main + warmup, rows, unit, per_step, per_step_key, passes, passes_key, max_steps, warmup)
