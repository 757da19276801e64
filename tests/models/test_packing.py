"""Packed forwards (rlhf.models.packing): every sample's log-probs, entropies, values and rewards from packed rows equal
those of the sample run alone without padding, no sample's outputs move when another sample changes, and the row
layout never computes more tokens than the padded batch."""

from __future__ import annotations

import pytest
import torch

from rlhf.models.forward import (
    causal_lm_log_probs,
    causal_lm_scores,
    forward_tokens,
    value_model_rewards,
    value_model_token_values,
)
from rlhf.models.loading import load_causal_lm, resolve_model_path
from rlhf.models.packing import attention_kind, first_fit_rows, pack, pack_for, plan_rows
from rlhf.models.value_head import load_value_model
from rlhf.spec.schema import ModelSpec

SPEC = ModelSpec(make_local=True)
LENGTHS = [7, 30, 3, 12, 1, 19]
TOL = 1e-6  # the packed forward against each sample alone, in float64


@pytest.fixture(scope="module")
def path() -> str:
    return resolve_model_path(SPEC)


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def lm(request, path):
    return load_causal_lm(path, attn=request.param).double().eval()


@pytest.fixture(scope="module")
def critic(path):
    torch.manual_seed(0)
    return load_value_model(path, "critic", init_value_head=True).double().eval()


def _samples(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g) for n in LENGTHS]


