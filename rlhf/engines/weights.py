"""Full parameters out of a (possibly ZeRO-3 partitioned, possibly LoRA-wrapped) model, one tensor at a time.

Every rank must iterate (ZeRO-3 gathers are collectives); ``keep`` decides whether a rank gets copies. Names are the
model's own (peft names for a peft model) in :func:`full_state_dict`, and plain Hugging Face names with the adapters
merged in :func:`hf_weights` (what a rollout engine loads).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, nullcontext

import torch
from torch import Tensor, nn


def gathered(params: Iterable[nn.Parameter], zero3: bool):
    """Context in which ZeRO-3 partitioned ``params`` hold their full data (read-only: changes are discarded)."""
    params = list(params)
    if not zero3 or not params:
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def _persistent_buffers(module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    keys = set(module.state_dict().keys())
    for name, buf in module.named_buffers():
        if name in keys:
            yield name, buf


def full_state_dict(module: nn.Module, zero3: bool, keep: bool = True) -> Iterator[tuple[str, Tensor]]:
    """``(name, cpu copy)`` of every parameter and persistent buffer, under the module's own names."""
    for name, p in module.named_parameters():
        with gathered([p], zero3):
            if keep:
                yield name, p.data.detach().to("cpu", copy=True)
    if keep:
        for name, b in _persistent_buffers(module):
            yield name, b.detach().to("cpu", copy=True)


def hf_weights(module: nn.Module, zero3: bool, keep: bool = True) -> Iterator[tuple[str, Tensor]]:
    """``(HF name, tensor)`` of the model as plain transformers would name it; LoRA adapters merged in, the trained
    copy of peft's modules_to_save used. The tensors are copies on the module's device."""
    from rlhf.models.lora import is_peft_model

    if not is_peft_model(module):
        for name, p in module.named_parameters():
            with gathered([p], zero3):
                if keep:
                    yield name, p.data.detach().clone()
        return
    yield from _merged_peft_weights(module.get_base_model(), zero3, keep)


def _param_bytes(p: nn.Parameter) -> int:
    numel = p.ds_numel if hasattr(p, "ds_numel") else p.numel()  # ZeRO-3 keeps only a shard: its full size
    return int(numel) * p.element_size()


def largest_weight_bytes(module: nn.Module) -> int:
    """Bytes of the largest single weight (full size under ZeRO-3): a sync's bucket buffer must hold it."""
    return max((_param_bytes(p) for p in module.parameters()), default=0)


def hf_weight_buckets(
    module: nn.Module, zero3: bool, bucket_bytes: int, keep: bool = True
) -> Iterator[list[tuple[str, Tensor]] | None]:
    """:func:`hf_weights` in buckets of about ``bucket_bytes`` (a larger tensor gets a bucket of its own), for
    weight sync. Under ZeRO-3 each bucket's parameters are gathered together and released when the consumer asks
    for the next bucket, so a rank never holds more than one bucket of full weights; the tensors are the gathered
    parameters themselves (no copy: consume them before moving on). Every rank must iterate (the gathers are
    collectives); ranks with ``keep=False`` get ``None`` per bucket. Peft models go through :func:`hf_weights`
    (merged copies), cut into buckets."""
    from rlhf.models.lora import is_peft_model

    if is_peft_model(module):
        bucket: list[tuple[str, Tensor]] = []
        size = 0
        for name, t in hf_weights(module, zero3, keep):
            bucket.append((name, t))
            size += t.numel() * t.element_size()
            if size >= bucket_bytes:
                yield bucket if keep else None
                bucket, size = [], 0
        if bucket or not keep:
            yield bucket if keep else None
        return
    pending: list[tuple[str, nn.Parameter]] = []
    size = 0

    def flush() -> Iterator[list[tuple[str, Tensor]] | None]:
        # One parameter's gather at a time, each kept until the bucket is consumed: a coalesced gather of the
        # whole bucket launches every all-gather at once, and gloo's per-call staging copies then double the peak.
        with ExitStack() as stack, torch.no_grad():
            for _, p in pending:
                stack.enter_context(gathered([p], zero3))
            yield [(n, p.data.detach()) for n, p in pending] if keep else None

    for name, p in module.named_parameters():
        nbytes = _param_bytes(p)
        if pending and size + nbytes > bucket_bytes:
            yield from flush()
            pending, size = [], 0
        pending.append((name, p))
        size += nbytes
    if pending:
        yield from flush()


def _merged_peft_weights(base: nn.Module, zero3: bool, keep: bool) -> Iterator[tuple[str, Tensor]]:
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
                if not keep:
                    continue
                weight = layer.weight.data.detach().clone()
                if not mod.merged:
                    for adapter in mod.active_adapters:
                        if adapter in mod.lora_A:
                            weight += mod.get_delta_weight(adapter).to(weight.dtype)
                yield f"{prefix}weight", weight
                if getattr(layer, "bias", None) is not None:
                    yield f"{prefix}bias", layer.bias.data.detach().clone()
        elif isinstance(mod, ModulesToSaveWrapper):
            handled.append(mod_name)
            trained = mod.modules_to_save[mod.active_adapter] if mod.active_adapter in mod.modules_to_save else None
            source = trained if trained is not None else mod.original_module
            for name, p in source.named_parameters():
                with gathered([p], zero3):
                    if keep:
                        yield f"{prefix}{name}", p.data.detach().clone()
        else:
            for name, p in mod.named_parameters(recurse=False):
                with gathered([p], zero3):
                    if keep:
                        yield f"{prefix}{name}", p.data.detach().clone()


@torch.no_grad()
def state_dict_on_rank0(module: nn.Module, zero3: bool, is_rank0: bool) -> dict[str, Tensor] | None:
    """The full state dict (module's own names, CPU) on rank 0; ``None`` elsewhere. All ranks must call it."""
    sd = dict(full_state_dict(module, zero3, keep=is_rank0))
    return sd if is_rank0 else None
