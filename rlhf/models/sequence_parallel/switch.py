"""Turning sequence parallelism on for one micro-batch: the model's attention switched to the Ulysses function of its
kernel and the micro-batch's context set, both undone on exit, so evaluation and generation never see them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist

from rlhf.models.packing import base_model
from rlhf.models.sequence_parallel.attention import ULYSSES_FOR, ULYSSES_SDPA, head_errors
from rlhf.models.sequence_parallel.batch import SequenceShard
from rlhf.models.sequence_parallel.context import SPContext, activated
from rlhf.models.sequence_parallel.layout import sample_layout


def ulysses_name(model: Any) -> str:
    """The Ulysses attention for the model's own kernel: flash-attention 2/3 -> ``ulysses_flash_attention_2``,
    anything else (sdpa, eager, ...) -> ``ulysses_sdpa``."""
    return ULYSSES_FOR.get(base_model(model).config._attn_implementation, ULYSSES_SDPA)


def model_errors(config: Any, sp: int) -> list[str]:
    """What keeps a model of this config from splitting its rows over ``sp`` ranks: head counts (:func:`head_errors`)
    and layers that are not full attention (sliding-window or linear-attention layers, ``config.layer_types``: they
    would see only this rank's columns)."""
    text = config.get_text_config()
    kv = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    errors = head_errors(text.num_attention_heads, kv, sp)
    other = sorted({t for t in getattr(text, "layer_types", None) or () if t != "full_attention"})
    if other:
        errors.append(f"layer types {other}: sequence parallelism here splits full-attention layers only")
    return errors


@contextmanager
def ulysses_attention(model: Any, name: str | None = None) -> Iterator[str]:
    """The model (or its DeepSpeed/peft wrapper) runs the Ulysses attention ``name`` (default :func:`ulysses_name`)
    inside, its own attention again on exit (``PreTrainedModel.set_attn_implementation`` both ways)."""
    hf = base_model(model)
    before = hf.config._attn_implementation
    name = name or ulysses_name(model)
    hf.set_attn_implementation(name)
    if hf.config._attn_implementation != name:  # transformers only warns for a model it cannot switch
        hf.set_attn_implementation(before)
        raise ValueError(
            f"{type(hf).__name__} kept its attention {before!r} when switched to {name!r}: its attention layers are "
            "not on transformers' AttentionInterface, so its rows cannot be split"
        )
    try:
        yield name
    finally:
        hf.set_attn_implementation(before)


@contextmanager
def sequence_parallel(
    model: Any, shard: SequenceShard, group: Any, *, attention: str | None = None
) -> Iterator[SPContext | None]:
    """Run one micro-batch's forward **and backward** inside: ``model`` splits the rows of ``shard`` over ``group``
    (the SP group; this rank is ``shard.rank`` in it). With ``shard.size == 1`` nothing changes (yields None), so an
    engine runs the same code without sequence parallelism."""
    if shard.size == 1:
        yield None
        return
    hf = base_model(model)
    errors = model_errors(hf.config, shard.size)
    if errors:
        raise ValueError(f"{type(hf).__name__} cannot split its rows over {shard.size} ranks: {'; '.join(errors)}")
    if dist.get_world_size(group) != shard.size or dist.get_rank(group) != shard.rank:
        raise ValueError(
            f"the shard is rank {shard.rank} of {shard.size}, the group's rank {dist.get_rank(group)} of "
            f"{dist.get_world_size(group)}"
        )
    ctx = SPContext(group=group, size=shard.size, rank=shard.rank, layout=sample_layout(shard.position_ids))
    with ulysses_attention(model, attention), activated(ctx):
        yield ctx
