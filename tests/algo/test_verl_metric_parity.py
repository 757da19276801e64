"""The actor metrics veRL 0.9.1 logs under its names (``actor/pg_clipfrac``, ``actor/pg_clipfrac_lower``,
``actor/ppo_kl``: the ``pg_metrics`` each policy-loss function of ``verl/trainer/ppo/core_algos.py`` returns) against
ours under ``logging.verl_metrics`` (rlhf.algo.verl_metrics), for every policy loss and veRL's bypass mode, on seeded
random tensors with padding, under the settings ``rlhf-recipes import-verl`` writes for the veRL command.

The functions come from the wheel (tests/algo/verl_reference.py); without it these tests are skipped.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from verl_reference import HOW_TO_GET, ActorConfig, actor_config, load, wheel_path

from rlhf.algo import ISCorrection, policy_loss
from rlhf.algo.policy_loss import POLICY_LOSSES
from rlhf.algo.rejection import Rejection
from rlhf.algo.verl_metrics import PG_CLIPFRAC, PG_CLIPFRAC_LOWER, PPO_KL, VERL_METRICS
from rlhf.importers.verl.mapping import map_command
from rlhf.importers.verl.overrides import split_command
from rlhf.pipelines.rl_losses import ActorLossSettings, bypass_policy_loss, policy_loss_params
from rlhf.spec.schema import ISCorrectionSpec, PolicyLossSpec

SEEDS = range(3)
A = "actor_rollout_ref.actor"
C = "algorithm.rollout_correction"
#: veRL 0.9.1's actor.yaml values of the settings its other losses read.
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


@pytest.fixture(scope="module")
def ref() -> SimpleNamespace:
    wheel = wheel_path()
    if wheel is None:
        pytest.skip(HOW_TO_GET)
    return load(wheel)


def mapped(*overrides: str) -> dict:
    """The values import-verl writes for a main_ppo command with these overrides."""
    words = ["python3", "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo", *overrides]
    return map_command(split_command(words)).values


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _verl_config(overrides: list[str]) -> ActorConfig:
    """veRL's actor config for ``overrides`` (``actor.X=V``), its ``policy_loss`` section an object as veRL's."""
    given = {o.split("=")[0].split(".actor.", 1)[1]: _number(o.split("=")[1]) for o in overrides}
    settings = {**VERL_LOSS_DEFAULTS, **given}
    section = SimpleNamespace(**{k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith("policy_loss.")})
    return actor_config(**{k: v for k, v in settings.items() if not k.startswith("policy_loss.")}, policy_loss=section)


def _batch(seed: int, batch: int = 8, width: int = 12):
    """Right-padded responses (one full row), log-ratios wide enough (std 0.8) that every clip, veRL's dual clip and
    DPPO's cap act on some tokens, and one beyond veRL's clamp at 20 (where the losses that clamp it part from those
    that do not); probabilities below 1."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (batch,), generator=g)
    lengths[0] = width
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    old = -torch.rand(batch, width, generator=g) * 3 - 0.05
    log_probs = (old + torch.randn(batch, width, generator=g) * 0.8).clamp(max=-0.01)
    advantages = torch.randn(batch, width, generator=g) * 2
    old[1, 0], log_probs[1, 0] = -25.0, -0.5
    return log_probs, old, advantages, mask


def _assert_same(ours: dict, theirs: dict) -> None:
    theirs = {k: v for k, v in theirs.items() if k.startswith("actor/")}
    assert sorted(ours) == sorted(theirs)
    for k, v in theirs.items():
        assert float(ours[k]) == pytest.approx(v, abs=1e-5), k


LOSS_CASES = [
    ("vanilla", []),  # veRL's dual clip, c = 3, always on
    ("vanilla", [f"{A}.clip_ratio_low=0.2", f"{A}.clip_ratio_high=0.28", f"{A}.clip_ratio_c=1.5"]),
    ("gspo", [f"{A}.clip_ratio_low=0.0003", f"{A}.clip_ratio_high=0.0004"]),  # whole sequences clip
    ("cispo", [f"{A}.clip_ratio_low=10", f"{A}.clip_ratio_high=0.2"]),  # veRL's CISPO example
    ("gpg", []),
    ("sapo", [f"{A}.tau_pos=1.3", f"{A}.tau_neg=2.0"]),
    ("geo_mean", []),
    ("geo_mean", [f"{A}.clip_ratio_low=0.4", f"{A}.clip_ratio_high=0.6"]),
    ("clip_cov", [f"{A}.policy_loss.clip_cov_ratio=0.1", f"{A}.policy_loss.clip_cov_lb=0.5"]),
    ("clip_cov", [f"{A}.policy_loss.clip_cov_ratio=0.05", f"{A}.clip_ratio_high=0.28"]),
    ("kl_cov", [f"{A}.policy_loss.kl_cov_ratio=0.1"]),
    ("dppo_tv", []),
    ("dppo_tv", [f"{A}.clip_ratio_low=0.1", f"{A}.clip_ratio_high=0.3", f"{A}.clip_ratio_c=1.5"]),
    ("dppo_kl", [f"{A}.clip_ratio_low=0.02", f"{A}.clip_ratio_high=0.05", f"{A}.clip_ratio_c=2.0"]),
    ("dro", [f"{A}.policy_loss.dro_beta=0.5"]),
]


