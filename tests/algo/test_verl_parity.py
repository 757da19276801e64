"""Our numerics against veRL 0.9.1's own functions (``verl/trainer/ppo/core_algos.py``) on seeded random tensors with
padding and groups, under the settings ``rlhf-recipes import-verl`` writes: each test maps a veRL command through
the converter and computes ours from the keys it wrote, so the mapping is part of what is tested.

Covered: the KL estimators, abs included (values, gradients); every aggregation the converter maps, Dr. GRPO's divisor
included (veRL pads each micro-batch to its longest response), and token-sum over a step of several micro-batches;
the vanilla, CISPO and GPG policy losses with veRL's clip defaults and dual clip; the KL-loss and entropy terms
aggregated by loss_agg_mode; the critic loss under each aggregation; the rollout IS weights (token and sequence, TIS and
IcePop, batch-normalised or not) in the vanilla loss; the advantages of grpo, grpo without std
(Dr. GRPO), rloo, reinforce_plus_plus_baseline and gpg with the KL in the reward, and unclipped scores.

The functions come from the wheel (tests/algo/verl_reference.py says how they are loaded without their heavy
imports); without it these tests are skipped, saying where to put it.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl_reference import HOW_TO_GET, ActorConfig, actor_config, load, wheel_path

from rlhf.algo import (
    LossNormalizer,
    aggregate,
    compute_advantages_and_returns,
    compute_approx_kl,
    entropy_bonus,
    kl_loss,
    policy_loss,
    value_loss,
)
from rlhf.algo.advantages import GROUP_STD_EPS
from rlhf.algo.aggregation import response_width, step_loss_normalizer
from rlhf.algo.is_correction import ISCorrection, is_weights
from rlhf.importers.verl.mapping import map_command
from rlhf.importers.verl.overrides import split_command
from rlhf.pipelines.rl_losses import policy_loss_params, rollout_is_weight_totals
from rlhf.spec import names
from rlhf.spec.schema import ISCorrectionSpec, PolicyLossSpec

SEEDS = range(3)
A = "actor_rollout_ref.actor"
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")


@pytest.fixture(scope="module")
def ref() -> SimpleNamespace:
    wheel = wheel_path()
    if wheel is None:
        pytest.skip(HOW_TO_GET)
    return load(wheel)


def mapped(*overrides: str, estimator: str = "grpo") -> dict:
    """The values import-verl writes for a main_ppo command with these overrides."""
    words = ["python3", "-m", "verl.trainer.main_ppo", f"algorithm.adv_estimator={estimator}", *overrides]
    return map_command(split_command(words)).values


def right_padded_mask(g: torch.Generator, batch: int, width: int) -> torch.Tensor:
    """Response masks as veRL holds them: each row's response from column 0, padded on the right, one row full."""
    lengths = torch.randint(1, width + 1, (batch,), generator=g)
    lengths[int(torch.randint(0, batch, (1,), generator=g))] = width
    return (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()


def _grad(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    out.sum().backward()
    return out.detach(), x.grad


# -- KL estimators ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["kl", "k1", "mse", "k2", "low_var_kl", "k3", "abs"])
@pytest.mark.parametrize("seed", SEEDS)
def test_kl_estimators_match_verl(ref, kind, seed):
    ours_name = mapped(f"{A}.use_kl_loss=True", f"{A}.kl_loss_type={kind}")["algorithm.kl.estimator"]
    g = torch.Generator().manual_seed(seed)
    # Log-ratios within about +-4: k1 and k2 are clamped at 10 here, not in veRL (a difference of its own, left aside).
    log_probs = torch.randn(4, 7, generator=g) * 2 - 3
    base = log_probs + torch.randn(4, 7, generator=g) * 1.2
    value_t, grad_t = _grad(lambda lp: ref.kl_penalty(lp, base, kind), log_probs)
    value_o, grad_o = _grad(lambda lp: compute_approx_kl(lp, base, ours_name), log_probs)
    torch.testing.assert_close(value_o, value_t)
    torch.testing.assert_close(grad_o, grad_t)


# -- aggregation -----------------------------------------------------------------------------------------------------


def _ours_norm(values: dict, mask: torch.Tensor) -> LossNormalizer | None:
    """The normaliser the pipeline gives one micro-batch under these recipe values (rl_losses.width_normalizer)."""
    if values.get("algorithm.policy_loss.aggregation") != "seq_mean_token_sum_norm":
        return None
    if values.get("algorithm.policy_loss.aggregation_norm") is not None:
        return LossNormalizer(constant=float(values["algorithm.policy_loss.aggregation_norm"]))
    assert values.get("algorithm.policy_loss.aggregation_norm_from") == "micro_batch_width"
    return LossNormalizer(constant=float(response_width(mask)))


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("scale", [None, 64])
@pytest.mark.parametrize("seed", SEEDS)
def test_aggregations_match_verl_on_a_micro_batch(ref, mode, scale, seed):
    overrides = [f"{A}.loss_agg_mode={mode}"] + ([f"{A}.loss_scale_factor={scale}"] if scale else [])
    values = mapped(*overrides)
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, 5, 9)
    loss = torch.randn(5, 9, generator=g)
    # Our rows hold prompt columns too (here 3 on the left, outside the mask): the divisor must not count them.
    ours_mask = torch.cat([torch.zeros(5, 3), mask], dim=1)
    ours_loss = torch.cat([torch.randn(5, 3, generator=g), loss], dim=1)
    name = values["algorithm.policy_loss.aggregation"]
    theirs = ref.agg_loss(loss, mask, mode, loss_scale_factor=scale)
    ours = aggregate(ours_loss, ours_mask, name, _ours_norm(values, ours_mask))
    torch.testing.assert_close(ours, theirs)


def test_token_sum_over_a_step_of_micro_batches_is_verls(ref):
    """Our engine divides each micro-batch's loss by the accumulation steps, veRL's does not: the sums are equal."""
    g = torch.Generator().manual_seed(0)
    masks = [right_padded_mask(g, 3, 6) for _ in range(4)]
    losses = [torch.randn(3, 6, generator=g) for _ in range(4)]
    name = mapped(f"{A}.loss_agg_mode=token-sum")["algorithm.policy_loss.aggregation"]
    norm = step_loss_normalizer(masks)
    ours = sum(aggregate(loss, mask, name, norm) / len(masks) for loss, mask in zip(losses, masks, strict=True))
    theirs = sum(ref.agg_loss(loss, mask, "token-sum") for loss, mask in zip(losses, masks, strict=True))
    torch.testing.assert_close(ours, theirs)


# -- policy loss -----------------------------------------------------------------------------------------------------


def _policy_batch(g: torch.Generator, batch: int = 6, width: int = 8):
    mask = right_padded_mask(g, batch, width)
    old = -torch.rand(batch, width, generator=g) * 3 - 0.05
    log_probs = old + torch.randn(batch, width, generator=g) * 0.3
    advantages = torch.randn(batch, width, generator=g) * 2
    return log_probs, old, advantages, mask


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        [f"{A}.clip_ratio=0.3"],  # no effect in 0.9.1: the 0.2 bounds of its yaml win
        [f"{A}.clip_ratio_low=0.2", f"{A}.clip_ratio_high=0.28"],
        [f"{A}.clip_ratio_c=10.0", f"{A}.loss_agg_mode=seq-mean-token-mean"],
        [f"{A}.loss_agg_mode=seq-mean-token-sum-norm"],
    ],
    ids=["defaults", "clip_ratio-alone", "clip-higher", "dual-clip-seq-mean", "dr-grpo"],
)
@pytest.mark.parametrize("loss_mode", ["vanilla", "cispo", "gpg"])
@pytest.mark.parametrize("seed", SEEDS)
def test_policy_losses_match_verl(ref, overrides, loss_mode, seed):
    if loss_mode == "cispo" and not overrides:
        # veRL's CISPO example: unbounded below, clipped above at 1.2.
        overrides = [f"{A}.clip_ratio_low=10", f"{A}.clip_ratio_high=0.2"]
    overrides = [*overrides, f"{A}.policy_loss.loss_mode={loss_mode}"]
    values = mapped(*overrides)
    config = actor_config(**{o.split("=")[0].rsplit(".", 1)[1]: _number(o.split("=")[1]) for o in overrides})
    verl_loss = getattr(ref, f"compute_policy_loss_{loss_mode}")
    g = torch.Generator().manual_seed(seed)
    log_probs, old, advantages, mask = _policy_batch(g)
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}

    def theirs(lp):
        return verl_loss(old, lp, advantages, mask, config.loss_agg_mode, config)[0]

    def ours(lp):
        return policy_loss(
            lp,
            old,
            advantages,
            mask,
            loss_type=pl["type"],
            clip_eps_low=pl["eps_clip_low"],
            clip_eps_high=pl["eps_clip_high"],
            dual_clip=pl.get("dual_clip"),
            aggregation=pl["aggregation"],
            norm=_ours_norm(values, mask),
        ).loss

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t)
    torch.testing.assert_close(grad_o, grad_t)


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_kl_loss_and_entropy_terms_aggregate_as_verls_actor(ref, mode, seed):
    """veRL's ppo_loss (verl/workers/utils/losses.py): ``+ kl_loss_coef · agg(kld) - entropy_coeff · agg(H)``, both
    by loss_agg_mode."""
    values = mapped(f"{A}.loss_agg_mode={mode}", f"{A}.use_kl_loss=True", f"{A}.kl_loss_coef=0.05")
    terms = values.get("algorithm.policy_loss.terms_aggregation", "token_mean")
    agg = values["algorithm.policy_loss.aggregation"] if terms == "policy" else "token_mean"
    g = torch.Generator().manual_seed(seed)
    log_probs, _, _, mask = _policy_batch(g)
    ref_lp = log_probs + torch.randn(log_probs.shape, generator=g) * 0.5
    entropy = torch.rand(log_probs.shape, generator=g) * 3
    norm = _ours_norm(values, mask)
    coef = values["algorithm.kl.coef"]

    def theirs(lp):
        kld = ref.kl_penalty(lp, ref_lp, "low_var_kl")
        return coef * ref.agg_loss(kld, mask, mode) - 0.01 * ref.agg_loss(entropy * lp.exp(), mask, mode)

    def ours(lp):
        kl = kl_loss(lp, ref_lp, mask, coef, values["algorithm.kl.estimator"], agg, norm)
        return kl + entropy_bonus(entropy * lp.exp(), mask, 0.01, agg, norm)

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t)
    torch.testing.assert_close(grad_o, grad_t)


