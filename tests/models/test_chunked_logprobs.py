"""Log-probs and entropy from the hidden states, chunk by chunk (rlhf.algo.logprobs.token_scores_from_hidden through
the output head, rlhf.models.head_scores): the same values and gradients as the whole logits, for every training
forward of rlhf.models.forward; the backward keeps no ``[tokens, vocab]`` tensor; a model that changes its logits
after the head still gets the right numbers."""

from __future__ import annotations

import pytest
import torch

from rlhf.algo.logprobs import (
    entropy_from_logits,
    log_probs_from_logits,
    sum_pi_squared_from_logits,
    token_scores_from_hidden,
)
from rlhf.models import head_scores
from rlhf.models.forward import causal_lm_log_probs, causal_lm_scores
from rlhf.models.loading import load_causal_lm, resolve_model_path
from rlhf.models.packing import pack
from rlhf.spec.schema import ModelSpec

LENGTHS = [7, 30, 3, 12, 1, 19]


@pytest.fixture(scope="module")
def path() -> str:
    return resolve_model_path(ModelSpec(make_local=True))


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(LENGTHS), max(LENGTHS)), 5, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(LENGTHS):
        ids[i, :n], mask[i, :n] = torch.randint(0, 256, (n,), generator=g), 1
    return ids, mask


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference relative to the largest magnitude (fp32 rounds relative to the values' scale)."""
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def _whole_logits(lm, ids, mask, temperature, packing):
    """What causal_lm_log_probs computed before the chunked head: the whole logits, then the fp32 reductions."""
    packed = pack(ids, mask, varlen=False) if packing else None
    if packed is not None:
        logits = lm(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits[:, :-1]
        rows = packed.input_ids
    else:
        pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        logits = lm(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits[:, :-1]
        rows = ids
    lp, ent = log_probs_from_logits(logits, rows[:, 1:], temperature), entropy_from_logits(logits)
    if packed is not None:
        lp, ent = packed.unpack_shifted(lp), packed.unpack_shifted(ent)
    return lp, ent


# fp64: the formulas agree to rounding; fp32: each chunk's head matmul rounds otherwise than the whole one, and the
# entropies' gradients (small, from differences of O(1) terms) and exp(2z/τ) in Σπ² carry that rounding relatively.
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 2e-5)], ids=["fp64", "fp32"])
@pytest.mark.parametrize("chunk", [1, 7, 1024])
def test_chunked_scores_equal_the_whole_logits_values_and_gradients(chunk, dtype, tol):
    g = torch.Generator().manual_seed(0)
    n, h, v = 37, 16, 50
    hidden = torch.randn(n, h, generator=g, requires_grad=True, dtype=dtype)
    weight = torch.randn(v, h, generator=g, requires_grad=True, dtype=dtype)
    bias = torch.randn(v, generator=g, requires_grad=True, dtype=dtype)
    labels = torch.randint(0, v, (n,), generator=g)
    w_lp, w_ent, w_hot = (torch.randn(n, generator=g, dtype=dtype) for _ in range(3))

    logits = torch.nn.functional.linear(hidden, weight, bias)
    lp, ent, hot = (
        log_probs_from_logits(logits, labels, 0.7),
        entropy_from_logits(logits),
        entropy_from_logits(logits, 0.7),
    )
    ref = torch.autograd.grad((lp * w_lp).sum() + (ent * w_ent).sum() + (hot * w_hot).sum(), [hidden, weight, bias])
    out = token_scores_from_hidden(
        hidden, weight, bias, labels, temperature=0.7, entropy_temperatures=(1.0, 0.7), sum_pi_squared=True, chunk=chunk
    )
    lp2, (ent2, hot2) = out.log_probs, out.entropies
    got = torch.autograd.grad((lp2 * w_lp).sum() + (ent2 * w_ent).sum() + (hot2 * w_hot).sum(), [hidden, weight, bias])
    assert _rel(lp2, lp) <= tol and _rel(ent2, ent) <= tol and _rel(hot2, hot) <= tol
    assert _rel(out.sum_pi_squared, sum_pi_squared_from_logits(logits, 0.7)) <= tol
    assert not out.sum_pi_squared.requires_grad
    for a, b in zip(got, ref, strict=True):
        assert _rel(a, b) <= tol, _rel(a, b)


def test_an_entropy_left_out_of_the_loss_gives_the_log_probs_own_gradient():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(9, 8, generator=g, requires_grad=True)
    weight = torch.randn(20, 8, generator=g, requires_grad=True)
    labels = torch.randint(0, 20, (9,), generator=g)
    alone = token_scores_from_hidden(hidden, weight, None, labels, temperature=0.5, chunk=4).log_probs
    ref = torch.autograd.grad(alone.sum(), [hidden, weight])
    both = token_scores_from_hidden(
        hidden, weight, None, labels, temperature=0.5, entropy_temperatures=(0.5,), sum_pi_squared=True, chunk=4
    )
    got = torch.autograd.grad(both.log_probs.sum(), [hidden, weight])
    for a, b in zip(got, ref, strict=True):
        assert torch.equal(a, b)


