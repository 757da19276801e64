"""rollout.weight_sync_lora: adapter-only syncs need LoRA on and an engine whose registry line declares adapter
loading (rlhf.spec.registry.Backend.lora_adapter); anything else is refused at validation, naming the key and the
fix, before anything starts."""

from __future__ import annotations

from rlhf.spec import validate
from rlhf.spec.build import load_spec
from rlhf.spec.registry import ROLLOUT_BACKENDS

LORA_HF = ["+recipe=grpo_tiny_cpu", "model.lora.rank=8"]


def _errors(overrides: list[str]):
    return [e for e in validate(load_spec(overrides)) if e.key == "rollout.weight_sync_lora"]


def test_merged_is_the_default_and_adapter_is_accepted_for_the_hf_engine():
    assert load_spec(LORA_HF).rollout.weight_sync_lora == "merged"
    assert _errors(LORA_HF + ["rollout.weight_sync_lora=adapter"]) == []


def test_adapter_without_lora_is_refused_naming_the_rank():
    (err,) = _errors(["+recipe=grpo_tiny_cpu", "rollout.weight_sync_lora=adapter"])
    assert "model.lora.rank > 0" in str(err) and "rollout.weight_sync_lora=merged" in str(err)


def test_adapter_with_vllm_is_accepted_up_to_vllms_largest_lora_rank():
    # grpo_llama3_8b runs vLLM on GPUs: validation needs no vLLM here
    gpu = ["+recipe=grpo_llama3_8b", "rollout.weight_sync_lora=adapter"]
    assert [e.key for e in validate(load_spec(gpu + ["model.lora.rank=64"]))] == []
    (err,) = [e for e in validate(load_spec(gpu + ["model.lora.rank=1024"])) if e.key == "model.lora.rank"]
    assert "rank 512 at most" in str(err) and "rollout.weight_sync_lora=merged" in str(err)


def test_adapter_with_an_engine_that_cannot_load_adapters_is_refused_naming_the_fix(monkeypatch):
    from rlhf.spec import registry

    monkeypatch.setitem(
        registry.ROLLOUT_BACKENDS, "vllm", registry.Backend("rlhf.backends.rollout.vllm.descriptor:BACKEND")
    )
    (err,) = _errors(["+recipe=grpo_llama3_8b", "model.lora.rank=8", "rollout.weight_sync_lora=adapter"])
    text = str(err)
    assert "vllm engine does not load LoRA adapters" in text
    assert "rollout.weight_sync_lora=merged" in text and "rollout=hf" in text


def test_an_unknown_value_is_refused_by_the_keys_domain():
    (err,) = _errors(LORA_HF + ["rollout.weight_sync_lora=delta"])
    assert "merged" in str(err) and "adapter" in str(err)


def test_every_backend_declares_whether_it_loads_adapters():
    assert {n: b.lora_adapter for n, b in ROLLOUT_BACKENDS.items()} == {"hf": True, "vllm": True}
