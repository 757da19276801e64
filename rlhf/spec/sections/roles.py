"""The models of the roles besides the policy: ``reward.*``, ``critic.*``, ``reference.*``, ``teacher.*``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlhf.spec import names
from rlhf.spec.keys import key

#: reward.contract's values (rlhf.rewards.contracts.CONTRACTS holds the same names, a test pins it).
REWARD_CONTRACTS = ("auto", "openrlhf", "verl", "trl")
#: reward.multi_objective_aggregation's values (TRL's GRPOConfig.multi_objective_aggregation).
REWARD_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


@dataclass(frozen=True)
class RewardSpec:
    """Where RL rewards come from: exactly one of model_path, function, urls, verifier (or an agent)."""

    model_path: str = key("", "reward model (sequence classification / value head)")
    # Any: one reference or a list of them, as TRL's --reward_funcs; rlhf.spec.validate checks the form.
    function: Any = key(
        "",
        "reward function(s), one or a list: FILE.py (its reward_func, else compute_score), FILE.py:NAME, or a dotted "
        "import path (trl.rewards.accuracy_reward; TRL's CLI names accuracy_reward, think_format_reward, ... alone "
        "work too); each read in the contract its signature shows (reward.contract)",
    )
    contract: str = key(
        "auto",
        "how reward.function is called: auto (by its signature, never its name) | openrlhf (reward_func(queries, "
        "prompts, labels) per batch) | verl (compute_score(data_source, solution_str, ground_truth, extra_info) per "
        "sample) | trl (f(prompts, completions, completion_ids, **columns) by keyword, a float or None each)",
        choices=REWARD_CONTRACTS,
    )
    weights: list[float] = key(
        factory=list,
        doc="one weight per reward.function entry (TRL's reward_weights); empty: 1.0 each",
    )
    multi_objective_aggregation: str = key(
        "sum_then_normalize",
        "several reward functions (TRL's): sum_then_normalize (weighted sum, then the advantage's baseline) | "
        "normalize_then_sum (GDPO: each function z-scored in its group, std + 1e-4, then the weighted sum)",
        choices=REWARD_AGGREGATIONS,
    )
    urls: list[str] = key(factory=list, doc="HTTP endpoints of the remote reward protocol")
    verifier: str = key(
        "",
        "built-in verifier: exact | math (HF math-verify) | format | reasoning_gym (the task's own score_answer)",
        choices=names.VERIFIERS,
        empty_ok=True,
    )
    verifier_timeout_s: float = key(
        5.0, "math/reasoning_gym: seconds per answer check; a check past it scores 0 (logged: verifier_timeout)", gt=0
    )
    timeout_s: float = key(180.0, "remote reward: seconds per request", gt=0)
    retries: int = key(5, "remote reward: retries per request", ge=0)
    request_batch: int = key(64, "remote reward: samples per HTTP request", ge=1)
    clip_range: list[float] | None = key(
        factory=lambda: [-10.0, 10.0],
        doc="[low, high] rewards are clipped to; null: not clipped (OpenRLHF always clips, [-10, 10] by default; veRL "
        "never clips scores)",
        length=2,
        increasing=True,
    )
    normalize: bool = key(False, "(r - mean) / std with the statistics saved by RM training")
    offload: bool = key(False, "reward model weights in host memory")
    value_head_prefix: str = key("score", "attribute name of the reward model's value head", nonempty=True)

    def functions(self) -> list[str]:
        """reward.function as a list of references (empty when unset)."""
        f = self.function
        if not f:
            return []
        return [f] if isinstance(f, str) else [str(x) for x in f]


@dataclass(frozen=True)
class CriticSpec:
    """The value model of PPO (gae)."""

    model_path: str = key(
        "",
        "empty: the critic of checkpoint.init_from's source when it has one, else the reward model's path, else "
        "the policy's",
    )
    value_clip: float | None = key(0.5, "value loss clipping (null: off)", gt=0)
    aggregation: str = key(
        "token_mean",
        "how the value loss's token terms become one loss, the names of algorithm.policy_loss.aggregation: token_mean "
        "(OpenRLHF, whatever the actor's aggregation) | seq_mean | seq_mean_token_sum | seq_mean_token_sum_norm (its "
        "divisor as the policy's: aggregation_norm, aggregation_norm_from); veRL's critic follows its own "
        "loss_agg_mode, the actor's by default",
        choices=names.LOSS_AGGREGATION_NAMES,
    )
    freezing_steps: int = key(0, "the policy is not trained during the first N steps", ge=0)
    save_value_network: bool = key(False, "also save the critic as a Hugging Face folder at the end")


@dataclass(frozen=True)
class ReferenceSpec:
    """The frozen reference policy of the KL penalty."""

    model_path: str = key("", "empty: the policy's initial weights (checkpoint.init_from's when it is set)")
    offload: bool = key(False, "reference weights in host memory")


@dataclass(frozen=True)
class TeacherSpec:
    """The frozen teacher of on-policy distillation (algorithm=opd): it scores the student's own samples token by
    token, at the rollout temperature like the reference. It must share the student's tokenizer (checked at
    validation for local folders, at load for hub names)."""

    model_path: str = key("", "teacher model: local HF folder or hub name org/name; algorithm=opd needs it")
    offload: bool = key(False, "teacher weights in host memory")
    params_b: float | None = key(
        None,
        "teacher size in billions of parameters, for the plan's memory estimate (null: the student's)",
        gt=0,
        le=1e5,  # 100T parameters: past it a typo, and the plan's arithmetic would overflow
    )