def test_sum_pi_squared_is_veRLs_formula_and_bounded_by_one_over_the_vocabulary_and_one():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [10.0, -10.0, -10.0, -10.0], [1.0, 2.0, 3.0, 4.0]])
    sq = sum_pi_squared_from_logits(logits)
    p = torch.softmax(logits, dim=-1)
    torch.testing.assert_close(sq, (p * p).sum(-1))
    assert sq[0].item() == pytest.approx(0.25) and sq[1].item() == pytest.approx(1.0, abs=1e-6)
    hot = sum_pi_squared_from_logits(logits, 2.0)
    torch.testing.assert_close(hot, (torch.softmax(logits / 2, -1) ** 2).sum(-1))


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
def test_every_training_forward_gives_the_whole_logits_numbers_in_fp32(path, packing):
    lm = load_causal_lm(path).float().train()
    ids, mask = _batch()
    weights = torch.randn(ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(3))
    action = (mask[:, 1:] * mask[:, :-1]).float()

    out = causal_lm_scores(lm, ids, mask, temperature=0.8, entropy_temperatures=(1.0,), packing=packing)
    lp, ent = out.log_probs, out.entropies[0]
    ((lp * weights * action).sum() + (ent * action).sum()).backward()
    got = {n: p.grad.clone() for n, p in lm.named_parameters()}
    lm.zero_grad(set_to_none=True)
    ref_lp, ref_ent = _whole_logits(lm, ids, mask, 0.8, packing)
    ((ref_lp * weights * action).sum() + (ref_ent * action).sum()).backward()

    assert float(((lp - ref_lp).abs() * action).max()) <= 1e-6
    assert float(((ent - ref_ent).abs() * action).max()) <= 1e-6
    for n, p in lm.named_parameters():
        assert _rel(got[n], p.grad) <= 1e-6, (n, _rel(got[n], p.grad))


def test_the_backward_keeps_no_tensor_of_tokens_by_vocabulary(path):
    lm = load_causal_lm(path).float().train()
    ids, mask = _batch()
    vocab = lm.config.vocab_size
    tokens = int(mask.sum())
    sizes: list[tuple[int, ...]] = []

    def keep(t):
        sizes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        lp = causal_lm_scores(lm, ids, mask, entropy_temperatures=(1.0,), packing=True).log_probs
    whole = [s for s in sizes if s and s[-1] == vocab and torch.Size(s).numel() >= tokens * vocab]
    assert not whole, f"saved for the backward: {whole} (the logits of {tokens} tokens)"
    lp.sum().backward()  # and it still has a backward
    assert lm.lm_head.weight.grad is not None and lm.lm_head.weight.grad.abs().sum() > 0


def test_a_model_that_changes_its_logits_after_the_head_gets_its_own_numbers(path, caplog):
    base = load_causal_lm(path).float().eval()

    class Scaled(type(base)):  # as Gemma's soft-capping or Cohere's logit scale: logits changed after lm_head
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 2.0
            return out

    lm = Scaled(base.config)
    lm.load_state_dict(base.state_dict())
    lm.eval()
    ids, mask = _batch()
    head_scores._WHOLE_LOGITS.discard(Scaled)
    with torch.no_grad():
        first = causal_lm_log_probs(lm, ids, mask, packing=True)
        assert Scaled in head_scores._WHOLE_LOGITS and "changes its logits" in caplog.text
        again = causal_lm_log_probs(lm, ids, mask, packing=True)  # straight to the whole logits now
        packed = pack(ids, mask)
        logits = lm(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits[:, :-1]
        ref = packed.unpack_shifted(
            torch.log_softmax(logits.float(), dim=-1).gather(-1, packed.input_ids[:, 1:, None])[..., 0]
        )
    action = (mask[:, 1:] * mask[:, :-1]).bool()
    assert torch.equal(first, again)
    assert float((first - ref).abs()[action].max()) <= 1e-6
    assert head_scores.output_head(base) is not None  # the plain model keeps the chunked head


def test_an_entropy_only_logged_has_no_gradient_through_the_models_head(path):
    """The actor logs the sampled distribution's entropy in every run: through the swapped head (its outputs stacked
    into one tensor) it comes back without a graph, and the log-probs' gradient is what it is without it."""
    lm = load_causal_lm(path).float().train()
    ids, mask = _batch()
    action = (mask[:, 1:] * mask[:, :-1]).float()
    out = causal_lm_scores(lm, ids, mask, temperature=0.8, entropy_temperatures=(0.8,), entropy_grads=(False,))
    assert out.log_probs.requires_grad and not out.entropies[0].requires_grad
    (out.log_probs * action).sum().backward()
    logged = {n: p.grad.clone() for n, p in lm.named_parameters()}
    lm.zero_grad(set_to_none=True)
    (causal_lm_log_probs(lm, ids, mask, temperature=0.8) * action).sum().backward()
    for n, p in lm.named_parameters():
        assert torch.equal(logged[n], p.grad), n