def _padded(samples: list[torch.Tensor], side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in samples)
    ids = torch.full((len(samples), width), 5, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(samples):
        cols = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        ids[i, cols], mask[i, cols] = s, 1
    return ids, mask


def _alone(fn, samples):
    """``fn(ids [1, n], mask [1, n])`` for each sample by itself: no padding, no other sample in the batch (a
    one-token sample predicts nothing: None)."""
    return [fn(s[None], torch.ones(1, len(s), dtype=torch.long)) if len(s) > 1 else None for s in samples]


@torch.no_grad()
@pytest.mark.parametrize("side", ["right", "left"])
def test_packed_log_probs_and_entropy_equal_each_sample_run_alone(lm, side):
    samples = _samples()
    ids, mask = _padded(samples, side)
    assert pack_for(lm, ids, mask) is not None, "the tiny Llama's attention takes packed rows"

    def scores(i, m, **kw):
        out = causal_lm_scores(lm, i, m, temperature=0.7, entropy_temperatures=(1.0, 0.7), sum_pi_squared=True, **kw)
        return out.log_probs, *out.entropies, out.sum_pi_squared

    logps, entropy, tempered, sum_sq = scores(ids, mask, packing=True)
    alone = _alone(scores, samples)
    width = ids.shape[1]
    for i, (s, out) in enumerate(zip(samples, alone, strict=True)):
        start = 0 if side == "right" else width - len(s)
        got = slice(start, start + len(s) - 1)
        if out is not None:
            torch.testing.assert_close(logps[i, got], out[0][0], atol=TOL, rtol=0)
            torch.testing.assert_close(entropy[i, got], out[1][0], atol=TOL, rtol=0)
            torch.testing.assert_close(tempered[i, got], out[2][0], atol=TOL, rtol=0)
            torch.testing.assert_close(sum_sq[i, got], out[3][0], atol=TOL, rtol=0)
        rest = torch.ones(width - 1, dtype=torch.bool)
        rest[got] = False
        assert torch.all(logps[i, rest] == 0), "positions that predict no token of the sample are 0"


@torch.no_grad()
def test_changing_one_sample_leaves_every_other_sample_bit_identical(lm):
    samples = _samples()
    ids, mask = _padded(samples)
    before = causal_lm_log_probs(lm, ids, mask, packing=True)
    changed = ids.clone()
    changed[0, : LENGTHS[0]] = (changed[0, : LENGTHS[0]] + 17) % 256  # sample 0 shares a row with others
    after = causal_lm_log_probs(lm, changed, mask, packing=True)
    rows, _ = plan_rows(LENGTHS, varlen=False)
    assert any(0 in row and len(row) > 1 for row in rows), rows
    others = [i for i in range(len(samples)) if i != 0]
    assert torch.equal(before[others], after[others])
    assert not torch.equal(before[0], after[0])


@torch.no_grad()
def test_rows_packed_beforehand_pass_their_position_ids(lm):
    """data.packing's rows: several samples per row, positions restarting; the mask is not needed."""
    samples = _samples(1)[:3]
    row = torch.cat(samples)[None]
    positions = torch.cat([torch.arange(len(s)) for s in samples])[None]
    lp = causal_lm_log_probs(lm, row, None, position_ids=positions)
    at = 0
    for s, alone in zip(samples, _alone(lambda i, m: causal_lm_log_probs(lm, i, m), samples), strict=True):
        torch.testing.assert_close(lp[0, at : at + len(s) - 1], alone[0], atol=TOL, rtol=0)
        at += len(s)


@torch.no_grad()
def test_packed_values_and_rewards_equal_each_sample_run_alone(critic):
    samples = _samples(2)
    ids, mask = _padded(samples)
    values = value_model_token_values(critic, ids, mask, packing=True)
    rewards = value_model_rewards(critic, ids, mask, packing=True)
    alone = [value_model_token_values(critic, s[None], torch.ones(1, len(s), dtype=torch.long))[0] for s in samples]
    for i, (s, v) in enumerate(zip(samples, alone, strict=True)):
        torch.testing.assert_close(values[i, : len(s)], v, atol=TOL, rtol=0)
        torch.testing.assert_close(rewards[i], v[-1], atol=TOL, rtol=0)
    padded = value_model_rewards(critic, ids, mask)
    torch.testing.assert_close(rewards, padded, atol=TOL, rtol=0)


def test_packed_gradients_equal_the_padded_batchs(path):
    """Training through the packed rows: the same loss, the same gradient (fp32)."""
    model = load_causal_lm(path)
    samples = _samples(3)
    ids, mask = _padded(samples)
    grads = []
    for packing in (False, True):
        model.zero_grad()
        lp = causal_lm_log_probs(model, ids, mask, packing=packing)
        (-(lp * mask[:, 1:]).sum() / mask[:, 1:].sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=0)


def test_sdpa_rows_never_compute_more_than_padding_and_varlen_is_one_row():
    g = torch.Generator().manual_seed(4)
    for _ in range(50):
        lengths = torch.randint(1, 60, (int(torch.randint(1, 20, (1,), generator=g)),), generator=g).tolist()
        rows, width = plan_rows(lengths, varlen=False)
        assert width == max(lengths) and len(rows) <= len(lengths)
        assert sorted(i for r in rows for i in r) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in r) <= width for r in rows)
    ids, mask = _padded(_samples())
    one = pack(ids, mask, varlen=True)
    assert one.input_ids.shape == (1, sum(LENGTHS)) and one.computed_tokens == one.real_tokens == sum(LENGTHS)
    assert one.position_ids[0].tolist() == [p for n in LENGTHS for p in range(n)]


def test_first_fit_rows_fills_the_longest_first():
    assert first_fit_rows([5, 3, 2, 4, 1], 5) == [[0], [3, 4], [1, 2]]


def test_forward_tokens_count_what_the_forward_computes(lm):
    ids, mask = _padded(_samples())
    packed = pack_for(lm, ids, mask)
    stats = forward_tokens(lm, mask, packing=True)
    assert stats == {"tokens_real": float(sum(LENGTHS)), "tokens_computed": float(packed.computed_tokens)}
    assert forward_tokens(lm, mask, packing=False)["tokens_computed"] == ids.numel()
    assert packed.computed_tokens < ids.numel()


def test_a_model_off_transformers_attention_interface_runs_padded(lm):
    class Custom(torch.nn.Module):  # e.g. remote code building its own mask
        config = lm.config

    assert attention_kind(lm) in ("sdpa", "eager")
    assert attention_kind(Custom()) is None
    ids, mask = _padded(_samples())
    assert pack_for(Custom(), ids, mask) is None
    gappy = mask.clone()
    gappy[1, 4] = 0  # not one contiguous span: cannot be packed
    assert pack(ids, gappy) is None
