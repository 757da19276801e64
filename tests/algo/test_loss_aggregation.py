"""Loss aggregations by hand, and the step-window normaliser giving one token mean over the whole optimizer step."""

from __future__ import annotations

import pytest
import torch
from algo_helpers import garble, random_mask, seeds
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf.algo.aggregation import LossNormalizer, aggregate, step_loss_normalizer

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])  # the middle sequence is empty


def test_token_mean_without_normaliser_is_the_masked_mean() -> None:
    assert aggregate(LOSS, MASK).item() == pytest.approx((1 + 2 + 7 + 8 + 9) / 5)


def test_token_mean_with_step_normaliser() -> None:
    norm = LossNormalizer(batch_num_tokens=10.0, dp_size=2)
    assert aggregate(LOSS, MASK, "token_mean", norm).item() == pytest.approx(27 / 10 * 2)


def test_seq_mean_excludes_empty_sequences() -> None:
    # Sequence token means 1.5 and 8; the empty one is neither summed nor counted.
    assert aggregate(LOSS, MASK, "seq_mean").item() == pytest.approx((1.5 + 8) / 2)
    norm = LossNormalizer(global_batch_size=4.0, dp_size=2)
    assert aggregate(LOSS, MASK, "seq_mean", norm).item() == pytest.approx((1.5 + 8) / 4 * 2)


def test_seq_mean_token_sum() -> None:
    assert aggregate(LOSS, MASK, "seq_mean_token_sum").item() == pytest.approx((3 + 24) / 2)


def test_seq_mean_token_sum_norm_divides_by_the_constant() -> None:
    norm = LossNormalizer(constant=4.0)
    assert aggregate(LOSS, MASK, "seq_mean_token_sum_norm", norm).item() == pytest.approx((3 + 24) / 2 / 4)
    with pytest.raises(ValueError, match="constant"):
        aggregate(LOSS, MASK, "seq_mean_token_sum_norm")


def test_unknown_aggregation_lists_valid_ones() -> None:
    with pytest.raises(
        KeyError,
        match="seq-mean-token-mean, seq_mean, seq_mean_token_sum, seq_mean_token_sum_norm, token-mean, token_mean",
    ):
        aggregate(LOSS, MASK, "mean")


def test_step_normaliser_counts_tokens_and_non_empty_sequences_over_the_window() -> None:
    masks = [MASK, torch.tensor([[1.0, 0.0, 0.0]])]
    norm = step_loss_normalizer(masks, dp_size=3, constant=7.0)
    # 5 + 1 tokens, 2 + 1 non-empty sequences, divided by gas = 2.
    assert (float(norm.batch_num_tokens), float(norm.global_batch_size)) == (3.0, 1.5)
    assert (norm.dp_size, norm.constant) == (3, 7.0)
    configured = step_loss_normalizer(masks, grad_accum_steps=4)
    assert (float(configured.batch_num_tokens), float(configured.global_batch_size)) == (1.5, 0.75)
    with pytest.raises(ValueError):
        step_loss_normalizer([])


@pytest.mark.parametrize("in_place", [True, False])
def test_step_normaliser_all_reduces_both_counts(in_place: bool) -> None:
    other_rank = torch.tensor([4.0, 2.0])  # what the other data-parallel rank counted

    def all_reduce(t: torch.Tensor) -> torch.Tensor | None:
        if in_place:  # torch.distributed.all_reduce style
            t += other_rank
            return None
        return t + other_rank

    norm = step_loss_normalizer([MASK], dp_size=2, all_reduce=all_reduce)
    assert (float(norm.batch_num_tokens), float(norm.global_batch_size)) == (9.0, 4.0)


def _simulate_step(losses: list[list[torch.Tensor]], masks: list[list[torch.Tensor]], name: str) -> torch.Tensor:
    """The gradient objective of one step: each rank's micro-batch losses scaled by 1/gas, averaged over ranks."""
    dp, gas = len(masks), len(masks[0])
    local = [torch.stack([torch.tensor([m.sum(), (m.sum(-1) > 0).sum()]) for m in rank]).sum(0) for rank in masks]
    total = torch.stack(local).sum(0)
    objective = torch.zeros(())
    for rank in range(dp):
        norm = step_loss_normalizer(masks[rank], dp_size=dp, all_reduce=lambda t, r=rank: t - local[r] + total)
        for loss, mask in zip(losses[rank], masks[rank], strict=True):
            objective += aggregate(loss, mask, name, norm) / gas
    return objective / dp


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 3), st.integers(1, 3))
def test_step_window_gives_one_mean_over_all_ranks_and_micro_batches(seed: int, dp: int, gas: int) -> None:
    g = torch.Generator().manual_seed(seed)
    # Micro-batches of different sizes and lengths, so a mean of per-micro-batch means would differ.
    shapes = [
        [(int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(2, 6, (1,), generator=g))) for _ in range(gas)]
        for _ in range(dp)
    ]
    losses = [[torch.randn(*s, generator=g) for s in rank] for rank in shapes]
    masks = [[random_mask(g, *s) for s in rank] for rank in shapes]
    flat = [(loss, mask) for rl, rm in zip(losses, masks, strict=True) for loss, mask in zip(rl, rm, strict=True)]
    token_mean = sum((loss * mask).sum() for loss, mask in flat) / sum(mask.sum() for _, mask in flat)
    torch.testing.assert_close(_simulate_step(losses, masks, "token_mean"), token_mean)
    seq_means = torch.cat([(loss * mask).sum(-1) / mask.sum(-1) for loss, mask in flat])
    torch.testing.assert_close(_simulate_step(losses, masks, "seq_mean"), seq_means.mean())


@settings(max_examples=30, deadline=None)
@given(seeds, st.sampled_from(["token_mean", "seq_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]))
def test_padding_and_masked_positions_never_change_an_aggregate(seed: int, name: str) -> None:
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(3, 5, generator=g)
    mask = random_mask(g, 3, 5)
    norm = LossNormalizer(constant=16.0)
    expected = aggregate(loss, mask, name, norm)
    torch.testing.assert_close(aggregate(garble(loss, mask, g), mask, name, norm), expected)
    padded_loss = torch.cat([loss, torch.randn(3, 2, generator=g)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(3, 2)], dim=1)
    torch.testing.assert_close(aggregate(padded_loss, padded_mask, name, norm), expected)