@pytest.mark.parametrize(
    ("loss_mode", "overrides"),
    LOSS_CASES,
    ids=lambda v: (
        v
        if isinstance(v, str)
        else ",".join(o.split("=")[0].rsplit(".", 1)[1] + "=" + o.split("=")[1] for o in v) or "defaults"
    ),
)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_losss_verl_named_metrics_are_verls(ref, loss_mode, overrides, seed):
    overrides = [*overrides, f"{A}.policy_loss.loss_mode={loss_mode}"]
    values = mapped(*overrides)
    assert values["logging.verl_metrics"] is True
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}
    config = _verl_config(overrides)
    log_probs, old, advantages, mask = _batch(seed)

    torch.manual_seed(100 + seed)  # clip_cov draws its tokens with torch.randperm: the same draw on both sides
    _, theirs = getattr(ref, f"compute_policy_loss_{loss_mode}")(
        old, log_probs, advantages, mask, config.loss_agg_mode, config
    )
    torch.manual_seed(100 + seed)
    out = policy_loss(
        log_probs,
        old,
        advantages,
        mask,
        loss_type=pl["type"],
        clip_eps_low=pl["eps_clip_low"],
        clip_eps_high=pl["eps_clip_high"],
        dual_clip=pl.get("dual_clip"),
        aggregation=pl["aggregation"],
        params=policy_loss_params(PolicyLossSpec(**pl)),
        verl_metrics=True,
    )
    _assert_same(out.verl, theirs)


def test_every_policy_loss_has_veRLs_metrics():
    assert sorted(VERL_METRICS) == sorted(POLICY_LOSSES.names())


@pytest.mark.parametrize("seed", SEEDS)
def test_without_a_dual_clip_nothing_counts_as_dual_clipped(ref, seed):
    """veRL always applies its dual clip; ours without one bounds no token, so its lower fraction is 0 while the
    upper one is still veRL's."""
    log_probs, old, advantages, mask = _batch(seed)
    config = actor_config(clip_ratio_c=1.5)  # low enough that some tokens of each batch are dual-clipped in veRL
    _, theirs = ref.compute_policy_loss_vanilla(old, log_probs, advantages, mask, "token-mean", config)
    out = policy_loss(log_probs, old, advantages, mask, verl_metrics=True)
    assert theirs[PG_CLIPFRAC_LOWER] > 0
    assert float(out.verl[PG_CLIPFRAC_LOWER]) == 0.0
    assert float(out.verl[PG_CLIPFRAC]) == pytest.approx(theirs[PG_CLIPFRAC], abs=1e-6)
    assert float(out.verl[PPO_KL]) == pytest.approx(theirs[PPO_KL], abs=1e-6)


def test_where_the_names_mean_something_else_than_ours():
    """The issue's cases: ours counts clip_cov's PPO-clipped tokens too, sums geo_mean's two sides, and signs the KL
    that kl_cov reports as an absolute value."""
    log_probs, old, advantages, mask = _batch(0)
    out = {
        loss: policy_loss(
            log_probs,
            old,
            advantages,
            mask,
            loss_type=loss,
            params=policy_loss_params(PolicyLossSpec(type=loss, cov_fraction=0.1, clip_cov_bounds=[0.5, 5.0])),
            verl_metrics=True,
        )
        for loss in ("clip_cov", "geo_mean", "kl_cov")
    }
    assert 0 < float(out["clip_cov"].verl[PG_CLIPFRAC]) < float(out["clip_cov"].clip_ratio)
    geo = out["geo_mean"]
    assert float(geo.verl[PG_CLIPFRAC]) > 0 and float(geo.verl[PG_CLIPFRAC_LOWER]) > 0
    assert float(geo.verl[PG_CLIPFRAC]) + float(geo.verl[PG_CLIPFRAC_LOWER]) == pytest.approx(float(geo.clip_ratio))
    assert float(out["kl_cov"].verl[PPO_KL]) > abs(float(out["kl_cov"].ppo_kl))


@pytest.mark.parametrize(
    "correction",
    [
        {"loss_type": "ppo_clip"},
        {"loss_type": "ppo_clip", "rollout_rs": "token_k3", "rollout_rs_threshold": 0.04},
        {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 2.0},
        {"loss_type": "reinforce", "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.05},
    ],
    ids=["ppo_clip", "ppo_clip-rs", "reinforce-tis", "reinforce-rs"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_bypass_modes_verl_named_metrics_are_verls(ref, correction, seed):
    """veRL's bypass mode: its vanilla loss's metrics against the rollout log-probs (ppo_clip) or its reinforce's
    ppo_kl alone, over the tokens rejection kept; its rollout_corr/* metrics are not ours to compare."""
    values = mapped(f"{C}.bypass_mode=True", *(f"{C}.{k}={v}" for k, v in correction.items()))
    pl = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.policy_loss.")}
    isc = ISCorrectionSpec(
        **{k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("algorithm.is_correction.")}
    )
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
        verl_metrics=values["logging.verl_metrics"],
    )
    log_probs, _, advantages, mask = _batch(seed)
    g = torch.Generator().manual_seed(1000 + seed)
    rollout = (log_probs + torch.randn(log_probs.shape, generator=g) * 0.5).clamp(max=-0.01)
    config = actor_config(policy_loss=ActorConfig(rollout_correction=dict(correction)))
    _, theirs = ref.compute_policy_loss_bypass_mode(rollout, log_probs, advantages, mask, "token-mean", config)
    out, _ = bypass_policy_loss(log_probs, rollout, advantages, mask, None, settings)
    _assert_same(out.verl, theirs)
