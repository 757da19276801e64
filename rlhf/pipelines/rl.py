"""The RL loop: one program for PPO, GRPO, Dr. GRPO, RLOO, REINFORCE++(-baseline), GSPO and DAPO; the algorithm
is only which registry entries rlhf.algo uses.

One step (OpenRLHF section 5.3):
  1. draw prompts_per_step prompts; generate samples_per_prompt each on the rollout engines (token in, token out)
  2. score them (reward function, remote endpoint, verifier, agent or reward model); DAPO dynamic filtering drops
     groups whose mean score is not strictly inside the range and draws fresh prompts to refill them
  3. experience: old log-probs (policy), reference log-probs, critic values; length penalties; KL; advantages
  4. train the critic, then the policy (epochs_per_rollout passes, global_batch samples per optimizer step)
  5. push the policy's weights into the rollout engines; KL controller update; log; checkpoint; evaluate
Async mode generates step k+1 while step k trains, so samples are at most one policy update old.

The driver holds the loop and all per-sample bookkeeping; the ranks only run forward/backward.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

import torch

from rlhf.algo import compute_advantages_and_returns, compute_approx_kl, make_kl_controller, masked_mean
from rlhf.algo.shaping import keep_group, overlong_penalty, stop_properly_penalty
from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.errors import UserError
from rlhf.pipelines.checkpoint import CheckpointManager
from rlhf.pipelines.experience import ExperienceBatch, from_rollouts
from rlhf.pipelines.rl_metrics import best_metric_key, eval_metrics, group_reward_std, rollout_metrics
from rlhf.pipelines.rl_roles import RLWorkers
from rlhf.pipelines.run_files import run_artifacts
from rlhf.spec.derive import derive
from rlhf.spec.schema import ExperimentSpec


@dataclass
class Scored:
    """One step's samples: rollouts with rewards, and what the reward sources said about them."""

    rollouts: list[Rollout]
    rows: list[dict[str, Any]]  # the prompt row of each sample
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]
    pass_rate: float | None = None  # dynamic filtering: kept groups / drawn groups (%)
    refill_rounds: int = 0


class PromptStream:
    """Prompts in a seeded, resumable order (one index at a time, so refills can draw any number)."""

    def __init__(self, dataset: Any, seed: int) -> None:
        from rlhf.data import ResumableSampler

        self.dataset = dataset
        self.sampler = ResumableSampler(len(dataset), 1, seed=seed, shuffle=True, drop_last=False)

    def take(self, n: int) -> list[dict[str, Any]]:
        return self.dataset.rows([self.sampler.next_indices()[0] for _ in range(n)])

    @property
    def epoch(self) -> int:
        return self.sampler.epoch


class Scorer:
    """Rewards for rollouts from whichever source the spec names."""

    def __init__(self, spec: ExperimentSpec, tokenizer: Any, workers: RLWorkers) -> None:
        self.spec, self.tokenizer, self.workers = spec, tokenizer, workers
        self.source = None
        if derive(spec).reward_source in ("function", "remote", "verifier"):
            from rlhf.rewards import make_reward_source

            self.source = make_reward_source(spec)

    def __call__(self, rollouts: list[Rollout], rows: list[dict[str, Any]]) -> Scored:
        dec = self.tokenizer.decode
        responses = [dec(r.output_ids, skip_special_tokens=False) for r in rollouts]
        prompts = [row["prompt"] for row in rows]
        labels = [row["label"] for row in rows]
        if all(r.reward is not None for r in rollouts):  # agents score their own episodes
            rewards = [float(r.reward) for r in rollouts]
            scores = [float(r.scores if r.scores is not None else r.reward) for r in rollouts]
            logs = _merge_logs([r.extra.get("extra_logs", {}) for r in rollouts])
            return Scored(rollouts, rows, rewards, scores, logs)
        if self.source is not None:
            queries = [p + resp for p, resp in zip(prompts, responses, strict=True)]
            res = self.source.score(queries, prompts, responses, labels)
            return Scored(rollouts, rows, list(res.rewards), list(res.scores), dict(res.extra_logs))
        if self.workers.reward is None:
            raise UserError(
                f"agent file {self.spec.agent.path}: episodes came back with reward None and no reward.* source is "
                "set; return rewards from step()/run_agent() or set reward.verifier, reward.function or reward.urls"
            )
        exp = from_rollouts(rollouts, self.tokenizer.pad_token_id)
        rm = self.workers.reward_model_scores(exp)
        return Scored(rollouts, rows, rm, list(rm), {})


