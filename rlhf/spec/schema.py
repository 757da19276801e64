"""The typed experiment spec: one frozen dataclass per config section.

These dataclasses are the schema Hydra validates every YAML against (registered in the ConfigStore by
``rlhf.spec.store``), so a misspelt key or a wrong type fails at compose time with its full key. Each field's
comment is its documentation; ``rlhf-recipes show NAME`` prints the resolved values.

Batch vocabulary (units in the names, everything else derived by ``rlhf.spec.derive``):
    rollout.prompts_per_step      prompts drawn per RL step
    rollout.samples_per_prompt    completions per prompt (group size)
    trainer.global_batch          samples per optimizer step, across all data-parallel ranks
    trainer.micro_batch_per_device samples per forward/backward on one device
Gradient accumulation = global_batch / (micro_batch_per_device * data-parallel size); never typed.

Imports nothing heavy: composing, validating and planning run without torch, ray or deepspeed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("policy", "reference", "critic", "reward", "rollout")


@dataclass(frozen=True)
class AdvantageSpec:
    estimator: str = "gae"  # gae | reinforce | reinforce_baseline | rloo | group_norm | dr_grpo (rlhf.algo registry)
    gamma: float = 1.0  # discount; forced to 1 for group estimators
    lambd: float = 1.0  # GAE lambda
    no_std_norm: bool = False  # whiten without dividing by std (OpenRLHF --algo.advantage.no_std_norm)


@dataclass(frozen=True)
class PolicyLossSpec:
    type: str = "ppo"  # ppo | gspo (rlhf.algo POLICY_LOSSES)
    eps_clip_low: float = 0.2  # ratio clipped to [1 - eps_clip_low, 1 + eps_clip_high]
    eps_clip_high: float = 0.2  # > eps_clip_low is DAPO's clip-higher
    dual_clip: float | None = None  # dual-clip constant c > 1, or null
    aggregation: str = "token_mean"  # token_mean | seq_mean | seq_mean_token_sum | seq_mean_token_sum_norm
    aggregation_norm: int | None = None  # constant normaliser for seq_mean_token_sum_norm (null: max_new_tokens)
    entropy_coef: float | None = None  # entropy bonus; null: entropy not computed, 0: logged only


@dataclass(frozen=True)
class KLSpec:
    coef: float = 0.01  # initial KL coefficient; 0 removes the reference model
    estimator: str = "k1"  # k1 | k2 | k3
    placement: str = "reward"  # reward: folded into the per-token reward | loss: added to the policy loss
    target: float | None = None  # set: adaptive controller (Ziegler et al.) toward this KL
    horizon: int = 10000  # adaptive controller horizon, in samples


@dataclass(frozen=True)
class ISCorrectionSpec:
    type: str = "none"  # none | tis | icepop | seq_mask_tis: rollout-vs-trainer log-prob mismatch correction
    low: float = 0.5  # lower threshold on the importance weight
    high: float = 5.0  # upper threshold


@dataclass(frozen=True)
class FilterSpec:
    dynamic_filtering: bool = False  # DAPO: drop prompt groups whose mean score is not strictly inside range
    dynamic_filtering_range: list[float] = field(default_factory=lambda: [0.0, 1.0])
    max_refill_rounds: int = 4  # rounds of extra prompts drawn to refill dropped groups before giving up
    overlong_buffer_len: int | None = None  # DAPO overlong penalty: last N tokens before max_new_tokens cost reward
    overlong_penalty_factor: float = 1.0
    stop_properly_penalty_coef: float | None = None  # ProRL: truncated samples' reward scaled (>=0) or set (<0)


@dataclass(frozen=True)
class PreferenceSpec:
    loss: str = "dpo"  # dpo | cdpo | ipo | kto | simpo | orpo (rlhf.algo PREFERENCE_LOSSES)
    beta: float = 0.1
    label_smoothing: float = 0.0  # cDPO epsilon
    nll_coef: float = 0.0  # NLL regulariser on chosen responses
    simpo_gamma: float = 0.5  # SimPO target margin
    orpo_lambda: float = 0.1  # ORPO odds-ratio weight
    kto_desirable_weight: float = 1.0
    kto_undesirable_weight: float = 1.0


@dataclass(frozen=True)
class RMLossSpec:
    loss: str = "sigmoid"  # sigmoid | logexp (rlhf.algo RM_LOSSES)
    use_margin: bool = False  # subtract the dataset's margin column inside the sigmoid loss


@dataclass(frozen=True)
class AlgorithmSpec:
    """conf/algorithm/*.yaml: an algorithm is a preset of registry entries, not a code path."""

    name: str = "ppo"
    family: str = "rl"  # rl | sft | rm | dpo: which pipeline runs
    advantage: AdvantageSpec = field(default_factory=AdvantageSpec)
    policy_loss: PolicyLossSpec = field(default_factory=PolicyLossSpec)
    kl: KLSpec = field(default_factory=KLSpec)
    is_correction: ISCorrectionSpec = field(default_factory=ISCorrectionSpec)
    filters: FilterSpec = field(default_factory=FilterSpec)
    preference: PreferenceSpec = field(default_factory=PreferenceSpec)
    rm: RMLossSpec = field(default_factory=RMLossSpec)


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 0  # 0 disables LoRA
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])


@dataclass(frozen=True)
class ModelSpec:
    """conf/model/*.yaml: the policy (or SFT/RM/DPO) base model, with the dimensions a plan needs offline."""

    name: str = "tiny"
    path: str = ""  # local HF folder or hub name (ignored when make_local)
    make_local: bool = False  # random init from these dimensions + a byte-level tokenizer, cached (no download)
    tokenizer_path: str = ""  # empty: same as path
    architecture: str = "llama"  # llama | qwen2 | qwen3 (for the tiny factory and the plan)
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 256
    vocab_size: int = 512
    max_position_embeddings: int = 1024
    tie_word_embeddings: bool = False
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2 (needs flash-attn)
    chat_template: str | None = None  # Jinja template overriding the tokenizer's
    trust_remote_code: bool = False
    lora: LoraSpec = field(default_factory=LoraSpec)


@dataclass(frozen=True)
class RoleDevices:
    """Devices per role; null: derived (colocated roles share their group's devices, the rest split evenly)."""

    policy: int | None = None
    reference: int | None = None
    critic: int | None = None
    reward: int | None = None
    rollout: int | None = None


@dataclass(frozen=True)
class PlacementSpec:
    """conf/placement/*.yaml: which roles share devices."""

    name: str = "colocate_all"
    colocate: list[list[str]] = field(
        default_factory=lambda: [["policy", "reference", "critic", "reward", "rollout"]]
    )  # groups of roles that share the same bundles; roles in no group get their own
    devices: RoleDevices = field(default_factory=RoleDevices)


@dataclass(frozen=True)
class RolloutSpec:
    """conf/rollout/*.yaml: the generation engine and sampling."""

    backend: str = "vllm"  # vllm | hf
    prompts_per_step: int = 128  # prompts per RL step (OpenRLHF rollout.batch_size)
    samples_per_prompt: int = 1  # group size n
    max_new_tokens: int = 1024
    min_new_tokens: int = 0  # tokens sampled before eos or a stop token may end a sample (vLLM min_tokens); 0: off
    temperature: float = 1.0  # also applied to training log-probs
    top_p: float = 1.0
    top_k: int = -1
    stop: list[str] = field(default_factory=list)  # stop strings besides the tokenizer's eos
    num_engines: int = 1  # rollout engines (vLLM instances)
    tensor_parallel_size: int = 1  # devices per engine; must fit within one node
    gpu_memory_utilization: float = 0.9  # vLLM's fraction of device memory (weights + KV cache)
    enable_sleep: bool = True  # hybrid engine: release rollout memory while training (colocate_all only)
    enforce_eager: bool = False  # disable CUDA graphs
    enable_prefix_caching: bool = False
    cpu_kv_cache_gb: int = 2  # KV cache of vLLM on CPU hardware
    # vLLM: sequences decoded together (None: vLLM's default, 256 on CPU). A step's prompts_per_step x
    # samples_per_prompt above it are generated in waves; raising it needs KV cache for all of them.
    max_num_seqs: int | None = None
    micro_batch_per_device: int = 4  # samples per forward when computing log-probs, values and rewards
    async_mode: bool = False  # generate step k+1 while training step k (staleness bounded to one step)


@dataclass(frozen=True)
class HardwareSpec:
    """conf/hardware/*.yaml: what the cluster has. On CPU a 'device' is one worker slot of a few cores."""

    name: str = "cpu"
    accelerator: str = "cpu"  # cpu | gpu
    device_type: str = "cpu"  # h100 | h200 | a100_80g | cpu
    nodes: int = 1
    devices_per_node: int = 1
    device_memory_gb: float = 16.0  # per device (GPU memory, or the RAM share of a CPU slot)
    cpus_per_node: int = 2
    host_memory_gb: float = 24.0  # per node
    bf16: bool = False  # native bf16 (on CPU bf16 works but is slower than fp32)
    device_tflops: float = 0.1  # dense bf16 TFLOP/s per device, for rough time estimates


@dataclass(frozen=True)
class TrainerSpec:
    """Optimizer, schedule, batches and DeepSpeed settings shared by every trained role."""

    global_batch: int = 128  # samples per optimizer step, across all data-parallel ranks
    micro_batch_per_device: int = 1  # samples per forward/backward on one device
    epochs_per_rollout: int = 1  # RL: optimizer passes over each rollout batch (OpenRLHF train.max_epochs)
    num_episodes: int = 1  # RL: passes over the prompt set
    epochs: int = 1  # SFT/RM/DPO: passes over the dataset
    max_steps: int | None = None  # stop after this many steps (RL steps, or optimizer steps for SFT/RM/DPO)
    zero_stage: int = 2  # DeepSpeed ZeRO stage 0..3
    precision: str = "bf16"  # bf16 | fp32 | fp16 (fp16 needs a GPU)
    offload_optimizer: bool = False  # optimizer states in host memory
    offload_params: bool = False  # ZeRO-3 parameters in host memory
    gradient_checkpointing: bool = False
    optimizer: str = "adamw"  # adamw (torch) | fused_adam | cpu_adam (DeepSpeed ops, compiled on first use)
    lr: float = 1e-6
    critic_lr: float = 9e-6
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    weight_decay: float = 0.0
    lr_scheduler: str = "cosine_with_min_lr"  # cosine_with_min_lr | constant_with_warmup | constant
    warmup_ratio: float = 0.03
    min_lr_ratio: float = 0.1
    max_norm: float = 1.0  # gradient clipping
    activation_mb_per_token: float | None = None  # override the plan's activation estimate (MiB per token)


@dataclass(frozen=True)
class DataSpec:
    """Datasets and how rows become tokens (OpenRLHF data.* flags)."""

    train_files: list[str] = field(
        default_factory=list
    )  # json/jsonl/csv/parquet/arrow files, dataset dirs, builtin:NAME
    train_probs: list[float] | None = None  # mixing probabilities, one per train file
    train_split: str = "train"
    eval_files: list[str] = field(default_factory=list)
    eval_split: str = "train"
    eval_fraction: float = 0.0  # hold out this fraction of train when no eval files are given
    input_key: str = "input"
    output_key: str | None = None
    prompt_key: str | None = None
    chosen_key: str = "chosen"
    rejected_key: str = "rejected"
    label_key: str | None = None
    margin_key: str | None = None
    datasource_key: str = "datasource"
    input_template: str | None = None  # e.g. "User: {}\nAssistant: "; must contain {}
    apply_chat_template: bool = True
    max_len: int = 2048  # prompt + response tokens
    max_prompt_len: int | None = None  # null: max_len - rollout.max_new_tokens
    max_samples: int | None = None
    on_bad_row: str = "error"  # error: stop naming file, row and key | skip: count and report
    on_too_long: str = "truncate"  # truncate | drop (counted and reported)
    packing: bool = False  # SFT: pack several samples per row
    multiturn: bool = False  # SFT: loss on every assistant turn
    pretrain_mode: bool = False  # SFT: loss on all tokens


@dataclass(frozen=True)
class RewardSpec:
    """Where RL rewards come from: exactly one of model_path, function, urls, verifier (or an agent)."""

    model_path: str = ""  # reward model (sequence classification / value head)
    function: str = ""  # python file defining reward_func(queries, prompts, labels)
    urls: list[str] = field(default_factory=list)  # HTTP endpoints of the remote reward protocol
    verifier: str = ""  # built-in: math | format | exact
    timeout_s: float = 180.0
    retries: int = 5
    request_batch: int = 64  # samples per HTTP request
    clip_range: list[float] = field(default_factory=lambda: [-10.0, 10.0])
    normalize: bool = False  # (r - mean) / std with the statistics saved by RM training
    offload: bool = False
    value_head_prefix: str = "score"


@dataclass(frozen=True)
class CriticSpec:
    model_path: str = ""  # empty: the reward model's path, else the policy's
    value_clip: float | None = 0.5
    freezing_steps: int = 0  # the policy is not trained during the first N steps
    save_value_network: bool = False


@dataclass(frozen=True)
class ReferenceSpec:
    model_path: str = ""  # empty: the policy's initial weights
    offload: bool = False


@dataclass(frozen=True)
class EvalSpec:
    steps: int = 0  # evaluate every N steps; 0 never
    temperature: float = 0.6
    samples_per_prompt: int = 4
    max_prompts: int | None = None
    best_metric: str = "auto"  # auto: first eval_*_pass1 | none | a metric name


@dataclass(frozen=True)
class CheckpointSpec:
    dir: str = "checkpoints"  # relative to the run directory
    save_steps: int = 0  # save every N steps; 0 only at the end
    max_keep: int = 3  # rotation
    resume: str = "auto"  # auto: resume from dir when a checkpoint is there | never | a checkpoint path
    output_dir: str = "model"  # final Hugging Face model, relative to the run directory
    save_hf_every_checkpoint: bool = False


@dataclass(frozen=True)
class LoggingSpec:
    mlflow: bool = True
    tracking_uri: str = ""  # empty: sqlite:///mlflow.db in the directory rlhf-run was started from
    experiment: str = "rlhf"
    run_name: str = ""  # empty: recipe name and time
    log_every: int = 1
    progress: bool = True  # progress bars on the console


@dataclass(frozen=True)
class AgentSpec:
    path: str = ""  # python file with an AgentInstance class (multi_turn) or run_agent function (openai)
    executor: str = "single_turn"  # single_turn | multi_turn | openai
    max_turns: int = 8  # an episode not done after this many turns is an error naming the agent file and sample
    step_timeout_s: float = 300.0  # one reset()/step() call
    call_timeout_s: float = 300.0  # openai: one chat completion
    run_timeout_s: float = 900.0  # openai: one run_agent() call


@dataclass(frozen=True)
class RaySpec:
    address: str = ""  # empty: start a private local cluster; "auto" or host:port attaches to one
    num_cpus: int | None = None  # local cluster only; null: what the plan needs
    object_store_gb: float | None = None
    runtime_env: dict[str, str] = field(default_factory=dict)  # extra env vars for every worker
    # Local cluster only: nice value of Ray's worker processes. Ray's own default (15) lets every other busy process
    # on the machine take the cores from the training actors (measured on a loaded 2-core machine: 0.36 cores used
    # against 0.9 at nice 0); 0 runs them like the rlhf-run process itself.
    worker_niceness: int = 0


@dataclass(frozen=True)
class ExperimentSpec:
    """The whole experiment. ``rlhf-run key=value`` overrides any field by its dotted path."""

    recipe: str = ""  # set by +recipe=NAME (informational)
    seed: int = 42
    algorithm: AlgorithmSpec = field(default_factory=AlgorithmSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    placement: PlacementSpec = field(default_factory=PlacementSpec)
    rollout: RolloutSpec = field(default_factory=RolloutSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    data: DataSpec = field(default_factory=DataSpec)
    reward: RewardSpec = field(default_factory=RewardSpec)
    critic: CriticSpec = field(default_factory=CriticSpec)
    reference: ReferenceSpec = field(default_factory=ReferenceSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    logging: LoggingSpec = field(default_factory=LoggingSpec)
    agent: AgentSpec = field(default_factory=AgentSpec)
    ray: RaySpec = field(default_factory=RaySpec)
