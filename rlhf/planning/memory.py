"""Memory estimate per device, a pure function of the spec. Formulas (bytes; P = parameter count):

Parameter count (from the model card's dimensions)
    embed = V*h; lm_head = V*h unless tied; per layer: attention h*(a*d) + 2*h*(k*d) + (a*d)*h (+ biases a*d + 2*k*d
    for qwen2), MLP 3*h*I, two norms 2*h; final norm h.    (V vocab, h hidden, a heads, k kv heads, d head dim, I MLP)

Model states of the trained roles (policy, critic) and frozen roles (reference, reward, teacher) come from the
    training backend of trainer.backend (rlhf.spec.registry): DeepSpeed ZeRO's accounting in
    rlhf.backends.train.deepspeed.descriptor, FSDP2's in rlhf.backends.train.fsdp2.memory. LoRA: the adapters are the
    trained parameters. The teacher of on-policy distillation has teacher.params_b billion parameters, or the
    student's count when that is not given. The states shard over every rank of the role whatever its mesh (with
    sequence parallelism too: DeepSpeed's ZeRO and FSDP2 partition over all of the role's ranks).
Activations (trained roles, per rank; :func:`activation_parts`, checked against measured peaks by
    bench/activation_memory.py, the table in docs/how-to/long-context.md). A micro-batch holds T tokens
    (micro_batch_per_device x data.max_len, or the token budget trainer.max_tokens_per_micro_batch x the sequence
    size N: a sample longer than the budget trains alone, so at least data.max_len); each rank of a sequence group
    computes t = T/N of them (trainer.sequence_parallel_size; 1: t = T). b bytes per value (2 bf16/fp16, 4 fp32).
    What autograd keeps per layer, per token of the rank (transformers' Llama/Qwen layers, counted tensor by tensor):
      norms      two RMSNorms, each the input upcast to fp32, the normalized value and its weighted output:
                 2 (4 + 2b) h  (qwen3 also normalizes q and k per head: (4 + b)(a + k)d)
      attention  q, k, v after RoPE and the kernel's output (the output projection's input is a view of it), its
                 logsumexp 4a: flash-attention and sdpa on rows of one sample (2a + 2k)d b; sdpa on rows of several
                 samples repeats k and v to a heads (4ad b); Ulysses (N > 1) holds the exchanged q, k and v of
                 this rank's heads over the whole row (k, v repeated to them: 3ad b under ulysses_sdpa; flash:
                 (a + 2 max(k, N))d b), the kernel's output and the same output back in this rank's columns (2ad b)
      MLP        gate, its SiLU, up and their product: 4 I b
    plus once: the final norm (4 + 2b)h, RoPE's cos and sin 2d b.
    Packed rows of several samples under sdpa without sequence parallelism (trainer.packing, rows as wide as the
    longest sample W): transformers' block mask, W x W booleans per row, which torch's sdpa turns into a float mask
    in every layer (L b W^2 per row; eager also keeps the attention probabilities, a b W^2). The plan counts every
    sample at full length, one per row, so it counts none; a row of shorter samples packed together can need it
    (docs/how-to/long-context.md: flash_attention_2 or sequence parallelism have none).
    The logits (the policy; a critic's value head scores one value per token): the trainers score the next tokens
    LOGIT_CHUNK_TOKENS (1024) positions at a time, forward and backward (rlhf.models.head_scores: each chunk's
    logits recomputed in the backward), so what the vocabulary costs is one chunk's fp32 temporaries at the peak,
    LOGIT_TEMPORARIES x min(1024, t) x V x 4, whatever the length; the head's input is the final norm's output.
    Gradient checkpointing keeps each layer's input (h b) and one layer's activations at a time (recomputed).
    trainer.activation_mb_per_token overrides all of this with a measured figure (MiB per token of the rank).
Rollout: the estimate of the rollout backend of rollout.backend (rlhf.backends.contract.rollout.RolloutBackend.memory):
vLLM
    on GPUs rollout.vllm.gpu_memory_utilization x device memory, holding its weights (2P/TP) and the KV cache (the
    rest; 2*layers*k*d*2 bytes per token), on CPU weights + rollout.vllm.cpu_kv_cache_gb
    (rlhf.backends.rollout.vllm.descriptor);
    hf: weights + the KV cache of its share of prompts_per_step*samples_per_prompt sequences of data.max_len
    (rlhf.backends.rollout.hf.descriptor).
Colocated roles take turns when the rollout sleeps (rollout.enable_sleep): the device peak is the larger of the
training phase (all DeepSpeed roles' states + activations) and the rollout phase (rollout memory + the resident
16-bit weights of the DeepSpeed roles); without sleep the two add up.
Weight sync (rollout.weight_sync), per device, with B = max(weight_sync_bucket_mb, the largest single weight):
    policy   sharded (ZeRO-3, FSDP2): every rank gathers one bucket (B) and rank 0 also packs it (B): 2B; else rank 0
             packs (B)
    rollout  the received bucket (B; vLLM keeps a partly loaded layer's tensors, counted in the same B)
    host     CPU shared_memory: the /dev/shm segment (two chunks of max(256 MB, the largest weight), once per node);
             object_store (the reference route): every
             policy rank's full host copy (P weights); rank 0's packed copy and the object store's, plus the copies
             the engines make of it (vLLM with TP > 1: one), per node
The sync phase holds the DeepSpeed roles' resident states (no activations), the sync buffers and, colocated, the
engine's weights (its KV cache asleep): the device peak is the largest of the three phases.
Phases (:func:`phases`, what is in device memory in each, for a group whose rollout takes turns with the policy):
    start       the trainers' models, the engines asleep (built and put to sleep before the trainers load)
    generation  the trainers' 16-bit weights (their optimizer states, master weights and gradients offloaded),
                the engines' weights and KV cache
    train       the trainers' full states, the engines asleep
    sync        the trainers' states, the engines' weights (KV cache asleep), the sync buffers
rlhf.pipelines.rl_roles.HybridSchedule runs these in this order; ``rlhf-plan --rehearse`` checks that it does.
Host memory per node (rlhf.planning.plan): the host columns of every rank on the node (offloaded optimizer states and
parameters, offloaded frozen models) plus the sync's host staging, against hardware.host_memory_gb; on CPU hardware
the devices themselves are host memory, so their peaks count too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlhf.backends.contract.rollout import kv_cache_bytes_per_token
from rlhf.backends.contract.training import ModelStates
from rlhf.spec.derive import Derived
from rlhf.spec.registry import rollout_backend, train_backend
from rlhf.spec.rollout_backend_rules import generates_in_policy
from rlhf.spec.schema import ExperimentSpec, ModelSpec

GB = 1024**3


def param_count(m: ModelSpec) -> tuple[int, int]:
    """(total parameters, parameters of the largest layer) from the model card's dimensions."""
    h, a, k, d = m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim
    attn = h * (a * d) + 2 * h * (k * d) + (a * d) * h
    if m.architecture == "qwen2":
        attn += a * d + 2 * k * d
    mlp = 3 * h * m.intermediate_size
    layer = attn + mlp + 2 * h
    embed = m.vocab_size * h
    head = 0 if m.tie_word_embeddings else m.vocab_size * h
    total = embed + head + m.num_layers * layer + h
    return total, max(layer, embed)


