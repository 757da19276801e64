"""Full parameters out of a (possibly sharded, possibly LoRA-wrapped) model, one tensor at a time.

Two kinds of sharding: DeepSpeed ZeRO-3 partitions (``zero3=True``: gathered in ``GatheredParameters``) and FSDP2's
DTensor parameters (recognised by type: each read is its ``full_tensor()``, an all-gather). Every rank must iterate
either way (the gathers are collectives); ``keep`` decides whether a rank gets copies. Names are the model's own (peft
names for a peft model) in :func:`full_state_dict`, and plain Hugging Face names with the adapters merged in
:func:`hf_weights` (what a rollout engine loads).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor


def gathered(params: Iterable[nn.Parameter], zero3: bool):
    """Context in which ZeRO-3 partitioned ``params`` hold their full data (read-only: changes are discarded)."""
    params = list(params)
    if not zero3 or not params:
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def is_sharded(t: Tensor) -> bool:
    """An FSDP2 (DTensor) parameter or tensor: reading it whole is a collective."""
    return isinstance(t, DTensor)


def _whole(t: Tensor, copy: bool) -> Tensor:
    """``t`` in full: a DTensor's ``full_tensor()`` (an all-gather: a new tensor), else ``t`` (cloned if ``copy``)."""
    if isinstance(t, DTensor):
        return t.full_tensor()
    return t.clone() if copy else t


def full_numel(p: Tensor) -> int:
    """Elements of the whole parameter: ZeRO-3 keeps only a shard (``ds_numel`` is its full size); a DTensor's
    ``numel`` is already the global one."""
    return int(p.ds_numel) if hasattr(p, "ds_numel") else p.numel()


