"""The RL loop: one program for PPO, GRPO, Dr. GRPO, RLOO, REINFORCE++(-baseline), GSPO, DAPO and on-policy
distillation; the algorithm is only which registry entries rlhf.algo uses.

One step (OpenRLHF section 5.3):
  1. draw prompts_per_step prompts; generate samples_per_prompt each on the rollout engines (token in, token out)
  2. score them (reward function, remote endpoint, verifier, agent or reward model); DAPO dynamic filtering drops
     groups whose mean score is not strictly inside the range and draws fresh prompts to refill them
  3. experience: old log-probs (policy), reference and teacher log-probs, critic values; length penalties; KL;
     advantages (OPD: from the teacher's per-token log-ratio)
  4. train the critic, then the policy (epochs_per_rollout passes, global_batch samples per optimizer step)
  5. push the policy's weights into the rollout engines; KL controller update; log; checkpoint; evaluate
Async mode generates step k+1 while step k trains, so samples are at most one policy update old.

The driver holds the loop and all per-sample bookkeeping; the ranks only run forward/backward.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

import torch

from rlhf.algo import (
    compute_advantages_and_returns,
    compute_approx_kl,
    controller_kl,
    make_kl_controller,
    masked_mean,
    reverse_kl_estimate,
    reverse_kl_rewards,
)
from rlhf.algo.is_correction import is_weights
from rlhf.algo.rejection import Rejection, rejection_keep
from rlhf.algo.shaping import overlong_penalty, stop_properly_penalty
from rlhf.algo.token_baseline import TokenBaselineInputs
from rlhf.backends.contract.rollout import Rollout
from rlhf.errors import WorkerFailure
from rlhf.pipelines.experience import ExperienceBatch, from_rollouts
from rlhf.pipelines.rl_generation import GREEDY_BASELINE_LOG, Generator, PromptStream, Scored, Scorer
from rlhf.pipelines.rl_losses import ActorLossSettings
from rlhf.pipelines.rl_metrics import best_metric_key, eval_metrics, group_reward_std, logged_names, rollout_metrics
from rlhf.pipelines.rl_roles import RLWorkers
from rlhf.pipelines.sft_warmup import SFTWarmup
from rlhf.pipelines.step_count import StepCount, count_steps
from rlhf.spec import names
from rlhf.spec.derive import derive
from rlhf.spec.schema import ExperimentSpec


def shaped_rewards(spec: ExperimentSpec, scored: Scored, exp: ExperienceBatch) -> torch.Tensor:
    """Scalar rewards after the length penalties (DAPO overlong, ProRL stop-properly), before any baseline."""
    r = torch.tensor(scored.rewards, dtype=torch.float32)
    f = spec.algorithm.filters
    lengths = torch.tensor(exp.info["response_length"])
    truncated = torch.tensor(exp.info["truncated"]) > 0
    if f.overlong_buffer_len:
        budget = spec.rollout.max_new_tokens
        if spec.agent.executor != "single_turn":
            # A multi-turn episode's budget is the whole sequence (data.max_len), not one turn's new tokens.
            lengths, budget = torch.tensor(exp.info["total_length"]), spec.data.max_len
        r = overlong_penalty(r, lengths, budget, f.overlong_buffer_len, f.overlong_penalty_factor)
    if f.stop_properly_penalty_coef is not None:
        r = stop_properly_penalty(r, truncated, f.stop_properly_penalty_coef)
    return r


#: The metric the adaptive KL controller reads when algorithm.kl.controller_kl is not the token mean ("kl").
CONTROLLER_KL = "kl_controller_input"
#: Scored.extra_logs key with 1.0 for a sample every reward function declined (rlhf.rewards.combine.UNSCORED_LOG).
UNSCORED_LOG = "reward/unscored"


def scored_mask(scored: Scored) -> torch.Tensor | None:
    """``[B]`` bool, False for a sample that no reward function scored (TRL's None from every function), or None
    when every sample has a reward (the advantage code then takes its unmasked path)."""
    flags = scored.extra_logs.get(UNSCORED_LOG)
    if not flags or not any(f == 1.0 for f in flags):
        return None
    return torch.tensor([f != 1.0 for f in flags])


def greedy_rewards(scored: Scored) -> torch.Tensor | None:
    """``[B]`` ReMax's baselines, the reward of the greedy response to each sample's prompt (rl_generation), or None
    when the estimator asked for none."""
    values = scored.extra_logs.get(GREEDY_BASELINE_LOG)
    return None if values is None else torch.tensor(values, dtype=torch.float32)


def teacher_rewards(exp: ExperienceBatch) -> torch.Tensor | None:
    """On-policy distillation's per-token rewards, log p_teacher - log p_student of each sampled token (the
    student's log-probs are the trainer's, before this step's update); None without a teacher."""
    if exp.teacher_logprobs is None:
        return None
    if exp.old_logprobs is None:
        raise RuntimeError("on-policy distillation needs the student's log-probs from the experience pass")
    return reverse_kl_rewards(exp.old_logprobs, exp.teacher_logprobs, exp.action_mask)


def reject(a: Any, exp: ExperienceBatch) -> dict[str, float]:
    """Rollout rejection sampling (algorithm.rejection): the rejected tokens leave ``exp.action_mask``, so they get
    no advantage and no loss; its metrics under veRL's names ({} when off, and in bypass mode, where the loss rejects
    against the current policy in each micro-batch, as veRL's)."""
    rs = a.rejection
    if not rs.enabled or getattr(a, "old_logprobs", "recompute") == "rollout":  # bypass: in the loss (rl_losses)
        return {}
    if exp.old_logprobs is None or exp.rollout_logprobs is None:
        raise RuntimeError("rejection sampling needs the trainer's and the rollout engine's log-probs")
    keep, metrics = rejection_keep(
        exp.old_logprobs, exp.rollout_logprobs, exp.action_mask, Rejection.of(rs.criteria, rs.upper, rs.lower)
    )
    exp.generated_mask, exp.action_mask = exp.action_mask, keep
    return metrics


def token_baseline_inputs(spec: ExperimentSpec, exp: ExperienceBatch, generated: torch.Tensor):
    """What the optimal token baseline reads (rlhf.algo.token_baseline), or None for the other estimators: the old
    log-probs and sum pi^2 of the experience pass, each response's first column, and the IS weights of an enabled
    correction over the whole batch (veRL's rollout_is_weights, read before rejection)."""
    if spec.algorithm.advantage.estimator not in names.TOKEN_BASELINE_ESTIMATORS:
        return None
    if exp.old_logprobs is None or exp.sum_pi_squared is None:
        raise RuntimeError("the optimal token baseline needs the old log-probs and sum pi^2 from the experience pass")
    correction = ActorLossSettings.from_spec(spec).is_correction
    weights = None
    if correction.enabled:
        weights = is_weights(exp.old_logprobs, exp.rollout_logprobs, generated, correction).coef.detach()
    start = (generated > 0).float().argmax(dim=1)  # the first generated token's column (0 for an empty response)
    return TokenBaselineInputs(exp.old_logprobs, exp.sum_pi_squared, start, weights)


def make_experience(spec: ExperimentSpec, workers: RLWorkers, scored: Scored, pad_id: int, kl_coef: float):
    """Rollouts + rewards -> an experience batch with advantages and returns, and its metrics."""
    info = {"datasource": [row["datasource"] for row in scored.rows]}
    exp = from_rollouts(scored.rollouts, pad_id, info)
    timing = workers.make_experience(exp)
    exp.rewards = shaped_rewards(spec, scored, exp)
    a = spec.algorithm
    kl = None
    if exp.ref_logprobs is not None and exp.old_logprobs is not None:
        kl = (
            compute_approx_kl(exp.old_logprobs, exp.ref_logprobs, a.kl.estimator, clamp_k3_only=a.kl.clamp_k3_only)
            * exp.action_mask
        )
    distill = teacher_rewards(exp)
    generated = exp.action_mask  # every generated token, for the rollout/trainer mismatch metrics
    rejection = reject(a, exp)  # after the KL above, read with every token as veRL's reward does; before advantages
    out = compute_advantages_and_returns(
        exp.rewards,
        exp.action_mask,
        estimator=a.advantage.estimator,
        kl=kl if a.kl.placement == "reward" else None,
        values=exp.values,
        kl_coef=kl_coef,
        gamma=a.advantage.gamma,
        lambd=a.advantage.lambd,
        n_samples_per_prompt=spec.rollout.samples_per_prompt,
        reward_clip_range=None if spec.reward.clip_range is None else tuple(spec.reward.clip_range),
        no_std_norm=a.advantage.no_std_norm,
        teacher_rewards=distill,
        kl_before_baseline=a.kl.before_baseline,
        scored=scored_mask(scored),
        std_eps=a.advantage.std_eps,
        whiten_unbiased=a.advantage.whiten_variance == "unbiased",
        skip_masked=a.advantage.skip_masked_tokens,
        greedy_rewards=greedy_rewards(scored),
        token_baseline=token_baseline_inputs(spec, exp, generated),
    )
    exp.advantages, exp.returns = out.advantages, out.returns
    n = spec.rollout.samples_per_prompt
    metrics = {
        "reward": float(exp.rewards.mean()),
        "score": fmean(scored.scores),
        "return": float(out.rewards.sum(-1).mean()),
        "response_length": fmean(exp.info["response_length"]),
        "total_length": fmean(exp.info["total_length"]),
        "truncated": fmean(exp.info["truncated"]),
        "group_reward_std": group_reward_std(exp.rewards.tolist(), n),
        "advantages_abs_mean": float(masked_mean(out.advantages.abs(), exp.action_mask)),
        **rollout_metrics(scored.rewards, exp.info["response_length"], exp.info["truncated"]),
        **timing,
    }
    metrics.update(rejection)
    if kl is not None:
        metrics["kl"] = float(masked_mean(kl, exp.action_mask))
        if a.kl.controller_kl != "token_mean":
            metrics[CONTROLLER_KL] = controller_kl(kl, exp.action_mask, a.kl.controller_kl)
    if distill is not None:
        metrics["reverse_kl"] = float(reverse_kl_estimate(exp.old_logprobs, exp.teacher_logprobs, exp.action_mask))
    if exp.rollout_logprobs is not None and exp.old_logprobs is not None:
        metrics["logprobs_diff"] = float(masked_mean((exp.old_logprobs - exp.rollout_logprobs).abs(), generated))
    for k, v in scored.extra_logs.items():
        finite = [x for x in v if x == x]
        if finite:
            metrics[k] = fmean(finite)
    if scored.pass_rate is not None:
        metrics["dynamic_filtering_pass_rate"] = scored.pass_rate
        metrics["dynamic_filtering_refill_rounds"] = float(scored.refill_rounds)
    return exp, metrics


def _total_steps(spec: ExperimentSpec, n_prompts: int, warmup: int = 0) -> StepCount:
    """RL steps: the prompts a pass takes, times trainer.num_episodes, capped by trainer.max_steps (plus the
    warm-up's SFT steps ahead of them)."""
    t = spec.trainer
    return count_steps(
        n_prompts,
        spec.rollout.prompts_per_step,
        "rollout.prompts_per_step",
        t.num_episodes,
        "trainer.num_episodes",
        t.max_steps,
        unit="prompts",
        warmup=warmup,
    )


def prompt_data(spec: ExperimentSpec) -> tuple[str, Any, Any]:
    """The policy's path, its tokenizer (left padding) and the prompt splits. Data before processes: a bad row stops
    the job here, naming file, row and key."""
    from rlhf.data import build_datasets
    from rlhf.models.loading import resolve_model_path, tokenizer_for

    path = resolve_model_path(spec.model)
    tokenizer = tokenizer_for(spec.model, path, padding_side="left")
    splits = build_datasets(spec, tokenizer, "prompt")
    print(splits.summary(), file=sys.stderr)
    return path, tokenizer, splits


def evaluate(spec: ExperimentSpec, gen: Generator, workers: RLWorkers, evalset: Any, step: int) -> dict[str, float]:
    """pass@1 and pass@k per datasource on the eval prompts (OpenRLHF compute_eval_metrics)."""
    n = spec.eval.samples_per_prompt
    count = len(evalset) if spec.eval.max_prompts is None else min(len(evalset), spec.eval.max_prompts)
    rows = evalset.rows(list(range(count)))
    sampling = gen.sampling(10**6 + step, temperature=spec.eval.temperature, n=n)
    with workers.generation(next_is_sync=False):  # hybrid engine: the engines awake, the trainers' states out
        rollouts = gen.launch(rows, sampling)()
        scored = gen.scorer(rollouts, [r for r in rows for _ in range(n)])
    lengths = [float(sum(r.action_mask)) for r in rollouts]
    truncated = [1.0 if r.finish_reason == "length" else 0.0 for r in rollouts]
    return eval_metrics(scored.scores, [r["datasource"] for r in scored.rows], lengths, truncated, n)


@dataclass
class StepState:
    """How far one RL step got, so that a step interrupted by a failed engine is carried on, not redone: the
    prompts it drew, then its scored samples, then its training metrics, then whether the engines have its
    weights."""

    step: int
    rows: list[dict[str, Any]] | None = None
    scored: Scored | None = None
    metrics: dict[str, float] | None = None
    synced: bool = False
    t0: float = 0.0
    t_gen: float = 0.0


class RLRecipe:
    """The RL pipeline as a recipe of rlhf.pipelines.lifecycle (the Runner owns resume, checkpoints, restarts,
    signals and tracking).

    With ``sft_warmup.steps = W`` the first W steps are the phase rlhf.pipelines.sft_warmup.SFTWarmup (the SFT
    pipeline's step on the policy's own engine: same actors, same optimizer), logged as ``sft/*``; at its end the
    reference becomes the warmed-up model and the engines get its weights (:meth:`_after_sft_step`), and RL step k is
    step W + k of the run (its sampling seeds are those of RL step k, so a run with and without warm-up draw alike)."""

    family = "rl"
    progress_keys = (
        "train/reward",
        "train/score",
        "train/policy_loss",
        "train/kl",
        "train/response_length",
        "sft/loss",
    )

    def __init__(self, spec: ExperimentSpec, run_dir: Path) -> None:
        self.spec, self.run_dir = spec, Path(run_dir)
        self.label = f"{spec.algorithm.name} rl"
        self.workers: RLWorkers | None = None
        self.gen: Generator | None = None  # None in a replay (train-only): no engines
        self.replay: Any = None  # rollout.replay: the recording steps come from (rlhf.pipelines.rollout_record)
        self.recorder: Any = None  # rollout.record
        self.current: StepState | None = None
        self.pending: tuple[list[dict[str, Any]], Callable[[], list[Rollout]]] | None = None  # async: step k+1
        self.best: tuple[str | None, float | None] = (None, None)
        self.last_eval: dict[str, float] = {}
        self.init_origin: dict[str, str] | None = None  # checkpoint.init_from: the tracker's init_from.* params
        self.warmup: SFTWarmup | None = None
        self.phases: tuple[SFTWarmup, ...] = ()

    # -- before any process -------------------------------------------------------------------------------------
    def prepare(self) -> StepCount:
        from rlhf.pipelines.init_from import starting_weights

        # checkpoint.init_from: policy, engines, reference (and the source's critic) load the starting weights
        self.spec, self.init_origin = starting_weights(self.spec, self.run_dir)
        spec = self.spec
        self.policy_path, self.tokenizer, self.splits = prompt_data(spec)
        self.warmup = SFTWarmup(spec, self.tokenizer, self._after_sft_step) if spec.sft_warmup.steps > 0 else None
        self.phases = (self.warmup,) if self.warmup is not None else ()  # run by the Runner before the RL steps
        self.warmup_steps = spec.sft_warmup.steps if self.warmup else 0
        count = _total_steps(spec, len(self.splits.train), self.warmup_steps)
        self.rl_total = count.main
        self.total = count.steps
        self.derived = derive(spec)
        self._open_recording()
        self.reset()
        # The weight-sync probe: the same few prompts every time, so its figures compare across syncs.
        train = self.splits.train
        self.probe_prompts = [list(r["prompt_ids"]) for r in train.rows(list(range(min(4, len(train)))))]
        return count

    def _open_recording(self) -> None:
        """The generation source, chosen once: the engines, or (rollout.replay) a recording, checked against the
        tokenizer and the steps this run trains before any process starts; and the recorder of rollout.record."""
        from rlhf.pipelines.rollout_record import RecordedRollouts, Recorder

        ro = self.spec.rollout
        self.replay = RecordedRollouts(self.spec, self.tokenizer, self.rl_total) if ro.replay else None
        self.recorder = Recorder(self.spec, self.tokenizer, self.policy_path, "rl") if ro.record else None

    def reset(self) -> None:
        a = self.spec.algorithm.kl
        self.stream = PromptStream(self.splits.train, self.spec.seed)
        self.kl_ctl = make_kl_controller(a.coef, a.target, a.horizon)
        self.best = (None, None)
        self.current = None
        self.pending = None

    # -- actors -------------------------------------------------------------------------------------------------
    def setup(self, realized: Any) -> None:
        opt_steps = self.rl_total * max(self.derived.optimizer_steps_per_rollout, 1) + self.warmup_steps
        self.workers = RLWorkers(self.spec, realized, self.policy_path, opt_steps)
        self.workers.pad_id = self.tokenizer.pad_token_id
        if self.warmup is not None:
            self.warmup.roles = self.workers.actors  # its steps train the policy these actors hold
        if self.replay is None:  # a replay starts no engine: nothing generates or scores
            self.gen = Generator(self.spec, self.workers, Scorer(self.spec, self.tokenizer, self.workers), self.stream)
        self.pending = None

    def teardown(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None

    def initial_eval(self) -> dict[str, float]:
        if not self._can_eval():
            return {}
        return {f"eval/{k}": v for k, v in evaluate(self.spec, self.gen, self.workers, self.splits.eval, 0).items()}

    # -- one step -----------------------------------------------------------------------------------------------
    def _after_sft_step(self, step: int, out: dict[str, float]) -> dict[str, float]:
        """After warm-up step ``step``: an eval when sft_warmup.eval_steps says so, and after the last one the
        hand-over to RL (the warmed-up model saved, made the reference and synced into the engines, then an eval)."""
        policy = self.workers.policy
        every = self.spec.sft_warmup.eval_steps
        if every and step % every == 0 and step < self.warmup_steps and self._can_eval():
            out.update(self.workers.sync_weights())  # eval samples from the engines: they get the weights first
            out = logged_names(out)
            self.last_eval = evaluate(self.spec, self.gen, self.workers, self.splits.eval, step)
            out.update({f"eval/{k}": v for k, v in self.last_eval.items()})
        if step == self.warmup_steps:
            # the reference is the warmed-up model (OpenRLHF: the SFT model), saved beside the run
            sft_model = self.run_dir / "sft_warmup_model"
            policy.run_all("save_hf", str(sft_model))
            self.workers.refresh_reference(str(sft_model))
            # the engines sample from the warmed-up policy from the first RL step on
            out.update(self.workers.sync_weights())
            out = logged_names(out)
            if self._can_eval():
                self.last_eval = evaluate(self.spec, self.gen, self.workers, self.splits.eval, step)
                out.update({f"eval/{k}": v for k, v in self.last_eval.items()})
        return out

    def _can_eval(self) -> bool:
        # a replay has no engines to sample eval answers from
        return self.spec.eval.steps > 0 and self.splits.eval is not None and self.gen is not None

    def step(self, run_step: int) -> dict[str, float]:
        """RL step ``run_step - sft_warmup.steps`` (the Runner runs the warm-up's steps before these)."""
        spec, workers, gen = self.spec, self.workers, self.gen
        step = run_step - self.warmup_steps  # the RL step (seeds, schedules) within the run's steps
        s = self.current if self.current is not None and self.current.step == step else StepState(step)
        self.current = s
        if s.scored is None:
            s.t0 = time.perf_counter()
            s.scored = self.replay.scored(step) if self.replay is not None else self._generate(s)
            if self.recorder is not None:
                self.recorder.write(step, s.scored, gen.sampling(step).seed)
            s.t_gen = time.perf_counter() - s.t0
        if s.metrics is None:
            if spec.rollout.async_mode and step < self.rl_total and self.pending is None and gen is not None:
                # the next rollout starts now, on the weights before this step's update (one step stale)
                self.pending = gen.start(step + 1)
            t1 = time.perf_counter()
            workers.kl_coef = self.kl_ctl.value
            exp, metrics = make_experience(spec, workers, s.scored, self.tokenizer.pad_token_id, self.kl_ctl.value)
            t_exp = time.perf_counter() - t1
            t2 = time.perf_counter()
            if workers.critic is not None:
                metrics.update(workers.train_critic(exp, step))
            if step > spec.critic.freezing_steps or workers.critic is None:
                metrics.update(workers.train_actor(exp, step))
            metrics.update(
                {
                    "timing/generation": s.t_gen,
                    "timing/make_experience": t_exp,
                    "timing/ppo_train": time.perf_counter() - t2,
                }
            )
            s.metrics = metrics
        metrics = s.metrics
        if not s.synced:
            metrics.update(workers.sync_weights(self.probe_prompts, self.tokenizer.eos_token_id))
            s.synced = True
        self.kl_ctl.update(metrics.get(CONTROLLER_KL, metrics.get("kl", 0.0)), self.derived.samples_per_step)
        metrics.update(
            {
                "kl_coef": self.kl_ctl.value,
                "timing/step_total": time.perf_counter() - s.t0,
                "episode": float(self.stream.epoch),
            }
        )
        out = logged_names(metrics)
        if self._can_eval() and (step % spec.eval.steps == 0 or step == self.rl_total):
            self.last_eval = evaluate(spec, gen, workers, self.splits.eval, run_step)
            out.update({f"eval/{k}": v for k, v in self.last_eval.items()})
            key = best_metric_key(self.last_eval, spec.eval.best_metric)
            if key and key in self.last_eval and (self.best[1] is None or self.last_eval[key] > self.best[1]):
                self.best = (key, self.last_eval[key])
                workers.policy.run_all("save_hf", str(self.run_dir / "best_model"))
        self.current = None
        return out

    def _generate(self, s: StepState) -> Scored:
        """Step ``s``'s samples from the engines (its prompts kept in ``s``, so a restarted engine redoes them)."""
        workers, gen = self.workers, self.gen
        if self.pending is not None and s.rows is None:
            s.rows, wait = self.pending  # async: generated while the previous step trained
        else:
            workers.before_generation()
            if s.rows is None:
                s.rows = self.stream.take(self.spec.rollout.prompts_per_step)
            wait = gen.launch(s.rows, gen.sampling(s.step))
        self.pending = None
        scored = gen.finish(s.step, s.rows, wait)
        workers.after_generation()
        return scored

    def recover(self, failure: WorkerFailure) -> bool:
        """A rollout engine that crashed or hung is started again in its bundle, the weight-sync group re-formed
        and the engine given the current weights; the step goes on where it stopped (its prompts re-issued when
        generation was under way). A training rank's failure is the Runner's (every actor from the checkpoint)."""
        if failure.role != "rollout" or self.workers is None:
            return False
        engines = self.workers.rollout
        dead = range(len(engines)) if failure.rank is None else [failure.rank]
        for i in dead:
            print(f"restarting rollout engine {i}", file=sys.stderr, flush=True)
            engines.restart(i)
        self.workers.weight_sync.connect()
        self.workers.sync_weights()  # the engines hold the policy's current weights again
        s = self.current
        if s is not None and s.metrics is not None:
            s.synced = True  # the sync above was this step's
        if self.pending is not None:  # async: the next step's generation, re-issued with the same prompts
            rows = self.pending[0]
            self.pending = (rows, self.gen.launch(rows, self.gen.sampling(s.step + 1 if s else 1)))
        return True  # a step still generating re-issues its prompts when it is carried on

    # -- checkpoints --------------------------------------------------------------------------------------------
    def state(self, step: int) -> dict[str, Any]:
        out = {
            "sampler": self.stream.sampler.state_dict(),
            "kl_coef": self.kl_ctl.value,
            "best_key": self.best[0],
            "best_value": self.best[1],
        }
        return out

    def save(self, folder: Path, step: int) -> None:
        for role, group in self.workers.trained_groups().items():
            group.run_all("save_checkpoint", str(folder / role), {"step": step})

    def load(self, folder: Path, state: dict[str, Any]) -> None:
        for role, group in self.workers.trained_groups().items():
            group.run_all("load_checkpoint", str(folder / role))
        self.stream.sampler.load_state_dict(state["sampler"])
        self.kl_ctl.value = float(state["kl_coef"])
        self.best = (state.get("best_key"), state.get("best_value"))
        self.current, self.pending = None, None
        sft_model = self.run_dir / "sft_warmup_model"
        if self.warmup_steps and int(state.get("step", 0)) >= self.warmup_steps and sft_model.is_dir():
            self.workers.refresh_reference(str(sft_model))  # the reference was the warmed-up model
        self.workers.sync_weights()

    # -- the end ------------------------------------------------------------------------------------------------
    def finish(self) -> dict[str, Any]:
        spec, workers = self.spec, self.workers
        model_dir = self.run_dir / spec.checkpoint.output_dir
        workers.policy.run_all("save_hf", str(model_dir))
        if workers.critic is not None and spec.critic.save_value_network:
            workers.critic.run_all("save_hf", str(self.run_dir / (spec.checkpoint.output_dir + "_critic")))
        return {
            "algorithm": spec.algorithm.name,
            "model_dir": str(model_dir),
            "final_metrics": self.last_eval,
            "best": {"key": self.best[0], "value": self.best[1]} if self.best[0] else None,
            "reward_first_last": _first_last(_read(self.run_dir)),
            **({"recording": self.spec.rollout.record} if self.recorder is not None else {}),
        }


def run(
    spec: ExperimentSpec, plan: Any, run_dir: Path, realize: Callable[[ExperimentSpec, Any], Any]
) -> dict[str, Any]:
    """Train ``spec`` (an RL algorithm); ``realize(spec, plan)`` gives the Ray placement (from the launcher)."""
    from rlhf.pipelines.lifecycle import Runner

    return Runner(spec, plan, run_dir, realize, RLRecipe(spec, run_dir)).run()


def _read(run_dir: Path) -> list[dict[str, float]]:
    from rlhf.tracking.tracker import read_metrics

    return read_metrics(run_dir)


def _first_last(rows: list[dict[str, float]], window: int = 5) -> dict[str, float] | None:
    """Mean train reward over the first and the last ``window`` steps (what the quickstart's claim is about)."""
    rewards = [r["train/reward"] for r in rows if "train/reward" in r]
    if not rewards:
        return None
    w = min(window, len(rewards))
    return {"first": fmean(rewards[:w]), "last": fmean(rewards[-w:]), "window": float(w)}
