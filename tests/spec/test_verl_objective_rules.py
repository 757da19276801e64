"""The rules of the policy losses taken from veRL (cispo, gpg) and of the keys a converted veRL recipe writes: a dual
clip only where there is a clipped surrogate, a lower clip bound >= 1 only for cispo, null reward clip accepted."""

from __future__ import annotations

import pytest

from rlhf.spec import validate
from rlhf.spec.build import load_spec

CPU_RL = ["+recipe=grpo_tiny_cpu"]


def error_keys(overrides: list[str]) -> list[str]:
    return [e.key for e in validate(load_spec(CPU_RL + overrides))]


@pytest.mark.parametrize("algorithm", ["cispo", "gpg"])
def test_the_presets_validate(algorithm):
    assert error_keys([f"algorithm={algorithm}"]) == []


@pytest.mark.parametrize("algorithm", ["cispo", "gpg"])
def test_no_dual_clip_without_a_clipped_surrogate(algorithm):
    assert error_keys([f"algorithm={algorithm}", "algorithm.policy_loss.dual_clip=3.0"]) == [
        "algorithm.policy_loss.dual_clip"
    ]


def test_a_lower_clip_bound_past_one_is_cispos_alone():
    assert error_keys(["algorithm=cispo", "algorithm.policy_loss.eps_clip_low=10.0"]) == []
    assert error_keys(["algorithm.policy_loss.eps_clip_low=10.0"]) == ["algorithm.policy_loss.eps_clip_low"]


def test_the_keys_a_converted_verl_recipe_writes_validate():
    overrides = [
        "reward.clip_range=null",
        "algorithm.kl.placement=reward",
        "algorithm.kl.before_baseline=true",
        "algorithm.policy_loss.aggregation=token_sum",
        "algorithm.policy_loss.terms_aggregation=policy",
        "algorithm.policy_loss.aggregation_norm_from=micro_batch_width",
        "algorithm.kl.estimator=abs",
    ]
    spec = load_spec(CPU_RL + overrides)
    assert validate(spec) == []
    assert spec.reward.clip_range is None
    assert spec.algorithm.kl.before_baseline is True


NEW_PRESETS = ["opo", "grpo_passk", "sapo", "geo_mean", "clip_cov", "kl_cov"]


@pytest.mark.parametrize("algorithm", NEW_PRESETS)
def test_the_new_veRL_presets_validate(algorithm):
    assert error_keys([f"algorithm={algorithm}"]) == []


@pytest.mark.parametrize("algorithm", ["sapo", "geo_mean", "clip_cov", "kl_cov"])
def test_the_new_losses_have_no_dual_clip(algorithm):
    assert error_keys([f"algorithm={algorithm}", "algorithm.policy_loss.dual_clip=3.0"]) == [
        "algorithm.policy_loss.dual_clip"
    ]


@pytest.mark.parametrize("algorithm", ["sapo", "geo_mean"])
def test_sapo_and_geo_mean_are_sequence_losses(algorithm):
    assert error_keys([f"algorithm={algorithm}", "algorithm.policy_loss.aggregation=token_mean"]) == [
        "algorithm.policy_loss.aggregation"
    ]


def test_clip_cov_clips_the_ratio_below_but_geo_mean_clips_the_log_ratio():
    assert error_keys(["algorithm=clip_cov", "algorithm.policy_loss.eps_clip_low=1.5"]) == [
        "algorithm.policy_loss.eps_clip_low"
    ]
    assert error_keys(["algorithm=geo_mean", "algorithm.policy_loss.eps_clip_low=1.5"]) == []


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("algorithm.advantage.std_eps=0", "algorithm.advantage.std_eps"),
        ("algorithm.policy_loss.sapo_tau_neg=0", "algorithm.policy_loss.sapo_tau_neg"),
        ("algorithm.policy_loss.cov_fraction=0", "algorithm.policy_loss.cov_fraction"),
        ("algorithm.policy_loss.cov_fraction=1.5", "algorithm.policy_loss.cov_fraction"),
        ("algorithm.policy_loss.clip_cov_bounds=[5.0,1.0]", "algorithm.policy_loss.clip_cov_bounds"),
        ("algorithm.policy_loss.kl_cov_coef=-1", "algorithm.policy_loss.kl_cov_coef"),
    ],
)
def test_the_new_keys_domains(override, key):
    assert error_keys([override]) == [key]


def test_std_eps_defaults_to_openrlhfs_and_grpo_passk_carries_verls():
    assert load_spec(CPU_RL).algorithm.advantage.std_eps == 1e-9
    assert load_spec([*CPU_RL, "algorithm=grpo_passk"]).algorithm.advantage.std_eps == 1e-6


def test_straight_through_needs_the_kl_in_the_loss_and_not_unbiased_gradient_too():
    assert error_keys(["algorithm.kl.placement=reward", "algorithm.kl.straight_through=true"]) == [
        "algorithm.kl.straight_through"
    ]
    loss = ["algorithm.kl.placement=loss", "algorithm.kl.straight_through=true"]
    assert error_keys(loss) == []
    assert error_keys([*loss, "algorithm.kl.unbiased_gradient=true"]) == ["algorithm.kl.straight_through"]