# -- critic ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_value_loss_matches_verls_critic(ref, mode, own, seed):
    # The critic follows the actor's loss_agg_mode unless critic.loss_agg_mode says otherwise.
    overrides = [f"critic.loss_agg_mode={mode}"] if own else [f"{A}.loss_agg_mode={mode}"]
    values = mapped(*overrides, estimator="gae")
    assert names.canonical_aggregation(values["critic.aggregation"]) == values["critic.aggregation"]
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, 5, 8)
    old_values = torch.randn(5, 8, generator=g)
    vpreds = old_values + torch.randn(5, 8, generator=g) * 0.8
    returns = torch.randn(5, 8, generator=g) * 2
    clip = values.get("critic.value_clip", 0.5)
    norm = LossNormalizer(constant=float(response_width(mask))) if mode == "seq-mean-token-sum-norm" else None

    def theirs(v):
        return ref.compute_value_loss(v, returns, old_values, mask, clip, mode)[0]

    def ours(v):
        return value_loss(
            v, old_values, returns, mask, clip_eps=clip, aggregation=values["critic.aggregation"], norm=norm
        )

    value_t, grad_t = _grad(theirs, vpreds)
    value_o, grad_o = _grad(ours, vpreds)
    torch.testing.assert_close(value_o, value_t)
    torch.testing.assert_close(grad_o, grad_t)


# -- advantages with the KL in the reward ----------------------------------------------------------------------------


def _verl_token_rewards(scores, old, ref_lp, mask, beta, kind="kl", *, ref):
    """veRL's ``apply_kl_penalty`` (trainer/ppo/ray_trainer.py): the score at the last response token, minus
    ``beta · kl_penalty(old, ref)`` on every response token."""
    last = mask.sum(-1).long() - 1
    token_scores = torch.zeros_like(mask).scatter_(1, last.unsqueeze(1), scores.unsqueeze(1))
    return token_scores - beta * ref.kl_penalty(old, ref_lp, kind) * mask


VERL_OUTCOME = {
    "grpo": "compute_grpo_outcome_advantage",
    "rloo": "compute_rloo_outcome_advantage",
    "reinforce_plus_plus_baseline": "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "gpg": "compute_gpg_outcome_advantage",
}