def teacher_params(spec: ExperimentSpec) -> int:
    """The distillation teacher's parameters: ``teacher.params_b`` when given, else counted as the student."""
    if spec.teacher.params_b is not None:
        return int(spec.teacher.params_b * 1e9)
    return param_count(spec.model)[0]


def lora_param_count(m: ModelSpec) -> int:
    """Adapter parameters of rank r on every linear layer (all-linear): r x (in + out) per matrix."""
    r = m.lora.rank
    if r <= 0:
        return 0
    h, a, k, d, inter = m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim, m.intermediate_size
    per_layer = r * ((h + a * d) + 2 * (h + k * d) + (a * d + h) + 2 * (h + inter) + (inter + h))
    return m.num_layers * per_layer


def synced_param_count(spec: ExperimentSpec) -> int:
    """Parameters a weight sync sends: the adapters alone with rollout.weight_sync_lora=adapter (LoRA on), else
    every weight (a merged sync sends the base with the adapters folded in)."""
    adapter = spec.model.lora.rank > 0 and spec.rollout.weight_sync_lora == "adapter"
    return lora_param_count(spec.model) if adapter else param_count(spec.model)[0]


@dataclass(frozen=True)
class StateBytes:
    """Bytes per device of one role's model states, split by kind."""

    weights: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0  # master weights + fp32 grads + Adam moments
    activations: float = 0.0
    rollout: float = 0.0  # rollout engine: weights + KV cache
    host: float = 0.0  # offloaded to host memory (per device)

    @property
    def device(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.rollout


def _state_bytes(s: ModelStates) -> StateBytes:
    return StateBytes(weights=s.weights, grads=s.grads, optimizer=s.optimizer, host=s.host)


#: Tokens whose logits exist at once when the trainers score the next tokens (rlhf.algo.logprobs.LOGIT_CHUNK_TOKENS,
#: here without importing torch; tests/planning/test_activation_memory.py checks that they agree).
LOGIT_CHUNK_TOKENS = 1024
#: fp32 ``chunk x vocabulary`` temporaries of one chunk's scoring at the start of the backward (its logits
#: recomputed, their fp32 copy, softmax, the gradients), beside every layer's kept activations: measured by
#: bench/activation_memory.py as the peak less what autograd keeps, 5.4-7.0 chunks at 2k-16k tokens (fp32 Llama, bf16
#: Qwen3; 8.4 once, at 16k without sequence parallelism), 2026-12-07 14:40-16:15 UTC on this 2-core machine, shared
#: with other sessions (load average 3-17: memory does not depend on it); docs/how-to/long-context.md has the table.
LOGIT_TEMPORARIES = 6


def micro_batch_tokens(spec: ExperimentSpec, micro_batch: int) -> int:
    """Tokens of one training micro-batch of a sequence group: ``micro_batch`` samples of data.max_len, or the token
    budget (trainer.max_tokens_per_micro_batch per rank, so N times it for a group of N ranks) where one is set; a
    sample longer than the budget trains alone (rlhf.pipelines.batching): the longest one bounds it."""
    t = spec.trainer
    if t.max_tokens_per_micro_batch:
        return max(t.max_tokens_per_micro_batch * max(t.sequence_parallel_size, 1), spec.data.max_len)
    return micro_batch * spec.data.max_len


def _attention_per_token(spec: ExperimentSpec, b: int, masked: bool) -> float:
    """Bytes the attention keeps per token of the rank (the module docstring's attention line)."""
    m, sp = spec.model, max(spec.trainer.sequence_parallel_size, 1)
    a, k, d = m.num_heads, m.num_kv_heads, m.head_dim
    lse = 4 * a
    if sp > 1:  # Ulysses: exchanged q, k, v; the kernel's output in heads, and back in columns
        kv = 2 * max(k, sp) if m.attn_implementation == "flash_attention_2" else 2 * a
        return (a + kv + 2 * a) * d * b + lse
    if masked:  # sdpa / eager with a block mask: transformers repeats k and v to every query head
        return 4 * a * d * b + lse
    return (2 * a + 2 * k) * d * b + lse


def _layer_bytes(spec: ExperimentSpec, tokens: int, b: int, masked: bool) -> float:
    """One decoder layer's activations for ``tokens`` of this rank's columns."""
    m = spec.model
    h, a, k, d = m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim
    norms = 2 * (4 + 2 * b) * h + ((4 + b) * (a + k) * d if m.architecture == "qwen3" else 0)
    return tokens * (norms + _attention_per_token(spec, b, masked) + 4 * m.intermediate_size * b)


def _logit_bytes(spec: ExperimentSpec, tokens: int) -> float:
    """The scored logits' chunk (fp32)."""
    return LOGIT_TEMPORARIES * min(LOGIT_CHUNK_TOKENS, tokens) * spec.model.vocab_size * 4


def activation_parts(
    spec: ExperimentSpec, micro_batch: int, *, role: str = "policy", samples_per_row: int = 1
) -> dict[str, float]:
    """Bytes per rank of one training micro-batch's activations, by part (the module docstring's formulas).
    ``samples_per_row``: samples packed in each row (the plan's full-length samples: 1)."""
    m, t = spec.model, spec.trainer
    sp = max(t.sequence_parallel_size, 1)
    total = micro_batch_tokens(spec, micro_batch)
    tokens = math.ceil(total / sp)  # this rank's columns
    if t.activation_mb_per_token is not None:
        return {"measured (trainer.activation_mb_per_token)": tokens * t.activation_mb_per_token * 1024**2}
    b = 2 if t.precision in ("bf16", "fp16") else 4
    h, a, d, L = m.hidden_size, m.num_heads, m.head_dim, m.num_layers
    masked = sp == 1 and samples_per_row > 1 and t.packing and m.attn_implementation in ("sdpa", "eager")
    layer = _layer_bytes(spec, tokens, b, masked)
    mask = 0.0
    if masked:  # rows as wide as the longest sample: the block mask (booleans) and its float copy in each layer
        width = min(spec.data.max_len, total)
        square = math.ceil(total / width) * width * width
        mask = square * (1 + (1 if t.gradient_checkpointing else L) * b)
        if m.attn_implementation == "eager":
            mask += square * a * b * (1 if t.gradient_checkpointing else L)
    kept = tokens * h * b * L + layer if t.gradient_checkpointing else layer * L
    return {
        "layers": kept,
        "attention mask": mask,
        "final norm, RoPE": tokens * ((4 + 2 * b) * h + 2 * d * b),
        "logits": _logit_bytes(spec, tokens) if role != "critic" else 0.0,  # the critic's head: a value per token
    }


def activation_bytes(
    spec: ExperimentSpec, micro_batch: int, *, role: str = "policy", samples_per_row: int = 1
) -> float:
    """Bytes per rank of one training micro-batch's activations (:func:`activation_parts`, summed)."""
    return sum(activation_parts(spec, micro_batch, role=role, samples_per_row=samples_per_row).values())


def forward_bytes(spec: ExperimentSpec, micro_batch: int) -> float:
    """Bytes per rank of a no-grad forward of ``micro_batch`` samples per sequence group (the experience pass's
    log-probs, values, rewards): nothing is kept for a backward, so one layer's activations at a time beside its
    input and output, and the scored logits' chunk; ``micro_batch`` samples of data.max_len whatever the token
    budget. Called for every candidate of rlhf-plan --auto: computed from the spec as it is, not a copy of it."""
    m, t = spec.model, spec.trainer
    tokens = math.ceil(micro_batch * spec.data.max_len / max(t.sequence_parallel_size, 1))
    b = 2 if t.precision in ("bf16", "fp16") else 4
    return _layer_bytes(spec, tokens, b, False) + 2 * tokens * m.hidden_size * b + _logit_bytes(spec, tokens)


def kv_bytes_per_token(m: ModelSpec, precision: str) -> int:
    return kv_cache_bytes_per_token(m, 2 if precision in ("bf16", "fp16") else 4)


def rollout_bytes(spec: ExperimentSpec, params: int) -> tuple[float, float]:
    """(device bytes the rollout engine holds per device, KV cache bytes within it): the backend's estimate."""
    mem = rollout_backend(spec.rollout.backend).memory(spec, params)
    return mem.device, mem.kv_cache


def largest_tensor(m: ModelSpec) -> int:
    """Parameters of the largest single weight matrix (embedding or lm_head, an MLP or attention projection)."""
    h, a, k, d = m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim
    return max(m.vocab_size * h, h * m.intermediate_size, h * a * d, h * k * d)


@dataclass(frozen=True)
class SyncBytes:
    """Extra bytes the weight sync needs, per device of a role and on the host."""

    route: str
    bucket: float  # B: bytes of one bucket
    device: dict[str, float] = field(default_factory=dict)  # role -> bytes per device during a sync
    host_per_rank: dict[str, float] = field(default_factory=dict)  # role -> host bytes per rank
    host_per_node: float = 0.0  # shared segment / object store / driver copies, once per node


def sync_bytes(spec: ExperimentSpec, derived: Derived, params: int) -> SyncBytes | None:
    """The weight sync's memory (see the module docstring); None when the run has no rollout engines, or no policy
    to send them weights (rollout.only), or when the policy's ranks generate themselves (rollout.hf.in_policy)."""
    if "rollout" not in derived.roles or "policy" not in derived.roles or generates_in_policy(spec):
        return None
    ro, hw = spec.rollout, spec.hardware
    wbytes = 4 if (hw.accelerator == "cpu" or spec.trainer.precision == "fp32") else 2
    full = synced_param_count(spec) * wbytes
    bucket = max(ro.weight_sync_bucket_mb * 2**20, largest_tensor(spec.model) * wbytes)
    if full < params * wbytes:  # adapters only: no bucket holds more than all of them
        bucket = min(bucket, full)
    route = ro.weight_sync
    sharded = train_backend(spec.trainer.backend).gathers_on_every_rank(spec)
    device = {"policy": (2 * bucket) if sharded else bucket, "rollout": bucket}
    host_rank: dict[str, float] = {}
    host_node = 0.0
    if route == "object_store":
        device = {"policy": bucket if sharded else 0.0, "rollout": 0.0}
        host_rank["policy"] = full  # named_weights: every rank's host copy
        # rank 0's packed copy, the object store's, and what the engines copy of it
        host_node = full * (2 + rollout_backend(ro.backend).memory(spec, params).packed_copies)
    elif route in ("shared_memory", "auto") and hw.accelerator == "cpu":
        # the /dev/shm segment beside the sender: two chunks (rlhf.backends.weight_sync.sender.SHARED_CHUNK)
        host_node = 2 * min(max(min(256 * 2**20, bucket), largest_tensor(spec.model) * wbytes), full)
    return SyncBytes(route=route, bucket=bucket, device=device, host_per_rank=host_rank, host_per_node=host_node)


PHASES = ("start", "generation", "train", "sync")


def sleeps(spec: ExperimentSpec, group: tuple[str, ...]) -> bool:
    """Whether the rollout of ``group`` takes turns with the policy (rlhf.pipelines.rl_roles.takes_turns)."""
    ro = spec.rollout
    if generates_in_policy(spec):
        return False  # one process holds both: nothing to swap
    return ro.enable_sleep and not ro.async_mode and "rollout" in group and "policy" in group


def phases(spec: ExperimentSpec, group: tuple[str, ...]) -> dict[str, dict[str, tuple[str, ...]]]:
    """Per phase, what of the trained roles ("weights", "states") and of the engines ("weights", "kv_cache") is in
    device memory (see the module docstring); without turns nothing moves."""
    full = {"trained": ("states", "weights"), "rollout": ("kv_cache", "weights")}
    if not sleeps(spec, group):
        return {p: dict(full) for p in PHASES}
    return {
        "start": {"trained": ("states", "weights"), "rollout": ()},
        "generation": {"trained": ("weights",), "rollout": ("kv_cache", "weights")},
        "train": {"trained": ("states", "weights"), "rollout": ()},
        "sync": {"trained": ("states", "weights"), "rollout": ("weights",)},
    }


@dataclass(frozen=True)
class GroupMemory:
    roles: tuple[str, ...]
    per_role: dict[str, StateBytes] = field(default_factory=dict)
    train_phase_gb: float = 0.0
    rollout_phase_gb: float = 0.0
    sync_phase_gb: float = 0.0  # resident states + weight-sync buffers (+ a colocated engine's weights)
    peak_gb: float = 0.0
    capacity_gb: float = 0.0
    kv_cache_gb: float = 0.0
    kv_cache_tokens: int = 0

    @property
    def fits(self) -> bool:
        return self.peak_gb <= self.capacity_gb

    @property
    def overflow_gb(self) -> float:
        return max(self.peak_gb - self.capacity_gb, 0.0)


def estimate(spec: ExperimentSpec, derived: Derived) -> list[GroupMemory]:
    """Per device group: bytes per device of each role, the phases' totals and the peak against capacity."""
    t = spec.trainer
    backend = train_backend(t.backend)  # the model states per role are the training backend's estimate
    params, largest = param_count(spec.model)
    lora = lora_param_count(spec.model)
    sync = sync_bytes(spec, derived, params)
    out = []
    for group in derived.groups:
        per_role: dict[str, StateBytes] = {}
        kv = 0.0
        for role in group:
            # the states shard over every rank of the role, its sequence groups' too (DeepSpeed's ZeRO and FSDP2
            # partition over all of them); the activations split by the sequence size (activation_parts)
            dp = max(derived.devices.get(role, 1), 1)
            if role in ("policy", "critic"):
                trainable = lora if (role == "policy" and lora) else None
                s = backend.trained_states(
                    spec, params=params + (lora if trainable else 0), largest_layer=largest, dp=dp, trainable=trainable
                )
                act = activation_bytes(spec, t.micro_batch_per_device, role=role)
                per_role[role] = StateBytes(s.weights, s.grads, s.optimizer, act, 0.0, s.host)
            elif role in ("reference", "reward", "teacher"):
                offload = {"reference": spec.reference.offload, "reward": spec.reward.offload}.get(
                    role, spec.teacher.offload
                )
                size = teacher_params(spec) if role == "teacher" else params
                s = backend.frozen_states(spec, params=size, largest_layer=largest, dp=dp, offload=offload)
                per_role[role] = _state_bytes(s)
            elif role == "rollout":
                total, kv = rollout_bytes(spec, params)
                per_role[role] = StateBytes(rollout=total)
        train = sum(s.device for r, s in per_role.items() if r != "rollout")
        ro = per_role.get("rollout")
        if ro is None:
            rollout_phase = 0.0
            peak = train
        elif sleeps(spec, group):
            resident = sum(s.weights for r, s in per_role.items() if r != "rollout")
            rollout_phase = ro.rollout + resident
            peak = max(train, rollout_phase)
        else:
            rollout_phase = ro.rollout + train
            peak = rollout_phase
        sync_phase = 0.0
        if sync is not None and any(r in sync.device for r in group):
            states = sum(s.device - s.activations for r, s in per_role.items() if r != "rollout")
            engine = 0.0
            if ro is not None:
                engine_weights = rollout_backend(spec.rollout.backend).memory(spec, params).weights
                engine = engine_weights if sleeps(spec, group) else ro.rollout  # weights woken, KV cache not
            sync_phase = states + engine + sum(sync.device.get(r, 0.0) for r in group)
            peak = max(peak, sync_phase)
        out.append(
            GroupMemory(
                roles=group,
                per_role=per_role,
                train_phase_gb=train / GB,
                rollout_phase_gb=rollout_phase / GB,
                sync_phase_gb=sync_phase / GB,
                peak_gb=peak / GB,
                capacity_gb=spec.hardware.device_memory_gb,
                kv_cache_gb=kv / GB,
                kv_cache_tokens=int(kv / max(kv_bytes_per_token(spec.model, "bf16"), 1)) if kv else 0,
            )
        )
    return out