def test_veRLs_conventions_validate_together():
    overrides = [
        "algorithm.advantage.std_eps=1e-6",
        "algorithm.advantage.whiten_variance=unbiased",
        "algorithm.kl.controller_kl=seq_mean",
        "algorithm.kl.clamp_k3_only=true",
        "algorithm.kl.target=0.1",
    ]
    assert error_keys(overrides) == []
    assert error_keys(["algorithm.kl.controller_kl=tokens"]) == ["algorithm.kl.controller_kl"]


def test_dro_needs_its_beta_and_dppo_validates():
    assert error_keys(["algorithm.policy_loss.type=dro"]) == ["algorithm.policy_loss.dro_beta"]
    assert error_keys(["algorithm.policy_loss.type=dro", "algorithm.policy_loss.dro_beta=0.1"]) == []
    assert error_keys(["algorithm.policy_loss.type=dppo_kl", "algorithm.policy_loss.dppo_ratio_cap=20"]) == []


RS = "algorithm.rejection."


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        ([f"{RS}criteria=[token_k1,seq_mean_k3]", f"{RS}upper=[1.5,0.03]", f"{RS}lower=[0.7]"], []),
        ([f"{RS}criteria=[seq_max_k2]", f"{RS}upper=[0.1]"], []),
        ([f"{RS}criteria=[token_k3]"], [f"{RS}upper"]),  # no bound
        ([f"{RS}criteria=[token_k1,token_k3]", f"{RS}upper=[1,2,3]"], [f"{RS}upper"]),  # three bounds for two
        ([f"{RS}criteria=[token_k3]", f"{RS}upper=[0.1]", f"{RS}lower=[0.05]"], [f"{RS}lower"]),  # k1 only
        ([f"{RS}criteria=[token_k1]", f"{RS}upper=[1.2]", f"{RS}lower=[1.5]"], [f"{RS}lower"]),  # above upper
        ([f"{RS}upper=[0.1]"], [f"{RS}upper"]),  # bounds with nothing to bound
        ([f"{RS}criteria=[token_k5]", f"{RS}upper=[0.1]"], [f"{RS}criteria"]),
        ([f"{RS}criteria=[token_k3]", f"{RS}upper=[0.1]", "algorithm=ppo"], [f"{RS}criteria"]),  # GAE
        ([f"{RS}criteria=[token_k3]", f"{RS}upper=[0.1]", "algorithm.is_correction.type=seq_mask_tis"], []),
        (
            [f"{RS}criteria=[token_k3]", f"{RS}upper=[0.1]", "algorithm=dr_grpo"]
            + ["algorithm.policy_loss.aggregation_norm_from=micro_batch_width"],
            [f"{RS}criteria"],
        ),
    ],
    ids=[
        "k1-and-k3",
        "seq-max",
        "no-bound",
        "too-many",
        "lower-not-k1",
        "lower-above",
        "no-criteria",
        "unknown",
        "gae",
        "beside-seq-is",
        "micro-batch-width",
    ],  # fmt: skip
)
def test_rejection_bounds_and_what_it_cannot_sit_beside(overrides, keys):
    assert sorted(set(error_keys(overrides))) == keys


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (["algorithm.old_logprobs=rollout"], []),  # ppo against the engine's log-probs
        (["algorithm.old_logprobs=rollout", "algorithm=gpg", "algorithm.is_correction.type=tis"], []),  # reinforce
        (["algorithm.old_logprobs=rollout", "algorithm.policy_loss.type=clip_cov"], ["algorithm.policy_loss.type"]),
        (["algorithm.old_logprobs=rollout", "algorithm.is_correction.type=tis"], ["algorithm.is_correction.level"]),
        (["algorithm.old_logprobs=engine"], ["algorithm.old_logprobs"]),
    ],
    ids=["ppo", "gpg-tis", "clip_cov", "ppo-with-is", "unknown"],
)
def test_bypass_mode_takes_veRLs_two_losses_and_no_second_is_correction(overrides, keys):
    assert sorted(set(error_keys(overrides))) == keys


OTB = "algorithm.advantage.estimator=optimal_token_baseline"


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        ([OTB], []),
        (["algorithm.advantage.estimator=tir_optimal_token_baseline", "algorithm.is_correction.type=tis"], []),
        (
            [OTB, "rollout.samples_per_prompt=1", "trainer.global_batch=32", "rollout.prompts_per_step=32"],
            ["rollout.samples_per_prompt"],  # a group baseline
        ),
        ([OTB, "algorithm.old_logprobs=rollout"], ["algorithm.advantage.estimator"]),  # sum pi^2 needs the forward
        (["algorithm.policy_loss.entropy_logits=sampled"], ["algorithm.policy_loss.entropy_logits"]),
    ],
    ids=["otb", "tir-with-is", "one-sample", "bypass", "entropy-logits-unknown"],
)
def test_the_optimal_token_baseline_needs_groups_and_the_old_policys_forward(overrides, keys):
    assert sorted(set(error_keys(overrides))) == keys


def test_the_optimal_token_baseline_always_recomputes_the_old_log_probs():
    """One optimizer step per rollout would reuse the training forward's log-probs (no experience pass): the token
    baseline reads sum pi^2 off that pass, so it is kept."""
    from rlhf.spec.derive import derive

    one_step = ["trainer.global_batch=64", "rollout.prompts_per_step=8", "rollout.samples_per_prompt=8"]
    assert derive(load_spec(CPU_RL + one_step)).old_logprobs == "reuse"
    assert derive(load_spec(CPU_RL + one_step + [OTB])).old_logprobs == "recompute"
