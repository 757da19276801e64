"""One rank of the sequence-parallel exactness run (tests/models/test_sequence_parallel.py starts two of these on CPU
with gloo; scripts/gpu_sp_check.py on GPUs with nccl), RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set.

Each case is a tiny random Llama and a padded batch of uneven samples. The reference is the one-process packed
forward and backward (rlhf.models.forward.causal_lm_log_probs with packing) of a token-mean loss weighted by random
advantages; the sequence-parallel run packs the same batch, gives this rank its columns (shard_packed), runs the
forward and backward inside ``sequence_parallel`` with this rank's loss share, sums the gradients over the group
and gathers the log-probs back to the padded layout. ``OUT/rank<r>.json`` gets, per case, the largest differences
from the reference (log-probs, gradients, critic values) and whether the model's attention was restored.

    python sp_ranks.py OUT [DEVICE [DTYPE [ATTN]]]      (defaults: cpu float64 sdpa)

ATTN is the model's own attention (sdpa -> ulysses_sdpa, flash_attention_2 -> ulysses_flash_attention_2);
SP_BACKEND in the environment overrides the process group's backend (gloo on CPU, nccl on GPUs).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from rlhf.algo import log_probs_from_logits
from rlhf.models.forward import causal_lm_log_probs, value_model_token_values
from rlhf.models.loading import load_causal_lm, resolve_model_path
from rlhf.models.packing import pack
from rlhf.models.sequence_parallel import (
    dp_token_count,
    loss_share,
    pack_actions,
    sequence_parallel,
    shard_packed,
    sp_groups,
)
from rlhf.models.value_head import load_value_model
from rlhf.spec.schema import ModelSpec

# name: (kv heads of 4 query heads, sample lengths, one varlen row or sdpa rows, gradient checkpointing,
#        extras: the leaky control and a critic's values)
CASES = {
    "gqa_kv2_one_row": (2, [7, 30, 3, 12, 1, 19], True, False, True),
    "mqa_kv1_one_row_odd_width": (1, [7, 30, 3, 12, 1, 18], True, False, False),  # 71 columns: one pad column
    "gqa_kv2_rows_odd_width": (2, [7, 29, 3, 12, 1, 19], False, False, False),  # 3 rows of 29: pad, several rows
    "mqa_kv1_checkpointing": (1, [40, 5, 17, 2], True, True, False),
}


def model_spec(kv: int) -> ModelSpec:
    return ModelSpec(
        make_local=True,
        name="sp-tiny",
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=kv,
        head_dim=16,
        intermediate_size=128,
    )


def padded_batch(lengths: list[int], seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), 7, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(0, 256, (n,), generator=g)
        mask[i, :n] = 1
    return ids.to(device), mask.to(device)


def run_case(name: str, path: str, groups, device, dtype, attn: str) -> dict[str, float | bool]:
    kv, lengths, varlen, checkpointing, extras = CASES[name]
    precision = "bf16" if dtype == torch.bfloat16 else "fp32"  # flash-attention loads in a 16-bit dtype only
    lm = load_causal_lm(path, attn=attn, precision=precision).to(device=device, dtype=dtype).train()
    if checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids, mask = padded_batch(lengths, seed=len(name), device=device)
    g = torch.Generator().manual_seed(1)
    advantages = torch.randn(ids.shape[0], ids.shape[1] - 1, generator=g, dtype=torch.float64).to(device, dtype)
    action_mask = (mask[:, 1:] * mask[:, :-1]).to(dtype)

    # The reference: one process, the whole batch packed.
    ref = causal_lm_log_probs(lm, ids, mask, packing=True)
    (-(ref * advantages * action_mask).sum() / action_mask.sum()).backward()
    ref_grads = [p.grad.detach().clone() for p in lm.parameters()]
    lm.zero_grad(set_to_none=True)

    # Sequence parallel: this rank's columns, its loss share, gradients summed over the group.
    packed = pack(ids, mask, varlen=varlen)
    shard = shard_packed(packed, size=groups.sp, rank=groups.sp_rank)
    local_adv = shard.take(pack_actions(packed, advantages))
    tokens = dp_token_count(shard.tokens, groups.dp_group, device)
    with sequence_parallel(lm, shard, groups.sp_group):
        logits = lm(input_ids=shard.input_ids, position_ids=shard.local_position_ids, use_cache=False).logits
        lp = log_probs_from_logits(logits, shard.targets)
        loss_share(-(lp * local_adv * shard.valid).sum(), tokens).backward()
    restored = lm.config._attn_implementation == attn
    for p in lm.parameters():
        dist.all_reduce(p.grad, group=groups.sp_group)
    got = packed.unpack_shifted(shard.gather_actions(lp.detach(), groups.sp_group))
    out = {
        "logp": float(((got - ref.detach()).abs() * action_mask).max()),
        "grad": max(float((p.grad - r).abs().max()) for p, r in zip(lm.parameters(), ref_grads, strict=True)),
        "grad_scale": max(float(r.abs().max()) for r in ref_grads),
        "tokens": shard.tokens,
        "pad": shard.pad,
        "rows": int(packed.input_ids.shape[0]),
        "restored": restored,
    }
    if extras:
        out["control_logp"] = leaky_log_probs_diff(lm, shard, packed, ref.detach(), action_mask, groups, device)
        out["values"] = critic_values_diff(path, shard, packed, ids, mask, groups, device, dtype, attn)
    return out


def leaky_log_probs_diff(lm, shard, packed, ref, action_mask, groups, device) -> float:
    """The control: the same run with each row taken as one sample (the sample layout of positions 0..W-1) lets the
    samples see each other, so its log-probs must differ from the reference by far more than the tolerance."""
    whole = torch.arange(shard.position_ids.shape[1], device=device).expand_as(shard.position_ids)
    with torch.no_grad(), sequence_parallel(lm, replace(shard, position_ids=whole), groups.sp_group):
        logits = lm(input_ids=shard.input_ids, position_ids=shard.local_position_ids, use_cache=False).logits
    local = log_probs_from_logits(logits, shard.targets)
    leaked = packed.unpack_shifted(shard.gather_actions(local, groups.sp_group))
    return float(((leaked - ref).abs() * action_mask).max())


def critic_values_diff(path, shard, packed, ids, mask, groups, device, dtype, attn) -> float:
    """A critic's per-token values from the split rows against its one-process packed forward."""
    torch.manual_seed(0)  # the same value head on every rank
    precision = "bf16" if dtype == torch.bfloat16 else "fp32"
    model = load_value_model(path, "critic", precision=precision, attn=attn, init_value_head=True)
    model = model.to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        ref = value_model_token_values(model, ids, mask, packing=True)
        with sequence_parallel(model, shard, groups.sp_group):
            local = model(input_ids=shard.input_ids, position_ids=shard.local_position_ids)
    values = packed.unpack(shard.gather_tokens(local, groups.sp_group))
    return float(((values - ref).abs() * mask).max())


def main() -> None:
    out_dir, device = Path(sys.argv[1]), torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu")
    dtype = getattr(torch, sys.argv[3] if len(sys.argv) > 3 else "float64")
    attn = sys.argv[4] if len(sys.argv) > 4 else "sdpa"
    rank = int(os.environ["RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    # Made before the process group exists: transformers' save_pretrained writes no weights on a rank other than 0.
    paths = {name: resolve_model_path(model_spec(CASES[name][0])) for name in CASES}
    backend = os.environ.get("SP_BACKEND") or ("nccl" if device.type == "cuda" else "gloo")
    dist.init_process_group(backend)
    groups = sp_groups(dist.get_world_size())
    results = {name: run_case(name, paths[name], groups, device, dtype, attn) for name in CASES}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
