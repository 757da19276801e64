"""``trainer.*``: optimizer, schedule, batches and the training engine; one sub-section per registered training
backend with keys of its own (``trainer.<name>.*``, from its registry line: rlhf.spec.sections.backends)."""

from __future__ import annotations

from rlhf.spec import names, registry
from rlhf.spec.keys import items, key
from rlhf.spec.sections.backends import with_backend_sections


# A frozen dataclass whose fields after ``backend`` are the sub-sections ``trainer.<name>`` of the registered backends
# with keys of their own (rlhf.spec.sections.backends), in the order of registry.TRAIN_BACKENDS.
@with_backend_sections("trainer", registry.TRAIN_BACKENDS)
class TrainerSpec:
    """Optimizer, schedule, batches and the training engine, shared by every trained role.

    ``backend`` picks the engine (rlhf.spec.registry). Keys every engine reads sit here; DeepSpeed's ZeRO keys
    (zero_stage, offload_optimizer, offload_params) stay here too, where OpenRLHF users look for them
    (``rlhf-run +recipe=grpo_llama3_8b trainer.zero_stage=3``); any other backend's own keys live in its sub-section
    (``trainer.fsdp2.*``). Keys of a backend not selected must stay at their defaults (validation says so)."""

    backend: str = key(
        "deepspeed",
        "training engine: deepspeed (ZeRO; keys zero_stage, offload_optimizer, offload_params) | fsdp2 (torch "
        "fully_shard; keys under trainer.fsdp2)",
        choices=names.TRAIN_BACKENDS,
    )
    global_batch: int = key(128, "samples per optimizer step, across all data-parallel ranks", ge=1)
    micro_batch_per_device: int = key(
        1, "samples per forward/backward on one device (unless trainer.max_tokens_per_micro_batch is set)", ge=1
    )
    packing: bool = key(
        True,
        "pack each forward's samples back to back into rows, position ids restarting per sample (transformers' "
        "packed-sequence masks keep samples apart; flash-attention: varlen), so padding is not computed; a model off "
        "transformers' attention interface runs padded (OpenRLHF --ds.packing_samples, veRL use_remove_padding)",
    )
    sequence_parallel_size: int = key(
        1,
        "ranks each sample's tokens are split over (Ulysses: queries, keys and values exchanged between sequence and "
        "heads, so each rank holds 1/N of every activation) in every forward of the policy, reference, critic, reward "
        "model and teacher; the data-parallel size is then ranks / N, and trainer.micro_batch_per_device counts the "
        "samples of one such group; needs trainer.packing (OpenRLHF --ds.ring_attn_size, veRL "
        "ulysses_sequence_parallel_size)",
        ge=1,
    )
    max_tokens_per_micro_batch: int = key(
        0,
        "training micro-batches by tokens: about this many real tokens per forward/backward on one device, the same "
        "number of micro-batches on every rank, the loss that of the whole step; a sample longer than it trains in a "
        "micro-batch of its own (logged: over_budget_samples; RM/DPO pairs must fit); 0: micro_batch_per_device "
        "samples (OpenRLHF --train.dynamic_batch_enable + --train.max_tokens_per_gpu, veRL ppo_max_token_len_per_gpu)",
        ge=0,
    )
    max_tokens_per_forward: int = key(
        0,
        "the same for passes without gradients (old/reference/teacher log-probs, values, rewards); 0: "
        "max_tokens_per_micro_batch, or rollout.micro_batch_per_device samples when that is 0 too (OpenRLHF "
        "--rollout.max_tokens_per_gpu, veRL log_prob_max_token_len_per_gpu)",
        ge=0,
    )
    epochs_per_rollout: int = key(1, "RL: optimizer passes over each rollout batch (OpenRLHF train.max_epochs)", ge=1)
    num_episodes: int = key(1, "RL: passes over the prompt set", ge=1)
    epochs: int = key(1, "SFT/RM/DPO: passes over the dataset", ge=1)
    max_steps: int | None = key(
        None, "stop after this many steps (RL steps, or optimizer steps for SFT/RM/DPO); null: the epochs decide", ge=1
    )
    zero_stage: int = key(2, "DeepSpeed ZeRO stage (backend=deepspeed; fsdp2 always shards)", choices=(0, 1, 2, 3))
    precision: str = key("bf16", "training precision (fp16 needs a GPU)", choices=names.PRECISIONS)
    offload_optimizer: bool = key(False, "DeepSpeed: optimizer states in host memory (fsdp2: fsdp2.cpu_offload)")
    offload_params: bool = key(False, "DeepSpeed ZeRO-3: parameters in host memory (fsdp2: fsdp2.cpu_offload)")
    gradient_checkpointing: bool = key(False, "recompute activations in the backward pass")
    optimizer: str = key(
        "adamw",
        "adamw (torch) | fused_adam (DeepSpeed's, compiled on first use; under fsdp2 torch's fused AdamW) | cpu_adam "
        "(DeepSpeed's, compiled on first use; deepspeed only)",
        choices=names.OPTIMIZERS,
    )
    lr: float = key(1e-6, "peak learning rate (policy, or the SFT/RM/DPO model)", gt=0)
    critic_lr: float = key(9e-6, "peak learning rate of the critic", gt=0)
    betas: list[float] = key(factory=lambda: [0.9, 0.95], doc="Adam betas", length=2, items=items(ge=0, lt=1))
    eps: float = key(1e-8, "Adam epsilon", gt=0)
    weight_decay: float = key(0.0, "decoupled weight decay", ge=0)
    lr_scheduler: str = key("cosine_with_min_lr", "learning-rate schedule", choices=names.LR_SCHEDULERS)
    warmup_ratio: float = key(0.03, "fraction of the steps spent warming up", ge=0, le=1)
    min_lr_ratio: float = key(0.1, "cosine_with_min_lr: final lr as a fraction of the peak", ge=0, le=1)
    max_norm: float = key(1.0, "gradient clipping norm; 0 disables clipping", ge=0)
    activation_mb_per_token: float | None = key(
        None, "override the plan's activation estimate (MiB per token; null: the formula)", gt=0
    )
    max_restarts: int | None = key(
        None,
        "crashed or hung actors restarted per run before it stops (a rollout engine in place; a training rank: "
        "every actor, from the last checkpoint); 0: stop at the first; null: 3 on the ray executor, 0 on local "
        "(one process: a failure stops the run at its last checkpoint, resumed with --resume). A value above 0 asks "
        "for Ray (launch.executor)",
        ge=0,
    )
    remote_timeout_s: float = key(
        1800.0, "a call to a training rank or rollout engine taking longer is treated as hung (restarted)", gt=0
    )
    startup_timeout_s: float | None = key(
        None,
        "an actor's start-up (its process placed, its model loaded, an engine built; again after a restart) taking "
        "longer is treated as hung; null: trainer.remote_timeout_s. Set it apart when steps are short and models big",
        gt=0,
    )
    heartbeat_timeout_s: float | None = key(
        None,
        "a training rank or rollout engine that answered a liveness call before and leaves one unanswered this "
        "long while the driver waits on it is stalled (killed, then restarted as a crashed one); independent of "
        "how long real work takes (trainer.remote_timeout_s); null: 30 on the ray executor, none on local (its "
        "roles run in the driver's own process). A value asks for Ray (launch.executor)",
        gt=0,
        le=3600,
    )
    on_nonfinite: str = key(
        "stop",
        "a NaN/inf loss or gradient norm: stop (naming step, role and metric; the last checkpoint stays loadable) "
        "| skip (the engine drops the step's update: DeepSpeed ZeRO 1-3, or fsdp2; 3 skipped in a row stop the run)",
        choices=("stop", "skip"),
    )

    @property
    def startup_s(self) -> float:
        """The bound on an actor's start-up: ``startup_timeout_s``, else ``remote_timeout_s``."""
        return self.startup_timeout_s if self.startup_timeout_s is not None else self.remote_timeout_s