@pytest.mark.parametrize(
    ("estimator", "extra"),
    [
        ("grpo", []),
        ("grpo", ["algorithm.norm_adv_by_std_in_grpo=False"]),
        ("rloo", []),
        ("reinforce_plus_plus_baseline", []),
        ("gpg", []),
    ],
    ids=["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "gpg"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_group_advantages_with_kl_in_the_reward_match_verl(ref, estimator, extra, seed):
    beta = 0.05
    values = mapped("algorithm.use_kl_in_reward=True", f"algorithm.kl_ctrl.kl_coef={beta}", *extra, estimator=estimator)
    assert values["algorithm.kl.before_baseline"] is True
    assert values["reward.clip_range"] is None
    n, prompts, width = 4, 3, 9
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, n * prompts, width)
    # Scores past OpenRLHF's [-10, 10] clip: veRL never clips them.
    scores = torch.randn(n * prompts, generator=g) * 8
    old = -torch.rand(n * prompts, width, generator=g) * 3
    ref_lp = old + torch.randn(n * prompts, width, generator=g)
    index = np.repeat(np.arange(prompts), n)

    token_rewards = _verl_token_rewards(scores, old, ref_lp, mask, beta, ref=ref)
    kwargs = {"norm_adv_by_std_in_grpo": False} if extra else {}
    theirs, _ = getattr(ref, VERL_OUTCOME[estimator])(token_rewards, mask, index, **kwargs)

    kl = compute_approx_kl(old, ref_lp, values["algorithm.kl.estimator"]) * mask
    ours = compute_advantages_and_returns(
        scores,
        mask,
        estimator=values["algorithm.advantage.estimator"],
        kl=kl,
        kl_coef=values["algorithm.kl.coef"],
        n_samples_per_prompt=n,
        reward_clip_range=values["reward.clip_range"],
        kl_before_baseline=values["algorithm.kl.before_baseline"],
        std_eps=values.get("algorithm.advantage.std_eps", GROUP_STD_EPS),
        whiten_unbiased=values.get("algorithm.advantage.whiten_variance") == "unbiased",
    ).advantages
    torch.testing.assert_close(ours * mask, theirs * mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_gpg_advantages_on_mostly_zero_scores_match_verl(ref, seed):
    """GPG's scale, batch size over the count of non-zero scores, is the point of it: most scores 0 here."""
    values = mapped(estimator="gpg")
    n, prompts, width = 4, 4, 7
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, n * prompts, width)
    scores = (torch.rand(n * prompts, generator=g) < 0.3).float()
    token_scores = torch.zeros_like(mask).scatter_(1, (mask.sum(-1).long() - 1).unsqueeze(1), scores.unsqueeze(1))
    theirs, _ = ref.compute_gpg_outcome_advantage(token_scores, mask, np.repeat(np.arange(prompts), n))
    ours = compute_advantages_and_returns(
        scores,
        mask,
        estimator=values["algorithm.advantage.estimator"],
        n_samples_per_prompt=n,
        reward_clip_range=values["reward.clip_range"],
    ).advantages
    torch.testing.assert_close(ours * mask, theirs * mask)


def test_without_the_veRL_key_the_advantage_differs_along_the_response(ref):
    """The default (OpenRLHF's) is kept: a per-token KL after the baseline, not veRL's one value per sequence."""
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 6)
    old = -torch.rand(4, 6, generator=g) * 3
    kl = compute_approx_kl(old, old + torch.randn(4, 6, generator=g), "k1")
    common = {"estimator": "group_norm", "kl": kl, "kl_coef": 0.05, "n_samples_per_prompt": 4}
    default = compute_advantages_and_returns(torch.tensor([1.0, 0.0, 0.5, 2.0]), mask, **common).advantages
    verl = compute_advantages_and_returns(
        torch.tensor([1.0, 0.0, 0.5, 2.0]), mask, kl_before_baseline=True, **common
    ).advantages
    assert torch.allclose(verl, verl[:, :1].expand_as(verl))
    assert not torch.allclose(default, default[:, :1].expand_as(default))


@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_on_near_equal_scores_matches_verl_with_its_std_epsilon(ref, seed):
    """Scores a few 1e-6 apart: the group std is of the order of the epsilon, so 1e-6 (veRL, written by
    import-verl as algorithm.advantage.std_eps) and 1e-9 (ours, OpenRLHF's) give visibly different advantages."""
    values = mapped(estimator="grpo")
    assert values["algorithm.advantage.std_eps"] == 1e-6
    n, prompts, width = 4, 3, 5
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, n * prompts, width)
    scores = 1.0 + torch.randn(n * prompts, generator=g, dtype=torch.float64) * 2e-6
    token_scores = torch.zeros_like(mask, dtype=torch.float64).scatter_(
        1, (mask.sum(-1).long() - 1).unsqueeze(1), scores.unsqueeze(1)
    )
    theirs, _ = ref.compute_grpo_outcome_advantage(token_scores, mask, np.repeat(np.arange(prompts), n))
    common = {"estimator": "group_norm", "n_samples_per_prompt": n, "reward_clip_range": values["reward.clip_range"]}
    ours = compute_advantages_and_returns(scores, mask, std_eps=values["algorithm.advantage.std_eps"], **common)
    torch.testing.assert_close(ours.advantages * mask, (theirs * mask).to(ours.advantages.dtype))
    default = compute_advantages_and_returns(scores, mask, **common).advantages
    assert (default * mask - theirs * mask).abs().max() > 1e-2


# -- opo, grpo_passk -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["opo", "grpo_passk"])
@pytest.mark.parametrize("kl_in_reward", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_opo_and_passk_advantages_match_verl(ref, estimator, kl_in_reward, seed):
    beta = 0.05
    extra = ["algorithm.use_kl_in_reward=True", f"algorithm.kl_ctrl.kl_coef={beta}"] if kl_in_reward else []
    values = mapped(*extra, estimator=estimator)
    assert values["algorithm.advantage.estimator"] == estimator
    n, prompts, width = 4, 3, 9
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, n * prompts, width)
    scores = torch.randn(n * prompts, generator=g) * 3
    old = -torch.rand(n * prompts, width, generator=g) * 3
    ref_lp = old + torch.randn(n * prompts, width, generator=g)
    index = np.repeat(np.arange(prompts), n)
    token_rewards = _verl_token_rewards(scores, old, ref_lp, mask, beta if kl_in_reward else 0.0, ref=ref)
    if estimator == "opo":
        theirs, _ = ref.compute_opo_outcome_advantage(token_rewards, mask, index)
    else:
        config = {"norm_adv_by_std_in_grpo": True}
        theirs, _ = ref.compute_grpo_passk_outcome_advantage(token_rewards, mask, index, config=config)
    kl = compute_approx_kl(old, ref_lp, values["algorithm.kl.estimator"]) * mask if kl_in_reward else None
    ours = compute_advantages_and_returns(
        scores,
        mask,
        estimator=values["algorithm.advantage.estimator"],
        kl=kl,
        kl_coef=values["algorithm.kl.coef"],
        n_samples_per_prompt=n,
        reward_clip_range=values["reward.clip_range"],
        kl_before_baseline=values.get("algorithm.kl.before_baseline", False),
        std_eps=values.get("algorithm.advantage.std_eps", GROUP_STD_EPS),
    ).advantages
    torch.testing.assert_close(ours * mask, theirs * mask)


# -- sapo, geo_mean, clip_cov, kl_cov --------------------------------------------------------------------------------

#: veRL 0.9.1's actor.yaml values of the settings these losses read.
VERL_LOSS_DEFAULTS = {
    "tau_pos": 1.0,
    "tau_neg": 1.05,
    "policy_loss.clip_cov_ratio": 0.0002,
    "policy_loss.clip_cov_lb": 1.0,
    "policy_loss.clip_cov_ub": 5.0,
    "policy_loss.kl_cov_ratio": 0.0002,
    "policy_loss.ppo_kl_coef": 0.1,
    "policy_loss.dro_beta": None,
}