def _merge_logs(logs: list[dict[str, float]]) -> dict[str, list[float]]:
    keys = list(dict.fromkeys(k for d in logs for k in d))
    return {k: [float(d.get(k, float("nan"))) for d in logs] for k in keys}


class Generator:
    """Prompts -> scored samples, with DAPO's dynamic filtering and refill. Single-turn generation goes straight to
    the engines; an agent executor (multi_turn, openai) drives them turn by turn from a background thread."""

    def __init__(self, spec: ExperimentSpec, workers: RLWorkers, scorer: Scorer, stream: PromptStream) -> None:
        self.spec, self.workers, self.scorer, self.stream = spec, workers, scorer, stream
        self.n = spec.rollout.samples_per_prompt
        self.executor = None
        if spec.agent.executor != "single_turn":
            from rlhf.agents import build_executor

            a = spec.agent
            options = {"step_timeout_s": a.step_timeout_s}
            if a.executor == "openai":
                options.update(call_timeout_s=a.call_timeout_s, run_timeout_s=a.run_timeout_s)
            self.executor = build_executor(a, **options)
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="agent")

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()
            self.pool.shutdown(wait=False)

    def sampling(self, step: int, *, temperature: float | None = None, n: int | None = None) -> SamplingSpec:
        ro = self.spec.rollout
        eos = self.scorer.tokenizer.eos_token_id
        return SamplingSpec(
            max_new_tokens=ro.max_new_tokens,
            min_new_tokens=ro.min_new_tokens,
            temperature=ro.temperature if temperature is None else temperature,
            top_p=ro.top_p,
            top_k=ro.top_k,
            n=n or self.n,
            stop=tuple(ro.stop),
            stop_token_ids=(eos,) if eos is not None else (),
            seed=self.spec.seed * 7919 + step,  # reproducible per step, so a resumed run samples the same
        )

    def launch(self, rows: list[dict[str, Any]], sampling: SamplingSpec) -> Callable[[], list[Rollout]]:
        """Start generating for ``rows``; the returned callable waits for the rollouts."""
        engines = self.workers.rollout
        if self.executor is None:
            refs = engines.generate_async([r["prompt_ids"] for r in rows], sampling)
            return lambda: engines.collect(refs)
        future = self.pool.submit(
            self.executor.run,
            engines,
            self.scorer.tokenizer,
            [r["prompt"] for r in rows],
            [r["label"] for r in rows],
            sampling,
            self.spec.data.max_len,
            prompt_ids=[r["prompt_ids"] for r in rows],
        )
        return future.result

    def start(self, step: int) -> tuple[list[dict[str, Any]], Callable[[], list[Rollout]]]:
        rows = self.stream.take(self.spec.rollout.prompts_per_step)
        return rows, self.launch(rows, self.sampling(step))

    def finish(self, step: int, rows: list[dict[str, Any]], wait: Callable[[], list[Rollout]]) -> Scored:
        scored = self._score(rows, wait())
        f = self.spec.algorithm.filters
        if not f.dynamic_filtering:
            return scored
        want = self.spec.rollout.prompts_per_step
        lo, hi = f.dynamic_filtering_range
        kept: list[Scored] = []
        dropped: list[Scored] = []
        drawn = 0
        rounds = 0
        batch = scored
        while True:
            for g in self._groups(batch):
                drawn += 1
                (kept if keep_group(g.scores, (lo, hi)) else dropped).append(g)
            if len(kept) >= want or rounds >= f.max_refill_rounds:
                break
            rounds += 1
            more = self.stream.take(want - len(kept))
            batch = self._score(more, self.launch(more, self.sampling(step * 1000 + rounds))())
        # Still short after the refill rounds: fill with dropped groups (zero group advantage for group estimators,
        # so they add tokens to the normaliser but no push), keeping the batch size the optimizer expects.
        out = _join((kept + dropped[::-1])[:want])
        out.pass_rate = 100.0 * len(kept) / max(drawn, 1)
        out.refill_rounds = rounds
        return out

    def _score(self, rows: list[dict[str, Any]], rollouts: list[Rollout]) -> Scored:
        expanded = [row for row in rows for _ in range(self.n)]
        return self.scorer(rollouts, expanded)

    def _groups(self, s: Scored) -> list[Scored]:
        n = self.n
        return [_slice(s, i, i + n) for i in range(0, len(s.rollouts), n)]