def _persistent_buffers(module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    keys = set(module.state_dict().keys())
    for name, buf in module.named_buffers():
        if name in keys:
            yield name, buf


def full_state_dict(module: nn.Module, zero3: bool, keep: bool = True) -> Iterator[tuple[str, Tensor]]:
    """``(name, cpu copy)`` of every parameter and persistent buffer, under the module's own names."""
    for name, p in module.named_parameters():
        with gathered([p], zero3):
            if keep or is_sharded(p):
                t = _whole(p.data.detach(), copy=False).to("cpu", copy=True)
                if keep:
                    yield name, t
    if keep:
        for name, b in _persistent_buffers(module):
            yield name, b.detach().to("cpu", copy=True)


def is_adapter_name(name: str) -> bool:
    """A peft LoRA adapter parameter (``...q_proj.lora_A.default.weight``, ``lora_B``, the embedding adapters, DoRA's
    magnitude vector): what an adapter-only sync sends."""
    return ".lora_" in name


def lora_adapter_weights(
    module: nn.Module, zero3: bool, keep: bool = True, *, to: dict[str, Any] | None = None
) -> Iterator[tuple[str, Tensor]]:
    """``(peft parameter name, tensor)`` of a peft model's LoRA adapters only (rollout.weight_sync_lora=adapter),
    each gathered whole (ZeRO-3, FSDP2) and copied; the names are the peft model's own, which an engine wrapping the
    same base with the same LoraConfig has too (rlhf.backends.rollout.hf.engine). ``to``: as in :func:`hf_weights`."""
    from rlhf.models.lora import is_peft_model

    if not is_peft_model(module):
        raise ValueError("adapter-only weight sync needs a LoRA (peft) model: set model.lora.rank > 0")
    to = to or {}
    for name, p in module.named_parameters():
        if not is_adapter_name(name):
            continue
        with gathered([p], zero3):
            if keep or is_sharded(p):
                t = _whole(p.data.detach(), copy=True).to(**to)
                if keep:
                    yield name, t


def _in_buckets(
    named: Iterator[tuple[str, Tensor]], bucket_bytes: int, keep: bool
) -> Iterator[list[tuple[str, Tensor]] | None]:
    """Copies from ``named`` cut into buckets of about ``bucket_bytes`` (``None`` per bucket for ranks without
    ``keep``, which still iterate for the gathers)."""
    bucket: list[tuple[str, Tensor]] = []
    size = 0
    for name, t in named:
        bucket.append((name, t))
        size += t.numel() * t.element_size()
        if size >= bucket_bytes:
            yield bucket if keep else None
            bucket, size = [], 0
    if bucket or not keep:
        yield bucket if keep else None


def hf_weights(
    module: nn.Module, zero3: bool, keep: bool = True, *, to: dict[str, Any] | None = None, adapter: bool = False
) -> Iterator[tuple[str, Tensor]]:
    """``(HF name, tensor)`` of the model as plain transformers would name it; LoRA adapters merged in, the trained
    copy of peft's modules_to_save used. The tensors are copies on the module's device, or moved/cast by ``to``
    (keyword arguments of ``Tensor.to``, e.g. the rollout engines' dtype). ``adapter``: the LoRA adapters alone
    instead (:func:`lora_adapter_weights`)."""
    from rlhf.models.lora import is_peft_model

    if adapter:
        yield from lora_adapter_weights(module, zero3, keep, to=to)
        return
    to = to or {}
    if not is_peft_model(module):
        for name, p in module.named_parameters():
            with gathered([p], zero3):
                if keep or is_sharded(p):
                    t = _whole(p.data.detach(), copy=True).to(**to)
                    if keep:
                        yield name, t
        return
    for name, t in _merged_peft_weights(module.get_base_model(), zero3, keep):
        yield name, t.to(**to)


def _param_bytes(p: nn.Parameter, dtype: torch.dtype | None = None) -> int:
    size = torch.empty((), dtype=dtype).element_size() if dtype is not None else p.element_size()
    return full_numel(p) * size


def largest_weight_bytes(module: nn.Module, dtype: torch.dtype | None = None) -> int:
    """Bytes of the largest single weight (full size when sharded; in ``dtype`` when given): a sync's bucket buffer
    must hold it."""
    return max((_param_bytes(p, dtype) for p in module.parameters()), default=0)


def hf_weight_buckets(
    module: nn.Module,
    zero3: bool,
    bucket_bytes: int,
    keep: bool = True,
    *,
    to: dict[str, Any] | None = None,
    adapter: bool = False,
) -> Iterator[list[tuple[str, Tensor]] | None]:
    """:func:`hf_weights` in buckets of about ``bucket_bytes`` (a larger tensor gets a bucket of its own), for
    weight sync. Sharded parameters are gathered one bucket at a time: under ZeRO-3 they are gathered together and
    released when the consumer asks for the next bucket, an FSDP2 DTensor is all-gathered (``full_tensor``) into the
    bucket; so a rank never holds more than one bucket of full weights. ZeRO-3's tensors are the gathered parameters
    themselves (no copy: consume them before moving on). Every rank must iterate (the gathers are collectives); ranks
    with ``keep=False`` get ``None`` per bucket. ``to``: as in :func:`hf_weights`. Peft models go through
    :func:`hf_weights` (merged copies, or the adapters alone with ``adapter``), cut into buckets."""
    from rlhf.models.lora import is_peft_model

    to = to or {}
    if adapter or is_peft_model(module):
        yield from _in_buckets(hf_weights(module, zero3, keep, to=to, adapter=adapter), bucket_bytes, keep)
        return
    pending: list[tuple[str, nn.Parameter]] = []
    size = 0
    dtype = to.get("dtype")

    def flush() -> Iterator[list[tuple[str, Tensor]] | None]:
        # One parameter's gather at a time, each kept until the bucket is consumed: a coalesced gather of the
        # whole bucket launches every all-gather at once, and gloo's per-call staging copies then double the peak.
        with ExitStack() as stack, torch.no_grad():
            for _, p in pending:
                stack.enter_context(gathered([p], zero3))
            if keep or any(is_sharded(p) for _, p in pending):
                out = [(n, _whole(p.data.detach(), copy=False).to(**to)) for n, p in pending]
            yield out if keep else None

    for name, p in module.named_parameters():
        nbytes = _param_bytes(p, dtype)
        if pending and size + nbytes > bucket_bytes:
            yield from flush()
            pending, size = [], 0
        pending.append((name, p))
        size += nbytes
    if pending:
        yield from flush()


def _merged_peft_weights(base: nn.Module, zero3: bool, keep: bool) -> Iterator[tuple[str, Tensor]]:
    # Under FSDP2 the adapters' delta is computed on the DTensors (peft's own get_delta_weight, sharded matmul) and
    # then read whole; every rank computes it, since each read is a collective.
    from peft.tuners.lora import LoraLayer
    from peft.utils import ModulesToSaveWrapper

    handled: list[str] = []  # module prefixes already emitted (their children are skipped)
    for mod_name, mod in base.named_modules():
        if any(mod_name.startswith(h + ".") for h in handled):
            continue
        prefix = f"{mod_name}." if mod_name else ""
        if isinstance(mod, LoraLayer):
            handled.append(mod_name)
            layer = mod.get_base_layer()
            with gathered(mod.parameters(), zero3):
                sharded = is_sharded(layer.weight)
                if not keep and not sharded:
                    continue
                weight = _whole(layer.weight.data.detach(), copy=True)
                if not mod.merged:
                    for adapter in mod.active_adapters:
                        if adapter in mod.lora_A:
                            weight += _whole(mod.get_delta_weight(adapter).detach(), copy=False).to(weight.dtype)
                bias = getattr(layer, "bias", None)
                bias = _whole(bias.data.detach(), copy=True) if bias is not None else None
                if keep:
                    yield f"{prefix}weight", weight
                    if bias is not None:
                        yield f"{prefix}bias", bias
        elif isinstance(mod, ModulesToSaveWrapper):
            handled.append(mod_name)
            trained = mod.modules_to_save[mod.active_adapter] if mod.active_adapter in mod.modules_to_save else None
            source = trained if trained is not None else mod.original_module
            yield from _own_params(source, prefix, zero3, keep, recurse=True)
        else:
            yield from _own_params(mod, prefix, zero3, keep, recurse=False)


def _own_params(mod: nn.Module, prefix: str, zero3: bool, keep: bool, recurse: bool) -> Iterator[tuple[str, Tensor]]:
    for name, p in mod.named_parameters(recurse=recurse):
        with gathered([p], zero3):
            if keep or is_sharded(p):
                t = _whole(p.data.detach(), copy=True)
                if keep:
                    yield f"{prefix}{name}", t


@torch.no_grad()
def state_dict_on_rank0(module: nn.Module, zero3: bool, is_rank0: bool) -> dict[str, Tensor] | None:
    """The full state dict (module's own names, CPU) on rank 0; ``None`` elsewhere. All ranks must call it."""
    sd = dict(full_state_dict(module, zero3, keep=is_rank0))
    return sd if is_rank0 else None


def write_hf_folder(
    module: nn.Module,
    state: dict[str, Tensor],
    path: str | os.PathLike,
    tokenizer: Any = None,
    config_updates: dict[str, Any] | None = None,
) -> None:
    """``module.save_pretrained`` of the full ``state`` (safetensors) plus the tokenizer, with ``config_updates`` set
    on its config first: what every backend's ``save_hf`` writes on rank 0. Written beside ``path`` and renamed into
    place once complete (rlhf.atomic_save): ``path`` holds a loadable model or what it held before, and a full disk
    raises atomic_save.DiskFull (one line)."""
    from rlhf.atomic_save import atomic_dir, tensors_bytes

    config = getattr(module, "config", None)
    for key, value in (config_updates or {}).items():
        setattr(config, key, value)
    # A peft model writes its adapters only: the full state's bytes would refuse a save that fits.
    need = None if hasattr(module, "peft_config") else tensors_bytes(state)
    what = f"the model {Path(path).name}/"
    with atomic_dir(path, need_bytes=need, what=what, fault_point="disk.fill_before_model") as tmp:
        module.save_pretrained(str(tmp), state_dict=state, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
