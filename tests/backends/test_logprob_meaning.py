"""The shift that makes vLLM's processed logits our log-probs, on hand-computed rows (no vLLM needed)."""

from __future__ import annotations

import math

import torch

from rlhf.backends.contract.logprob_meaning import reporting_temperature, shift_to_tempered_logprobs_


def test_shifted_row_over_temperature_is_the_tempered_log_softmax():
    # Row 0: z = [0, ln 3] at T = 0.5 -> z / T = [0, ln 9] -> p = [1/10, 9/10].
    # Row 1: the same z sampled greedily (T = 0): untempered, p = [1/4, 3/4], and vLLM does not divide it.
    z = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])
    t = torch.tensor([0.5, 0.0])
    out = shift_to_tempered_logprobs_(z, t)
    assert out is z  # in place, as a vLLM logits processor should
    read_off = torch.stack([z[0] / 0.5, z[1]])
    want = torch.log(torch.tensor([[0.1, 0.9], [0.25, 0.75]]))
    torch.testing.assert_close(read_off, want)


def test_shift_leaves_what_is_sampled_unchanged():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 50, generator=g) * 3
    t = torch.tensor([0.7, 1.0, 1.3, 0.0])
    shifted = shift_to_tempered_logprobs_(z.clone(), t)
    tau = reporting_temperature(t)[:, None]
    # One constant per row: the sampling distribution (hence top-k and top-p sets) and the argmax are the same.
    torch.testing.assert_close((shifted / tau).softmax(-1), (z / tau).softmax(-1))
    assert torch.equal(shifted.argsort(-1), z.argsort(-1))
    torch.testing.assert_close((shifted / tau).logsumexp(-1), torch.zeros(4), atol=1e-5, rtol=0)


def test_temperatures_below_vllms_greedy_threshold_report_at_one():
    t = torch.tensor([0.0, 5e-6, 1e-5, 0.7], dtype=torch.float64)
    assert reporting_temperature(t).tolist() == [1.0, 1.0, 1e-5, 0.7]