def _slice(s: Scored, a: int, b: int) -> Scored:
    return Scored(
        s.rollouts[a:b], s.rows[a:b], s.rewards[a:b], s.scores[a:b], {k: v[a:b] for k, v in s.extra_logs.items()}
    )


def _join(parts: list[Scored]) -> Scored:
    keys = list(dict.fromkeys(k for p in parts for k in p.extra_logs))
    return Scored(
        [r for p in parts for r in p.rollouts],
        [r for p in parts for r in p.rows],
        [r for p in parts for r in p.rewards],
        [r for p in parts for r in p.scores],
        {k: [v for p in parts for v in p.extra_logs.get(k, [float("nan")] * len(p.rollouts))] for k in keys},
    )


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


def make_experience(spec: ExperimentSpec, workers: RLWorkers, scored: Scored, pad_id: int, kl_coef: float):
    """Rollouts + rewards -> an experience batch with advantages and returns, and its metrics."""
    info = {"datasource": [row["datasource"] for row in scored.rows]}
    exp = from_rollouts(scored.rollouts, pad_id, info)
    timing = workers.make_experience(exp)
    exp.rewards = shaped_rewards(spec, scored, exp)
    a = spec.algorithm
    kl = None
    if exp.ref_logprobs is not None and exp.old_logprobs is not None:
        kl = compute_approx_kl(exp.old_logprobs, exp.ref_logprobs, a.kl.estimator) * exp.action_mask
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
        reward_clip_range=tuple(spec.reward.clip_range),
        no_std_norm=a.advantage.no_std_norm,
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
    if kl is not None:
        metrics["kl"] = float(masked_mean(kl, exp.action_mask))
    if exp.rollout_logprobs is not None and exp.old_logprobs is not None:
        metrics["logprobs_diff"] = float(masked_mean((exp.old_logprobs - exp.rollout_logprobs).abs(), exp.action_mask))
    for k, v in scored.extra_logs.items():
        finite = [x for x in v if x == x]
        if finite:
            metrics[k] = fmean(finite)
    if scored.pass_rate is not None:
        metrics["dynamic_filtering_pass_rate"] = scored.pass_rate
        metrics["dynamic_filtering_refill_rounds"] = float(scored.refill_rounds)
    return exp, metrics


def _total_steps(spec: ExperimentSpec, n_prompts: int) -> int:
    per_episode = n_prompts // spec.rollout.prompts_per_step
    if per_episode == 0:
        raise UserError(
            f"data.train_files: {n_prompts} prompts cannot fill one rollout.prompts_per_step="
            f"{spec.rollout.prompts_per_step}; lower it or add prompts"
        )
    total = per_episode * spec.trainer.num_episodes
    return min(total, spec.trainer.max_steps) if spec.trainer.max_steps else total