def _verl_config(overrides: list[str]):
    """An actor config for ``overrides`` (``actor.X=V``), its ``policy_loss`` section an object as veRL's."""
    given = {o.split("=")[0].split(".actor.", 1)[1]: _number(o.split("=")[1]) for o in overrides}
    settings = {**VERL_LOSS_DEFAULTS, **given}
    section = SimpleNamespace(**{k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith("policy_loss.")})
    return actor_config(**{k: v for k, v in settings.items() if not k.startswith("policy_loss.")}, policy_loss=section)


@pytest.mark.parametrize(
    ("loss_mode", "overrides"),
    [
        ("sapo", []),
        ("sapo", [f"{A}.tau_pos=1.3", f"{A}.tau_neg=2.0", f"{A}.loss_agg_mode=token-mean"]),
        ("geo_mean", []),
        ("geo_mean", [f"{A}.clip_ratio_low=0.4", f"{A}.clip_ratio_high=0.4"]),
        ("clip_cov", [f"{A}.policy_loss.clip_cov_ratio=0.1"]),
        ("clip_cov", [f"{A}.policy_loss.clip_cov_ratio=0.05", f"{A}.policy_loss.clip_cov_lb=0.5"]),
        ("clip_cov", [f"{A}.clip_ratio_high=0.28", f"{A}.loss_agg_mode=seq-mean-token-sum-norm"]),
        ("kl_cov", []),
        ("kl_cov", [f"{A}.policy_loss.kl_cov_ratio=0.1", f"{A}.policy_loss.ppo_kl_coef=1.0"]),
        ("kl_cov", [f"{A}.policy_loss.kl_cov_ratio=0.2", f"{A}.loss_agg_mode=seq-mean-token-mean"]),
        ("dppo_tv", []),
        ("dppo_tv", [f"{A}.clip_ratio_low=0.1", f"{A}.clip_ratio_high=0.3", f"{A}.clip_ratio_c=1.5"]),
        ("dppo_kl", []),
        ("dppo_kl", [f"{A}.clip_ratio_low=0.02", f"{A}.clip_ratio_high=0.05", f"{A}.loss_agg_mode=seq-mean-token-sum"]),
        ("dro", [f"{A}.policy_loss.dro_beta=0.5"]),
        ("dro", [f"{A}.policy_loss.dro_beta=2.0", f"{A}.loss_agg_mode=seq-mean-token-mean"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(o.split(".")[-1] for o in v) or "defaults",
)
@pytest.mark.parametrize("seed", SEEDS)
def test_sapo_geo_mean_cov_dppo_and_dro_losses_match_verl(ref, loss_mode, overrides, seed):
    overrides = [*overrides, f"{A}.policy_loss.loss_mode={loss_mode}"]
    values = mapped(*overrides)
    config = _verl_config(overrides)
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}
    assert pl["type"] == loss_mode and pl.get("dual_clip") is None
    params = policy_loss_params(PolicyLossSpec(**pl))
    verl_loss = getattr(ref, f"compute_policy_loss_{loss_mode}")
    g = torch.Generator().manual_seed(seed)
    log_probs, old, advantages, mask = _policy_batch(g, batch=8, width=10)
    if loss_mode == "geo_mean":  # one advantage per sequence, as GMPO (and every outcome estimator) gives
        advantages = advantages[:, :1].expand_as(advantages).clone()

    metrics = {}

    def theirs(lp):
        torch.manual_seed(100 + seed)  # clip_cov draws its tokens with torch.randperm
        loss, metrics["theirs"] = verl_loss(old, lp, advantages, mask, config.loss_agg_mode, config)
        return loss

    def ours(lp):
        torch.manual_seed(100 + seed)
        out = policy_loss(
            lp,
            old,
            advantages,
            mask,
            loss_type=pl["type"],
            clip_eps_low=pl["eps_clip_low"],
            clip_eps_high=pl["eps_clip_high"],
            aggregation=pl["aggregation"],
            norm=_ours_norm(values, mask),
            params=params,
        )
        metrics["ours"] = out
        return out.loss

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t)
    torch.testing.assert_close(grad_o, grad_t)
    if loss_mode in ("dppo_tv", "dppo_kl"):  # veRL's clip fraction: the tokens outside the trust region
        clipfrac = metrics["theirs"]["actor/pg_clipfrac"]
        # both kinds of token are in the batch, so the comparison means something (the KL region's default bound,
        # 0.2, holds every token of these batches)
        assert clipfrac < 1 and (clipfrac > 0 or loss_mode == "dppo_kl" and len(overrides) == 1)
        assert metrics["ours"].clip_ratio.item() == pytest.approx(clipfrac, abs=1e-6)
    if loss_mode in ("dppo_tv", "dppo_kl", "dro"):
        assert metrics["ours"].ppo_kl.item() == pytest.approx(metrics["theirs"]["actor/ppo_kl"], abs=1e-6)


# -- gspo ------------------------------------------------------------------------------------------------------------


def _is_correction(values: dict) -> ISCorrection | None:
    """The IS correction the recipe's algorithm.is_correction keys make (as rl_losses.ActorLossSettings does)."""
    given = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.is_correction.")}
    if not given:
        return None
    isc = ISCorrectionSpec(**given)
    return ISCorrection(*isc.axes(), *isc.bounds(), seq_ratio=isc.seq_ratio, batch_normalize=isc.batch_normalize)


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("dual", [False, True], ids=["no-clip_ratio_c", "clip_ratio_c"])
@pytest.mark.parametrize("tis", [None, 2.0, 1.2], ids=["no-is", "tis-2", "tis-1.2"])
@pytest.mark.parametrize("seed", SEEDS)
def test_gspo_matches_verl(ref, mode, dual, tis, seed):
    """veRL's GSPO (GSPO-token) under each loss_agg_mode, with and without clip_ratio_c (which it does not read), with
    and without token-level TIS (thresholds 2 and 1.2: a few and many tokens truncated): its clip range from veRL's
    GSPO example (3e-4, 4e-4) so that whole sequences clip, advantages that vary along each sequence (where GSPO's
    and GSPO-token's gradients part) and rollout log-probs off the trainer's by ~0.4 nat per token."""
    overrides = [
        f"{A}.policy_loss.loss_mode=gspo",
        f"{A}.loss_agg_mode={mode}",
        f"{A}.clip_ratio_low=0.0003",
        f"{A}.clip_ratio_high=0.0004",
    ]
    if dual:  # c just above 1: a dual clip would bound the sequences whose ratio passed 1.01 (seeds 0 and 1)
        overrides.append(f"{A}.clip_ratio_c=1.01")
    extra = [
        "algorithm.rollout_correction.rollout_is=token",
        f"algorithm.rollout_correction.rollout_is_threshold={tis}",
    ]
    values = mapped(*overrides, *(extra if tis else []))
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}
    assert pl["type"] == "gspo" and pl.get("dual_clip") is None
    params = policy_loss_params(PolicyLossSpec(**pl))
    correction = _is_correction(values)
    assert (correction is not None) == (tis is not None)
    config = actor_config(**{o.split("=")[0].rsplit(".", 1)[1]: _number(o.split("=")[1]) for o in overrides[1:]})
    g = torch.Generator().manual_seed(seed)
    log_probs, old, advantages, mask = _policy_batch(g, batch=8, width=10)
    # Some sequences on-policy but for a tiny drift (their ratio inside the narrow band), the others clipped.
    log_probs = torch.where(torch.arange(8).unsqueeze(1) % 2 == 0, old + (log_probs - old) * 1e-4, log_probs)
    rollout = old + torch.randn(8, 10, generator=g) * 0.4
    weights = None
    if tis is not None:
        weights, _ = ref.compute_rollout_correction_weights(old - rollout, mask, "token", tis)

    def theirs(lp):
        return ref.compute_policy_loss_gspo(old, lp, advantages, mask, mode, config, rollout_is_weights=weights)[0]

    def ours(lp):
        return policy_loss(
            lp,
            old,
            advantages,
            mask,
            loss_type=pl["type"],
            clip_eps_low=pl["eps_clip_low"],
            clip_eps_high=pl["eps_clip_high"],
            dual_clip=pl.get("dual_clip"),
            rollout_log_probs=rollout,
            is_correction=correction,
            aggregation=pl["aggregation"],
            norm=_ours_norm(values, mask),
            params=params,
        ).loss

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t, rtol=0, atol=1e-5)
    torch.testing.assert_close(grad_o, grad_t, rtol=0, atol=1e-5)


