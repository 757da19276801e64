"""The hf engine with rollout.weight_sync_lora=adapter holds the base plus a peft adapter: an adapter-only sync (the
LoRA A/B tensors alone, in the weight-sync wire format, each checksummed) changes its log-probs to the trainer's,
which a silently dropped adapter would not (peers' LoRA syncs that deliver nothing: veRL #7495)."""

from __future__ import annotations

import torch

from rlhf.backends.rollout.hf.engine import HFEngine
from rlhf.backends.shared.weights import hf_weights
from rlhf.backends.weight_sync.lora import lora_settings, write_adapter_folder
from rlhf.backends.weight_sync.wire import pack_weights
from rlhf.models.loading import resolve_model_path
from rlhf.models.lora import apply_lora
from rlhf.spec.build import load_spec

SEQS = [([1, 74, 71, 78, 78, 81], [5, 6, 9, 12, 40]), ([1, 40, 41], [42, 43, 44, 45])]


def _trainer_logprobs(model, seqs) -> list[float]:
    out = []
    with torch.no_grad():
        for prompt, output in seqs:
            ids = torch.tensor([prompt + output])
            lp = torch.log_softmax(model(input_ids=ids).logits.float()[0, len(prompt) - 1 : -1], -1)
            out += lp.gather(-1, ids[0, len(prompt) :].unsqueeze(-1)).squeeze(-1).tolist()
    return out


def _flat(scored: list[list[float]]) -> list[float]:
    return [x for seq in scored for x in seq]


def _trained_adapter():
    """(spec, base path, a peft model whose adapters moved off peft's zero init)."""
    from transformers import AutoModelForCausalLM

    spec = load_spec(["+recipe=grpo_tiny_cpu", "model.lora.rank=8", "rollout.weight_sync_lora=adapter"])
    path = resolve_model_path(spec.model)
    trainer = apply_lora(AutoModelForCausalLM.from_pretrained(path), spec.model.lora).eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for name, p in trainer.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return spec, path, trainer


def test_an_adapter_only_sync_moves_the_engine_to_the_trainers_log_probs():
    spec, path, trainer = _trained_adapter()
    engine = HFEngine.from_path(path, lora=lora_settings(spec))
    base = _flat(engine.score(SEQS))

    adapters = list(hf_weights(trainer, False, adapter=True))
    assert adapters and all(".lora_A." in n or ".lora_B." in n for n, _ in adapters)
    packed, sent = pack_weights(adapters, version=1)
    (got,) = engine.load_packed(packed)
    assert got["digest"] == sent.digest and got["tensors"] == len(adapters)

    trained = _trainer_logprobs(trainer, SEQS)
    after = _flat(engine.score(SEQS))
    moved = sum(abs(a - b) for a, b in zip(after, base, strict=True)) / len(base)
    assert moved > 0.05  # the probe's default tolerance: the adapter changed what the engine computes ...
    torch.testing.assert_close(torch.tensor(after), torch.tensor(trained), atol=1e-5, rtol=0)  # ... to the trainer's

    merged_bytes = sum(t.numel() * t.element_size() for _, t in hf_weights(trainer, False))
    assert sent.bytes * 5 < merged_bytes  # rank 8 on the tiny model: about a tenth of the merged weights

    engine.load_from_path(path)  # a fresh engine's state: the base, peft's initial (zero) adapter
    torch.testing.assert_close(torch.tensor(_flat(engine.score(SEQS))), torch.tensor(base), atol=1e-6, rtol=0)


def test_the_adapter_folder_vllm_reads_is_one_peft_loads_back_to_the_same_model(tmp_path):
    """What the vLLM worker writes from a received adapter sync (rlhf.backends.weight_sync.lora.write_adapter_folder)
    is a
    peft adapter folder: loaded onto the base with peft's own loader it computes the trainer's log-probs."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    spec, path, trainer = _trained_adapter()
    written = write_adapter_folder(hf_weights(trainer, False, adapter=True), tmp_path / "a", spec.model.lora.alpha)
    assert written == 139_264  # 28 fp32 tensors of rank 8
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(path), tmp_path / "a").eval()
    torch.testing.assert_close(
        torch.tensor(_trainer_logprobs(loaded, SEQS)), torch.tensor(_trainer_logprobs(trainer, SEQS)), atol=1e-6, rtol=0
    )
