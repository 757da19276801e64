"""The RL roles' collective operations: experience passes, training steps, weight sync and the hybrid engine's
turns. The training-side roles (policy, reference, teacher, critic, reward) are built by rlhf.pipelines.role_set, as
every pipeline's are; the rollout engines (HFRolloutWorker for hf, VLLMRolloutActor in the vllm venv for vllm) by
rlhf.pipelines.rollout_engines, started while the models load.

Weights go from the policy's rank 0 to the engines over the route rlhf.backends.weight_sync.driver chose (a process
group
or shared memory; the driver sees only reports). Experience tensors travel as Ray object references.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from typing import Any

from rlhf.backends.weight_sync.driver import WeightSync
from rlhf.errors import UserError
from rlhf.pipelines.batching import micro_batch_tokens, throughput
from rlhf.pipelines.experience import ExperienceBatch, micro_batch_plan, rank_micro_batches
from rlhf.pipelines.rl_losses import (
    ActorLossSettings,
    actor_loss_fn,
    critic_loss_fn,
    critic_values_fn,
    policy_logprobs_fn,
    policy_scores_fn,
    reward_model_fn,
    rollout_is_weight_totals,
)
from rlhf.pipelines.role_set import RoleModels, load_models, start_role_actors
from rlhf.pipelines.rollout_engines import PolicyEngines, RolloutEngines
from rlhf.spec import names
from rlhf.spec.rollout_backend_rules import generates_in_policy
from rlhf.spec.schema import ExperimentSpec


def _threads(spec: ExperimentSpec) -> dict[str, str]:
    # Colocated roles take turns on the same cores, so each may use all of its bundle's threads.
    hw = spec.hardware
    return {"OMP_NUM_THREADS": str(max(hw.cpus_per_node // hw.devices_per_node, 1))}


def check_teacher_tokenizer(spec: ExperimentSpec, policy_path: str) -> str:
    """The teacher's path, once its tokenizer is known to be the student's. Validation compares local folders
    without loading anything; a student made locally (model.make_local) or a hub name is compared here, when both
    can be read: by their files when both are folders, else by loading both tokenizers' vocabularies."""
    from pathlib import Path

    from rlhf.spec.tokenizer_files import tokenizer_difference

    teacher = spec.teacher.model_path
    student = spec.model.tokenizer_path or policy_path
    local = Path(teacher).expanduser()
    teacher = str(local) if local.exists() else teacher
    if Path(student).is_dir() and Path(teacher).is_dir():
        diff = tokenizer_difference(student, teacher)
    else:
        from transformers import AutoTokenizer

        trust = spec.model.trust_remote_code
        a = AutoTokenizer.from_pretrained(student, trust_remote_code=trust).get_vocab()
        b = AutoTokenizer.from_pretrained(teacher, trust_remote_code=trust).get_vocab()
        diff = None if a == b else f"their vocabularies differ ({len(a)} vs {len(b)} tokens)"
    if diff is not None:
        raise UserError(
            f"teacher.model_path={spec.teacher.model_path}: the teacher must share the student's tokenizer "
            f"({student}), but {diff}"
        )
    return teacher


def reuses_current_logprobs(spec: ExperimentSpec) -> bool:
    """True when the actor makes exactly one optimizer step per rollout and nothing before training needs the old
    log-probs (rlhf.spec.derive.old_logprob_source): the policy's weights when training starts are the weights that
    would recompute them, so the loss takes its own detached log-probs as the old ones (ratio 1, as TRL does) and the
    experience pass skips one forward over every sample."""
    from rlhf.spec.derive import derive

    return derive(spec).old_logprobs == "reuse"


