"""Log-probs with temperature, entropy, masked reductions and whitening, on hand-computed tensors."""

from __future__ import annotations

import math

import pytest
import torch
from algo_helpers import garble, random_mask, seeds
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf.algo.logprobs import entropy_from_logits, log_probs_from_logits, masked_mean, masked_sum, masked_whiten


def test_log_probs_match_softmax_by_hand() -> None:
    # exp(logits) = [1, 2, 3]: probabilities 1/6, 2/6, 3/6.
    logits = torch.tensor([[[0.0, math.log(2), math.log(3)]]])
    lp = log_probs_from_logits(logits, torch.tensor([[2]]))
    assert lp.item() == pytest.approx(math.log(0.5), abs=1e-6)


def test_temperature_divides_logits() -> None:
    # logits / 2 -> exp = [1, sqrt 2, sqrt 3].
    logits = torch.tensor([[0.0, math.log(2), math.log(3)]])
    lp = log_probs_from_logits(logits, torch.tensor([0]), temperature=2.0)
    assert lp.item() == pytest.approx(-math.log(1 + math.sqrt(2) + math.sqrt(3)), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_caller_logits_are_not_modified(dtype: torch.dtype) -> None:
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    before = logits.clone()
    log_probs_from_logits(logits, torch.zeros(2, 3, dtype=torch.long), temperature=0.7)
    assert torch.equal(logits, before)


def test_entropy_after_tempered_log_probs_is_of_untempered_logits() -> None:
    # OpenRLHF divides in place, so an entropy computed afterwards would see tempered logits; ours must not.
    logits = torch.tensor([[0.0, math.log(3)]])
    log_probs_from_logits(logits, torch.tensor([0]), temperature=3.0)
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(logits).item() == pytest.approx(expected, abs=1e-6)


def test_low_precision_logits_are_computed_in_fp32_with_gradient() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.5]], dtype=torch.bfloat16, requires_grad=True)
    lp = log_probs_from_logits(logits, torch.tensor([1]), temperature=0.5)
    assert lp.dtype == torch.float32
    z = [2.0, 4.0, 7.0]  # the bf16 values are exact; divided by 0.5
    assert lp.item() == pytest.approx(4.0 - math.log(sum(math.exp(v) for v in z)), abs=1e-6)
    lp.sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


@pytest.mark.parametrize("shape", [(2, 1300, 5), (1100, 5), (5,)])
def test_chunked_computation_matches_log_softmax_across_chunk_boundaries(shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    full = torch.randn(2, 1301, 5, generator=g)
    logits = full[:, :-1] if len(shape) == 3 else torch.randn(shape, generator=g)  # a non-contiguous slice, too
    labels = torch.randint(0, 5, shape[:-1], generator=g)
    log_softmax = torch.log_softmax(logits / 0.7, dim=-1)
    expected = log_softmax.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(log_probs_from_logits(logits, labels, temperature=0.7), expected)
    p = torch.softmax(logits, dim=-1)
    torch.testing.assert_close(entropy_from_logits(logits), -(p * p.log()).sum(-1))


def test_non_positive_temperature_is_rejected() -> None:
    with pytest.raises(ValueError, match="temperature"):
        log_probs_from_logits(torch.zeros(1, 2), torch.tensor([0]), temperature=0.0)


def test_entropy_of_uniform_is_log_vocab() -> None:
    assert entropy_from_logits(torch.full((3, 4), 2.5)).tolist() == pytest.approx([math.log(4)] * 3, abs=1e-6)


def test_masked_mean_and_sum() -> None:
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 5.0, 7.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    assert masked_sum(x, m).item() == 15.0
    assert masked_mean(x, m).item() == 15.0 / 4
    assert masked_mean(x, m, dim=-1).tolist() == [1.5, 6.0]
    assert masked_sum(x, m, dim=-1).tolist() == [3.0, 12.0]


def test_masked_whiten_uses_population_variance() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    # mean 2, population variance (1 + 0 + 1) / 3; the masked entry is zeroed.
    s = math.sqrt(2 / 3)
    assert masked_whiten(x, m).tolist()[0] == pytest.approx([-1 / s, 0.0, 1 / s, 0.0], abs=1e-6)
    assert masked_whiten(x, m, divide_by_std=False).tolist()[0] == pytest.approx([-1.0, 0.0, 1.0, 0.0])


def test_masked_whiten_clamps_tiny_variance() -> None:
    # variance (0.5e-5)^2 = 2.5e-11 is clamped to 1e-8: divide by 1e-4, not by 0.5e-5.
    x = torch.tensor([0.0, 1e-5])
    assert masked_whiten(x, torch.ones(2)).tolist() == pytest.approx([-0.05, 0.05], rel=1e-3)


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(1, 4), st.integers(1, 7))
def test_masked_positions_never_change_masked_reductions(seed: int, batch: int, length: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, generator=g)
    m = random_mask(g, batch, length)
    y = garble(x, m, g)
    torch.testing.assert_close(masked_mean(x, m), masked_mean(y, m))
    torch.testing.assert_close(masked_sum(x, m, dim=-1), masked_sum(y, m, dim=-1))
    torch.testing.assert_close(masked_whiten(x, m), masked_whiten(y, m))
    # Right padding (extra masked columns) changes nothing either.
    pad = torch.randn(batch, 3, generator=g)
    padded = masked_whiten(torch.cat([x, pad], dim=1), torch.cat([m, torch.zeros(batch, 3)], dim=1))
    torch.testing.assert_close(padded[:, :length], masked_whiten(x, m))
