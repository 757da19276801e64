"""Rollout-only runs (``rollout.only=true``): the RL pipeline's generation and scoring, step by step, with no
training role (no policy trainer, reference, critic or teacher: rlhf.spec.derive leaves only the engines and a
reward model when the rewards come from one). For evaluation (``eval.steps``) and for making data
(``rollout.record=DIR``: the recording a later ``rollout.replay=DIR`` trains on).

Each step draws ``rollout.prompts_per_step`` prompts in the run's seeded order and samples them with the step's
seed, exactly as an RL run's step would from the same weights; the engines keep the weights they loaded
(``model.path``), since nothing trains. Checkpoints hold the prompt order only, so a resumed run carries on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import fmean
from typing import Any

from rlhf.errors import WorkerFailure
from rlhf.pipelines.rl import _total_steps, evaluate, prompt_data
from rlhf.pipelines.rl_generation import Generator, PromptStream, Scored, Scorer
from rlhf.pipelines.rl_losses import reward_model_fn
from rlhf.pipelines.rl_metrics import group_reward_std, rollout_metrics
from rlhf.pipelines.rl_roles import _threads, forward_in_ranks
from rlhf.pipelines.role_set import with_mesh
from rlhf.pipelines.step_count import StepCount
from rlhf.spec.schema import ExperimentSpec


class RolloutWorkers:
    """The roles of a rollout-only run: the rollout engines, and the reward model when rewards come from one."""

    def __init__(self, spec: ExperimentSpec, realized: Any, model_path: str) -> None:
        from rlhf.pipelines.rollout_engines import RolloutEngines
        from rlhf.workers import ModelWorker

        self.spec = spec
        env = _threads(spec) if spec.hardware.accelerator == "cpu" else None
        self.reward = None
        pending = None
        if "reward" in realized.plan.roles:
            self.reward = with_mesh(realized.create_group("reward", ModelWorker, spec, "reward", env=env), spec)
            r = spec.reward
            pending = self.reward.async_run_all(
                "init_frozen", "reward", kind="reward", model_path=r.model_path, normalize_reward=r.normalize
            )
        self.rollout = RolloutEngines(spec, realized, model_path, env)
        if pending is not None:
            self.reward.get(pending, "init", startup=True)

    @contextmanager
    def generation(self, next_is_sync: bool = False) -> Iterator[None]:
        """Nothing takes turns with the engines (no trainer holds their devices): a block that generates runs as
        it is (the RL workers' hybrid schedule, rlhf.pipelines.rl_roles.HybridSchedule, has nothing to swap)."""
        yield

    def reward_model_scores(self, exp: Any) -> list[float]:
        import torch

        mb = self.spec.rollout.micro_batch_per_device
        return torch.cat(forward_in_ranks(self.reward, reward_model_fn, exp, "reward", mb)).tolist()


def step_metrics(scored: Scored, n: int) -> dict[str, float]:
    """What one rollout-only step logs: rollout/* rewards, scores and lengths (the RL step's rollout metrics)."""
    lengths = [float(sum(r.action_mask)) for r in scored.rollouts]
    truncated = [1.0 if r.finish_reason == "length" else 0.0 for r in scored.rollouts]
    out = {
        **rollout_metrics(scored.rewards, lengths, truncated),
        "rollout/score_mean": fmean(scored.scores),
        "rollout/group_reward_std": group_reward_std(scored.rewards, n),
    }
    for k, v in scored.extra_logs.items():
        finite = [x for x in v if x == x]
        if finite:
            out[f"rollout/{k}"] = fmean(finite)
    if scored.pass_rate is not None:
        out["rollout/dynamic_filtering_pass_rate"] = scored.pass_rate
    return out


class RolloutOnlyRecipe:
    """rollout.only as a recipe of rlhf.pipelines.lifecycle (the Runner owns resume, checkpoints, restarts,
    tracking)."""

    family = "rl"
    progress_keys = ("rollout/reward_mean", "rollout/response_length_mean")

    def __init__(self, spec: ExperimentSpec, run_dir: Path) -> None:
        self.spec, self.run_dir = spec, Path(run_dir)
        self.label = f"{spec.algorithm.name} rollout-only"
        self.workers: RolloutWorkers | None = None
        self.gen: Generator | None = None
        self.recorder: Any = None
        self.current: tuple[int, list[dict[str, Any]]] | None = None  # the step under way and its prompts
        self.last_eval: dict[str, float] = {}
        self.init_origin: dict[str, str] | None = None  # checkpoint.init_from: the tracker's init_from.* params

    def prepare(self) -> StepCount:
        from rlhf.pipelines.init_from import starting_weights
        from rlhf.pipelines.rollout_record import Recorder

        self.spec, self.init_origin = starting_weights(self.spec, self.run_dir)  # the engines sample from them
        spec = self.spec
        self.model_path, self.tokenizer, self.splits = prompt_data(spec)
        count = _total_steps(spec, len(self.splits.train))
        self.total = count.steps
        if spec.rollout.record:
            self.recorder = Recorder(spec, self.tokenizer, self.model_path, "rollout_only")
        self.reset()
        return count

    def reset(self) -> None:
        self.stream = PromptStream(self.splits.train, self.spec.seed)
        self.current = None

    def setup(self, realized: Any) -> None:
        self.workers = RolloutWorkers(self.spec, realized, self.model_path)
        self.gen = Generator(self.spec, self.workers, Scorer(self.spec, self.tokenizer, self.workers), self.stream)

    def teardown(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None

    def _can_eval(self) -> bool:
        return self.spec.eval.steps > 0 and self.splits.eval is not None

    def initial_eval(self) -> dict[str, float]:
        if not self._can_eval():
            return {}
        return {f"eval/{k}": v for k, v in evaluate(self.spec, self.gen, self.workers, self.splits.eval, 0).items()}

    def step(self, step: int) -> dict[str, float]:
        gen = self.gen
        if self.current is None or self.current[0] != step:  # a step carried on after a restart keeps its prompts
            self.current = (step, self.stream.take(self.spec.rollout.prompts_per_step))
        rows = self.current[1]
        sampling = gen.sampling(step)
        scored = gen.finish(step, rows, gen.launch(rows, sampling))
        if self.recorder is not None:
            self.recorder.write(step, scored, sampling.seed)
        out = step_metrics(scored, self.spec.rollout.samples_per_prompt)
        out["rollout/episode"] = float(self.stream.epoch)
        if self._can_eval() and (step % self.spec.eval.steps == 0 or step == self.total):
            self.last_eval = evaluate(self.spec, gen, self.workers, self.splits.eval, step)
            out.update({f"eval/{k}": v for k, v in self.last_eval.items()})
        self.current = None
        return out

    def recover(self, failure: WorkerFailure) -> bool:
        """A crashed or hung engine is started again in its bundle with the model's weights (nothing trained them)."""
        if failure.role != "rollout" or self.workers is None:
            return False
        engines = self.workers.rollout
        for i in range(len(engines)) if failure.rank is None else [failure.rank]:
            print(f"restarting rollout engine {i}", file=sys.stderr, flush=True)
            engines.restart(i)
        return True

    def state(self, step: int) -> dict[str, Any]:
        return {"sampler": self.stream.sampler.state_dict()}

    def save(self, folder: Path, step: int) -> None:
        pass  # nothing trains: the driver state (the prompt order) is the whole checkpoint

    def load(self, folder: Path, state: dict[str, Any]) -> None:
        self.stream.sampler.load_state_dict(state["sampler"])
        self.current = None

    def finish(self) -> dict[str, Any]:
        out: dict[str, Any] = {"algorithm": self.spec.algorithm.name, "final_metrics": self.last_eval}
        if self.recorder is not None:
            out["recording"] = self.spec.rollout.record
        return out


def run(
    spec: ExperimentSpec, plan: Any, run_dir: Path, realize: Callable[[ExperimentSpec, Any], Any]
) -> dict[str, Any]:
    """Generate and score ``spec``'s prompts (and record them) with nothing trained, on the placement
    ``realize(spec, plan)`` gives, with the run lifecycle of every pipeline."""
    from rlhf.pipelines.lifecycle import Runner

    return Runner(spec, plan, run_dir, realize, RolloutOnlyRecipe(spec, run_dir)).run()