def forward_in_ranks(
    group: Any, fn: Any, exp: ExperienceBatch, name: str | None, micro_batch: int, max_tokens: int = 0
) -> list[Any]:
    """``fn`` over the batch on ``group``: equal shares per data-parallel rank, in micro-batches of ``micro_batch``
    samples or, with ``max_tokens`` (per device), token-budget micro-batches (the same count on every rank); the
    results, concatenated, are in sample order (2-D results right-padded to a common width)."""
    plan = micro_batch_plan(exp, group.data_parallel, micro_batch, micro_batch_tokens(group, max_tokens))
    per_rank = [[exp.select(mb).trimmed().tensors() for mb in rank] for rank in plan]
    results = group.run_per_rank("forward", [(fn, batches, name) for batches in per_rank])
    flat = [x for rank in results for x in rank]
    order = [i for rank in plan for mb in rank for i in mb]
    if order == list(range(len(exp))):
        return flat
    return [_in_sample_order(flat, order)]


def _in_sample_order(parts: list[Any], order: list[int]) -> Any:
    """One tensor of the parts' rows put back in sample order (``order[j]``: the sample of the j-th row); parts of
    more than one axis are right-padded on their last (the tokens: ``[b, w]``, or ``[b, k, w]`` for several scores
    per token)."""
    import torch

    width = max(p.shape[-1] for p in parts) if parts[0].dim() > 1 else None
    rows = torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[-1])) if width else p for p in parts])
    out = torch.empty_like(rows)
    out[torch.as_tensor(order)] = rows
    return out


def takes_turns(spec: ExperimentSpec, rollout_colocated: bool) -> bool:
    """Rollout and training share devices and swap memory (colocated with the policy, rollout.enable_sleep, not
    async): rlhf.planning.memory.sleeps, which the plan's phases follow."""
    ro = spec.rollout
    return ro.enable_sleep and not ro.async_mode and rollout_colocated


def engines_first(spec: ExperimentSpec, rollout_colocated: bool) -> bool:
    """Whether the engines start (and go to sleep) before any trainer loads its model: on GPUs whenever they share
    devices with the trainers, so vLLM's memory profiler, which sizes the KV cache from the device memory it finds
    free at start, does not count the trainers' memory as its own (OpenRLHF's train_ppo_ray creates the engines
    and puts them to sleep before the models load). On CPU there is no device memory to share: both start at once."""
    return rollout_colocated and spec.hardware.accelerator == "gpu"


class HybridSchedule:
    """Who holds the shared devices when, for trainers and engines that take turns (OpenRLHF's order,
    ppo_trainer.broadcast_to_vllm and samples_generator):

        start        engines built first, then asleep (level 1: a step-0 eval generates before any sync)
        generation   trainers' states offloaded (any ZeRO stage), engines' weights and KV cache awake
        train        engines asleep (level 2 when a sync comes next: it overwrites every weight, so none is backed
                     up), trainers' states back
        sync         engines' weights awake, their KV cache still asleep; the received buffers freed after it
    Each change frees the allocator's cache (the trainers' offload and the engines' sync both empty it). With
    ``active`` False (not colocated, async or no sleep) nothing moves. ``offload``/``reload`` act on the trained
    groups; ``engines`` is the RolloutEngines (or, in the rehearsal, its stand-in). ``phase`` and ``history`` say
    what the run did, which the rehearsal compares with the plan's phases."""

    def __init__(self, active: bool, engines: Any, offload: Callable[[], None], reload: Callable[[], None]) -> None:
        self.active = active
        self.engines = engines
        self.offload, self.reload = offload, reload
        self.phase = "start"
        self.engine_tags: set[str] = {"weights", "kv_cache"}
        self.trainers_resident = True
        self.history: list[tuple[str, tuple[str, ...], bool]] = []

    def _mark(self, phase: str) -> None:
        self.phase = phase
        self.history.append((phase, tuple(sorted(self.engine_tags)), self.trainers_resident))

    def engines_started(self) -> None:
        """Right after the engines start, before any trainer loads."""
        if self.active:
            self.engines.sleep(1)
            self.engine_tags = set()
        self._mark("start")

    def begin_generation(self) -> None:
        if self.active:
            if self.trainers_resident:
                self.offload()
                self.trainers_resident = False
            self.engines.wake(["kv_cache"] if "weights" in self.engine_tags else None)
            self.engine_tags = {"weights", "kv_cache"}
        self._mark("generation")

    def end_generation(self, next_is_sync: bool = True) -> None:
        if self.active:
            self.engines.sleep(2 if next_is_sync else 1)
            self.engine_tags = set()
            self.reload()
            self.trainers_resident = True
        self._mark("train")

    def begin_sync(self) -> None:
        """Only the engines' weights wake for a sync (OpenRLHF's broadcast_to_vllm: wake_up(tags=["weights"])); the
        KV cache stays asleep until the next generation."""
        if self.active and "weights" not in self.engine_tags:
            self.engines.wake(["weights"])
            self.engine_tags |= {"weights"}
        self._mark("sync")