def test_gspo_without_the_veRL_keys_differs_from_veRLs(ref):
    """The defaults (OpenRLHF's GSPO: seq_mean, the ratio against the rollout log-probs, the sequence gradient) are
    kept, and they are not veRL's under token-mean with TIS: the keys import-verl writes are what makes them equal."""
    g = torch.Generator().manual_seed(0)
    log_probs, old, advantages, mask = _policy_batch(g, batch=8, width=10)
    rollout = old + torch.randn(8, 10, generator=g) * 0.4
    config = actor_config(loss_agg_mode="token-mean")
    weights, _ = ref.compute_rollout_correction_weights(old - rollout, mask, "token", 2.0)
    theirs = ref.compute_policy_loss_gspo(old, log_probs, advantages, mask, "token-mean", config, weights)[0]
    tis = ISCorrection("token", "clip", "ratio", 0.0, 2.0)
    ours = policy_loss(log_probs, old, advantages, mask, loss_type="gspo", rollout_log_probs=rollout, is_correction=tis)
    assert (ours.loss - theirs).abs() > 1e-3


# -- rollout correction: token and sequence IS weights, batch-normalised or not (issue 35) --------------------------


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "batch-normalize"])
@pytest.mark.parametrize(
    ("level", "threshold"),
    [("token", "2.0"), ("token", "1.2"), ("sequence", "2.0"), ("sequence", "0.8"), ("sequence", "0.5_2.0")],
    ids=["tis-2", "tis-1.2", "seq-tis-2", "seq-tis-0.8", "seq-icepop"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_rollout_is_weights_in_the_vanilla_loss_match_verl(ref, mode, normalize, level, threshold, seed):
    """veRL's vanilla PPO loss with the rollout IS weights its trainer computes over the batch
    (compute_rollout_correction_weights: rollout_is=token or sequence, truncated at a number or masked outside a
    LOW_HIGH band, with and without rollout_is_batch_normalize) against ours under the keys import-verl writes,
    the whole batch one micro-batch. Rollout log-probs off the trainer's by ~0.3 nat per token: the sequence
    products spread over e^-2..e^2, so the bounds truncate (or drop) some sequences and keep others."""
    overrides = [
        f"{A}.loss_agg_mode={mode}",
        f"algorithm.rollout_correction.rollout_is={level}",
        f"algorithm.rollout_correction.rollout_is_threshold={threshold}",
        f"algorithm.rollout_correction.rollout_is_batch_normalize={normalize}",
    ]
    values = mapped(*overrides)
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}
    correction = _is_correction(values)
    assert correction is not None and correction.batch_normalize == normalize
    assert correction.sequence_product == (level == "sequence")
    g = torch.Generator().manual_seed(seed)
    log_probs, old, advantages, mask = _policy_batch(g, batch=8, width=10)
    rollout = old + torch.randn(8, 10, generator=g) * 0.3
    verl_threshold = _number(threshold)
    weights, _ = ref.compute_rollout_correction_weights(old - rollout, mask, level, verl_threshold, normalize)
    config = actor_config(loss_agg_mode=mode)

    def theirs(lp):
        return ref.compute_policy_loss_vanilla(old, lp, advantages, mask, mode, config, rollout_is_weights=weights)[0]

    def ours(lp):
        return policy_loss(
            lp,
            old,
            advantages,
            mask,
            loss_type=pl["type"],
            clip_eps_low=pl["eps_clip_low"],
            clip_eps_high=pl["eps_clip_high"],
            dual_clip=pl.get("dual_clip"),
            rollout_log_probs=rollout,
            is_correction=correction,
            aggregation=pl["aggregation"],
            norm=_ours_norm(values, mask),
        ).loss

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t, rtol=0, atol=1e-5)
    torch.testing.assert_close(grad_o, grad_t, rtol=0, atol=1e-5)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("seed", SEEDS)
def test_batch_normalised_weights_over_micro_batches_are_verls_over_the_rollout_batch(ref, level, seed):
    """veRL normalises the IS weights once, over the whole rollout batch; the pipeline hands every micro-batch the
    totals of that batch (rl_losses.rollout_is_weight_totals), so each micro-batch's weights are veRL's rows."""
    c = "algorithm.rollout_correction"
    values = mapped(f"{c}.rollout_is={level}", f"{c}.rollout_is_threshold=1.5", f"{c}.rollout_is_batch_normalize=True")
    correction = _is_correction(values)
    g = torch.Generator().manual_seed(seed)
    _, old, _, mask = _policy_batch(g, batch=12, width=10)
    mask[3] = 0.0  # a sequence with no action token: counted by neither
    rollout = old + torch.randn(12, 10, generator=g) * 0.3
    rollout[:5] -= 0.1  # the first micro-batch's weights above the others': its own mean is not the batch's
    theirs, _ = ref.compute_rollout_correction_weights(old - rollout, mask, level, 1.5, True)
    exp = SimpleNamespace(old_logprobs=old, rollout_logprobs=rollout, action_mask=mask)
    totals = rollout_is_weight_totals(exp, correction)
    for rows in (slice(0, 5), slice(5, 9), slice(9, 12)):
        ours = is_weights(old[rows], rollout[rows], mask[rows], correction, totals).coef
        torch.testing.assert_close(ours * mask[rows], theirs[rows], rtol=0, atol=1e-6)
    alone = is_weights(old[:5], rollout[:5], mask[:5], correction).coef
    assert (alone * mask[:5] - theirs[:5]).abs().max() > 1e-3  # normalised over its micro-batch alone it differs


