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

from rlhf.errors import UserError
from rlhf.pipelines.batching import EvalShards, per_rank_micro_batches, redistribute
from rlhf.pipelines.checkpoint import CheckpointManager
from rlhf.pipelines.run_files import run_artifacts
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
    extra: dict[str, Any] = field(default_factory=dict)


class Workers:
    """The policy group and, where the task needs one, the reference (fused into the policy's processes when
    the plan colocates them with the same ranks, else its own group)."""

    def __init__(self, spec: ExperimentSpec, realized: Any, task: Task, total_steps: int) -> None:
        from rlhf.workers import ModelWorker, TrainerWorker

        self.reference = None
        need_ref = task.reference_fn is not None
        fused = need_ref and realized.can_fuse("policy", "reference")
        self.policy = realized.create_group(
            "policy", TrainerWorker, spec, "policy", fused=("reference",) if fused else ()
        )
        ref_path = spec.reference.model_path or None
        if need_ref and not fused:
            self.reference = realized.create_group("reference", ModelWorker, spec, "reference")
        # Start building every model before waiting on any: the groups initialise in parallel.
        refs = self.policy.async_run_all(
            "init_trained", kind=task.model_kind, total_steps=total_steps, init_value_head=task.init_value_head
        )
        if self.reference is not None:
            ref_refs = self.reference.async_run_all(
                "init_frozen", "reference", model_path=ref_path, offload=spec.reference.offload
            )
            self.reference.get(ref_refs, "init_frozen")
        self.info = self.policy.get(refs, "init_trained")[0]
        if fused:
            self.policy.run_all("init_frozen", "reference", model_path=ref_path, offload=spec.reference.offload)
            self.reference = self.policy

    @property
    def dp(self) -> int:
        return len(self.policy)

    def attach_reference(self, fn: Callable, per_rank: list[list[dict]]) -> list[list[dict]]:
        """Run the reference on every micro-batch and merge its per-sample outputs into the batches."""
        group = self.reference
        split, back = (per_rank, lambda r: r) if len(group) == len(per_rank) else redistribute(per_rank, len(group))
        results = back(group.run_per_rank("forward", [(fn, batches, "reference") for batches in split]))
        return [[{**b, **r} for b, r in zip(bs, rs, strict=True)] for bs, rs in zip(per_rank, results, strict=True)]


def _steps(spec: ExperimentSpec, n_train: int) -> tuple[int, int]:
    t = spec.trainer
    per_epoch = n_train // t.global_batch
    if per_epoch == 0:
        raise UserError(
            f"data.train_files: {n_train} training samples cannot fill one trainer.global_batch={t.global_batch}; "
            f"lower trainer.global_batch or add data"
        )
    total = per_epoch * t.epochs
    if t.max_steps:
        total = min(total, t.max_steps)
    return per_epoch, total


