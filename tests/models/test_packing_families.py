"""Packing per model family (issue 45's trap): the training forwards' log-probs of packed rows are each sample's own,
for every causal LM family the model options name or people bring in 2026: dense attention (Llama, Qwen2, Qwen3),
mixture of experts (Qwen3-MoE) and hybrid linear attention (Qwen3-Next, Qwen3.5: Gated DeltaNet beside full
attention). The linear-attention layers carry a recurrent state and a causal convolution along the row, which
transformers' torch path does not restart at a packed sample's boundary, so those families must run padded
(rlhf.models.packing.attention_kind: None): one sample's state would otherwise leak into the next, silently."""

from __future__ import annotations

import pytest
import torch
import transformers

from rlhf.models.forward import causal_lm_log_probs
from rlhf.models.packing import attention_kind

DENSE = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
HEADS = dict(num_key_value_heads=2, head_dim=16)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
LINEAR = dict(
    num_hidden_layers=4,  # three Gated DeltaNet layers, then full attention
    linear_num_value_heads=4,
    linear_num_key_heads=2,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
)
FAMILIES = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", {**DENSE, "num_key_value_heads": 2}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", {**DENSE, "num_key_value_heads": 2}),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", {**DENSE, **HEADS}),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", {**DENSE, **HEADS, **MOE}),
    "qwen3_next": (
        "Qwen3NextForCausalLM",
        "Qwen3NextConfig",
        {**DENSE, **HEADS, **MOE, **LINEAR, "shared_expert_intermediate_size": 32},
    ),
    "qwen3_5": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig", {**DENSE, **HEADS, **LINEAR}),
}
LINEAR_ATTENTION = {"qwen3_next", "qwen3_5"}
LENGTHS = [9, 4, 7, 2]


def _model(family: str) -> torch.nn.Module:
    model_cls, config_cls, kwargs = FAMILIES[family]
    if not hasattr(transformers, model_cls):
        pytest.skip(f"transformers {transformers.__version__} has no {model_cls}")
    torch.manual_seed(0)
    return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kwargs)).float().eval()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_packed_log_probs_are_each_samples_own_in_every_family(family):
    model = _model(family)
    g = torch.Generator().manual_seed(1)
    samples = [torch.randint(0, 128, (n,), generator=g) for n in LENGTHS]
    ids = torch.zeros(len(samples), max(LENGTHS), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(samples):
        ids[i, : len(s)], mask[i, : len(s)] = s, 1
    with torch.no_grad():
        packed = causal_lm_log_probs(model, ids, mask, packing=True)
        for i, s in enumerate(samples):
            alone = causal_lm_log_probs(model, s[None], torch.ones(1, len(s), dtype=torch.long))[0]
            torch.testing.assert_close(packed[i, : len(s) - 1], alone, atol=1e-5, rtol=0)
    # the hybrid families run padded: their recurrent layers would carry a sample's state into the next
    assert (attention_kind(model) is None) == (family in LINEAR_ATTENTION), attention_kind(model)


def test_forced_packing_of_a_hybrid_family_leaks_one_samples_state_into_the_next(monkeypatch):
    """Why they run padded: forced into packed rows (as if their attention were on the packable list), Qwen3.5's
    Gated DeltaNet layers carry the first sample's state into the second, and its log-probs change."""
    from rlhf.models import packing

    model = _model("qwen3_5")
    monkeypatch.setattr(packing, "attention_kind", lambda m: "sdpa")
    g = torch.Generator().manual_seed(2)
    lengths = [8, 5, 3]  # first-fit: the 3 shares the 5's row, after it
    ids = torch.zeros(3, 8, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n], mask[i, :n] = torch.randint(0, 128, (n,), generator=g), 1
    assert packing.pack(ids, mask, varlen=False).input_ids.shape[0] == 2  # really packed: two rows of three samples
    with torch.no_grad():
        packed = causal_lm_log_probs(model, ids, mask, packing=True)
        alone = causal_lm_log_probs(model, ids[2:, :3], mask[2:, :3])[0]
    assert float((packed[2, :2] - alone).abs().max()) > 1e-3
