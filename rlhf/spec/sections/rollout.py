"""``rollout.*``: the generation engine and sampling; one sub-section per registered rollout backend with keys of
its own (``rollout.<name>.*``, from its registry line: rlhf.spec.sections.backends)."""

from __future__ import annotations

from rlhf.spec import names, registry
from rlhf.spec.keys import key
from rlhf.spec.sections.backends import with_backend_sections


# A frozen dataclass whose fields after ``backend`` are the sub-sections ``rollout.<name>`` of the registered backends
# with keys of their own (rlhf.spec.sections.backends), in the order of registry.ROLLOUT_BACKENDS.
@with_backend_sections("rollout", registry.ROLLOUT_BACKENDS)
class RolloutSpec:
    """conf/rollout/*.yaml: the generation engine and sampling.

    ``backend`` picks the engine (rlhf.spec.registry; its contract rlhf.backends.contract.rollout). Keys every
    engine reads sit here; a backend's own keys live in its sub-section (``rollout.vllm.*``, ``rollout.hf.*``),
    which must stay at its defaults when another backend is selected (validation says so)."""

    backend: str = key(
        "vllm",
        "generation engine: vllm (keys under rollout.vllm) | hf (transformers generate, keys under rollout.hf)",
        choices=names.ROLLOUT_BACKENDS,
    )
    prompts_per_step: int = key(128, "prompts per RL step (OpenRLHF rollout.batch_size)", ge=1)
    samples_per_prompt: int = key(1, "completions per prompt (group size n)", ge=1)
    max_new_tokens: int = key(1024, "generated tokens per sample at most", ge=1)
    # Log-probs, in both engines and the trainer (rlhf.backends.contract.logprob_meaning): log-softmax(logits /
    # temperature)
    # over the full vocabulary at the sampled token. top_k, top_p and min_new_tokens choose what is sampled and
    # never enter that number, so rollout and trainer log-probs differ only by numerics whatever they are set to.
    min_new_tokens: int = key(
        0,
        "eos and stop token ids are masked until this many tokens exist (not in the log-probs; stop strings may "
        "still end a sample); 0: off",
        ge=0,
    )
    temperature: float = key(
        1.0,
        "sampling temperature; rollout and training log-probs are log-softmax(logits / temperature); 0: greedy "
        "(log-probs at temperature 1)",
        ge=0,
    )
    top_p: float = key(
        1.0, "nucleus sampling mass: filters what is sampled, not the log-probs (full distribution's)", gt=0, le=1
    )
    top_k: int = key(-1, "sample among the k most likely tokens (not applied to the log-probs); -1 (or 0): off", ge=-1)
    stop: list[str] = key(factory=list, doc="stop strings besides the tokenizer's eos (kept in the output)")
    num_engines: int = key(1, "rollout engines", ge=1)
    tensor_parallel_size: int = key(1, "devices per engine; must fit within one node (hf: 1)", ge=1)
    enable_sleep: bool = key(
        True,
        "hybrid engine: colocated with the policy, the engines release their device memory while the trainers "
        "train and the trainers theirs while the engines generate (vLLM: its sleep mode; hf: the model to host)",
    )
    micro_batch_per_device: int = key(4, "samples per forward when computing log-probs, values and rewards", ge=1)
    weight_sync: str = key(
        "auto",
        "trainer -> engines: auto (shared_memory beside the policy's rank 0, broadcast elsewhere) | broadcast (a "
        "process group: nccl on GPUs, gloo on CPU) | shared_memory (CPU: /dev/shm, GPU: CUDA IPC) | object_store "
        "(through Ray's object store and the driver: the reference route)",
        choices=names.WEIGHT_SYNC_ROUTES,
    )
    weight_sync_lora: str = key(
        "merged",
        "with LoRA on (model.lora.rank > 0), what a sync sends: merged (the adapters merged into the base, every "
        "weight, any engine) | adapter (the LoRA A/B matrices only, into engines that hold the base plus an adapter: "
        "hf and vllm; validation refuses it for an engine that cannot)",
        choices=names.WEIGHT_SYNC_LORA,
    )
    weight_sync_backend: str = key(
        "",
        "data backend of the broadcast route; empty: nccl on GPUs, gloo on CPU",
        choices=("gloo", "nccl"),
        empty_ok=True,
    )
    weight_sync_bucket_mb: float = key(
        512.0,
        "weights travel in buckets of about this size (a larger tensor gets its own); ZeRO-3 gathers one at a time",
        gt=0,
    )
    weight_sync_checksums: bool = key(True, "every tensor's checksum checked by each engine on the bytes it received")
    weight_sync_timeout_s: float = key(
        600.0, "an engine that does not finish a sync (or its set-up) within this many seconds is named and fails", gt=0
    )
    verify_sync_every: int = key(
        10, "log-prob probe of every engine against the trainer after the first sync and every N syncs; 0: never", ge=0
    )
    verify_sync_tolerance: float = key(
        0.05, "mean |log-prob| difference of an engine from the trainer on the probe above which the run stops", gt=0
    )
    async_mode: bool = key(False, "generate step k+1 while training step k (staleness bounded to one step)")
    # Record and replay (rlhf.data.rollout_records): one Parquet file per RL step. Relative paths are relative to
    # the directory rlhf-run was started from, like data files.
    record: str = key(
        "",
        "write each RL step's scored rollouts (token ids, masks, log-probs, rewards, seed) to this folder as they "
        "are made, one Parquet file per step; a resumed run continues it; empty: off",
    )
    replay: str = key(
        "",
        "train-only: take each step's rollouts from a recording (rollout.record) instead of generating; no rollout "
        "engine or reward model starts (the other roles keep the devices they had beside them), evaluation is "
        "skipped (it samples from the engines); empty: off",
    )
    only: bool = key(
        False,
        "rollout-only: generate and score (and record with rollout.record, evaluate with eval.steps) with no "
        "training role started: no policy trainer, reference, critic or teacher",
    )
