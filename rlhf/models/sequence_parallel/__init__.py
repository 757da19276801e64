"""Sequence parallelism (Ulysses): the packed rows of a micro-batch split over the ``sp`` ranks of a group, exact.

Every rank of a sequence-parallel (SP) group holds the same micro-batch and runs the model on its own contiguous
columns of the packed rows. In each attention layer an all-to-all trades columns for heads (each rank then holds
``H/sp`` heads over the whole rows), attention runs exactly within each packed sample, and a second all-to-all
trades back; everything else (embeddings, MLPs, norms, logits) only ever sees this rank's columns. Like OpenRLHF's
``--ds.ring_attn_size`` and veRL's ``ulysses_sequence_parallel_size``, on any training engine, on CPU (gloo) too.

How the training engines use it (DeepSpeed and FSDP2, rlhf.backends.train): :func:`splitting` (the runtime module)
around each micro-batch's forward and backward, inside which the model forwards of rlhf.models.forward split their
rows by themselves and gather their per-token outputs back with a differentiable gather (each rank's backward then
carries its own columns' part of the gradient of the loss every rank of the group computes whole), so no loss
function changes; the engine multiplies each rank's loss by :func:`loss_scale` ``(sp, "world")`` and counts tokens
over the DP group only (rlhf.backends.shared.step_window). The pieces underneath, as a caller with a loss of its own
would use them (``rlhf.models.packing.pack`` first: ``varlen=True`` gives one row)::

    groups = sp_groups(sp)                               # once: contiguous SP groups, DP groups across them
    packed = pack(input_ids, attention_mask, varlen=True)
    shard = shard_packed(packed, size=groups.sp, rank=groups.sp_rank)
    adv = shard.take(pack_actions(packed, advantages))   # every [B, T-1] input: old log-probs, masks, weights
    tokens = dp_token_count(shard.tokens, groups.dp_group, device)  # the whole rows' count, summed over DP only
    with sequence_parallel(model, shard, groups.sp_group):           # the forward AND the backward inside
        logits = model(input_ids=shard.input_ids, position_ids=shard.local_position_ids, use_cache=False).logits
        logp = log_probs_from_logits(logits, shard.targets)          # [R, L]: this rank's columns
        loss = loss_share((token_loss(logp, adv) * shard.valid).sum(), tokens)
        (loss * loss_scale(groups.sp, "world")).backward()          # "world" or "dp": the engine's reduction
    full = packed.unpack_shifted(shard.gather_actions(logp, groups.sp_group))  # [B, T-1] (experience, metrics)

What it passes and gets back:

* in: the shard's ``input_ids`` and ``local_position_ids`` (this rank's columns; positions are global, so RoPE is
  right), no attention mask, ``use_cache=False``; the shard carries the whole rows' position ids, from which the
  samples are found once per micro-batch (transformers' rule: rlhf.models.sequence_parallel.layout);
* out: this rank's columns of every per-token output (``[R, L, ...]``). ``shard.targets`` are the next tokens taken
  on the whole rows before slicing; ``shard.valid`` marks the columns whose prediction counts (the pad added to make
  the width a multiple of ``sp`` and each sample's last token never do). ``gather_actions`` / ``gather_tokens``
  put the group's columns together (not differentiable: outputs, metrics), ``PackedBatch.unpack_shifted`` /
  ``unpack`` return them to the trainer's padded layout;
* the loss: each rank's share, gradients summed over SP and averaged over DP (rlhf.models.sequence_parallel.loss:
  ``loss_scale`` says what to multiply by for DeepSpeed with or without an ``mpu`` and for FSDP2).

Rules: the model is on transformers' attention interface, causal, with full-attention layers only and ``H % sp ==
0`` and ``K % sp == 0 or sp % K == 0`` (``model_errors``, ``head_errors``); ``sequence_parallel`` switches its
attention to ``ulysses_flash_attention_2`` when it runs flash-attention 2/3, else ``ulysses_sdpa``, and back on exit
(evaluation and generation keep the model's own attention). With ``sp == 1`` the shard is the rows as they are and
the context changes nothing, so an engine keeps one code path.
"""

from rlhf.models.sequence_parallel.attention import ULYSSES_FLASH, ULYSSES_SDPA, head_errors
from rlhf.models.sequence_parallel.batch import (
    SequenceShard,
    pack_actions,
    shard_packed,
    shard_rows,
    valid_actions,
)
from rlhf.models.sequence_parallel.groups import SPGroups, sp_groups
from rlhf.models.sequence_parallel.loss import dp_token_count, loss_scale, loss_share
from rlhf.models.sequence_parallel.runtime import Splitting, active, splitting
from rlhf.models.sequence_parallel.switch import model_errors, sequence_parallel, ulysses_attention, ulysses_name

__all__ = [
    "ULYSSES_FLASH",
    "ULYSSES_SDPA",
    "SPGroups",
    "SequenceShard",
    "Splitting",
    "active",
    "dp_token_count",
    "head_errors",
    "loss_scale",
    "loss_share",
    "model_errors",
    "pack_actions",
    "sequence_parallel",
    "shard_packed",
    "shard_rows",
    "splitting",
    "sp_groups",
    "ulysses_attention",
    "ulysses_name",
    "valid_actions",
]
