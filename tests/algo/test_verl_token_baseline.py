"""The actor's entropy and sum pi^2 at the sampling temperature against veRL's, and the optimal token baseline
(rlhf.algo.token_baseline) against veRL 0.9.1's own
``compute_optimal_token_baseline_advantage`` and ``compute_multi_turn_optimal_token_baseline_advantage``, under the
keys ``rlhf-recipes import-verl`` writes: responses of different lengths with masked tokens inside (a multi-turn
episode's tool outputs), a group whose longest response stands alone (veRL's zero tail), a response rejection
sampling masked out whole, with and without the rollout IS weights; ours in our layout (prompt columns before each
response, a different prompt length per group), theirs in veRL's (responses from column 0)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl_reference import HOW_TO_GET, load, wheel_path

from rlhf.algo import compute_advantages_and_returns
from rlhf.algo.logprobs import token_scores_from_hidden
from rlhf.algo.token_baseline import TokenBaselineInputs
from rlhf.importers.verl.mapping import map_command
from rlhf.importers.verl.overrides import split_command
from rlhf.spec import names

N, PROMPTS, WIDTH = 4, 4, 9


@pytest.fixture(scope="module")
def ref() -> SimpleNamespace:
    wheel = wheel_path()
    if wheel is None:
        pytest.skip(HOW_TO_GET)
    return load(wheel)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_the_tempered_entropy_and_sum_pi_squared_are_veRLs_on_the_logits_over_the_temperature(ref, temperature):
    """veRL's actor divides the logits by the rollout temperature, then takes verl_F.entropy_from_logits and
    calculate_sum_pi_squared_from_logits: ours, chunk by chunk from the hidden states, give the same numbers."""
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(23, 16, generator=g), torch.randn(40, 16, generator=g)
    labels = torch.randint(0, 40, (23,), generator=g)
    ours = token_scores_from_hidden(
        hidden, weight, None, labels, temperature=temperature, entropy_temperatures=(temperature,), sum_pi_squared=True
    )
    tempered = (hidden @ weight.T) / temperature
    torch.testing.assert_close(ours.entropies[0], ref.verl_F.entropy_from_logits(tempered), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        ours.sum_pi_squared, ref.verl_F.calculate_sum_pi_squared_from_logits(tempered), rtol=1e-5, atol=1e-6
    )


def _episodes(seed: int) -> tuple[torch.Tensor, ...]:
    """veRL-layout ``[B, WIDTH]`` masks (holes inside, the last token kept), scores, old log-probs, sum pi^2 and IS
    weights. Group 0's longest response is alone; group 1 has a response masked out whole (rejected)."""
    g = torch.Generator().manual_seed(seed)
    b = N * PROMPTS
    lengths = torch.randint(2, WIDTH, (b,), generator=g)
    lengths[0], lengths[1:N] = WIDTH, torch.randint(2, WIDTH - 2, (N - 1,), generator=g)
    cols = torch.arange(WIDTH).unsqueeze(0)
    mask = (cols < lengths.unsqueeze(1)).double()
    holes = (torch.rand(b, WIDTH, generator=g, dtype=torch.float64) < 0.25) & (cols > 0)
    holes &= cols < (lengths - 1).unsqueeze(1)  # the last token (where the score sits) is the model's
    mask = mask * (~holes)
    mask[N + 1] = 0.0
    scores = torch.rand(b, generator=g, dtype=torch.float64) * 2 - 0.5
    old = -torch.rand(b, WIDTH, generator=g, dtype=torch.float64) * 3
    sum_sq = old.exp().square() + torch.rand(b, WIDTH, generator=g, dtype=torch.float64) * 0.3
    is_w = 0.5 + torch.rand(b, WIDTH, generator=g, dtype=torch.float64)
    return mask, lengths, scores, old, sum_sq, is_w