def evaluate(spec: ExperimentSpec, gen: Generator, workers: RLWorkers, evalset: Any, step: int) -> dict[str, float]:
    """pass@1 and pass@k per datasource on the eval prompts (OpenRLHF compute_eval_metrics)."""
    n = spec.eval.samples_per_prompt
    count = len(evalset) if spec.eval.max_prompts is None else min(len(evalset), spec.eval.max_prompts)
    rows = evalset.rows(list(range(count)))
    sampling = gen.sampling(10**6 + step, temperature=spec.eval.temperature, n=n)
    rollouts = gen.launch(rows, sampling)()
    scored = gen.scorer(rollouts, [r for r in rows for _ in range(n)])
    lengths = [float(sum(r.action_mask)) for r in rollouts]
    truncated = [1.0 if r.finish_reason == "length" else 0.0 for r in rollouts]
    return eval_metrics(scored.scores, [r["datasource"] for r in scored.rows], lengths, truncated, n)


def run(
    spec: ExperimentSpec, plan: Any, run_dir: Path, realize: Callable[[ExperimentSpec, Any], Any]
) -> dict[str, Any]:
    """Train ``spec`` (an RL algorithm); ``realize(spec, plan)`` gives the Ray placement (from the launcher)."""
    from rlhf.data import build_datasets
    from rlhf.models.loading import resolve_model_path, tokenizer_for
    from rlhf.tracking import Progress, Tracker, summary_lines

    t_start = time.time()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    policy_path = resolve_model_path(spec.model)
    tokenizer = tokenizer_for(spec.model, policy_path, padding_side="left")
    # Data before processes: a bad row stops the job here, naming file, row and key.
    splits = build_datasets(spec, tokenizer, "prompt")
    print(splits.summary(), file=sys.stderr)
    total = _total_steps(spec, len(splits.train))
    d = derive(spec)
    opt_steps = total * max(d.optimizer_steps_per_rollout, 1)
    stream = PromptStream(splits.train, spec.seed)
    kl_ctl = make_kl_controller(spec.algorithm.kl.coef, spec.algorithm.kl.target, spec.algorithm.kl.horizon)

    ckpt_root = Path(spec.checkpoint.dir)
    ckpt = CheckpointManager(ckpt_root if ckpt_root.is_absolute() else run_dir / ckpt_root, spec.checkpoint.max_keep)
    resume_from = ckpt.resolve_resume(spec.checkpoint.resume)
    state = ckpt.driver_state(resume_from) if resume_from else {}
    tracker = Tracker(spec, run_dir, run_id=state.get("mlflow_run_id"))
    realized = None
    gen = None
    ok = False
    try:
        tracker.rewind(int(state["step"]) if state else -1)
        tracker.log_artifacts(run_artifacts(spec, plan, run_dir))
        realized = realize(spec, plan)
        workers = RLWorkers(spec, realized, policy_path, opt_steps)
        workers.pad_id = tokenizer.pad_token_id
        # The weight-sync probe: the same few prompts every time, so its figures compare across syncs.
        probe_prompts = [list(r["prompt_ids"]) for r in splits.train.rows(list(range(min(4, len(splits.train)))))]
        scorer = Scorer(spec, tokenizer, workers)
        gen = Generator(spec, workers, scorer, stream)
        start = 0
        best: tuple[str | None, float | None] = (None, None)
        if resume_from:
            for role, group in workers.trained_groups().items():
                group.run_all("load_checkpoint", str(resume_from / role))
            stream.sampler.load_state_dict(state["sampler"])
            kl_ctl.value = float(state["kl_coef"])
            best = (state.get("best_key"), state.get("best_value"))
            start = int(state["step"])
            workers.sync_weights()
            print(f"resumed from {resume_from} at step {start}", file=sys.stderr)

        def save(step: int) -> Path:
            tmp = ckpt.begin(step)
            for role, group in workers.trained_groups().items():
                group.run_all("save_checkpoint", str(tmp / role), {"step": step})
            driver = {
                "step": step,
                "sampler": stream.sampler.state_dict(),
                "kl_coef": kl_ctl.value,
                "mlflow_run_id": tracker.run_id,
                "family": "rl",
                "best_key": best[0],
                "best_value": best[1],
            }
            return ckpt.commit(tmp, step, driver)

        keys = ("reward", "score", "policy_loss", "kl", "response_length")
        progress = Progress(total, start, f"{spec.algorithm.name} rl", keys, spec.logging.progress)
        evalset = splits.eval
        last_eval: dict[str, float] = {}
        last_ckpt = resume_from
        pending = gen.start(start + 1) if spec.rollout.async_mode and start < total else None
        for step in range(start + 1, total + 1):
            t0 = time.perf_counter()
            if pending is None:
                workers.before_generation()
            rows, wait = pending if pending is not None else gen.start(step)
            scored = gen.finish(step, rows, wait)
            workers.after_generation()
            t_gen = time.perf_counter() - t0
            # Async: the next rollout starts now, on the weights before this step's update (one step stale).
            pending = gen.start(step + 1) if spec.rollout.async_mode and step < total else None
            t1 = time.perf_counter()
            workers.kl_coef = kl_ctl.value
            exp, metrics = make_experience(spec, workers, scored, tokenizer.pad_token_id, kl_ctl.value)
            t_exp = time.perf_counter() - t1
            t2 = time.perf_counter()
            if workers.critic is not None:
                metrics.update(workers.train_critic(exp, step))
            if step > spec.critic.freezing_steps or workers.critic is None:
                metrics.update(workers.train_actor(exp, step))
            t_train = time.perf_counter() - t2
            metrics.update(workers.sync_weights(probe_prompts, tokenizer.eos_token_id))
            kl_ctl.update(metrics.get("kl", 0.0), d.samples_per_step)
            metrics.update(
                {
                    "kl_coef": kl_ctl.value,
                    "timing/generation": t_gen,
                    "timing/make_experience": t_exp,
                    "timing/ppo_train": t_train,
                    "timing/step_total": time.perf_counter() - t0,
                    "episode": float(stream.epoch),
                }
            )
            tracker.log({(k if k.startswith("rollout/") else f"train/{k}"): v for k, v in metrics.items()}, step)
            progress.update(metrics)
            if spec.eval.steps > 0 and evalset is not None and (step % spec.eval.steps == 0 or step == total):
                last_eval = evaluate(spec, gen, workers, evalset, step)
                tracker.log({f"eval/{k}": v for k, v in last_eval.items()}, step)
                progress.write(f"step {step}: " + ", ".join(f"{k}={v:.3g}" for k, v in last_eval.items()))
                key = best_metric_key(last_eval, spec.eval.best_metric)
                if key and key in last_eval and (best[1] is None or last_eval[key] > best[1]):
                    best = (key, last_eval[key])
                    workers.policy.run_all("save_hf", str(run_dir / "best_model"))
            if spec.checkpoint.save_steps > 0 and (step % spec.checkpoint.save_steps == 0 or step == total):
                last_ckpt = save(step)
        progress.close()
        model_dir = run_dir / spec.checkpoint.output_dir
        workers.policy.run_all("save_hf", str(model_dir))
        if workers.critic is not None and spec.critic.save_value_network:
            workers.critic.run_all("save_hf", str(run_dir / (spec.checkpoint.output_dir + "_critic")))
        metrics_log = [m for m in _read(run_dir)]
        result = {
            "family": "rl",
            "algorithm": spec.algorithm.name,
            "steps": total,
            "seconds": time.time() - t_start,
            "model_dir": str(model_dir),
            "checkpoint": str(last_ckpt) if last_ckpt else None,
            "mlflow_run_id": tracker.run_id,
            "tracking_uri": tracker.tracking_uri if tracker.run_id else None,
            "final_metrics": last_eval,
            "best": {"key": best[0], "value": best[1]} if best[0] else None,
            "reward_first_last": _first_last(metrics_log),
            "run_dir": str(run_dir),
        }
        for line in summary_lines(result):
            print(line, file=sys.stderr)
        ok = True
        return result
    finally:
        tracker.finish(ok)
        if gen is not None:
            gen.close()
        if realized is not None:
            realized.shutdown()


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
