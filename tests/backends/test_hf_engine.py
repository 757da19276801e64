"""The hf rollout engine on a tiny random Llama: shapes, contiguity, exact log-probs
(rlhf.backends.contract.logprob_meaning,
also under top-k/top-p and min_new_tokens), stopping, determinism, weight loading."""

from __future__ import annotations

import pytest
import torch
from logprob_checks import (
    FILTERS,
    check_filtered_sampling_reports_full_logprobs,
    check_min_new_tokens_stays_out_of_logprobs,
)
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.backends.contract.rollout import SamplingSpec
from rlhf.backends.rollout.hf.engine import HFEngine
from rlhf.models.tokenizer import byte_level_tokenizer


def tiny_llama(tokenizer, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=256,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # A model this small gains nothing from intra-op threads, and on a shared, busy machine two spinning OpenMP
    # threads make each generate call up to 50x slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tokenizer():
    return byte_level_tokenizer()


@pytest.fixture(scope="module")
def engine(tokenizer, tmp_path_factory) -> HFEngine:
    path = tmp_path_factory.mktemp("tiny")
    tiny_llama(tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return HFEngine.from_path(str(path))


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    texts = ["Repeat the digit: 7", "2+3=", "What comes after 4? Think step by step"]
    return [tokenizer.encode(t, add_special_tokens=False) for t in texts]


def forward_logprobs(model, prompt: list[int], output: list[int], temperature: float) -> torch.Tensor:
    """log softmax(logits / T) at the sampled tokens from one full forward pass over prompt + output."""
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(output)[:, None]).squeeze(-1)


def greedy(engine, prompts, **kw):
    return engine.generate(prompts, SamplingSpec(temperature=0.0, **kw))


def test_returns_n_contiguous_samples_per_prompt(engine, prompts):
    out = engine.generate(prompts, SamplingSpec(max_new_tokens=6, n=3, seed=0))
    assert len(out) == 9
    for i, r in enumerate(out):
        assert r.prompt_ids == prompts[i // 3]
        assert 1 <= len(r.output_ids) <= 6 and r.action_mask == [1] * len(r.output_ids)
        assert len(r.logprobs) == len(r.output_ids)
        assert r.finish_reason in ("stop", "length")


def test_logprobs_equal_a_full_forward_pass_at_the_sampling_temperature(engine, prompts):
    # Prompts of different lengths share a left-padded batch: this also checks padding and positions.
    out = engine.generate(prompts, SamplingSpec(max_new_tokens=8, n=2, temperature=0.7, top_k=20, seed=1))
    for r in out:
        got = torch.tensor(r.logprobs)
        assert torch.isfinite(got).all() and (got <= 0).all()
        want = forward_logprobs(engine.model, r.prompt_ids, r.output_ids, 0.7)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_greedy_is_deterministic_and_follows_the_argmax(engine, prompts):
    a = greedy(engine, prompts, max_new_tokens=8, n=2)
    b = greedy(engine, prompts, max_new_tokens=8, n=2)
    assert [r.output_ids for r in a] == [r.output_ids for r in b]
    assert a[0].output_ids == a[1].output_ids
    r = a[2]
    with torch.no_grad():
        logits = engine.model(torch.tensor([r.prompt_ids + r.output_ids])).logits[0, len(r.prompt_ids) - 1 : -1]
    assert logits.argmax(-1).tolist() == r.output_ids
    torch.testing.assert_close(torch.tensor(r.logprobs), forward_logprobs(engine.model, r.prompt_ids, r.output_ids, 1))


def test_top_k_one_sampling_is_greedy(engine, prompts):
    sampled = engine.generate(prompts, SamplingSpec(max_new_tokens=6, top_k=1, seed=3))
    assert [r.output_ids for r in sampled] == [r.output_ids for r in greedy(engine, prompts, max_new_tokens=6)]


def test_top_k_and_top_p_pick_the_tokens_but_the_logprobs_are_the_full_tempered_distribution(
    engine, tokenizer, prompts
):
    figures = check_filtered_sampling_reports_full_logprobs(engine, engine.model, prompts, tokenizer.pad_token_id, 1e-4)
    print("hf top_p=0.8 top_k=20 T=0.7:", figures)


def test_top_k_one_reports_the_argmax_tempered_logprob_not_zero(engine, prompts):
    # The nucleus of one token would give log-prob 0 everywhere; the tempered full distribution does not.
    spec = SamplingSpec(max_new_tokens=6, top_k=1, top_p=FILTERS["top_p"], temperature=FILTERS["temperature"], seed=3)
    sampled = engine.generate(prompts, spec)
    assert [r.output_ids for r in sampled] == [r.output_ids for r in greedy(engine, prompts, max_new_tokens=6)]
    for r in sampled:
        want = forward_logprobs(engine.model, r.prompt_ids, r.output_ids, FILTERS["temperature"])
        torch.testing.assert_close(torch.tensor(r.logprobs), want, atol=1e-4, rtol=0)
        assert max(r.logprobs) < -0.01


def test_min_new_tokens_mask_stays_out_of_sampled_logprobs(engine, tokenizer, prompts):
    figures = check_min_new_tokens_stays_out_of_logprobs(
        engine, engine.model, prompts[0], tokenizer.eos_token_id, tokenizer.pad_token_id, 1e-4
    )
    print("hf min_new_tokens=4:", figures)


def test_seed_reproduces_samples_without_touching_the_global_rng(engine, prompts):
    spec = SamplingSpec(max_new_tokens=8, n=4, seed=7)
    torch.manual_seed(123)
    a = engine.generate(prompts, spec)
    after = torch.rand(1)
    torch.manual_seed(123)
    b = engine.generate(prompts, spec)
    assert [r.output_ids for r in a] == [r.output_ids for r in b]
    assert torch.equal(after, torch.rand(1))  # the caller's random stream is as if generate never ran
    other = engine.generate(prompts, SamplingSpec(max_new_tokens=8, n=4, seed=8))
    assert [r.output_ids for r in a] != [r.output_ids for r in other]


def test_max_new_tokens_ends_with_length(engine, prompts):
    out = engine.generate(prompts, SamplingSpec(max_new_tokens=5, min_new_tokens=5, seed=0))
    assert all(len(r.output_ids) == 5 and r.finish_reason == "length" for r in out)


def test_stop_token_ids_cut_after_the_token_and_say_stop(engine, prompts):
    full = greedy(engine, prompts[:1], max_new_tokens=12, min_new_tokens=12)[0].output_ids
    k = 3
    stop_id = full[k]
    first = full.index(stop_id)
    out = greedy(engine, prompts[:1], max_new_tokens=12, stop_token_ids=(stop_id,))[0]
    assert out.output_ids == full[: first + 1] and out.finish_reason == "stop"


def test_min_new_tokens_holds_back_stop_tokens_but_not_their_logprobs(engine, prompts):
    full = greedy(engine, prompts[:1], max_new_tokens=8, min_new_tokens=8)[0].output_ids
    stop_id = full[0]
    held = greedy(engine, prompts[:1], max_new_tokens=8, stop_token_ids=(stop_id,), min_new_tokens=3)[0]
    assert len(held.output_ids) >= 3 and stop_id not in held.output_ids[:3]
    want = forward_logprobs(engine.model, held.prompt_ids, held.output_ids, 1.0)
    torch.testing.assert_close(torch.tensor(held.logprobs), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("pad_is_eos", [False, True])
def test_stop_strings_cut_after_the_string_and_keep_it(engine, tokenizer, prompts, pad_is_eos):
    # With pad == eos (OpenRLHF's fallback) the rows that stopped early are filled with eos after the string.
    pad = tokenizer.eos_token_id if pad_is_eos else tokenizer.pad_token_id
    eng = HFEngine(engine.model, pad, tokenizer.eos_token_id, tokenizer)
    full = greedy(eng, prompts[:1], max_new_tokens=16, min_new_tokens=16)[0].output_ids
    pieces = [tokenizer.decode([t]) for t in full]
    # The first generated token that is a printable character seen for the first time there.
    k = next(i for i, p in enumerate(pieces) if len(p) == 1 and p.isprintable() and p not in "".join(pieces[:i]))
    out = greedy(eng, prompts, max_new_tokens=16, stop=(pieces[k],))[0]
    assert out.output_ids == full[: k + 1] and out.finish_reason == "stop"
    assert tokenizer.decode(out.output_ids).endswith(pieces[k])


def test_stop_strings_need_the_tokenizer(tokenizer, prompts):
    bare = HFEngine(tiny_llama(tokenizer, seed=0), tokenizer.pad_token_id, tokenizer.eos_token_id)
    with pytest.raises(ValueError, match="tokenizer"):
        bare.generate(prompts, SamplingSpec(stop=("x",)))


def test_load_weights_replaces_the_model_in_place(tokenizer, prompts):
    eng = HFEngine(tiny_llama(tokenizer, seed=0), tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer)
    other = tiny_llama(tokenizer, seed=1)
    target = HFEngine(other, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer)
    before = [r.output_ids for r in greedy(eng, prompts, max_new_tokens=8)]
    expected = [r.output_ids for r in greedy(target, prompts, max_new_tokens=8)]
    assert before != expected
    eng.load_weights((name, t.clone()) for name, t in other.state_dict().items())
    assert [r.output_ids for r in greedy(eng, prompts, max_new_tokens=8)] == expected


def test_load_weights_refuses_unknown_names_and_wrong_shapes_without_copying(tokenizer):
    eng = HFEngine(tiny_llama(tokenizer, seed=0), tokenizer.pad_token_id, tokenizer.eos_token_id)
    name = "model.norm.weight"
    kept = eng.model.state_dict()[name].clone()
    with pytest.raises(KeyError, match="model.not_a_layer.weight"):
        eng.load_weights([(name, torch.zeros_like(kept)), ("model.not_a_layer.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match=name):
        eng.load_weights([(name, torch.zeros(3))])
    assert torch.equal(eng.model.state_dict()[name], kept)
    eng.load_weights([(name, torch.zeros_like(kept))])  # a partial update is fine
    assert torch.equal(eng.model.state_dict()[name], torch.zeros_like(kept))


def test_sleep_and_wake_are_harmless_on_cpu(engine, prompts):
    engine.sleep()
    engine.wake()
    assert len(engine.generate(prompts, SamplingSpec(max_new_tokens=2))) == len(prompts)


def test_bad_requests_are_refused(engine):
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[]], SamplingSpec())
    with pytest.raises(ValueError, match="n >= 1"):
        engine.generate([[1]], SamplingSpec(n=0))
