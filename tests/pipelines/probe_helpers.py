"""What the weight-sync probe tests share (imported by name, like tiny_shapes): the trainer's side of the probe and a
training step that moves the weights by a chosen amount."""

from __future__ import annotations

from functools import partial

import torch

from rlhf.pipelines.experience import from_rollouts
from rlhf.pipelines.rl_losses import policy_logprobs_fn
from rlhf.pipelines.sft import sft_loss_fn

PROMPTS = [[1, 74, 71, 78, 78, 81], [1, 5, 6, 9], [1, 40, 41, 42, 43, 44, 45, 46]]


def trainer_score(policy, pad_id):
    """``score(rollouts)``: the policy's temperature-1 log-probs of each rollout's output tokens (judge_probe's)."""

    def score(rollouts):
        exp = from_rollouts(rollouts, pad_id)
        t = exp.tensors()
        batch = [{k: v for k, v in t.items() if k in ("sequences", "attention_mask", "action_mask")}]
        lp = policy.run_all("forward", partial(policy_logprobs_fn, temperature=1.0), batch, None)[0][0]
        mask = exp.action_mask.bool()
        return [lp[i][mask[i]].tolist() for i in range(len(rollouts))]

    return score


def sft_step(policy, vocab, lr, seed):
    """One SFT step of the policy at rate ``lr`` on random tokens (``seed``)."""
    policy.run_all("set_peak_lr", lr)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (2, 16), generator=g)
    mb = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "action_mask": torch.ones(2, 15)}
    policy.run_all("train_step", [mb], sft_loss_fn, "action_mask")


def policy_and_sync(spec, realized):
    """The policy group (initialised), its rollout engines and their WeightSync on ``realized``, with the
    tokenizer's pad id: ``(policy, ws, pad)``."""
    from rlhf.backends.weight_sync.driver import WeightSync
    from rlhf.models.loading import resolve_model_path, tokenizer_for
    from rlhf.pipelines.rollout_engines import RolloutEngines
    from rlhf.workers import TrainerWorker

    path = resolve_model_path(spec.model)
    pad = tokenizer_for(spec.model, path).pad_token_id
    policy = realized.create_group("policy", TrainerWorker, spec, "policy")
    policy.run_all("init_trained", kind="causal_lm", total_steps=10)
    return policy, WeightSync(spec, policy, RolloutEngines(spec, realized, path, None)), pad
