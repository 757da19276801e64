"""An estimated step time per phase, a pure function of the spec and its plan: what ``rlhf-plan --auto`` ranks layouts
by. No Ray, no torch; a few microseconds per layout.

A step is one RL step (one rollout batch: generate, score, experience, train, sync), or one optimizer step of SFT, RM
and DPO. Its phases run one after the other, as the RL pipeline runs them (rlhf.pipelines.rl); with
``rollout.async_mode`` generation overlaps experience and training, so the step is the longer of the two:

    generation   prefill + decode on each engine, the engines side by side (the step waits for the slowest)
    reward       the reward model's forward over every sample (it scores while the step generates)
    experience   old log-probs (skipped where the pipeline reuses the training forward's or takes the engine's),
                 reference / teacher log-probs, critic values, one role after the other, each role's ranks side by side
    train        critic then policy: forward + backward per micro-batch, gradient and parameter traffic of the
                 training engine, the optimizer step, times the optimizer steps per rollout
    sync         the weight sync: the sharded gather, the transfer by route, the engines' load of the new weights
    bubble       what colocation costs beyond running the phases in turn: the trainers' states moved to host
                 memory around generation and back (hybrid engine: rollout.enable_sleep beside the policy), the
                 engines put to sleep and woken; with split placement the cost of colocation's absence shows up
                 instead as fewer devices in each phase (the devices of one phase idle while another runs)
    overhead     the driver's fixed cost per step and per remote call

Symbols: P parameters of a model (rlhf.planning.memory.param_count; LoRA trains the adapters but backpropagates
through P), L layers, h hidden size, a heads of dimension d, V vocabulary; S samples per step; s = p + r tokens per
sample (p = the plan's max prompt tokens x PROMPT_FILL, r = rollout.max_new_tokens x RESPONSE_FILL; SFT/RM/DPO:
data.max_len x PROMPT_FILL); a device's peak F (hardware.device_tflops for 16-bit, device_tflops_fp32 for fp32) and
memory bandwidth B (hardware.memory_bandwidth_gbs); on CPU hardware the node's figures are shared by its
devices_per_node slots.

FLOPs (Kaplan et al. 2020; attention as in Korthikanti et al. 2022, causal):
    forward of t tokens in sequences of s:  2 P' t + 2 L a d s t    (P' = P without the input embedding: a lookup)
    training step: forward + backward 3x the forward (4x with gradient checkpointing: one forward again);
    LoRA: the frozen base needs no weight gradient, 2x + 2x(trained share)
Time of a compute phase: micro-batches x (MICRO_BATCH_S or FORWARD_S) + FLOPs / (F x TRAIN_EFF or FORWARD_EFF).
Decode, per engine of TP devices, per step of b sequences at mean context c (prompt + half the response):
    max( (2 P/TP + b c k_bytes/TP) / (B x DECODE_BW_EFF),  2 P' b / TP / (F x DECODE_FLOP_EFF) )
      + TP > 1: 2 L all-reduces of b h 16-bit values over the node's link + decode_step_s + b decode_seq_s
    b = the engine's samples, at most what it decodes at once (RolloutBackend.generation_batch; vLLM:
    rollout.vllm.max_num_seqs, else vLLM's default for the device, and at most what its KV cache holds, the plan's
    KV cache / k_bytes per token); more samples decode in waves. hf engine: up to 512 sequences per generate call.
    Prefill: the forward FLOPs of the prompts at PREFILL_EFF.
Training engine traffic per trained role of N ranks (ring collectives move (N-1)/N of the bytes; link: the node's
link_bandwidth_gbs, or network_bandwidth_gbs / devices_per_node where the role spans nodes; x COMM_EFF, with
COMM_OVERLAP of it hidden behind compute):
    every collective call also costs collective_s: ZeRO-0/1/2 one per gradient bucket (BUCKET_BYTES); FSDP2 one
              per unit (each decoder layer, the embeddings, the root) and ZeRO-3 one per module with parameters (9
              per decoder layer) for every gather and reduce-scatter
    ZeRO-0/1: all-reduce of the 16-bit gradients once per optimizer step (2x the bytes)
    ZeRO-2:   reduce-scatter of the gradients every micro-batch, all-gather of the weights per optimizer step
    ZeRO-3 and FSDP2: all-gather of the weights in forward and backward (and for the recomputed forward with
              checkpointing), reduce-scatter of the gradients, every micro-batch; FSDP2 reduces in fp32;
              reshard_after_forward=false saves the backward gather
    fixed cost of the sharded engine's hooks, on any number of ranks (even one, where nothing is gathered):
              ZeRO-3 (FSDP2) fetches and releases each of its gathered_units modules around every pass, so each
              costs zero3_module (fsdp2_unit) per module: train_s per training micro-batch (+ forward_s for the
              recomputed forward with checkpointing), forward_s per no-grad forward micro-batch (log-probs,
              reference, reward), step_s per optimizer step and sync_s per weight sync (the gathered read)
    offload (DeepSpeed offload_optimizer, FSDP2 cpu_offload): gradients down and weights up over host_link_gbs per
              optimizer step and the Adam step on the host (HOST_ADAM_BYTES_PER_PARAM at the host's memory
              bandwidth, HOST_BANDWIDTH_GBS); offload_params (ZeRO-3) and offloaded frozen models: their weights
              up over host_link_gbs for every micro-batch's forward (and backward)
    Adam on the device: ADAM_BYTES_PER_PARAM per trained parameter shard at B.
Sequence parallelism (trainer.sequence_parallel_size N, a role's mesh: rlhf.spec.mesh): the samples split over the
    role's data-parallel groups (ranks / N), each rank computing 1/N of every sample's tokens (the FLOPs above for
    t/N tokens: the attention of a/N heads over whole sequences); per layer and pass, Ulysses' four all-to-alls move
    (N-1)/N of this rank's q, k, v and attention output (t/N tokens x (2a + 2 max(k, N)) d values; kv heads fewer
    than N are repeated first) over the sequence group's link (the node's link, or the network for a group wider
    than a node), on the critical path (none hidden), + 4 collective_s: one pass for a no-grad forward, forward and
    backward in training (+ the recomputed forward with checkpointing).
Weight sync: a sharded policy all-gathers P 16-bit weights over its link first; then shared_memory (engines on the
    policy rank 0's device or node: CUDA IPC / a /dev/shm segment) copies the bytes at B twice (the sender's pack
    and each engine's copy), broadcast sends them over the link (network where an engine is on another node); the
    engines' load at B x ENGINE_LOAD_EFF; checksums (rollout.weight_sync_checksums) read the bytes once more on
    each side at B.
Colocation (the plan's phases, rlhf.planning.memory.phases): with turns, the trainers' gradients and optimizer states
    cross host_link_gbs out before generation and back before training, and WAKE_SLEEP_S per step for the engines.

Constants (``GPU`` and ``CPU`` below): every efficiency is a fraction of the datasheet peak, named and sourced at
its definition. The GPU ones come from published measurements and have not been checked here (no GPU); the CPU ones
were measured on the 2-core development machine (bench/cost_probe.py) and the whole model is checked against
measured step times in bench/calibrate_cost.py (bench/README.md, "Cost model calibration").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlhf.planning.memory import (
    GB,
    kv_bytes_per_token,
    lora_param_count,
    param_count,
    sleeps,
    synced_param_count,
    teacher_params,
)
from rlhf.planning.plan import Plan
from rlhf.spec.derive import role_mesh
from rlhf.spec.registry import rollout_backend, train_backend
from rlhf.spec.schema import ExperimentSpec, ModelSpec

# Lengths the model assumes (no data is read): every prompt as long as the plan allows and every response run to
# rollout.max_new_tokens, an upper bound on the work of a step.
PROMPT_FILL = 1.0
RESPONSE_FILL = 1.0

ADAM_BYTES_PER_PARAM = 32  # Adam on a device: fp32 master, two moments read and written, the gradient read, 16-bit copy
HOST_ADAM_BYTES_PER_PARAM = 32  # the same traffic in host memory (DeepSpeed's CPU Adam, FSDP2's CPU step)
BUCKET_BYTES = 5e8 * 2  # DeepSpeed's default reduce_bucket_size (5e8 elements) of 16-bit gradients


@dataclass(frozen=True)
class ModuleCost:
    """A sharded training engine's fixed cost per gathered module (:func:`gathered_units`), whatever the number of
    ranks: its hooks fetch, release and reduce each module's parameters in every pass, whether or not a byte moves
    (bench/cost_probe.py measures it on one rank, over ZeRO-2's time)."""

    train_s: float = 0.0  # per training micro-batch (forward + backward)
    forward_s: float = 0.0  # per no-grad forward micro-batch (and per recomputed forward)
    step_s: float = 0.0  # per optimizer step
    sync_s: float = 0.0  # per weight sync (each module gathered whole once)


@dataclass(frozen=True)
class Constants:
    """The cost model's constants for one kind of accelerator; each field says where its value comes from."""

    train_eff: float  # achieved fraction of peak in training forward + backward
    forward_eff: float  # no-grad forward (log-probs, values, reward scores)
    prefill_eff: float  # rollout prefill
    decode_bw_eff: float  # fraction of memory bandwidth a decode step reaches
    decode_flop_eff: float  # fraction of peak a compute-bound decode step reaches
    comm_eff: float  # collective bus bandwidth over the link's peak
    comm_overlap: float  # share of the training engine's traffic hidden behind compute
    host_link_eff: float  # host <-> device copies over the link's peak
    engine_load_eff: float  # the engines' load of synced weights, fraction of memory bandwidth
    micro_batch_s: float  # fixed cost of one training micro-batch (framework, kernel launches, Python)
    forward_s: float  # fixed cost of one no-grad forward micro-batch
    decode_step_s: float  # fixed cost of one decode step (scheduler, sampling, Python), unless the backend says
    decode_seq_s: float  # the engine's own cost per sequence per decode step (scheduling, sampling)
    tp_allreduce_s: float  # latency of one small all-reduce between the TP workers of an engine
    collective_s: float  # fixed cost of one collective call of the training engine (NCCL or gloo)
    call_s: float  # one round of remote calls from the driver to a role's ranks
    step_s: float  # the driver's fixed cost per step (data, stitching, logging)
    wake_sleep_s: float  # putting the colocated engines to sleep and waking them, per step
    host_bandwidth_gbs: float  # host memory bandwidth of the node, for optimizer steps in host memory
    zero3_module: ModuleCost  # DeepSpeed ZeRO-3's fixed cost per module with parameters
    fsdp2_unit: ModuleCost  # FSDP2's fixed cost per fully_shard unit
    sources: dict[str, str] = field(default_factory=dict)


GPU = Constants(
    train_eff=0.35,
    forward_eff=0.45,
    prefill_eff=0.50,
    decode_bw_eff=0.60,
    decode_flop_eff=0.40,
    comm_eff=0.75,
    comm_overlap=0.5,
    host_link_eff=0.80,
    engine_load_eff=0.25,
    micro_batch_s=0.010,
    forward_s=0.005,
    decode_step_s=0.004,
    decode_seq_s=10e-6,
    tp_allreduce_s=15e-6,
    collective_s=25e-6,
    call_s=0.02,
    step_s=2.0,
    wake_sleep_s=1.5,
    host_bandwidth_gbs=100.0,
    zero3_module=ModuleCost(),
    fsdp2_unit=ModuleCost(),
    sources={
        "train_eff": "assumed between the RL trainer MFU prime-rl publishes (14.7% at 16k, 36.1% at 64k context, "
        "8xH200, peers-2026.md section 2) and Megatron-LM's 52% (Narayanan et al. 2021) for dense pre-training",
        "forward_eff": "assumed: a forward without the backward's weight-gradient GEMMs and recomputation, a little "
        "above train_eff",
        "prefill_eff": "assumed: vLLM prefill is GEMM-bound at large token counts (half of the peak)",
        "decode_bw_eff": "assumed: decode kernels reach 60-80% of HBM bandwidth at small batch (roofline studies, "
        "e.g. the vLLM and TensorRT-LLM decode benchmarks); the low end",
        "decode_flop_eff": "assumed: large-batch decode GEMMs are short and skinny",
        "comm_eff": "nccl-tests bus bandwidth reaches about 75-80% of NVLink's 450 GB/s per direction on DGX H100",
        "comm_overlap": "assumed: DeepSpeed overlap_comm and ZeRO-3 prefetch hide about half the traffic",
        "host_link_eff": "pinned-memory copies reach about 80% of PCIe's peak (cudaMemcpy bandwidth tests)",
        "engine_load_eff": "assumed: vLLM's reload_weights processes tensors one by one (measured on CPU at about "
        "a quarter of memcpy, bench/README.md weight-sync table)",
        "micro_batch_s": "assumed: a decoder forward + backward launches ~100 kernels per layer at ~5 us each",
        "forward_s": "assumed: half of micro_batch_s",
        "decode_step_s": "assumed: vLLM V1's scheduler and sampler per step with CUDA graphs, a few ms",
        "decode_seq_s": "assumed: vLLM's CPU-side scheduling and sampling per running sequence, ~10 us per step "
        "(why one engine of 1024 sequences decodes slower than four of 256 on the same devices)",
        "tp_allreduce_s": "NCCL small-message all-reduce latency within an NVLink node, ~10-20 us",
        "collective_s": "NCCL all-gather / reduce-scatter launch and latency within a node, ~20-30 us",
        "call_s": "assumed: a Ray actor call round trip with small arguments, ~10-20 ms with object transfer",
        "step_s": "assumed: the driver's tokenisation, reward dispatch, stitching and logging per step",
        "wake_sleep_s": "assumed: vLLM sleep (level 2) and wake of weights and KV cache plus an empty_cache, "
        "about a second per step (OpenRLHF's hybrid engine logs)",
        "host_bandwidth_gbs": "assumed: DDR5 host memory of a dual-socket server as DeepSpeed CPU Adam uses it",
        "zero3_module": "not measured (no GPU here): counted as nothing, which leaves the GPU estimates as they were "
        "before the CPU's was measured",
        "fsdp2_unit": "not measured (no GPU here): counted as nothing, as zero3_module",
    },
)

# Measured on the 2-core development machine (AMD EPYC with AVX-512, torch 2.13 CPU) by bench/cost_probe.py,
# 2026-12-01 23:46 UTC, machine shared with other sessions (load average 17-24): the efficiencies are achieved rates
# over the probe's own one-thread fp32 GEMM rate, the fixed costs the probe's best times. That output was not kept;
# bench/README.md ("The probe, run again") has a run of 2026-12-02 beside these values.
CPU = Constants(
    train_eff=0.61,  # model=small forward + backward, micro-batch 16 x 64 tokens, one thread
    forward_eff=0.69,  # the same without gradients, log-softmax over the logits
    prefill_eff=0.55,  # model=small, 64 prompts of 25 tokens
    decode_bw_eff=0.50,  # assumed: decode on this CPU is compute-bound in every probe (never the bound here)
    decode_flop_eff=0.35,  # model=small, transformers generate, batch 64
    comm_eff=1.0,  # link_bandwidth_gbs is gloo's own measured rate
    comm_overlap=0.0,  # gloo collectives on one core each: nothing overlaps
    host_link_eff=1.0,
    engine_load_eff=0.25,  # bench/README.md weight-sync table: vLLM's reload at about a quarter of memcpy
    micro_batch_s=0.0021,  # model=tiny forward + backward at micro-batch 1 x 8 tokens
    forward_s=0.0007,  # the same without gradients
    decode_step_s=0.0013,  # model=tiny, generate at batch 1, per new token
    decode_seq_s=0.0,
    tp_allreduce_s=2.1e-4,  # = collective_s
    collective_s=2.1e-4,  # a 1 KB gloo all-reduce between two processes over loopback (median of 50)
    call_s=0.0008,  # a Ray actor call round trip with a small argument (median of 20)
    step_s=0.048,  # a whole RL step of grpo_tiny_cpu at 2 prompts x 2 samples x 1 token (median of 6)
    wake_sleep_s=0.0,  # on CPU the hf engine's sleep moves nothing
    host_bandwidth_gbs=13.0,  # = the copy rate
    # bench/cost_probe.py --only-sharded, 2026-12-02 08:26-08:27 UTC, load average 1.0-1.1: model=tiny on one rank,
    # what the engine adds over ZeRO-2, per module; the median of three runs (bench/README.md, "The probe, run again")
    zero3_module=ModuleCost(train_s=3.98e-4, forward_s=2.09e-4, step_s=5.5e-5, sync_s=2.05e-5),
    fsdp2_unit=ModuleCost(train_s=0.0, forward_s=1.23e-4, step_s=5.45e-4, sync_s=2.77e-4),
    sources={"all": "bench/cost_probe.py on this machine, 2026-12-01 (bench/README.md, Cost model calibration)"},
)


def reuses_current_logprobs(spec: ExperimentSpec, plan: Plan) -> bool:
    """rlhf.pipelines.rl_roles.reuses_current_logprobs, read from the plan (that module imports torch): one optimizer
    step per rollout, no KL in the reward, no teacher and no rejection sampling, so the experience pass skips the
    policy's forward (tests/planning/test_cost.py checks that the two agree)."""
    return plan.derived.old_logprobs == "reuse"


def constants_for(spec: ExperimentSpec) -> Constants:
    return CPU if spec.hardware.accelerator == "cpu" else GPU


@dataclass(frozen=True)
class StepEstimate:
    """Estimated seconds per phase of one step (see the module docstring)."""

    phases: dict[str, float]
    overlapped: bool = False  # rollout.async_mode: generation runs beside experience and training

    @property
    def total(self) -> float:
        p = self.phases
        if self.overlapped:
            first = p.get("generation", 0.0) + p.get("reward", 0.0)
            second = p.get("experience", 0.0) + p.get("train", 0.0)
            rest = sum(v for k, v in p.items() if k not in ("generation", "reward", "experience", "train"))
            return max(first, second) + rest
        return sum(p.values())


PHASES = ("generation", "reward", "experience", "train", "sync", "bubble", "overhead")


@dataclass(frozen=True)
class _Device:
    flops: float  # peak FLOP/s of one device in the training precision
    flops16: float  # peak 16-bit FLOP/s (rollout on GPUs)
    bandwidth: float  # bytes/s
    link: float  # bytes/s within a node
    network: float  # bytes/s per device between nodes
    host_link: float  # bytes/s host <-> device


def _device(spec: ExperimentSpec) -> _Device:
    hw = spec.hardware
    share = 1.0 / hw.devices_per_node if hw.accelerator == "cpu" else 1.0  # a CPU slot's share of the node
    fp32 = spec.trainer.precision == "fp32"
    return _Device(
        flops=(hw.device_tflops_fp32 if fp32 else hw.device_tflops) * 1e12 * share,
        flops16=(hw.device_tflops_fp32 if hw.accelerator == "cpu" else hw.device_tflops) * 1e12 * share,
        bandwidth=hw.memory_bandwidth_gbs * 1e9 * share,
        link=hw.link_bandwidth_gbs * 1e9,
        network=hw.network_bandwidth_gbs * 1e9 / hw.devices_per_node,
        host_link=hw.host_link_gbs * 1e9,
    )


def forward_flops(m: ModelSpec, tokens: float, seq: float) -> float:
    """FLOPs of a forward over ``tokens`` tokens in sequences of ``seq`` tokens (see the module docstring)."""
    params, _ = param_count(m)
    matmul = params - m.vocab_size * m.hidden_size  # the input embedding is a lookup (tied: lm_head still multiplies)
    return 2 * matmul * tokens + 2 * m.num_layers * m.num_heads * m.head_dim * seq * tokens


def _bytes(precision: str) -> int:
    return 2 if precision in ("bf16", "fp16") else 4


def _lengths(spec: ExperimentSpec, plan: Plan) -> tuple[float, float]:
    """(prompt tokens, response tokens) per sample as the model assumes them."""
    if spec.algorithm.family == "rl":
        return plan.derived.max_prompt_len * PROMPT_FILL, spec.rollout.max_new_tokens * RESPONSE_FILL
    return spec.data.max_len * PROMPT_FILL, 0.0


BOUNDS = ("exact", "layout", "placement")


@dataclass(frozen=True)
class _Ctx:
    """What every phase reads: the spec, its plan, the constants, the device's rates and how exact to be."""

    spec: ExperimentSpec
    plan: Plan
    c: Constants
    dev: _Device
    bound: str  # "exact"; "layout": KV cache unbounded, nothing moved by turns; "placement": also any training engine

    @property
    def any_engine(self) -> bool:
        return self.bound == "placement"

    def link(self, role: str) -> float:
        """Bandwidth a role's collectives run at: the node's link, or the network where its group spans nodes."""
        g = self.plan.groups[self.plan.roles[role].group]
        return self.dev.network if len(set(g.nodes)) > 1 else self.dev.link

    def sequence_link(self, role: str) -> float:
        """Bandwidth of a role's sequence groups (contiguous ranks): the node's link, or the network where a group
        is wider than a node."""
        wide = role_mesh(self.spec, self.plan.roles[role].ranks).sequence > self.spec.hardware.devices_per_node
        return self.dev.network if wide else self.dev.link

    def ring(self, nbytes: float, ranks: int, bandwidth: float) -> float:
        """A ring collective moving (N-1)/N of ``nbytes`` per rank (reduce-scatter or all-gather)."""
        if ranks <= 1 or self.any_engine:
            return 0.0
        return nbytes * (ranks - 1) / ranks / (bandwidth * self.c.comm_eff)

    def calls(self, n: int, ranks: int) -> float:
        """The fixed cost of ``n`` collective calls among ``ranks`` ranks."""
        return 0.0 if ranks <= 1 or self.any_engine else n * self.c.collective_s

    def host(self, nbytes: float) -> float:
        """Bytes over the host link (offload); nothing for a bound over every training engine."""
        return 0.0 if self.any_engine else nbytes / (self.dev.host_link * self.c.host_link_eff)


def gathered_units(spec: ExperimentSpec) -> int:
    """How many separate gathers a sharded engine makes per pass (the training backend's answer)."""
    return train_backend(spec.trainer.backend).gathered_units(spec)


def _sharded(spec: ExperimentSpec) -> bool:
    return train_backend(spec.trainer.backend).gathers_on_every_rank(spec)


def hooks_s(
    spec: ExperimentSpec,
    c: Constants,
    *,
    train_mbs: float = 0,
    forward_mbs: float = 0,
    steps: float = 0,
    syncs: float = 0,
) -> float:
    """The sharded engine's fixed cost per gathered module (``c.zero3_module`` or ``c.fsdp2_unit`` times
    :func:`gathered_units`) for so many training micro-batches, no-grad forward micro-batches, optimizer steps and
    weight syncs; nothing for an engine that does not shard the weights (ZeRO-0/1/2). Recomputation
    (trainer.gradient_checkpointing) adds a forward to each training micro-batch."""
    if not _sharded(spec):
        return 0.0
    cost = train_backend(spec.trainer.backend).module_cost(c)
    per_train = cost.train_s + (cost.forward_s if spec.trainer.gradient_checkpointing else 0.0)
    per_module = train_mbs * per_train + forward_mbs * cost.forward_s + steps * cost.step_s + syncs * cost.sync_s
    return gathered_units(spec) * per_module


def _groups(x: _Ctx, role: str) -> tuple[int, int]:
    """(data-parallel groups, ranks per sequence group) of a model role: its ranks as the spec's training backend
    lays them out (rlhf.spec.derive.role_mesh; read from the spec, not the plan, whose placement the search's bounds
    share between layouts of several sequence sizes)."""
    mesh = role_mesh(x.spec, x.plan.roles[role].ranks)
    return max(mesh.data, 1), max(mesh.sequence, 1)


def sequence_exchange(x: _Ctx, role: str, tokens: float, passes: int) -> float:
    """Ulysses' all-to-alls for ``passes`` passes (forward 1, forward + backward 2, + a recomputed forward 3) over a
    micro-batch of which this rank holds ``tokens`` columns (see the module docstring); 0 without sequence
    parallelism."""
    _, sp = _groups(x, role)
    if sp <= 1 or x.any_engine:
        return 0.0
    m, c = x.spec.model, x.c
    kv = max(m.num_kv_heads, sp)  # fewer kv heads than ranks are repeated before the exchange
    per_layer = tokens * (2 * m.num_heads + 2 * kv) * m.head_dim * _bytes(x.spec.trainer.precision)
    link = x.sequence_link(role)
    seconds = per_layer * (sp - 1) / sp / (link * c.comm_eff) + 4 * c.collective_s
    return passes * m.num_layers * seconds


def _forward_role(x: _Ctx, role: str, samples: int, seq: float) -> float:
    """A no-grad forward of ``role`` over ``samples`` samples, its data-parallel groups side by side (each sequence
    group's ranks split every sample's tokens)."""
    spec, plan, c, dev = x.spec, x.plan, x.c, x.dev
    if role not in plan.roles or samples <= 0:
        return 0.0
    ranks = plan.roles[role].ranks
    dp, sp = _groups(x, role)
    per_group = math.ceil(samples / dp)
    rl = spec.algorithm.family == "rl"
    micro = spec.rollout.micro_batch_per_device if rl else spec.trainer.micro_batch_per_device
    mbs = max(math.ceil(per_group / max(micro, 1)), 1)
    m = spec.model
    params = teacher_params(spec) if role == "teacher" else param_count(m)[0]
    scale = params / max(param_count(m)[0], 1)  # the teacher may be another size; same shape otherwise
    t = mbs * c.forward_s + scale * forward_flops(m, per_group * seq / sp, seq) / (dev.flops * c.forward_eff)
    t += mbs * sequence_exchange(x, role, min(micro, per_group) * seq / sp, 1)
    wbytes = params * _bytes(spec.trainer.precision)
    if _sharded(spec):
        t += mbs * (x.ring(wbytes, ranks, x.link(role)) * (1 - c.comm_overlap) + x.calls(gathered_units(spec), ranks))
        t += 0.0 if x.any_engine else hooks_s(spec, c, forward_mbs=mbs)
    offload = {"reference": spec.reference.offload, "reward": spec.reward.offload, "teacher": spec.teacher.offload}
    if offload.get(role) and spec.hardware.accelerator == "gpu":
        t += mbs * x.host(wbytes / ranks)
    return t + c.call_s


def _train_role(x: _Ctx, role: str, samples: int, seq: float) -> float:
    """Every optimizer step of one trained role over one step's samples (see the module docstring)."""
    spec, plan, c, dev = x.spec, x.plan, x.c, x.dev
    if role not in plan.roles or samples <= 0:
        return 0.0
    t, m, hw = spec.trainer, spec.model, spec.hardware
    ranks = plan.roles[role].ranks
    params = param_count(m)[0]
    lora = lora_param_count(m) if role == "policy" else 0
    trained = lora or params
    gpu = hw.accelerator == "gpu"
    steps = max(plan.derived.optimizer_steps_per_rollout, 1) if spec.algorithm.family == "rl" else 1
    dp, sp = _groups(x, role)
    accum = max(t.global_batch // (max(t.micro_batch_per_device, 1) * dp), 1)  # rlhf.spec.derive's, from the spec
    per_mb_samples = min(t.micro_batch_per_device, math.ceil(samples / dp))  # per sequence group
    fwd = forward_flops(m, per_mb_samples * seq / sp, seq)  # this rank's share of the group's tokens
    backward = 2.0 if not lora else 1.0 + lora / params
    recompute = 1.0 if t.gradient_checkpointing and not x.any_engine else 0.0
    per_mb = c.micro_batch_s + (1.0 + backward + recompute) * fwd / (dev.flops * c.train_eff)
    per_mb += sequence_exchange(x, role, per_mb_samples * seq / sp, 2 + int(recompute))
    wbytes, gbytes = params * _bytes(t.precision), trained * _bytes(t.precision)
    link = x.link(role)
    hidden = 1 - c.comm_overlap
    per_step = 0.0
    units = gathered_units(spec)
    buckets = max(math.ceil(gbytes / BUCKET_BYTES), 1)
    backend = train_backend(t.backend)
    traffic = backend.traffic(
        spec,
        x,
        ranks=ranks,
        link=link,
        weight_bytes=wbytes,
        grad_bytes=gbytes,
        trained=trained,
        units=units,
        buckets=buckets,
        hidden=hidden,
        gpu=gpu,
    )
    per_mb += traffic.per_micro_batch
    per_step += traffic.per_step
    offload = traffic.optimizer_on_host
    if not x.any_engine:
        per_mb += hooks_s(spec, c, train_mbs=1)
        per_step += hooks_s(spec, c, steps=1)
    sharded_states = backend.shards_optimizer_states(spec) or x.any_engine
    shard = trained / (ranks if sharded_states else 1)
    if offload and not x.any_engine:
        per_step += x.host(shard * (4 + 2))  # fp32 gradients down, 16-bit weights up
        per_step += shard * HOST_ADAM_BYTES_PER_PARAM / (c.host_bandwidth_gbs * 1e9)
    else:
        per_step += shard * ADAM_BYTES_PER_PARAM / dev.bandwidth
    return steps * (accum * per_mb + per_step) + c.call_s


def _generation(x: _Ctx, prompt: float, response: float) -> float:
    spec, plan, c, dev = x.spec, x.plan, x.c, x.dev
    if "rollout" not in plan.roles or response <= 0:
        return 0.0
    ro, m, hw = spec.rollout, spec.model, spec.hardware
    engines = max(plan.roles["rollout"].ranks, 1)
    tp = ro.tensor_parallel_size
    params = param_count(m)[0]
    rbytes = 2 if hw.accelerator == "gpu" else 4  # the engines' precision (rlhf.planning.memory.rollout_bytes)
    seqs = math.ceil(plan.derived.samples_per_step / engines)
    seq = prompt + response
    kv_tokens = _kv_tokens(spec, plan) if x.bound == "exact" else None
    batch = rollout_backend(ro.backend).generation_batch(spec, seqs, kv_tokens, seq)
    waves = math.ceil(seqs / max(batch, 1))
    kvb = kv_bytes_per_token(m, "bf16" if rbytes == 2 else "fp32") / tp
    context = prompt + response / 2
    flops = dev.flops16 if hw.accelerator == "gpu" else dev.flops
    matmul = forward_flops(m, 1, context)  # FLOPs per generated token
    read = (params * rbytes / tp + batch * context * kvb) / (dev.bandwidth * c.decode_bw_eff)
    compute = matmul * batch / tp / (flops * c.decode_flop_eff)
    step = max(read, compute) + rollout_backend(ro.backend).decode_overhead_s(spec, c)
    step += batch * c.decode_seq_s
    if tp > 1:
        step += 2 * m.num_layers * (c.tp_allreduce_s + batch * m.hidden_size * rbytes / (dev.link * c.comm_eff))
    decode = waves * response * step
    prefill = forward_flops(m, seqs * prompt, prompt) / tp / (flops * c.prefill_eff)
    return decode + prefill + c.call_s


def _kv_tokens(spec: ExperimentSpec, plan: Plan) -> float | None:
    """Tokens one engine's KV cache holds (vLLM on GPUs: the plan's KV cache), None where it is not the limit."""
    if not rollout_backend(spec.rollout.backend).kv_bounds_batch(spec):
        return None
    group = plan.roles["rollout"].group
    kv_gb = plan.memory[group].kv_cache_gb
    m, tp = spec.model, spec.rollout.tensor_parallel_size
    per_device = kv_bytes_per_token(m, "bf16") / min(tp, m.num_kv_heads)  # a TP worker keeps its heads' share
    return kv_gb * GB / per_device


def _sync(x: _Ctx) -> float:
    spec, plan, c, dev = x.spec, x.plan, x.c, x.dev
    if plan.sync is None or "rollout" not in plan.roles:
        return 0.0
    params = synced_param_count(spec)  # the adapters alone with rollout.weight_sync_lora=adapter
    wbytes = params * (4 if spec.hardware.accelerator == "cpu" or spec.trainer.precision == "fp32" else 2)
    policy = plan.roles["policy"]
    t = 0.0
    if _sharded(spec):
        t += x.ring(wbytes, policy.ranks, x.link("policy"))
        t += 0.0 if x.any_engine else hooks_s(spec, c, syncs=1)
    pg, rg = plan.groups[policy.group], plan.groups[plan.roles["rollout"].group]
    route = spec.rollout.weight_sync
    beside = policy.group == plan.roles["rollout"].group or (
        spec.hardware.accelerator == "cpu" and bool(rg.nodes) and bool(pg.nodes) and set(rg.nodes) == {pg.nodes[0]}
    )
    if route == "object_store":
        t += 3 * wbytes / dev.bandwidth + 2 * wbytes / dev.link
    elif route == "shared_memory" or (route == "auto" and beside):
        t += 2 * wbytes / dev.bandwidth
    else:
        other_node = any(n != pg.nodes[0] for n in rg.nodes) if pg.nodes else False
        t += wbytes / ((dev.network if other_node else dev.link) * c.comm_eff)
    if spec.rollout.weight_sync_checksums:
        t += 2 * wbytes / dev.bandwidth
    if rollout_backend(spec.rollout.backend).loads_synced_weights(spec):
        t += wbytes / spec.rollout.tensor_parallel_size / (dev.bandwidth * c.engine_load_eff)
    return t + c.call_s


def _bubble(x: _Ctx) -> float:
    """Hybrid engine: the trainers' states to host memory and back around generation, the engines' sleep/wake."""
    spec, plan, c = x.spec, x.plan, x.c
    if "rollout" not in plan.roles or spec.hardware.accelerator != "gpu" or x.any_engine:
        return 0.0
    group = plan.roles["rollout"].group
    if not sleeps(spec, plan.groups[group].roles):
        return 0.0
    if x.bound != "exact":
        return c.wake_sleep_s
    moved = sum(s.grads + s.optimizer for r, s in plan.memory[group].per_role.items() if r in ("policy", "critic"))
    return 2 * x.host(moved) + c.wake_sleep_s


def estimate(spec: ExperimentSpec, plan: Plan, *, bound: str = "exact") -> StepEstimate:
    """Seconds per phase of one step of ``spec`` laid out as ``plan`` says (see the module docstring).

    ``bound`` asks for a lower bound instead, for the search (rlhf.planning.auto), reading the plan for its placement
    only (roles' ranks, groups' nodes, the sync route), so any plan of the same placement will do: ``layout`` counts
    the engines' KV cache as unbounded and the states the hybrid engine moves as nothing; ``placement`` also counts
    every cost of the training engine's choice as nothing (its traffic, offload, recomputation, sharded gathers;
    Adam over the smallest shard), a bound for every training engine of the placement."""
    if bound not in BOUNDS:
        raise ValueError(f"bound={bound!r}: one of {', '.join(BOUNDS)}")
    c = constants_for(spec)
    x = _Ctx(spec, plan, c, _device(spec), bound)
    prompt, response = _lengths(spec, plan)
    seq = prompt + response
    family = spec.algorithm.family
    phases = dict.fromkeys(PHASES, 0.0)
    if family == "rl":
        samples = plan.derived.samples_per_step
        phases["generation"] = _generation(x, prompt, response)
        phases["reward"] = _forward_role(x, "reward", samples, seq)
        exp = 0.0
        if plan.derived.old_logprobs == "recompute":  # reused, or the engine's (bypass): no forward
            exp += _forward_role(x, "policy", samples, seq)
        for role in ("reference", "teacher", "critic"):
            exp += _forward_role(x, role, samples, seq)
        phases["experience"] = exp
        phases["train"] = sum(_train_role(x, r, samples, seq) for r in ("critic", "policy"))
        phases["sync"] = _sync(x)
        phases["bubble"] = _bubble(x)
    else:
        samples = spec.trainer.global_batch * (2 if family in ("rm", "dpo") else 1)  # pairs: chosen and rejected
        phases["experience"] = _forward_role(x, "reference", samples, seq)
        phases["train"] = _train_role(x, "policy", samples, seq)
    phases["overhead"] = c.step_s
    return StepEstimate(phases=phases, overlapped=family == "rl" and spec.rollout.async_mode)
