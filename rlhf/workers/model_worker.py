"""The Ray actor that hosts the training backend's engines for one rank (``trainer.backend``: DeepSpeed or FSDP2,
through rlhf.spec.registry): at most one trained model and any number of frozen ones. Colocated roles (policy +
reference) can be fused into one process this way, which saves a process, a framework import and a copy of the CUDA
context per rank. Everything here goes through the rlhf.backends.contract.training contract, never a backend's own API.

Thin by design: building models and engines, moving batches in and results out. What a step computes is the
``loss_fn`` / ``fn`` the pipeline sends (module-level functions or ``functools.partial`` of them, pickled by name).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rlhf.backends.shared.worker_base import BaseWorker
from rlhf.spec.schema import ExperimentSpec

MODEL_KINDS = ("causal_lm", "reward", "critic")


class EngineWorker(BaseWorker):
    def __init__(self, spec: ExperimentSpec, role: str) -> None:
        super().__init__(spec, role)
        self.trained = None  # rlhf.backends.contract.training.TrainEngine
        self.frozen: dict[str, Any] = {}  # name -> rlhf.backends.contract.training.FrozenEngine
        self.tokenizer = None
        self.in_policy = None  # rollout.hf.in_policy: the engine over the trained module, built on first use

    # -- building ------------------------------------------------------------------------------------------------
    def _loader(
        self, kind: str, path: str | None, *, train: bool, init_value_head: bool = False, normalize_reward: bool = False
    ) -> Callable[[str], Any]:
        """``load(precision)``: the model as the backend asks for it (it calls it in the context it needs)."""
        from rlhf.models.loading import load_causal_lm, resolve_model_path, tokenizer_for
        from rlhf.models.value_head import load_value_model

        if kind not in MODEL_KINDS:
            raise ValueError(f"role {self.role}: model kind {kind!r} is not one of {', '.join(MODEL_KINDS)}")
        m = self.spec.model
        path = path or resolve_model_path(m)
        if self.tokenizer is None:
            self.tokenizer = tokenizer_for(m, path)
        t = self.spec.trainer
        lora = m.lora if train else None
        gc = t.gradient_checkpointing and train

        def load(precision: str) -> Any:
            if kind == "causal_lm":
                return load_causal_lm(
                    path,
                    precision=precision,
                    attn=m.attn_implementation,
                    trust_remote_code=m.trust_remote_code,
                    gradient_checkpointing=gc,
                    lora=lora,
                )
            return load_value_model(
                path,
                kind,
                precision=precision,
                attn=m.attn_implementation,
                value_head_prefix=self.spec.reward.value_head_prefix,
                init_value_head=init_value_head,
                normalize_reward=normalize_reward,
                trust_remote_code=m.trust_remote_code,
                gradient_checkpointing=gc,
                lora=lora,
            )

        return load

    def init_trained(
        self,
        *,
        kind: str = "causal_lm",
        model_path: str | None = None,
        lr: float | None = None,
        total_steps: int = 1,
        init_value_head: bool = False,
    ) -> dict[str, Any]:
        """Build the trained model and its engine (optimizer, schedule over ``total_steps``) on the backend."""
        import torch

        self.init_distributed()
        t = self.spec.trainer
        dp = self.backend.mesh(self.spec, self.world_size).data  # ranks of one SP group train the same samples
        per_step = t.micro_batch_per_device * dp
        if t.global_batch % per_step:
            raise ValueError(
                f"role {self.role}: trainer.global_batch={t.global_batch} is not a multiple of "
                f"micro_batch_per_device x data-parallel ranks = {per_step}"
            )
        load = self._loader(kind, model_path, train=True, init_value_head=init_value_head)
        self.in_policy = None  # an engine over a previous trained module would generate with stale weights
        torch.manual_seed(self.spec.seed)  # same head and adapter init on every rank
        self.trained = self.backend.build_trained(
            load, self.spec, lr=lr or t.lr, total_steps=total_steps, grad_accum=t.global_batch // per_step
        )
        return {
            "grad_accum": self.trained.grad_accum,
            "trainable_params": self.trained.trainable_params(),
            "pid": os.getpid(),
        }

    def init_frozen(
        self,
        name: str,
        *,
        kind: str = "causal_lm",
        model_path: str | None = None,
        offload: bool = False,
        normalize_reward: bool = False,
    ) -> None:
        """Build a frozen model (``name``: reference, reward, ...) on the backend (DeepSpeed: ZeRO-3 if training uses
        stage 3, else whole; FSDP2: sharded)."""
        self.init_distributed()
        load = self._loader(kind, model_path, train=False, normalize_reward=normalize_reward)
        self.frozen[name] = self.backend.build_frozen(load, self.spec, offload=offload)

    # -- computing -----------------------------------------------------------------------------------------------
    def _trained(self):
        if self.trained is None:
            raise RuntimeError(f"role {self.role} rank {self.rank}: init_trained was not called")
        return self.trained

    def _frozen(self, name: str):
        try:
            return self.frozen[name]
        except KeyError:
            raise RuntimeError(
                f"role {self.role} rank {self.rank}: no frozen model {name!r} "
                f"(have: {', '.join(self.frozen) or 'none'})"
            ) from None

    def train_step(
        self,
        micro_batches: list[dict[str, Any]],
        loss_fn: Callable,
        mask_key: str | None = "action_mask",
        norm_constant: float | None = None,
    ) -> dict[str, float]:
        """One optimizer step (rlhf.backends.contract.training.TrainEngine.step)."""
        from rlhf import faults

        if faults.count_hits("rank.exit_on_train_step"):
            os._exit(1)  # fault injection: a training rank dies
        if faults.count_hits("rank.hang_on_train_step"):
            import time

            time.sleep(3600)  # fault injection: a training rank stops answering
        if faults.count_hits("rank.stop_on_train_step"):
            faults.stop_self("rank.stop_on_train_step")  # fault injection: the rank's process stops running
        self._steps_done = getattr(self, "_steps_done", 0) + 1
        if faults.in_range("rank.nan_loss_on_train_steps", self._steps_done):
            loss_fn = _nan_loss(loss_fn)  # fault injection: this step's numbers go bad
        return self._trained().step(micro_batches, loss_fn, mask_key=mask_key, norm_constant=norm_constant)

    def forward(self, fn: Callable, batches: list[dict[str, Any]], name: str | None = None) -> list[Any]:
        """``fn(model, batch)`` without gradients on each batch, with the trained model (``name=None``) or the
        frozen model ``name``; results moved to CPU."""
        engine = self._frozen(name) if name else self._trained()
        run = engine.forward if name else engine.forward_no_grad
        return [_to_cpu(run(fn, b)) for b in batches]

    # -- generation in the policy's ranks (rlhf.spec.rollout_backend_rules.generates_in_policy): the rollout backend's
    # in-policy engine over the module this rank trains
    def _in_policy(self):
        if self.in_policy is None:
            from rlhf.spec.registry import rollout_backend

            backend = rollout_backend(self.spec.rollout.backend)
            self.in_policy = backend.in_policy_engine(self._trained().module, self.tokenizer)
        return self.in_policy

    def rollout_ready(self) -> dict[str, Any]:
        return self._in_policy().info()

    def rollout_generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        return self._in_policy().generate(prompts, sampling)

    def rollout_score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        return self._in_policy().score(sequences)

    # -- weights and checkpoints ---------------------------------------------------------------------------------
    def pack_weights(self, version: int, checksums: bool = True, adapter: bool = False) -> dict[str, Any] | None:
        """The object-store weight sync (the reference route): rank 0 packs the full HF-named weights (gathered, LoRA
        merged; ``adapter``: the LoRA adapters alone) in the weight sync's wire format into Ray's object store and
        returns its sender report with the object's ref (inside a list, so Ray passes the ref on instead of the
        weights; the local executor hands the object itself on); other ranks take part in the gathers when the
        backend shards and return None."""
        from rlhf.backends.weight_sync.wire import pack_weights
        from rlhf.futures import put

        keep = self.rank == 0
        named = [(n, t.cpu()) for n, t in self._trained().named_weights(keep=keep, adapter=adapter)]
        if not keep:
            return None
        packed, report = pack_weights(named, version, checksums)
        del named
        return {"report": report.to_dict(), "weights": [put(packed)]}

    # -- weight sync: the policy's rank 0 sends; every rank gathers when the backend shards ----------------------
    def sync_location(self) -> dict[str, Any]:
        from rlhf.backends.weight_sync.group import member_location

        return member_location()

    def sync_reserve(self, host: str) -> int:
        """Rank 0: bind the sync group's store socket on ``host``; returns its port."""
        from rlhf.backends.weight_sync.group import listen_socket

        self._sync_listen = listen_socket(host)
        return int(self._sync_listen.getsockname()[1])

    def sync_connect(
        self,
        cfg: dict[str, Any] | None,
        *,
        bucket_mb: float,
        checksums: bool,
        shared: str | None,
        adapter: bool = False,
    ) -> dict[str, Any]:
        """Rank 0 joins the sync group as its sender (``cfg``); every rank keeps the bucket size and what a sync
        sends (``adapter``: the LoRA adapters alone). Blocks until every engine worker has joined."""
        from rlhf.backends.weight_sync.group import GroupConfig
        from rlhf.backends.weight_sync.sender import WeightSender

        engine = self._trained()
        self._sync_bucket_bytes = max(int(bucket_mb * 2**20), 1)
        self._sync_adapter = adapter
        if self.rank != 0:
            return {"rank": self.rank}
        self.sync_close()
        largest = engine.largest_weight_bytes()
        capacity = max(self._sync_bucket_bytes, largest)
        self._sync_sender = WeightSender(
            GroupConfig.from_dict(cfg),
            self._sync_listen,
            device=engine.device,
            capacity=capacity,
            checksums=checksums,
            shared=shared,
            largest_tensor=largest,
        )
        return {"rank": 0, "capacity": capacity}

    def sync_push(self, version: int, measure_memory: bool = False) -> dict[str, Any] | None:
        """Stream the current weights to the engines (rank 0), bucket by bucket; when the backend shards (ZeRO-3,
        FSDP2) every rank takes part in each bucket's gather. Returns rank 0's report (other ranks: their memory
        growth only)."""
        from rlhf.backends.weight_sync.memory import PeakRSS

        engine = self._trained()
        if self.rank != 0 and not engine.gathers_on_every_rank:
            return None
        with PeakRSS(measure_memory) as peak:
            adapter = getattr(self, "_sync_adapter", False)
            buckets = engine.weight_buckets(self._sync_bucket_bytes, keep=self.rank == 0, adapter=adapter)
            if self.rank == 0:
                report = self._sync_sender.push(buckets, version).to_dict()
            else:
                for _ in buckets:
                    pass
                report = {"version": version, "side": "gather", "rank": self.rank}
        report["peak_rss_delta_mb"] = peak.delta_mb
        return report

    def sync_close(self) -> None:
        sender = getattr(self, "_sync_sender", None)
        if sender is not None:
            sender.close()
            self._sync_sender = None

    def shutdown(self) -> None:
        """Close the weight-sync group, then leave the process group: the process may outlive the job (the local
        executor's is the driver's)."""
        self.sync_close()
        super().shutdown()

    def save_checkpoint(self, path: str, client_state: dict[str, Any] | None = None) -> None:
        from rlhf import faults

        if faults.count_hits("rank.enospc_on_save"):
            import errno

            raise OSError(errno.ENOSPC, "No space left on device", path)  # fault injection: a full disk
        self._trained().save(path, client_state)

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        return self._trained().load(path)

    def save_hf(self, path: str, config_updates: dict[str, Any] | None = None) -> None:
        self._trained().save_hf(path, tokenizer=self.tokenizer, config_updates=config_updates)

    def set_peak_lr(self, lr: float) -> None:
        self._trained().set_peak_lr(lr)

    def offload_states(self) -> None:
        self._trained().offload_states()

    def reload_states(self) -> None:
        self._trained().reload_states()


def _nan_loss(loss_fn: Callable) -> Callable:
    def wrapped(model: Any, batch: Any, norm: Any) -> Any:
        loss, metrics = loss_fn(model, batch, norm)
        return loss * float("nan"), metrics

    return wrapped


def _to_cpu(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, dict):
        return {k: _to_cpu(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(v) for v in x)
    return x