def _ours_layout(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """veRL's response columns moved right by each row's prompt: our action-aligned layout."""
    out = torch.zeros(x.shape[0], WIDTH + int(offsets.max()), dtype=x.dtype)
    for i, o in enumerate(offsets.tolist()):
        out[i, o : o + WIDTH] = x[i]
    return out


def _back(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return torch.stack([x[i, o : o + WIDTH] for i, o in enumerate(offsets.tolist())])


@pytest.mark.parametrize("estimator", names.TOKEN_BASELINE_ESTIMATORS)
@pytest.mark.parametrize("with_is", [False, True], ids=["no_is", "is_weights"])
@pytest.mark.parametrize("seed", range(3))
def test_optimal_token_baseline_advantages_match_verl(ref, estimator, with_is, seed):
    words = ["python3", "-m", "verl.trainer.main_ppo", f"algorithm.adv_estimator={estimator}"]
    values = map_command(split_command(words)).values
    assert values["algorithm.advantage.estimator"] == estimator
    mask, lengths, scores, old, sum_sq, is_w = _episodes(seed)
    last = (lengths - 1).clamp(min=0)
    token_rewards = torch.zeros_like(mask).scatter_(1, last.unsqueeze(1), scores.unsqueeze(1)) * mask
    verl_fn = {
        "optimal_token_baseline": ref.compute_optimal_token_baseline_advantage,
        "tir_optimal_token_baseline": ref.compute_multi_turn_optimal_token_baseline_advantage,
    }[estimator]
    index = np.repeat(np.arange(PROMPTS), N)
    theirs, _ = verl_fn(token_rewards, mask, index, old, sum_sq, is_w if with_is else None)

    offsets = torch.arange(PROMPTS).repeat_interleave(N) % 3 + 1  # the prompts' last columns differ per group
    placed = {k: _ours_layout(v, offsets) for k, v in {"mask": mask, "old": old, "sq": sum_sq, "is": is_w}.items()}
    inputs = TokenBaselineInputs(placed["old"], placed["sq"], offsets, placed["is"] if with_is else None)
    rewards = torch.where(mask.sum(-1) > 0, scores, torch.zeros_like(scores))  # a rejected response scores nothing
    ours = compute_advantages_and_returns(
        rewards,
        placed["mask"],
        estimator=estimator,
        n_samples_per_prompt=N,
        reward_clip_range=values.get("reward.clip_range"),
        token_baseline=inputs,
    ).advantages
    torch.testing.assert_close(_back(ours, offsets), theirs.to(ours.dtype), rtol=1e-5, atol=1e-6)  # fp32 rewards
    assert float(theirs.abs().max()) > 0.1


def test_the_zero_tail_leaves_the_longest_response_its_return_past_the_second_longest(ref):
    """Group 0's first response is the only one of full length: past the second longest, its advantage is its
    return (no baseline), as veRL's handle_zero_tail; the others' positions there are outside their masks."""
    mask, lengths, scores, old, sum_sq, _ = _episodes(0)
    mask[:N] = (torch.arange(WIDTH).unsqueeze(0) < lengths[:N].unsqueeze(1)).double()  # no holes: plain positions
    offsets = torch.zeros(N * PROMPTS, dtype=torch.long)
    inputs = TokenBaselineInputs(old, sum_sq, offsets)
    out = compute_advantages_and_returns(
        scores,
        mask,
        estimator="optimal_token_baseline",
        n_samples_per_prompt=N,
        reward_clip_range=None,
        token_baseline=inputs,
    )
    second = int(lengths[1:N].max())
    assert int(lengths[0]) == WIDTH > second
    torch.testing.assert_close(out.advantages[0, second:], out.returns[0, second:])
    assert not torch.allclose(out.advantages[0, :second], out.returns[0, :second])


def test_without_sum_pi_squared_the_estimator_says_what_it_needs():
    mask = torch.ones(4, 3)
    with pytest.raises(ValueError, match="sum pi\\^2"):
        compute_advantages_and_returns(
            torch.ones(4), mask, estimator="optimal_token_baseline", n_samples_per_prompt=2
        )
