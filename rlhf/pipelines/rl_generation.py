"""Generating and scoring one RL step's samples: prompts in a resumable order, the engines (or an agent executor)
producing rollouts, the reward sources scoring them, and DAPO's dynamic filtering with refill."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rlhf.algo.shaping import keep_group
from rlhf.backends.contract.rollout import Rollout, SamplingSpec
from rlhf.errors import UserError
from rlhf.pipelines.experience import from_rollouts
from rlhf.spec import names
from rlhf.spec.derive import derive
from rlhf.spec.schema import ExperimentSpec

#: Scored.extra_logs key holding, for each sample, the reward of the greedy response to its prompt (ReMax's
#: baseline); logged as a metric too.
GREEDY_BASELINE_LOG = "reward/greedy_baseline"


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

    def __init__(self, spec: ExperimentSpec, tokenizer: Any, workers: Any) -> None:
        self.spec, self.tokenizer, self.workers = spec, tokenizer, workers
        self.source = None
        self.step = 0  # the training step being scored (TRL functions read it from trainer_state)
        d = derive(spec)
        # On-policy distillation may run without a reward source: the teacher trains, samples score 0.
        self.unscored = "teacher" in d.roles and d.reward_source is None
        if d.reward_source in ("function", "remote", "verifier"):
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
            from rlhf.rewards import RewardBatch, score_batch

            queries = [p + resp for p, resp in zip(prompts, responses, strict=True)]
            batch = RewardBatch(
                queries,
                prompts,
                responses,
                labels,
                # TRL and veRL hand their functions the text without special tokens, and TRL the token ids
                completions=[dec(r.output_ids, skip_special_tokens=True) for r in rollouts],
                rows=list(rows),
                completion_ids=[list(r.output_ids) for r in rollouts],
                group_size=_group_size(rows),
                step=self.step,
                max_steps=self.spec.trainer.max_steps or 0,
            )
            res = score_batch(self.source, batch)
            return Scored(rollouts, rows, list(res.rewards), list(res.scores), dict(res.extra_logs))
        if self.unscored:
            zeros = [0.0] * len(rollouts)
            return Scored(rollouts, rows, zeros, list(zeros), {})
        if self.workers.reward is None:
            raise UserError(
                f"agent file {self.spec.agent.path}: episodes came back with reward None and no reward.* source is "
                "set; return rewards from step()/run_agent() or set reward.verifier, reward.function or reward.urls"
            )
        exp = from_rollouts(rollouts, self.tokenizer.pad_token_id)
        rm = self.workers.reward_model_scores(exp)
        return Scored(rollouts, rows, rm, list(rm), {})


def _group_size(rows: list[dict[str, Any]]) -> int:
    """The samples per prompt of a batch whose rows repeat each prompt's record (the same object) once per sample:
    training's rollout.samples_per_prompt, or evaluation's own count."""
    n = 1
    while n < len(rows) and rows[n] is rows[0]:
        n += 1
    return n


def _merge_logs(logs: list[dict[str, float]]) -> dict[str, list[float]]:
    keys = list(dict.fromkeys(k for d in logs for k in d))
    return {k: [float(d.get(k, float("nan"))) for d in logs] for k in keys}


class Generator:
    """Prompts -> scored samples, with DAPO's dynamic filtering and refill. Single-turn generation goes straight to
    the engines; an agent executor (multi_turn, openai) drives them turn by turn from a background thread."""

    def __init__(self, spec: ExperimentSpec, workers: Any, scorer: Scorer, stream: PromptStream) -> None:
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
        self.scorer.step = step
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
        scored = self.scorer(rollouts, expanded)
        if self.spec.algorithm.advantage.estimator in names.GREEDY_BASELINE_ESTIMATORS:
            # ReMax: one greedy response per prompt, scored by the same source; its reward is each sample's baseline.
            greedy = self.scorer(self.launch(rows, self.sampling(self.scorer.step, temperature=0.0, n=1))(), rows)
            scored.extra_logs[GREEDY_BASELINE_LOG] = [r for r in greedy.rewards for _ in range(self.n)]
        return scored

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