def run_supervised(
    spec: ExperimentSpec, plan: Any, run_dir: Path, make_task: Callable[[ExperimentSpec, Any], Task], realize: Callable
) -> dict[str, Any]:
    """Train the task ``make_task(spec, tokenizer)`` as ``spec`` says; ``realize(spec, plan)`` gives the Ray
    placement (rlhf.launch.realize.realize)."""
    from rlhf.data import ResumableSampler, build_datasets
    from rlhf.models.loading import tokenizer_for
    from rlhf.tracking import Progress, Tracker, summary_lines

    t_start = time.time()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    t = spec.trainer
    # Data before processes: a bad row stops the job here, naming file, row and key.
    tokenizer = tokenizer_for(spec.model)
    task = make_task(spec, tokenizer)
    splits = build_datasets(spec, tokenizer, task.data_kind)
    print(splits.summary(), file=sys.stderr)
    train, evalset = splits.train, splits.eval
    steps_per_epoch, total = _steps(spec, len(train))
    sampler = ResumableSampler(len(train), t.global_batch, seed=spec.seed, shuffle=True, drop_last=True)

    ckpt_root = Path(spec.checkpoint.dir)
    ckpt = CheckpointManager(ckpt_root if ckpt_root.is_absolute() else run_dir / ckpt_root, spec.checkpoint.max_keep)
    resume_from = ckpt.resolve_resume(spec.checkpoint.resume)
    state = ckpt.driver_state(resume_from) if resume_from else {}
    tracker = Tracker(spec, run_dir, run_id=state.get("mlflow_run_id"))
    ok = False
    realized = None
    try:
        tracker.rewind(int(state["step"]) if state else -1)  # a fresh run starts an empty metrics.jsonl
        tracker.log_artifacts(run_artifacts(spec, plan, run_dir))
        if not state:
            for report in splits.reports:
                tracker.log(report.as_metrics(), 0)
        realized = realize(spec, plan)
        workers = Workers(spec, realized, task, total)
        dp, micro = workers.dp, t.micro_batch_per_device
        start = 0
        if resume_from:
            workers.policy.run_all("load_checkpoint", str(resume_from))
            sampler.load_state_dict(state["sampler"])
            start = int(state["step"])
            print(f"resumed from {resume_from} at step {start}", file=sys.stderr)

        def evaluate(step: int) -> dict[str, float]:
            if evalset is None:
                return {}
            shards = EvalShards.build(len(evalset), dp, micro)
            batches = shards.batches(evalset, task.collate)
            if task.reference_fn is not None:
                batches = workers.attach_reference(task.reference_fn, batches)
            out = workers.policy.run_per_rank("forward", [(task.eval_fn, b, None) for b in batches])
            metrics = {f"eval/{k}": v for k, v in task.eval_metrics(shards.gather(out)).items()}
            tracker.log(metrics, step)
            return metrics

        def save(step: int) -> Path:
            tmp = ckpt.begin(step)
            workers.policy.run_all("save_checkpoint", str(tmp), {"step": step})
            if spec.checkpoint.save_hf_every_checkpoint:
                workers.policy.run_all("save_hf", str(tmp / "hf"))
            return ckpt.commit(
                tmp,
                step,
                {"step": step, "sampler": sampler.state_dict(), "mlflow_run_id": tracker.run_id, "family": task.family},
            )

        last_eval = evaluate(0) if start == 0 else {}
        progress = Progress(total, start, f"{task.family} train", task.progress_keys, spec.logging.progress)
        if last_eval:
            progress.write("step 0: " + ", ".join(f"{k}={v:.4g}" for k, v in last_eval.items()))
        last_ckpt = resume_from
        eval_every = spec.eval.steps if spec.eval.steps > 0 else steps_per_epoch
        for step in range(start + 1, total + 1):
            rows = train.rows(sampler.next_indices())
            per_rank = per_rank_micro_batches(rows, dp, micro, task.collate)
            if task.reference_fn is not None:
                per_rank = workers.attach_reference(task.reference_fn, per_rank)
            result = workers.policy.run_per_rank("train_step", [(mbs, task.loss_fn, task.mask_key) for mbs in per_rank])
            metrics = {f"train/{k}": v for k, v in result[0].items()}
            metrics["train/epoch"] = sampler.epoch + sampler.position / len(train)
            tracker.log(metrics, step)
            progress.update(metrics)
            if step % eval_every == 0 or step == total:
                last_eval = evaluate(step)
                progress.write(f"step {step}: " + ", ".join(f"{k}={v:.4g}" for k, v in last_eval.items()))
            if spec.checkpoint.save_steps > 0 and (step % spec.checkpoint.save_steps == 0 or step == total):
                last_ckpt = save(step)
        progress.close()
        if not last_eval:
            last_eval = evaluate(total)
        model_dir = run_dir / spec.checkpoint.output_dir
        updates = task.final_config(last_eval) if task.final_config and last_eval else None
        workers.policy.run_all("save_hf", str(model_dir), updates)
        result = {
            "family": task.family,
            "steps": total,
            "seconds": time.time() - t_start,
            "model_dir": str(model_dir),
            "checkpoint": str(last_ckpt) if last_ckpt else None,
            "mlflow_run_id": tracker.run_id,
            "tracking_uri": tracker.tracking_uri if tracker.run_id else None,
            "final_metrics": last_eval,
            "run_dir": str(run_dir),
        }
        for line in summary_lines(result):
            print(line, file=sys.stderr)
        ok = True
        return result
    finally:
        tracker.finish(ok)
        if realized is not None:
            realized.shutdown()
