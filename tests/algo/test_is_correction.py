"""The IS correction's grid (level x mode x gating x threshold) by hand: each statistic, each mode, each level, the
filter ratio, OpenRLHF's refused combinations, and the FlashREINFORCE trust region acting on the gradient; veRL's
sequence weight (seq_ratio=product) and the weights' batch normalisation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from rlhf.algo.is_correction import ISCorrection, binary_kl, is_weight_totals, is_weights, total_variation
from rlhf.algo.policy_loss import policy_loss


def _log(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows).log()


def test_binary_kl_and_tv_of_the_sampled_token_by_hand() -> None:
    # Rollout probability p = 0.5, trainer probability q = 0.25 (and equal probabilities: 0).
    rollout, old = _log([[0.5, 0.3]]), _log([[0.25, 0.3]])
    kl = binary_kl(old, rollout)
    assert kl[0, 0].item() == pytest.approx(0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75), rel=1e-5)
    assert kl[0, 1].item() == pytest.approx(0.0, abs=1e-7)
    assert total_variation(old, rollout).tolist()[0] == pytest.approx([0.25, 0.0], abs=1e-7)


def test_binary_kl_is_never_negative_where_rollout_and_trainer_agree() -> None:
    # Unclamped, p log(p/q) + (1-p) log((1-p)/(1-q)) cancels to as low as -6e-8 in fp32 for q = p(1 + 1e-7) (22 of
    # these 64 tokens), and a band [0, delta] would drop them.
    p = torch.rand(64, generator=torch.Generator().manual_seed(0)) * 0.9 + 0.05
    rollout = p.log()
    old = rollout + 1e-7
    assert (binary_kl(old, rollout) >= 0).all()
    assert binary_kl(old, rollout).max().item() < 1e-6


def test_probabilities_are_clamped_so_a_certain_token_keeps_binary_kl_finite() -> None:
    # log p = 0 (p = 1) would make (1 - p) log((1 - p) / (1 - q)) 0 * log 0 = NaN without the clamp to 1 - 1e-6.
    kl = binary_kl(_log([[0.5]]), torch.zeros(1, 1))
    p, q = 1 - 1e-6, 0.5
    assert torch.isfinite(kl).all()
    assert kl.item() == pytest.approx(p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q)), rel=1e-4)


def test_token_clip_ratio_is_tis_and_counts_the_clamped_tokens() -> None:
    # w = [0.25, 1, 2, 8]: clamped into [0.5, 5]; two of the four action tokens were outside (the fifth is masked).
    old = _log([[0.25, 1.0, 2.0, 8.0, 100.0]])
    rollout = torch.zeros(1, 5)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    out = is_weights(old, rollout, mask, ISCorrection("token", "clip", "ratio", 0.5, 5.0))
    assert out.coef.tolist()[0][:4] == pytest.approx([0.5, 1.0, 2.0, 5.0])
    assert out.filter_ratio.item() == pytest.approx(2 / 4)


def test_token_mask_ratio_is_icepop() -> None:
    old, rollout, mask = _log([[0.25, 1.0, 2.0, 8.0]]), torch.zeros(1, 4), torch.ones(1, 4)
    out = is_weights(old, rollout, mask, ISCorrection("token", "mask", "ratio", 0.5, 5.0))
    assert out.coef.tolist()[0] == pytest.approx([0.0, 1.0, 2.0, 0.0])


def test_seq_mask_ratio_gates_by_the_geometric_mean_and_keeps_token_weights_unclamped() -> None:
    # Row 0: (0.25 * 1 * 2 * 8)^(1/4) = sqrt 2, inside [0.5, 5]: weights kept as they are. Row 1: 8 (its masked
    # 100s ignored): the whole sequence weighs 0. One sequence of two filtered.
    old = _log([[0.25, 1.0, 2.0, 8.0], [8.0, 8.0, 100.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    out = is_weights(old, torch.zeros(2, 4), mask, ISCorrection("seq", "mask", "ratio", 0.5, 5.0))
    assert out.coef.tolist()[0] == pytest.approx([0.25, 1.0, 2.0, 8.0])
    assert out.coef.tolist()[1] == [0.0] * 4
    assert out.filter_ratio.item() == pytest.approx(0.5)


def test_seq_binary_kl_gates_by_the_plain_mean_of_the_token_divergences() -> None:
    # Row 0: token binary KLs [bkl(0.5, 0.25) = 0.144, 0], mean 0.072 > 0.02: dropped. Row 1: [bkl(0.5, 0.4) =
    # 0.0204, 0], mean 0.0102 <= 0.02: kept, with its token weights q / p = [0.8, 1].
    rollout = _log([[0.5, 0.3], [0.5, 0.3]])
    old = _log([[0.25, 0.3], [0.4, 0.3]])
    mask = torch.ones(2, 2)
    out = is_weights(old, rollout, mask, ISCorrection("seq", "mask", "binary_kl", 0.0, 0.02))
    means = binary_kl(old, rollout).mean(dim=-1)
    assert means.tolist() == pytest.approx([0.0719, 0.0102], abs=1e-4)
    assert out.coef.tolist() == [[0.0, 0.0], pytest.approx([0.8, 1.0], rel=1e-5)]
    assert out.filter_ratio.item() == pytest.approx(0.5)


def test_token_tv_masks_each_token_past_its_upper_bound() -> None:
    rollout, old = _log([[0.5, 0.5, 0.5]]), _log([[0.25, 0.45, 0.5]])  # tv 0.25, 0.05, 0
    out = is_weights(old, rollout, torch.ones(1, 3), ISCorrection("token", "mask", "tv", 0.0, 0.1))
    assert out.coef.tolist()[0] == pytest.approx([0.0, 0.9, 1.0], rel=1e-5)
    assert out.filter_ratio.item() == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("level", "mode", "gating", "low", "match"),
    [
        ("seq", "clip", "ratio", 0.5, "clip"),
        ("token", "clip", "binary_kl", 0.0, "clip"),
        ("off", "clip", "tv", 0.0, "clip"),  # refused whatever the level, as OpenRLHF does
        ("seq", "mask", "binary_kl", 0.5, "upper bound"),
        ("token", "mask", "tv", 0.5, "upper bound"),
        ("sequence", "mask", "ratio", 0.5, "level"),
        ("token", "truncate", "ratio", 0.5, "mode"),
        ("token", "mask", "kl", 0.5, "gating"),
    ],
)
def test_openrlhfs_invalid_combinations_are_refused(level, mode, gating, low, match) -> None:
    with pytest.raises(ValueError, match=match):
        ISCorrection(level, mode, gating, low, 1.0)


def test_a_divergence_gate_with_the_default_band_is_fine_while_off() -> None:
    # OpenRLHF checks the lower bound only when the correction is on.
    assert not ISCorrection("off", "mask", "binary_kl", 0.5, 5.0).enabled


def test_flash_reinforce_trust_region_zeroes_the_gradient_of_sequences_outside_it() -> None:
    # One optimizer step per rollout: log π = old (ratio 1), the surrogate is REINFORCE weighted by w = q / p.
    rollout = _log([[0.5, 0.3], [0.5, 0.3]])
    old = _log([[0.25, 0.3], [0.4, 0.3]])
    log_probs = old.clone().requires_grad_()
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.ones(2, 2)
    out = policy_loss(
        log_probs,
        old,
        advantages,
        mask,
        rollout_log_probs=rollout,
        is_correction=ISCorrection("seq", "mask", "binary_kl", 0.0, 0.02),
        aggregation="seq-mean-token-mean",
    )
    out.loss.backward()
    # Row 0 is outside the region: no gradient. Row 1: d(-A ρ w)/d log π = -A w / 2 tokens / 2 sequences.
    assert log_probs.grad[0].tolist() == [0.0, 0.0]
    assert log_probs.grad[1].tolist() == pytest.approx([0.8 / 4, 1.0 / 4], rel=1e-5)
    assert out.is_filter_ratio.item() == pytest.approx(0.5)


# -- veRL's sequence weight (seq_ratio=product) and batch normalisation (issue 35) -----------------------------------


def test_seq_product_clip_is_verls_truncated_sequence_weight_on_every_token() -> None:
    # Row 0: w = [0.5, 2, 3] (the 4th token masked): product 3, truncated at 2, on all four columns. Row 1: w = [0.5,
    # 0.5]: product 0.25 (a geometric mean would say 0.5), kept. Row 2 has no action token: weight 1 (an empty sum).
    old = _log([[0.5, 2.0, 3.0, 50.0], [0.5, 0.5, 1.0, 1.0], [7.0, 7.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    out = is_weights(old, torch.zeros(3, 4), mask, ISCorrection("seq", "clip", "ratio", 0.0, 2.0, "product"))
    assert out.coef.tolist() == [[2.0] * 4, pytest.approx([0.25] * 4), [1.0] * 4]
    assert out.filter_ratio.item() == pytest.approx(1 / 3)


def test_seq_product_mask_zeroes_sequences_outside_the_band_and_gives_the_others_their_product() -> None:
    # Products 3 (outside [0.5, 2]) and 1.5 (inside): the kept sequence weighs 1.5 on each token, not w_t.
    old = _log([[1.5, 2.0], [3.0, 0.5]])
    out = is_weights(
        old, torch.zeros(2, 2), torch.ones(2, 2), ISCorrection("seq", "mask", "ratio", 0.5, 2.0, "product")
    )
    assert out.coef.tolist() == [[0.0, 0.0], pytest.approx([1.5, 1.5])]
    assert out.filter_ratio.item() == pytest.approx(0.5)


def test_seq_product_bounds_the_summed_log_ratio_so_a_long_sequence_stays_finite() -> None:
    # 30 tokens of log-ratio 1: e^30 bounded to e^20 before the band; masked out (not inf * 0 = NaN elsewhere).
    old, rollout, mask = torch.ones(1, 30), torch.zeros(1, 30), torch.ones(1, 30)
    clip = is_weights(old, rollout, mask, ISCorrection("seq", "clip", "ratio", 0.0, 1e12, "product"))
    assert clip.coef[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-5)
    mask_out = is_weights(old, rollout, mask, ISCorrection("seq", "mask", "ratio", 0.0, 2.0, "product"))
    assert torch.isfinite(mask_out.coef).all() and mask_out.coef.abs().sum().item() == 0.0


def test_token_tis_batch_normalised_divides_by_the_mean_over_the_action_tokens() -> None:
    # Truncated weights [0.5, 1, 2 | 2, (pad)]: mean over the 4 action tokens 5.5 / 4 = 1.375.
    old = _log([[0.5, 1.0, 4.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    out = is_weights(
        old, torch.zeros(2, 3), mask, ISCorrection("token", "clip", "ratio", 0.0, 2.0, batch_normalize=True)
    )
    expected = torch.tensor([[0.5, 1.0, 2.0], [2.0, 2.0, 2.0]]) / 1.375
    torch.testing.assert_close(out.coef * mask, expected * mask)


def test_seq_product_batch_normalised_divides_by_the_mean_over_sequences_not_tokens() -> None:
    # Sequence weights 2 (3 tokens) and 0.5 (1 token); the empty row is not counted. Mean over sequences 1.25 (a
    # token mean would be 6.5 / 4 = 1.625).
    old = _log([[1.0, 2.0, 1.0], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    isc = ISCorrection("seq", "clip", "ratio", 0.0, 5.0, "product", batch_normalize=True)
    out = is_weights(old, torch.zeros(3, 3), mask, isc)
    assert out.coef[0].tolist() == pytest.approx([2 / 1.25] * 3)
    assert out.coef[1, 0].item() == pytest.approx(0.5 / 1.25)


def test_batch_normalisation_over_a_batch_given_as_totals_of_its_micro_batches() -> None:
    # The same division when the batch comes in two micro-batches and the totals are summed over them.
    old = _log([[0.5, 1.0, 4.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    isc = ISCorrection("token", "clip", "ratio", 0.0, 2.0, batch_normalize=True)
    whole = is_weights(old, torch.zeros(2, 3), mask, isc).coef
    plain = replace(isc, batch_normalize=False)
    totals = sum(
        is_weight_totals(
            is_weights(old[i : i + 1], torch.zeros(1, 3), mask[i : i + 1], plain).coef, mask[i : i + 1], "token"
        )
        for i in range(2)
    )
    assert totals.tolist() == [5.5, 4.0]
    for i in range(2):
        part = is_weights(old[i : i + 1], torch.zeros(1, 3), mask[i : i + 1], isc, totals).coef
        torch.testing.assert_close(part * mask[i], whole[i : i + 1] * mask[i])


def test_batch_normalisation_leaves_all_zero_weights_alone() -> None:
    # Every token masked out by the band: mean 0, nothing divided (no NaN).
    old = _log([[9.0, 9.0]])
    out = is_weights(
        old, torch.zeros(1, 2), torch.ones(1, 2), ISCorrection("token", "mask", "ratio", 0.5, 2.0, batch_normalize=True)
    )
    assert out.coef.tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize(
    ("level", "mode", "gating", "match"),
    [("token", "clip", "ratio", "seq_ratio"), ("seq", "mask", "binary_kl", "seq_ratio")],
)
def test_the_sequence_product_needs_level_seq_and_the_ratio(level, mode, gating, match) -> None:
    with pytest.raises(ValueError, match=match):
        ISCorrection(level, mode, gating, 0.0, 2.0, "product")


def test_clip_at_level_seq_still_needs_the_product() -> None:
    with pytest.raises(ValueError, match="clip"):
        ISCorrection("seq", "clip", "ratio", 0.0, 2.0)
    assert ISCorrection("seq", "clip", "ratio", 0.0, 2.0, "product").enabled


def test_weights_normalised_over_the_rollout_batch_keep_the_old_logprob_pass() -> None:
    # One optimizer step per rollout skips the old-log-prob pass, unless the IS weights' batch mean needs them first.
    from rlhf.pipelines.rl_roles import reuses_current_logprobs
    from rlhf.spec.build import load_spec

    base = ["+recipe=quickstart_cpu", "algorithm.is_correction.type=tis"]
    assert reuses_current_logprobs(load_spec(base))
    assert not reuses_current_logprobs(load_spec([*base, "algorithm.is_correction.batch_normalize=true"]))
