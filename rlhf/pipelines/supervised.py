"""The loop SFT, RM and DPO share: data first (bad rows fail before any process starts), then the actor groups,
then optimizer steps with evaluation, atomic checkpoints and resume, and the final Hugging Face model.

The driver owns the data order (a seeded ResumableSampler whose position is saved in every checkpoint) and cuts
each global batch into per-rank micro-batches; the ranks only run forward/backward. A task (sft.py, rm.py, dpo.py)
supplies the collate function, the loss, the per-sample eval outputs and how they become metrics.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf.pipelines.batching import (
    EvalShards,
    micro_batch_tokens,
    per_rank_micro_batches,
    redistribute,
    throughput,
)
from rlhf.pipelines.role_set import RoleModels, RoleSet, build_roles
from rlhf.pipelines.step_count import StepCount, count_steps
from rlhf.spec.schema import ExperimentSpec

log = logging.getLogger(__name__)


@dataclass
class Task:
    """What differs between SFT, RM and DPO."""

    family: str
    data_kind: str  # rlhf.data kind: sft | preference | kto
    model_kind: str  # causal_lm | reward
    collate: Callable[[list[dict[str, Any]]], dict[str, Any]]
    loss_fn: Callable  # (model, micro_batch, normalizer) -> (loss, metrics); runs on the ranks
    mask_key: str | None  # micro-batch key of the step-window token normaliser; None for sequence-level losses
    eval_fn: Callable  # (model, batch) -> {name: per-sample tensor}; runs on the ranks
    eval_metrics: Callable[[dict[str, Any]], dict[str, float]]  # per-sample outputs of the whole eval set -> metrics
    progress_keys: tuple[str, ...] = ("train/loss",)
    init_value_head: bool = False
    reference_fn: Callable | None = None  # (model, batch) -> {name: per-sample tensor} merged into each batch
    final_config: Callable[[dict[str, float]], dict[str, Any]] | None = None  # config.json updates (RM mean/std)
    # a row's tokens, for token-budget micro-batches (trainer.max_tokens_per_micro_batch); None: fixed-size only
    row_tokens: Callable[[dict[str, Any]], int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def start_roles(spec: ExperimentSpec, realized: Any, task: Task, total_steps: int) -> RoleSet:
    """The plan's roles (rlhf.pipelines.role_set): the policy and, for a task with a reference (DPO's losses but the
    reference-free ones), the reference, fused into the policy's processes when the plan colocates them with the
    same ranks, else its own group."""
    has_ref = "reference" in realized.plan.roles
    if has_ref != (task.reference_fn is not None):
        raise RuntimeError(
            f"{task.family}: the plan's roles {tuple(realized.plan.roles)} "
            f"{'have' if has_ref else 'lack'} a reference the task {'does not use' if has_ref else 'needs'}"
        )
    models = RoleModels(total_steps, policy_kind=task.model_kind, init_value_head=task.init_value_head)
    return build_roles(spec, realized, models)


def attach_reference(roles: RoleSet, fn: Callable, per_rank: list[list[dict]]) -> list[list[dict]]:
    """Run the reference on every micro-batch and merge its per-sample outputs into the batches."""
    group = roles.reference
    dp = group.data_parallel
    split, back = (per_rank, lambda r: r) if dp == len(per_rank) else redistribute(per_rank, dp)
    results = back(group.run_per_rank("forward", [(fn, batches, "reference") for batches in split]))
    return [[{**b, **r} for b, r in zip(bs, rs, strict=True)] for bs, rs in zip(per_rank, results, strict=True)]


def train_rows(roles: RoleSet, task: Task, rows: list[dict[str, Any]], micro: int, max_tokens: int = 0) -> dict:
    """One optimizer step of ``task`` on ``rows`` (a global batch) through the policy's train_step: the driver cuts
    them into per-rank micro-batches (of ``micro`` rows, or by a token budget of ``max_tokens`` when the task counts
    its rows' tokens), merges the reference's outputs where the task has one; rank 0's metrics, unprefixed. The step
    of SFT, RM and DPO, and of the SFT warm-up before RL (rlhf.pipelines.sft_warmup)."""
    policy = roles.policy
    budget = micro_batch_tokens(policy, max_tokens)
    per_rank = per_rank_micro_batches(
        rows, policy.data_parallel, micro, task.collate, max_tokens=budget, row_tokens=task.row_tokens
    )
    if task.reference_fn is not None:
        per_rank = attach_reference(roles, task.reference_fn, per_rank)
    return dict(policy.run_per_rank("train_step", [(mbs, task.loss_fn, task.mask_key) for mbs in per_rank])[0])


# One non-empty row per pair: the step-window normaliser of this key counts the step's pairs (step_share).
PAIR_KEY = "chosen_attention_mask"


def pair_tokens(row: dict[str, Any]) -> int:
    """A preference row's tokens: chosen and rejected stay in one micro-batch (one forward over both)."""
    return len(row["chosen_ids"]) + len(row["rejected_ids"])


def step_share(batch_size: int, norm: Any) -> Any:
    """The factor that turns a micro-batch's mean over its ``batch_size`` samples into its share of the whole
    step's mean: ``batch_size x ranks / (samples in the step / micro-batches)``, with the step-window normaliser of a
    task whose ``mask_key`` has one non-empty row per sample. 1 when every micro-batch holds the same number of
    samples; with token-budget micro-batches (different sizes) the gradient stays that of the step's mean."""
    if norm is None or norm.global_batch_size is None:
        return 1.0
    return batch_size * norm.dp_size / norm.global_batch_size


def _steps(spec: ExperimentSpec, n_train: int, unit: str) -> StepCount:
    """Optimizer steps: the batches a pass takes, times trainer.epochs, capped by trainer.max_steps."""
    t = spec.trainer
    return count_steps(
        n_train, t.global_batch, "trainer.global_batch", t.epochs, "trainer.epochs", t.max_steps, unit=unit
    )


class SupervisedRecipe:
    """SFT, RM and DPO as a recipe of rlhf.pipelines.lifecycle: a task (sft.py, rm.py, dpo.py) says what differs;
    the Runner owns resume, checkpoints, restarts, signals and tracking."""

    def __init__(self, spec: ExperimentSpec, run_dir: Path, make_task: Callable[[ExperimentSpec, Any], Task]) -> None:
        self.spec, self.run_dir, self.make_task = spec, Path(run_dir), make_task
        self.workers: RoleSet | None = None
        self.last_eval: dict[str, float] = {}
        self.init_origin: dict[str, str] | None = None  # checkpoint.init_from: the tracker's init_from.* params

    def prepare(self) -> StepCount:
        from dataclasses import replace

        from rlhf.data import build_datasets
        from rlhf.models.loading import tokenizer_for
        from rlhf.pipelines.init_from import starting_weights, value_head_trained

        # checkpoint.init_from: the spec the ranks load names the starting weights (checked, made loadable here).
        self.spec, self.init_origin = starting_weights(self.spec, self.run_dir)
        spec = self.spec
        # Data before processes: a bad row stops the job here, naming file, row and key.
        self.tokenizer = tokenizer_for(spec.model)
        self.task = self.make_task(spec, self.tokenizer)
        if self.init_origin and self.task.init_value_head and value_head_trained(spec.model.path):
            self.task = replace(self.task, init_value_head=False)  # an RM started from an RM keeps its trained head
        self.family = self.task.family
        self.label = f"{self.task.family} train"
        self.progress_keys = self.task.progress_keys
        self.splits = build_datasets(spec, self.tokenizer, self.task.data_kind)
        print(self.splits.summary(), file=sys.stderr)
        unit = {"sft": "samples", "preference": "pairs"}.get(self.task.data_kind, "examples")
        count = _steps(spec, len(self.splits.train), unit)
        self.steps_per_epoch, self.total = count.per_pass, count.steps
        self.reset()
        return count

    def reset(self) -> None:
        from rlhf.data import ResumableSampler

        t = self.spec.trainer
        self.sampler = ResumableSampler(
            len(self.splits.train), t.global_batch, seed=self.spec.seed, shuffle=True, drop_last=True
        )

    def setup(self, realized: Any) -> None:
        self.workers = start_roles(self.spec, realized, self.task, self.total)

    def teardown(self) -> None:
        return None

    def recover(self, failure: Any) -> bool:
        return False  # only training ranks here: the Runner restarts them from the checkpoint

    def _evaluate(self) -> dict[str, float]:
        evalset, task, workers = self.splits.eval, self.task, self.workers
        if evalset is None:
            return {}
        dp = workers.policy.data_parallel
        shards = EvalShards.build(len(evalset), dp, self.spec.trainer.micro_batch_per_device)
        batches = shards.batches(evalset, task.collate)
        if task.reference_fn is not None:
            batches = attach_reference(workers, task.reference_fn, batches)
        out = workers.policy.run_per_rank("forward", [(task.eval_fn, b, None) for b in batches])
        # Prefixed as logged: final_metrics, the RM's stored mean/std and sweep objectives read these names.
        self.last_eval = {f"eval/{k}": v for k, v in task.eval_metrics(shards.gather(out)).items()}
        return dict(self.last_eval)

    def initial_eval(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for report in self.splits.reports:
            metrics.update(report.as_metrics())
        metrics.update(self._evaluate())
        return metrics

    def step(self, step: int) -> dict[str, float]:
        t, task, workers, train = self.spec.trainer, self.task, self.workers, self.splits.train
        rows = train.rows(self.sampler.next_indices())
        t0 = time.perf_counter()
        result = train_rows(workers, task, rows, t.micro_batch_per_device, t.max_tokens_per_micro_batch)
        real = float(sum(task.row_tokens(r) for r in rows)) if task.row_tokens is not None else 0.0
        result.update(throughput(result, real, time.perf_counter() - t0))
        metrics = {f"train/{k}": v for k, v in result.items()}
        metrics["train/epoch"] = self.sampler.epoch + self.sampler.position / len(train)
        eval_every = self.spec.eval.steps if self.spec.eval.steps > 0 else self.steps_per_epoch
        if step % eval_every == 0 or step == self.total:
            metrics.update(self._evaluate())
        return metrics

    def state(self, step: int) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict()}

    def save(self, folder: Path, step: int) -> None:
        self.workers.policy.run_all("save_checkpoint", str(folder), {"step": step})
        if self.spec.checkpoint.save_hf_every_checkpoint:
            self.workers.policy.run_all("save_hf", str(folder / "hf"))

    def load(self, folder: Path, state: dict[str, Any]) -> None:
        self.workers.policy.run_all("load_checkpoint", str(folder))
        self.sampler.load_state_dict(state["sampler"])

    def finish(self) -> dict[str, Any]:
        if not self.last_eval:
            self._evaluate()
        model_dir = self.run_dir / self.spec.checkpoint.output_dir
        task = self.task
        updates = task.final_config(self.last_eval) if task.final_config and self.last_eval else None
        self.workers.policy.run_all("save_hf", str(model_dir), updates)
        return {"model_dir": str(model_dir), "final_metrics": self.last_eval}


def run_supervised(
    spec: ExperimentSpec, plan: Any, run_dir: Path, make_task: Callable[[ExperimentSpec, Any], Task], realize: Callable
) -> dict[str, Any]:
    """Train the task ``make_task(spec, tokenizer)`` as ``spec`` says; ``realize(spec, plan)`` gives the Ray
    placement (rlhf.launch.realize.realize)."""
    from rlhf.pipelines.lifecycle import Runner

    return Runner(spec, plan, run_dir, realize, SupervisedRecipe(spec, run_dir, make_task)).run()