def test_the_sequence_weight_is_not_the_geometric_mean_gate(ref):
    """Without seq_ratio=product (OpenRLHF's seq level: a geometric-mean gate keeping token weights) the loss is not
    veRL's sequence-level IS: the key import-verl writes is what makes them equal."""
    g = torch.Generator().manual_seed(0)
    log_probs, old, advantages, mask = _policy_batch(g, batch=8, width=10)
    rollout = old + torch.randn(8, 10, generator=g) * 0.3
    weights, _ = ref.compute_rollout_correction_weights(old - rollout, mask, "sequence", "0.5_2.0")
    config = actor_config()
    theirs = ref.compute_policy_loss_vanilla(old, log_probs, advantages, mask, "token-mean", config, weights)[0]
    gate = ISCorrection("seq", "mask", "ratio", 0.5, 2.0)
    ours = policy_loss(log_probs, old, advantages, mask, rollout_log_probs=rollout, is_correction=gate)
    assert (ours.loss - theirs).abs() > 1e-3


# -- rollout rejection sampling (issue 47) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rs", "threshold"),
    [
        ("token_k1", "1.3"),
        ("token_k1", "0.6_1.5"),
        ("token_k2", "0.02"),
        ("token_k3", "0.03"),
        ("seq_sum_k1", "0.5_3.0"),
        ("seq_sum_k3", "0.4"),
        ("seq_mean_k2", "0.02"),
        ("seq_mean_k3", "0.03"),
        ("seq_max_k2", "0.1"),
        ("seq_max_k3", "0.15"),
        ("token_k1,seq_mean_k3", "0.7_1.6,0.03"),
        ("token_k3,seq_max_k2", "0.05"),
    ],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_rejection_masks_and_metrics_match_verl(ref, rs, threshold, seed):
    """veRL's compute_rollout_rejection_mask against ours under the keys import-verl writes: the same tokens kept
    (every criterion, token and sequence levels, k1 with its two bounds), and veRL's rejected fractions. Rollout
    log-probs ~0.3 nat off the trainer's, so every bound here keeps some tokens and rejects others."""
    from rlhf.algo.rejection import Rejection, rejection_keep
    from rlhf.spec.schema import RejectionSpec

    c = "algorithm.rollout_correction"
    values = mapped(f"{c}.rollout_rs='{rs}'", f"{c}.rollout_rs_threshold='{threshold}'")  # quoted, as Hydra needs
    spec = RejectionSpec(**{k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.rejection.")})
    g = torch.Generator().manual_seed(seed)
    _, old, _, mask = _policy_batch(g, batch=16, width=12)
    rollout = old + torch.randn(16, 12, generator=g) * 0.3
    theirs, verl_metrics = ref.compute_rollout_rejection_mask(old - rollout, mask, rs, _number(threshold))
    keep, metrics = rejection_keep(old, rollout, mask, Rejection.of(spec.criteria, spec.upper, spec.lower))
    torch.testing.assert_close(keep, theirs.to(keep.dtype), rtol=0, atol=0)
    assert 0 < float((keep < 0.5).logical_and(mask > 0).sum()) < float(mask.sum())  # some kept, some rejected
    for name, value in metrics.items():
        verl_name = name.removeprefix("rollout_corr/")
        assert value == pytest.approx(verl_metrics[verl_name], abs=1e-6), name


@pytest.mark.parametrize(
    ("level", "threshold", "normalize"),
    [("token", "2.0", False), ("token", "1.5", True), ("sequence", "2.0", False), ("sequence", "0.5_2.0", True)],
    ids=["tis", "tis-normalised", "seq-tis", "seq-icepop-normalised"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_rejection_beside_is_weights_in_the_vanilla_loss_is_verls(ref, level, threshold, normalize, seed):
    """Rejection sampling and IS weights together, as veRL's trainer makes them: the weights (and their batch mean)
    over every response token, the loss aggregated over the kept ones (its modified response mask)."""
    from rlhf.pipelines.rl import reject
    from rlhf.pipelines.rl_losses import rollout_is_weight_totals
    from rlhf.spec.schema import RejectionSpec

    c = "algorithm.rollout_correction"
    values = mapped(
        f"{c}.rollout_is={level}",
        f"{c}.rollout_is_threshold={threshold}",
        f"{c}.rollout_is_batch_normalize={normalize}",
        f"{c}.rollout_rs=token_k3",
        f"{c}.rollout_rs_threshold=0.04",
    )
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}
    rs = RejectionSpec(**{k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.rejection.")})
    correction = _is_correction(values)
    g = torch.Generator().manual_seed(seed)
    log_probs, old, advantages, mask = _policy_batch(g, batch=8, width=10)
    rollout = old + torch.randn(8, 10, generator=g) * 0.3
    weights, _ = ref.compute_rollout_correction_weights(old - rollout, mask, level, _number(threshold), normalize)
    modified, _ = ref.compute_rollout_rejection_mask(old - rollout, mask, "token_k3", 0.04)
    exp = SimpleNamespace(old_logprobs=old, rollout_logprobs=rollout, action_mask=mask.clone())
    reject(SimpleNamespace(rejection=rs), exp)
    torch.testing.assert_close(exp.action_mask, modified.to(mask.dtype), rtol=0, atol=0)
    assert ((mask > 0) & (exp.action_mask == 0)).any()
    totals = rollout_is_weight_totals(exp, correction) if normalize else None
    config = actor_config()

    def theirs(lp):
        return ref.compute_policy_loss_vanilla(
            old, lp, advantages, modified, "token-mean", config, rollout_is_weights=weights
        )[0]

    def ours(lp):
        return policy_loss(
            lp,
            old,
            advantages,
            exp.action_mask,
            loss_type=pl["type"],
            clip_eps_low=pl["eps_clip_low"],
            clip_eps_high=pl["eps_clip_high"],
            dual_clip=pl.get("dual_clip"),
            rollout_log_probs=rollout,
            is_correction=correction,
            is_batch_totals=totals,
            is_mask=exp.generated_mask,
        ).loss

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t, rtol=0, atol=1e-5)
    torch.testing.assert_close(grad_o, grad_t, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "correction",
    [
        {"loss_type": "ppo_clip"},
        {"loss_type": "ppo_clip", "rollout_rs": "token_k3", "rollout_rs_threshold": 0.04},
        {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 2.0},
        {
            "loss_type": "reinforce",
            "rollout_is": "sequence",
            "rollout_is_threshold": 2.0,
            "rollout_is_batch_normalize": True,
            "rollout_rs": "seq_mean_k3",
            "rollout_rs_threshold": 0.05,
        },
    ],
    ids=["ppo_clip", "ppo_clip-rs", "reinforce-tis", "reinforce-seq-tis-normalised-rs"],
)
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("seed", SEEDS)
def test_bypass_mode_losses_are_verls(ref, correction, mode, seed):
    """veRL's bypass mode (compute_policy_loss_bypass_mode: old log-probs = the rollout's; the current policy
    compared with them in the micro-batch for its IS weights and rejection) against ours under the keys import-verl
    writes: the loss and its gradient, and ppo_kl."""
    from rlhf.algo import ISCorrection
    from rlhf.algo.rejection import Rejection
    from rlhf.pipelines.rl_losses import ActorLossSettings, bypass_policy_loss
    from rlhf.spec.schema import ISCorrectionSpec

    c = "algorithm.rollout_correction"
    given = [f"{c}.bypass_mode=True", f"{A}.loss_agg_mode={mode}"]
    given += [f"{c}.{k}={v}" for k, v in correction.items()]
    values = mapped(*given)
    assert values["algorithm.old_logprobs"] == "rollout"
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}
    isc_keys = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.is_correction.")}
    isc = ISCorrectionSpec(**isc_keys)
    rs = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.rejection.")}
    settings = ActorLossSettings(
        loss_type=pl["type"],
        clip_eps_low=pl["eps_clip_low"],
        clip_eps_high=pl["eps_clip_high"],
        dual_clip=pl.get("dual_clip"),
        aggregation=pl["aggregation"],
        temperature=1.0,
        entropy_coef=None,
        kl_in_loss=False,
        kl_estimator="k1",
        is_correction=ISCorrection(
            *isc.axes(), *isc.bounds(), seq_ratio=isc.seq_ratio, batch_normalize=isc.batch_normalize
        ),
        bypass=True,
        rejection=Rejection.of(rs["criteria"], rs["upper"], rs.get("lower", [])) if rs else None,
    )
    g = torch.Generator().manual_seed(seed)
    log_probs, _, advantages, mask = _policy_batch(g, batch=8, width=10)
    rollout = log_probs.detach() + torch.randn(8, 10, generator=g) * 0.3
    config = actor_config(loss_agg_mode=mode, policy_loss=ActorConfig(rollout_correction=dict(correction)))
    kls = {}

    def theirs(lp):
        loss, metrics = ref.compute_policy_loss_bypass_mode(rollout, lp, advantages, mask, mode, config)
        kls["theirs"] = metrics["actor/ppo_kl"]
        return loss

    def ours(lp):
        out, _ = bypass_policy_loss(lp, rollout, advantages, mask, None, settings)
        kls["ours"] = float(out.ppo_kl)
        return out.loss

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t, rtol=0, atol=1e-5)
    torch.testing.assert_close(grad_o, grad_t, rtol=0, atol=1e-5)
    assert kls["ours"] == pytest.approx(kls["theirs"], abs=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_advantages_after_rejection_are_verls(ref, seed):
    """The pipeline's step (rlhf.pipelines.rl.reject) on an experience batch, then the GRPO advantages: the action
    mask loses the rejected tokens first, so the losses (which read every token through it) leave them out, and the
    others carry veRL's advantages (its scores placed on the last response token, under its modified mask)."""
    from rlhf.pipelines.rl import reject
    from rlhf.spec.schema import RejectionSpec

    c = "algorithm.rollout_correction"
    values = mapped(f"{c}.rollout_rs='token_k1,seq_max_k2'", f"{c}.rollout_rs_threshold='0.7_1.5,0.12'")
    algo = SimpleNamespace(
        rejection=RejectionSpec(
            **{k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.rejection.")}
        )
    )
    n, prompts, width = 4, 3, 9
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, n * prompts, width)
    old = -torch.rand(n * prompts, width, generator=g) * 3
    rollout = old + torch.randn(n * prompts, width, generator=g) * 0.3
    scores = torch.randn(n * prompts, generator=g)
    exp = SimpleNamespace(old_logprobs=old, rollout_logprobs=rollout, action_mask=mask.clone())
    metrics = reject(algo, exp)
    modified, _ = ref.compute_rollout_rejection_mask(old - rollout, mask, "token_k1,seq_max_k2", "0.7_1.5,0.12")
    torch.testing.assert_close(exp.action_mask, modified.to(mask.dtype), rtol=0, atol=0)
    assert 0 < metrics["rollout_corr/rollout_rs_masked_fraction"] < 1
    token_scores = _verl_token_rewards(scores, old, old, mask, 0.0, ref=ref)
    theirs, _ = ref.compute_grpo_outcome_advantage(token_scores, modified, np.repeat(np.arange(prompts), n))
    ours = compute_advantages_and_returns(
        scores,
        exp.action_mask,
        estimator=values["algorithm.advantage.estimator"],
        n_samples_per_prompt=n,
        reward_clip_range=values["reward.clip_range"],
        std_eps=values.get("algorithm.advantage.std_eps", GROUP_STD_EPS),
    ).advantages
    torch.testing.assert_close(ours * exp.action_mask, theirs * modified)  # the losses read them through the mask
    assert ((mask > 0) & (exp.action_mask == 0)).any()  # some response tokens were rejected


# -- issue 35 items 6, 9, 10: straight-through KL, unclamped k1/k2/abs, whitening, the controller's KL ---------------


@pytest.mark.parametrize("kind", ["kl", "k1", "mse", "k2", "abs", "low_var_kl", "k3", "k1+", "low_var_kl+", "k3+"])
@pytest.mark.parametrize("seed", SEEDS)
def test_kl_loss_beyond_the_clamp_and_straight_through_match_verl(ref, kind, seed):
    """Log-ratios up to about +-16: veRL leaves k1, k2 and abs unbounded (clamp_k3_only), and its '+' estimators
    keep the value with k2's gradient (straight_through)."""
    values = mapped(f"{A}.use_kl_loss=True", f"{A}.kl_loss_type={kind}", f"{A}.kl_loss_coef=0.1")
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, 4, 7)
    log_probs = -torch.rand(4, 7, generator=g) * 3
    base = log_probs + torch.randn(4, 7, generator=g) * 8
    coef = values["algorithm.kl.coef"]

    def theirs(lp):
        return coef * ref.agg_loss(ref.kl_penalty(lp, base, kind), mask, "token-mean")

    def ours(lp):
        return kl_loss(
            lp,
            base,
            mask,
            coef,
            values["algorithm.kl.estimator"],
            "token_mean",
            old_log_probs=lp.detach() - 0.3,  # an off-policy epoch: straight_through ignores it, as veRL
            straight_through=values.get("algorithm.kl.straight_through", False),
            clamp_k3_only=values.get("algorithm.kl.clamp_k3_only", False),
        )

    value_t, grad_t = _grad(theirs, log_probs)
    value_o, grad_o = _grad(ours, log_probs)
    torch.testing.assert_close(value_o, value_t)
    torch.testing.assert_close(grad_o, grad_t)


@pytest.mark.parametrize("kind", ["kl", "mse", "abs"])
def test_kl_in_the_reward_beyond_the_clamp_matches_verl(ref, kind):
    values = mapped("algorithm.use_kl_in_reward=True", f"algorithm.kl_penalty={kind}", estimator="reinforce_plus_plus")
    g = torch.Generator().manual_seed(0)
    log_probs = -torch.rand(5, 6, generator=g) * 3
    base = log_probs + torch.randn(5, 6, generator=g) * 12
    ours = compute_approx_kl(
        log_probs, base, values["algorithm.kl.estimator"], clamp_k3_only=values["algorithm.kl.clamp_k3_only"]
    )
    torch.testing.assert_close(ours, ref.kl_penalty(log_probs, base, kind))


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_whitened_as_verl(ref, seed):
    """veRL's REINFORCE++: discounted returns of the KL-penalised token rewards, whitened by the N/(N-1) variance."""
    beta = 0.05
    values = mapped(
        "algorithm.use_kl_in_reward=True",
        f"algorithm.kl_ctrl.kl_coef={beta}",
        "algorithm.gamma=0.9",
        estimator="reinforce_plus_plus",
    )
    assert values["algorithm.advantage.whiten_variance"] == "unbiased"
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, 6, 8)
    scores = torch.randn(6, generator=g) * 2
    old = -torch.rand(6, 8, generator=g) * 3
    ref_lp = old + torch.randn(6, 8, generator=g)
    token_rewards = _verl_token_rewards(scores, old, ref_lp, mask, beta, ref=ref)
    theirs, returns_t = ref.compute_reinforce_plus_plus_outcome_advantage(
        token_rewards, mask, config=SimpleNamespace(gamma=0.9)
    )
    kl = compute_approx_kl(old, ref_lp, values["algorithm.kl.estimator"]) * mask
    out = compute_advantages_and_returns(
        scores,
        mask,
        estimator=values["algorithm.advantage.estimator"],
        kl=kl,
        kl_coef=values["algorithm.kl.coef"],
        gamma=values["algorithm.advantage.gamma"],
        reward_clip_range=values["reward.clip_range"],
        whiten_unbiased=True,
    )
    torch.testing.assert_close(out.returns * mask, returns_t * mask)
    torch.testing.assert_close(out.advantages * mask, theirs * mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_whitened_as_verl(ref, seed):
    values = mapped("algorithm.gamma=0.95", "algorithm.lam=0.9", estimator="gae")
    assert values["algorithm.advantage.whiten_variance"] == "unbiased"
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, 6, 8)
    scores = torch.randn(6, generator=g) * 2
    critic = torch.randn(6, 8, generator=g)
    token_scores = torch.zeros_like(mask).scatter_(1, (mask.sum(-1).long() - 1).unsqueeze(1), scores.unsqueeze(1))
    theirs, returns_t = ref.compute_gae_advantage_return(token_scores, critic * mask, mask, 0.95, 0.9)
    out = compute_advantages_and_returns(
        scores,
        mask,
        estimator="gae",
        values=critic,
        gamma=values["algorithm.advantage.gamma"],
        lambd=values["algorithm.advantage.lambd"],
        reward_clip_range=values["reward.clip_range"],
        whiten_unbiased=True,
    )
    torch.testing.assert_close(out.returns * mask, returns_t * mask)
    torch.testing.assert_close(out.advantages * mask, theirs * mask)


def _multi_turn_mask(g: torch.Generator, batch: int, width: int) -> torch.Tensor:
    """Right-padded response masks with a masked span inside (a tool's output between two turns)."""
    mask = right_padded_mask(g, batch, width)
    for row in range(batch):
        length = int(mask[row].sum())
        if length >= 5:
            start = int(torch.randint(1, length - 3, (1,), generator=g))
            mask[row, start : start + 2] = 0
    return mask


@pytest.mark.parametrize("estimator", ["gae", "reinforce_plus_plus"])
@pytest.mark.parametrize("seed", SEEDS)
def test_multi_turn_masks_are_stepped_over_as_verl(ref, estimator, seed):
    values = mapped("algorithm.gamma=0.9", "algorithm.lam=0.8", estimator=estimator)
    assert values["algorithm.advantage.skip_masked_tokens"] is True
    g = torch.Generator().manual_seed(seed)
    mask = _multi_turn_mask(g, 6, 10)
    assert (mask[:, :-1] < mask[:, 1:]).any()  # some interior hole
    scores = torch.randn(6, generator=g) * 2
    critic = torch.randn(6, 10, generator=g)
    last = (mask * torch.arange(10)).argmax(-1)
    token_scores = torch.zeros_like(mask).scatter_(1, last.unsqueeze(1), scores.unsqueeze(1))
    if estimator == "gae":
        theirs, returns_t = ref.compute_gae_advantage_return(token_scores, critic, mask, 0.9, 0.8)
    else:
        theirs, returns_t = ref.compute_reinforce_plus_plus_outcome_advantage(
            token_scores, mask, config=SimpleNamespace(gamma=0.9)
        )
    out = compute_advantages_and_returns(
        scores,
        mask,
        estimator=values["algorithm.advantage.estimator"],
        values=critic if estimator == "gae" else None,
        gamma=values["algorithm.advantage.gamma"],
        lambd=values["algorithm.advantage.lambd"],
        reward_clip_range=values["reward.clip_range"],
        whiten_unbiased=values["algorithm.advantage.whiten_variance"] == "unbiased",
        skip_masked=values["algorithm.advantage.skip_masked_tokens"],
    )
    torch.testing.assert_close(out.advantages * mask, theirs * mask)
    torch.testing.assert_close(out.returns * mask, returns_t * mask)
    default = compute_advantages_and_returns(
        scores,
        mask,
        estimator=values["algorithm.advantage.estimator"],
        values=critic if estimator == "gae" else None,
        gamma=0.9,
        lambd=0.8,
        reward_clip_range=None,
        whiten_unbiased=True,
    )
    assert not torch.allclose(default.advantages * mask, theirs * mask)


@pytest.mark.parametrize("kl_in_reward", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_remax_advantages_match_verl(ref, kl_in_reward, seed):
    beta = 0.05
    extra = ["algorithm.use_kl_in_reward=True", f"algorithm.kl_ctrl.kl_coef={beta}"] if kl_in_reward else []
    values = mapped(*extra, estimator="remax")
    assert values["algorithm.advantage.estimator"] == "remax"
    n, prompts, width = 2, 4, 7
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, n * prompts, width)
    scores = torch.randn(n * prompts, generator=g) * 3
    greedy = torch.randn(prompts, generator=g).repeat_interleave(n)
    old = -torch.rand(n * prompts, width, generator=g) * 3
    ref_lp = old + torch.randn(n * prompts, width, generator=g)
    token_rewards = _verl_token_rewards(scores, old, ref_lp, mask, beta if kl_in_reward else 0.0, ref=ref)
    theirs, _ = ref.compute_remax_outcome_advantage(token_rewards, greedy, mask)
    kl = compute_approx_kl(old, ref_lp, values["algorithm.kl.estimator"]) * mask if kl_in_reward else None
    ours = compute_advantages_and_returns(
        scores,
        mask,
        estimator=values["algorithm.advantage.estimator"],
        kl=kl,
        kl_coef=values["algorithm.kl.coef"],
        n_samples_per_prompt=n,
        reward_clip_range=values["reward.clip_range"],
        kl_before_baseline=values.get("algorithm.kl.before_baseline", False),
        greedy_rewards=greedy,
    ).advantages
    torch.testing.assert_close(ours * mask, theirs * mask)
