"""What every rollout engine object shares: the object a backend's actor builds
(rlhf.backends.shared.rollout_actor.RolloutActor.build) and calls for the
:class:`rlhf.backends.contract.rollout.RolloutEngine` contract.

A backend's engine subclasses :class:`RolloutEngineBase` and writes what is its own:

* its construction (the model on its device; the actor's ``build`` makes it);
* :meth:`~RolloutEngineBase.generate`;
* :meth:`~RolloutEngineBase.load_weights`: a batch (or a stream) of HF-named tensors into its model, in place;
* :meth:`~RolloutEngineBase.score`, the teacher-forced log-probs the weight-sync probe compares with the trainer's
  (without it, a run must set ``rollout.verify_sync_every=0``).

It inherits, for an engine that is its own one worker (it computes in this process):

* the weight sync's receiving side (``sync_locations``, ``sync_connect``, ``sync_pull``, ``sync_close``) and the
  object-store route (``load_packed``), through rlhf.backends.weight_sync's receiver, each ending in
  ``load_weights``; :meth:`~RolloutEngineBase.direct_targets` and ``keeps_received_tensors`` tune how buckets land;
* ``load_from_path``: the folder as transformers loads it, through ``load_weights``;
* ``sleep``, ``wake`` and ``empty_cache`` for a platform with nothing to release (the CPU): ``awake`` keeps both
  tags.

What a platform does differently it overrides: the hf engine (rlhf.backends.rollout.hf.engine) moves its model to host
memory on GPUs and receives a sync straight into its parameters. vLLM's engine (rlhf.backends.rollout.vllm.engine)
answers these methods itself: its tensor-parallel workers receive a sync and load a folder in vLLM's processes
(rlhf.backends.rollout.vllm.worker), and it sleeps with vLLM's sleep mode.

This module runs in every engine's interpreter (the vLLM venv too): torch, transformers and the weight sync are
imported where a method needs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rlhf.backends.contract.rollout import MEMORY_TAGS, Rollout, SamplingSpec

# ``lookup(name, dtype, shape)``: the engine's own tensor a received one may be written into, or None
DirectTargets = Callable[[str, str, tuple[int, ...]], Any]


class RolloutEngineBase:
    """The generic part of a rollout engine object; see the module docstring for what a subclass writes."""

    #: where received tensors land before ``load_weights`` takes them (a torch.device or its name): the engine's
    #: device, so a GPU engine copies nothing through host memory
    device: Any = "cpu"
    #: whether ``load_weights`` may hold a received tensor after asking the stream for the next one (a loader that
    #: gathers a layer's tensors first): each then lands in memory of its own. An engine that copies each tensor as
    #: it comes sets it False and the receiver reuses one buffer per bucket.
    keeps_received_tensors: bool = True
    #: the dtype ``load_from_path`` reads a folder in ("auto": the folder's own; ``load_weights`` converts)
    load_dtype: Any = "auto"

    def __init__(self) -> None:
        # What of the engine is in device memory (rlhf.backends.contract.rollout.MEMORY_TAGS)
        self.awake: set[str] = set(MEMORY_TAGS)
        self._receiver: Any = None  # rlhf.backends.weight_sync.receiver.WeightReceiver while connected

    # -- what a backend writes ----------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        """``len(prompts) * sampling.n`` rollouts, prompt-major: RolloutEngine.generate."""
        raise NotImplementedError(f"{type(self).__name__}: a rollout engine writes generate")

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy HF-named tensors into the model in place; names not given keep their values. ``named_tensors`` is a
        list (``load_from_path``) or a stream (a sync: each tensor checked on arrival). Unless
        ``keeps_received_tensors``, a streamed tensor's memory is reused once the next one is asked for: copy it
        first."""
        raise NotImplementedError(f"{type(self).__name__}: a rollout engine writes load_weights")

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        """Teacher-forced log-probs at temperature 1 of each ``(prompt, output)``'s output tokens: RolloutEngine.score,
        which the weight-sync probe asks for."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot score sequences teacher-forced, which the weight-sync probe needs: set "
            "rollout.verify_sync_every=0"
        )

    # -- hooks with defaults --------------------------------------------------------------------------------------
    def direct_targets(self) -> DirectTargets | None:
        """``lookup(name, dtype, shape)``: the model's own tensor a sync may receive ``name`` straight into (same
        dtype and shape, contiguous), else None; asked once per sync. None (the default): every tensor lands in a
        buffer and reaches ``load_weights``."""
        return None

    # -- the weight sync, this engine being its own one worker ----------------------------------------------------
    def load_packed(self, packed: Any) -> list[dict[str, Any]]:
        """One packed sync (the object-store route, rlhf.backends.weight_sync.wire), each tensor checked before
        ``load_weights`` sees it; returns this engine's receiver report."""
        from rlhf.backends.weight_sync.wire import SyncReport, unpack_weights

        self.wake(["weights"])
        report = SyncReport(version=-1, side="receiver", route="object_store")
        self.load_weights(unpack_weights(packed, report))
        return [report.to_dict()]

    def sync_locations(self) -> list[dict[str, Any]]:
        """Where this engine's one worker (this process) runs."""
        from rlhf.backends.weight_sync.group import member_location

        return [member_location()]

    def sync_connect(self, cfg: dict[str, Any], routes: list[str]) -> list[dict[str, Any]]:
        """Join the weight-sync group as rank ``cfg["rank"]`` on route ``routes[0]`` (replacing a connection)."""
        import torch

        from rlhf.backends.weight_sync.group import GroupConfig
        from rlhf.backends.weight_sync.receiver import WeightReceiver

        self.sync_close()
        self._receiver = WeightReceiver(
            GroupConfig.from_dict(cfg),
            device=torch.device(self.device),
            route=routes[0],
            stable=self.keeps_received_tensors,
        )
        return [{"rank": cfg["rank"], "route": routes[0]}]

    def sync_pull(self, version: int) -> list[dict[str, Any]]:
        """Load the weights the sender streams, each tensor as it arrives (straight into the model where
        :meth:`direct_targets` names a tensor); wakes the weights only, and hands the buffers' memory back after."""
        if self._receiver is None:
            raise RuntimeError(f"{type(self).__name__}.sync_pull({version}) before sync_connect")
        self.wake(["weights"])
        lookup = self.direct_targets()
        into = None if lookup is None else (lambda e: lookup(e.name, e.dtype, e.shape))
        self.load_weights(self._receiver.pull(version, into=into))
        self.empty_cache()
        return [self._receiver.report.to_dict()]

    def sync_close(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    # -- loading from a folder ------------------------------------------------------------------------------------
    def load_from_path(self, path: str) -> None:
        """Reload every weight from a Hugging Face folder (what a fresh engine started on ``path`` would hold): the
        model transformers loads from it, in ``load_dtype``, through ``load_weights``."""
        from transformers import AutoModelForCausalLM

        self.wake(["weights"])
        fresh = AutoModelForCausalLM.from_pretrained(path, dtype=self.load_dtype)
        self.load_weights(list(fresh.state_dict().items()))

    # -- device memory: nothing to release ------------------------------------------------------------------------
    def sleep(self, level: int = 1) -> None:
        """Nothing to release on this platform: what is awake stays awake."""

    def wake(self, tags: list[str] | None = None) -> None:
        """Bring back ``tags`` (None: both)."""
        self.awake |= set(tags or MEMORY_TAGS)

    def empty_cache(self) -> None:
        """No allocator cache to hand back."""