class RLWorkers:
    def __init__(self, spec: ExperimentSpec, realized: Any, policy_path: str, total_steps: int) -> None:

        self.spec = spec
        self.roles = set(realized.plan.roles)
        env = _threads(spec) if spec.hardware.accelerator == "cpu" else None
        self.temperature = spec.rollout.temperature or 1.0
        # Before any actor starts: a teacher whose tokenizer differs would score other tokens than the student's.
        teacher_path = check_teacher_tokenizer(spec, policy_path) if "teacher" in self.roles else ""
        actors = self.actors = start_role_actors(spec, realized, env)
        self.rollout_colocated = "rollout" in self.roles and realized.colocated("rollout", "policy")
        self.rollout = None
        # Without a rollout role (a replay) nothing takes turns: the schedule only records the phases.
        self.schedule = HybridSchedule(False, None, offload=lambda: None, reload=lambda: None)
        in_policy = "rollout" in self.roles and generates_in_policy(spec)  # the policy's ranks generate
        if "rollout" in self.roles and not in_policy and engines_first(spec, self.rollout_colocated):
            self._start_engines(spec, realized, policy_path, env)

        def engines_now() -> None:  # while the models load; a replay (rollout.replay) has no rollout role
            if self.rollout is None and "rollout" in self.roles and not in_policy:
                self._start_engines(spec, realized, policy_path, env)

        models = RoleModels(total_steps, policy_path=policy_path, teacher_path=teacher_path, what="init")
        load_models(actors, spec, models, while_loading=engines_now)
        self.policy, self.reference, self.teacher = actors.policy, actors.reference, actors.teacher
        self.critic, self.reward = actors.critic, actors.reward
        if in_policy:  # no engine processes: no sync, nothing takes turns
            self.rollout = PolicyEngines(spec, self.policy)
            self.schedule = HybridSchedule(False, self.rollout, offload=lambda: None, reload=lambda: None)
            self.schedule.engines_started()
        sync = self.rollout is not None and not in_policy
        self.weight_sync = WeightSync(spec, self.policy, self.rollout) if sync else None
        self.actor_settings = ActorLossSettings.from_spec(spec)
        self.packing = spec.trainer.packing
        self.reuses_current_logprobs = reuses_current_logprobs(spec)
        self.bypass = spec.algorithm.old_logprobs == "rollout"  # veRL's bypass mode: the engine's log-probs are old
        self.token_baseline = spec.algorithm.advantage.estimator in names.TOKEN_BASELINE_ESTIMATORS
        # veRL logs actor/entropy from its old-log-prob pass: here too, where that pass runs (not in bypass mode, nor
        # with one optimizer step per rollout, where the training forward's log-probs are the old ones)
        self.verl_entropy = spec.logging.verl_metrics and not self.bypass and not self.reuses_current_logprobs
        self.kl_coef = spec.algorithm.kl.coef  # the KL controller's current value, set by the loop
        self.pad_id: int | None = None  # the tokenizer's pad id, set by the loop (probe batches are padded with it)

    def _start_engines(self, spec: ExperimentSpec, realized: Any, policy_path: str, env: Any) -> None:
        self.rollout = RolloutEngines(spec, realized, policy_path, env)
        self.schedule = HybridSchedule(
            takes_turns(spec, self.rollout_colocated),
            self.rollout,
            offload=lambda: [g.run_all("offload_states") for g in self.trained_groups().values()],
            reload=lambda: [g.run_all("reload_states") for g in self.trained_groups().values()],
        )
        self.rollout.sleep_after_restart = self.schedule.active
        self.schedule.engines_started()

    # -- hybrid engine ------------------------------------------------------------------------------------------
    @property
    def takes_turns(self) -> bool:
        return self.schedule.active

    def before_generation(self) -> None:
        """Training states out of device memory, rollout engines in (see HybridSchedule; no-ops on CPU)."""
        self.schedule.begin_generation()

    def after_generation(self, next_is_sync: bool = True) -> None:
        self.schedule.end_generation(next_is_sync)

    @contextmanager
    def generation(self, next_is_sync: bool = False):
        """A block that generates (an eval, the probe) between other phases: the engines awake around it."""
        self.before_generation()
        try:
            yield
        finally:
            self.after_generation(next_is_sync)

    def sync_weights(self, probe_prompts: list[list[int]] | None = None, eos_id: int | None = None) -> dict[str, float]:
        """Policy weights (ZeRO-3 gathered bucket by bucket, LoRA merged) into every rollout engine over the
        configured route; every tensor checksummed by the engines; the log-prob probe when it is due (and
        ``probe_prompts`` are given). Returns metrics (seconds, bytes, probe differences); none without engines."""
        if self.weight_sync is None:
            return {}
        self.schedule.begin_sync()
        result = self.weight_sync.sync()
        out = {"timing/broadcast": result.seconds, "rollout/sync_bytes": float(result.bytes)}
        if probe_prompts and self.weight_sync.probe_due():
            score = partial(self.score_rollouts, temperature=1.0)
            # the engines score in a generation phase of their own (their KV cache is asleep after a sync)
            with self.generation(next_is_sync=False):
                engine_side = self.weight_sync.probe_engines(probe_prompts, eos_id)
            out.update(self.weight_sync.judge_probe(engine_side, score))
        return out

    def score_rollouts(self, rollouts: list[Any], temperature: float | None = None) -> list[list[float]]:
        """The policy's log-probs (at the rollout temperature, or ``temperature``) of each rollout's generated
        tokens, in order."""
        from rlhf.pipelines.experience import from_rollouts

        pad = self.spec.model.vocab_size - 1 if self.pad_id is None else self.pad_id
        exp = from_rollouts(rollouts, pad)
        t = self.temperature if temperature is None else temperature
        fn = partial(policy_logprobs_fn, temperature=t, packing=self.packing)
        lp = self._stitch(self._forward(self.policy, fn, exp, None), exp.action_mask.shape[1])
        mask = exp.action_mask.bool()
        return [lp[i][mask[i]].tolist() for i in range(len(rollouts))]

    def refresh_reference(self, path: str) -> None:
        """The reference becomes the model saved at ``path`` (after an SFT warm-up: the warmed-up policy, as the
        reference is the SFT model in OpenRLHF's workflow)."""
        if self.reference is None:
            return
        self.reference.start_all("init_frozen", "reference", model_path=path, offload=self.spec.reference.offload)

    # -- experience ----------------------------------------------------------------------------------------------
    def _forward(self, group: Any, fn: Any, exp: ExperienceBatch, name: str | None) -> list[Any]:
        t = self.spec.trainer
        budget = t.max_tokens_per_forward or t.max_tokens_per_micro_batch
        return forward_in_ranks(group, fn, exp, name, self.spec.rollout.micro_batch_per_device, budget)

    def _stitch(self, parts: list[Any], width: int) -> Any:
        """The micro-batches' ``[b, ..., w]`` outputs padded on the right to ``width`` and concatenated."""
        import torch

        return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[-1])) for p in parts])

    def _verl_entropy(self, entropy: Any, mask: Any) -> float:
        """veRL's ``actor/entropy``: the old policy's tempered entropy over the rollout batch, aggregated by the
        policy loss's aggregation (its loss_agg_mode)."""
        from rlhf.algo import LossNormalizer, aggregate
        from rlhf.algo.aggregation import response_width

        pl = self.spec.algorithm.policy_loss
        agg = names.canonical_aggregation(pl.aggregation)
        width = pl.aggregation_norm_from == "micro_batch_width"
        constant = pl.aggregation_norm or (response_width(mask) if width else self.spec.rollout.max_new_tokens)
        return float(aggregate(entropy, mask, agg, LossNormalizer(constant=float(constant))))

    def make_experience(self, exp: ExperienceBatch) -> dict[str, float]:
        """Fill old (policy), reference and teacher log-probs and critic values in place."""
        width = exp.action_mask.shape[1]
        timing = {}
        t0 = time.perf_counter()
        fn = partial(policy_logprobs_fn, temperature=self.temperature, packing=self.packing)
        if self.bypass:  # no forward: the rollout engine's log-probs stand in for the old policy's
            exp.old_logprobs = exp.rollout_logprobs * exp.action_mask
        elif self.token_baseline or self.verl_entropy:  # what else the old policy's forward hands back
            scores_fn = partial(
                policy_scores_fn,
                temperature=self.temperature,
                packing=self.packing,
                sum_pi_squared=self.token_baseline,
                entropy=self.verl_entropy,
            )
            rows = iter(self._stitch(self._forward(self.policy, scores_fn, exp, None), width).unbind(dim=1))
            exp.old_logprobs = next(rows) * exp.action_mask
            if self.token_baseline:
                exp.sum_pi_squared = next(rows) * exp.action_mask
            if self.verl_entropy:
                timing["actor/entropy"] = self._verl_entropy(next(rows), exp.action_mask)
        elif not self.reuses_current_logprobs:
            exp.old_logprobs = self._stitch(self._forward(self.policy, fn, exp, None), width) * exp.action_mask
        if self.reference is not None:
            name = "reference"
            exp.ref_logprobs = self._stitch(self._forward(self.reference, fn, exp, name), width) * exp.action_mask
        if self.teacher is not None:
            teacher = self._stitch(self._forward(self.teacher, fn, exp, "teacher"), width)
            exp.teacher_logprobs = teacher * exp.action_mask
        if self.critic is not None:
            values_fn = partial(critic_values_fn, packing=self.packing)
            exp.values = self._stitch(self._forward(self.critic, values_fn, exp, None), width) * exp.action_mask
        timing["timing/logprobs"] = time.perf_counter() - t0
        return timing

    def reward_model_scores(self, exp: ExperienceBatch) -> list[float]:
        import torch

        parts = self._forward(self.reward, partial(reward_model_fn, packing=self.packing), exp, "reward")
        return torch.cat(parts).tolist()

    # -- training ------------------------------------------------------------------------------------------------
    def _steps(
        self, group: Any, exp: ExperienceBatch, fields: tuple[str, ...], seed: int, extra: dict | None = None
    ) -> list[list[list[dict]]]:
        """Optimizer steps of one epoch: a seeded shuffle, cut into global batches, each split over the ranks and
        into micro-batches (of trainer.micro_batch_per_device samples, or by trainer.max_tokens_per_micro_batch),
        each with the tensors of ``extra`` too (the same in every micro-batch). Returns step -> rank ->
        micro-batches."""
        import torch

        t = self.spec.trainer
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(exp), generator=g)
        ranks = group.data_parallel
        budget = micro_batch_tokens(group, t.max_tokens_per_micro_batch)
        steps = []
        for start in range(0, len(exp) - t.global_batch + 1, t.global_batch):
            batch = exp.select(order[start : start + t.global_batch])
            per_rank = []
            for rank in rank_micro_batches(batch, ranks, t.micro_batch_per_device, budget):
                mbs = []
                for m in rank:
                    tensors = {k: v for k, v in m.tensors().items() if k in fields}
                    tensors["kl_coef"] = torch.tensor([self.kl_coef])
                    tensors.update(extra or {})
                    mbs.append(tensors)
                per_rank.append(mbs)
            steps.append(per_rank)
        return steps

    def train_critic(self, exp: ExperienceBatch, step: int) -> dict[str, float]:
        fields = ("sequences", "attention_mask", "action_mask", "values", "returns")
        pl = self.spec.algorithm.policy_loss
        fn = partial(
            critic_loss_fn,
            clip=self.spec.critic.value_clip,
            packing=self.packing,
            aggregation=names.canonical_aggregation(self.spec.critic.aggregation),
            norm_from_width=pl.aggregation_norm is None and pl.aggregation_norm_from == "micro_batch_width",
        )
        return self._train(self.critic, exp, fields, fn, step, "critic")

    def train_actor(self, exp: ExperienceBatch, step: int) -> dict[str, float]:
        fields = (
            "sequences",
            "attention_mask",
            "action_mask",
            "generated_mask",  # with rejection sampling: every generated token, which the IS weights read
            "old_logprobs",
            "advantages",
            "rollout_logprobs",
            "ref_logprobs",
        )
        fn = partial(actor_loss_fn, s=self.actor_settings)
        isc = self.actor_settings.is_correction
        extra = {}
        if isc.enabled and isc.batch_normalize and exp.old_logprobs is not None and not self.bypass:
            # The IS weights are normalised over the whole rollout batch (veRL), not each micro-batch.
            extra["is_weight_totals"] = rollout_is_weight_totals(exp, isc)
        return self._train(self.policy, exp, fields, fn, step, "actor", extra)

    def _train(
        self,
        group: Any,
        exp: ExperienceBatch,
        fields: tuple,
        fn: Any,
        step: int,
        prefix: str,
        extra: dict | None = None,
    ) -> dict:
        pl = self.spec.algorithm.policy_loss
        norm_constant = None
        if "seq_mean_token_sum_norm" in (pl.aggregation, self.spec.critic.aggregation):
            norm_constant = float(pl.aggregation_norm or self.spec.rollout.max_new_tokens)
        sums: dict[str, float] = {}
        count = 0
        t0 = time.perf_counter()
        for epoch in range(self.spec.trainer.epochs_per_rollout):
            seed = self.spec.seed * 1000003 + step * 101 + epoch
            for per_rank in self._steps(group, exp, fields, seed, extra):
                args = [(mbs, fn, "action_mask", norm_constant) for mbs in per_rank]
                result = group.run_per_rank("train_step", args)[0]
                for k, v in result.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                count += 1
        seconds = time.perf_counter() - t0
        out = {}
        for k, v in sums.items():
            key = {"grad_norm": f"{prefix}_grad_norm", "lr": f"{prefix}_lr"}.get(k, k)
            out[key] = v / max(count, 1)
        own = "" if prefix == "actor" else f"{prefix}_"  # the policy's keys as OpenRLHF logs them, bare
        budget = micro_batch_tokens(group, self.spec.trainer.max_tokens_per_micro_batch)
        if 0 < budget < self.spec.data.max_len:  # samples that trained in a micro-batch of their own
            out[f"{own}over_budget_samples"] = float((exp.attention_mask.sum(dim=1) > budget).sum())
        real_tokens = float(exp.attention_mask.sum()) * self.spec.trainer.epochs_per_rollout if count else 0.0
        out.update(throughput(out, real_tokens, seconds, own))
        return out

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def trained_groups(self) -> dict[str, Any]:
        return self.actors.trained_groups()
