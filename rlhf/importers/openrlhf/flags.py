"""OpenRLHF's flag vocabularies: the dotted flags of each entry point (since 2026-04) with their arity and default,
and the flat names they replaced. Source: shared/reference/openrlhf.md sections 2.1-2.6.

A flag is known by its *canonical* (dotted) name. :func:`resolve` turns a flag as written, flat or dotted, into the
canonical names it sets (``--bf16`` sets ``ds.param_dtype`` to ``bf16``; ``--ref_reward_offload`` sets two), or
None when the entry point has no such flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENTRY_POINTS = ("train_ppo_ray", "train_sft", "train_rm", "train_dpo")
# Removed upstream or not a trainer: named in the error, so the user knows why.
OTHER_ENTRY_POINTS = {
    "train_ppo": "the non-Ray PPO trainer (removed from OpenRLHF); convert the train_ppo_ray form",
    "train_kto": "removed from OpenRLHF on 2026-03-19; here it is algorithm=kto (write the recipe by hand)",
    "train_prm": "removed from OpenRLHF on 2026-03-19; process reward models are not supported here",
    "train_kd": "removed from OpenRLHF on 2026-03-19; knowledge distillation is not supported here",
    "batch_inference": "removed from OpenRLHF on 2026-03-19; not a training command",
    "interactive_chat": "removed from OpenRLHF on 2026-03-19; not a training command",
    "serve_rm": "a reward server, not a trainer: here it is rlhf-serve-rm",
    "lora_combiner": "not a trainer: here LoRA adapters are merged when the final model is saved",
}

# Arity: 0 = store_true, 1 = one value, 2 = exactly two, -1 = one or more (nargs="*").
BOOL, ONE, TWO, MANY = 0, 1, 2, -1


@dataclass(frozen=True)
class FlagDef:
    name: str  # canonical dotted name, without --
    arity: int
    default: Any = None
    type: type = str


def _f(name: str, arity: int = ONE, default: Any = None, typ: type | None = None) -> FlagDef:
    if typ is None:
        typ = bool if arity == BOOL else type(default) if default is not None and not isinstance(default, list) else str
    return FlagDef(name, arity, False if arity == BOOL else default, typ)


# -- shared by every entry point --------------------------------------------------------------------------------------

_CKPT_LOG = [
    _f("ckpt.output_dir", default="./ckpt"),
    _f("ckpt.path"),
    _f("ckpt.save_steps", default=-1),
    _f("ckpt.save_hf", BOOL),
    _f("ckpt.disable_ds", BOOL),
    _f("ckpt.max_num", default=3),
    _f("ckpt.max_mem", typ=float),
    _f("ckpt.load_enable", BOOL),
    _f("ckpt.best_metric_key", default=""),
    _f("logger.logging_steps", default=1),
    _f("logger.wandb.key"),
    _f("logger.wandb.org"),
    _f("logger.wandb.group"),
    _f("logger.wandb.project"),
    _f("logger.wandb.run_name"),
    _f("logger.tensorboard_dir"),
    _f("eval.dataset"),
    _f("eval.split", default="train"),
    _f("eval.steps", default=-1),
    _f("use_ms", BOOL),
    _f("local_rank", default=-1),
]

_DS = [
    _f("ds.zero_stage", default=2),
    _f("ds.param_dtype", default="bf16"),
    _f("ds.zpg", default=1),
    _f("ds.adam_offload", BOOL),
    _f("ds.overlap_comm", BOOL),
    _f("ds.deepcompile", BOOL),
    _f("ds.use_universal_ckpt", BOOL),
    _f("ds.grad_accum_dtype"),
    _f("ds.attn_implementation", default="flash_attention_2"),
    _f("ds.experts_implementation"),
    _f("ds.use_liger_kernel", BOOL),
    _f("ds.load_in_4bit", BOOL),
    _f("ds.packing_samples", BOOL),
    _f("ds.ring_attn_size", default=1),
    _f("ds.ring_attn_head_stride", default=1),
    _f("ds.tensor_parallel_size", default=1),
    _f("ds.lora.rank", default=0),
    _f("ds.lora.alpha", default=16),
    _f("ds.lora.target_modules", MANY, default=["all-linear"]),
    _f("ds.lora.dropout", default=0.0),
]


def _optim(prefix: str, lr: float) -> list[FlagDef]:
    p = f"{prefix}." if prefix else ""
    return [
        _f(f"{p}optim", default="adam"),
        _f(f"{p}adam.lr", default=lr),
        _f(f"{p}adam.betas", TWO, default=[0.9, 0.95], typ=float),
        _f(f"{p}adam.eps", default=1e-8),
        _f(f"{p}adam.weight_decay", default=0.0),
        _f(f"{p}muon.lr", default=0.02),
        _f(f"{p}muon.momentum", default=0.95),
        _f(f"{p}muon.ns_steps", default=5),
        _f(f"{p}muon.nesterov", BOOL),
        _f(f"{p}muon.no_nesterov", BOOL),
        _f(f"{p}lr_scheduler", default="cosine_with_min_lr"),
        _f(f"{p}lr_warmup_ratio", default=0.03),
        _f(f"{p}min_lr_ratio", default=0.1),
        _f(f"{p}max_norm", default=1.0),
    ]


# -- train_ppo_ray (section 2.1) -------------------------------------------------------------------------------------

_PPO = [
    *[_f(f"{r}.num_nodes", default=1) for r in ("actor", "ref", "critic", "reward")],
    *[_f(f"{r}.num_gpus_per_node", default=8) for r in ("actor", "ref", "critic", "reward")],
    _f("train.colocate_actor_ref", BOOL),
    _f("train.colocate_critic_reward", BOOL),
    _f("train.colocate_all", BOOL),
    _f("vllm.num_engines", typ=int),
    _f("vllm.tensor_parallel_size", default=1),
    _f("vllm.sync_backend", default="nccl"),
    _f("vllm.sync_with_ray", BOOL),
    _f("vllm.enable_prefix_caching", BOOL),
    _f("vllm.enforce_eager", BOOL),
    _f("vllm.enable_sleep", BOOL),
    _f("vllm.gpu_memory_utilization", default=0.95),
    _f("rollout.batch_size", default=1024),
    _f("rollout.vllm_generate_batch_size", typ=int),
    _f("rollout.micro_batch_size", default=1),
    _f("rollout.n_samples_per_prompt", default=1),
    _f("rollout.max_new_tokens", typ=int),
    _f("rollout.temperature", default=1.0),
    _f("rollout.top_p", default=1.0),
    _f("rollout.max_tokens_per_gpu", typ=int),
    *_DS,
    _f("ds.enable_sleep", BOOL),
    _f("ds.value_head_prefix", default="score"),
    _f("actor.gradient_checkpointing_enable", BOOL),
    _f("actor.gradient_checkpointing_reentrant", BOOL),
    _f("actor.freeze_visual_encoder", BOOL),
    _f("ref.offload", BOOL),
    _f("reward.offload", BOOL),
    _f("train.enable_ema", BOOL),
    _f("train.ema_beta", default=0.992),
    *_optim("actor", 1e-6),
    *_optim("critic", 9e-6),
    _f("algo.advantage.estimator", default="gae"),
    _f("algo.advantage.gamma", default=1.0),
    _f("algo.advantage.lambd", default=1.0),
    _f("algo.advantage.no_std_norm", BOOL),
    # Before 0.11.2: one switch and a type (tis, icepop, seq-mask-tis).
    _f("algo.advantage.is_correction_enable", BOOL),
    _f("algo.advantage.is_correction_type", default="tis"),
    # 0.11.2: the same correction as level x mode x gating; the threshold took LOW HIGH before, HIGH alone too now.
    _f("algo.advantage.is_correction_level", default="off"),
    _f("algo.advantage.is_correction_mode", default="mask"),
    _f("algo.advantage.is_correction_gating", default="ratio"),
    _f("algo.advantage.is_correction_threshold", MANY, default=[0.5, 5.0], typ=float),
    _f("algo.kl.init_coef", default=0.01),
    _f("algo.kl.target", typ=float),
    _f("algo.kl.horizon", default=10000),
    _f("algo.kl.use_loss", BOOL),
    _f("algo.kl.estimator", default="k1"),
    _f("algo.kl.unbiased_gradient", BOOL),
    _f("algo.dynamic_filtering_enable", BOOL),
    _f("algo.dynamic_filtering_range", TWO, default=[0.0, 1.0], typ=float),
    _f("actor.eps_clip", default=0.2),
    _f("actor.eps_clip_low_high", TWO, typ=float),
    _f("actor.dual_clip", typ=float),
    _f("actor.policy_loss_type", default="ppo"),
    _f("actor.loss_agg_mode", default="token-mean"),
    _f("actor.entropy_coef", typ=float),
    _f("actor.aux_loss_coef", default=0.0),
    _f("critic.value_clip", default=0.5),
    _f("critic.freezing_steps", default=-1),
    _f("critic.save_value_network", BOOL),
    _f("reward.clip_range", TWO, default=[-10.0, 10.0], typ=float),
    _f("reward.normalize_enable", BOOL),
    _f("reward.overlong_buffer_len", typ=int),
    _f("reward.overlong_penalty_factor", default=1.0),
    _f("reward.stop_properly_penalty_coef", typ=float),
    _f("train.batch_size", default=128),
    _f("train.micro_batch_size", default=1),
    _f("train.max_epochs", default=1),
    _f("train.num_episodes", default=1),
    _f("train.seed", default=42),
    _f("train.full_determinism_enable", BOOL),
    _f("train.dynamic_batch_enable", BOOL),
    _f("train.max_tokens_per_gpu", default=16192),
    _f("train.async_enable", BOOL),
    _f("train.async_queue_size", default=1),
    _f("train.partial_rollout_enable", BOOL),
    _f("actor.model_name_or_path"),
    _f("reward.model_name_or_path"),
    _f("critic.model_name_or_path"),
    _f("data.prompt_dataset"),
    _f("data.prompt_probs"),
    _f("data.prompt_split", default="train"),
    _f("data.input_key", default="input"),
    _f("data.label_key"),
    _f("data.input_template"),
    _f("data.apply_chat_template", BOOL),
    _f("data.max_len", default=2048),
    _f("data.max_samples", typ=int),
    _f("data.disable_fast_tokenizer", BOOL),
    _f("data.dataloader_num_workers", default=0),
    _f("data.image_key", default="images"),
    _f("data.max_images_per_prompt", default=0),
    _f("eval.temperature", default=0.6),
    _f("eval.n_samples_per_prompt", default=4),
    _f("reward.remote_url"),
    _f("train.agent_func_path"),
    *_CKPT_LOG,
]

# -- train_sft, train_rm, train_dpo (sections 2.2-2.4) ---------------------------------------------------------------


def _supervised(lr: float, micro: int, epochs: int, max_len: int, template: str | None) -> list[FlagDef]:
    return [
        *_CKPT_LOG,
        *_DS,
        _f("train.micro_batch_size", default=micro),
        _f("train.batch_size", default=128),
        _f("train.max_epochs", default=epochs),
        _f("train.seed", default=42),
        _f("train.full_determinism_enable", BOOL),
        _f("model.model_name_or_path"),
        _f("model.gradient_checkpointing_enable", BOOL),
        _f("model.gradient_checkpointing_reentrant", BOOL),
        _f("model.aux_loss_coef", default=0.0),
        _f("model.pretrain_mode_enable", BOOL),
        *_optim("", lr),
        _f("data.dataset"),
        _f("data.dataset_probs"),
        _f("data.dataset_split", default="train"),
        _f("data.max_samples", typ=int),
        _f("data.multiturn", BOOL),
        _f("data.input_key", default="input"),
        _f("data.output_key"),
        _f("data.input_template", default=template),
        _f("data.apply_chat_template", BOOL),
        _f("data.tokenizer_chat_template"),
        _f("data.max_len", default=max_len),
        _f("data.disable_fast_tokenizer", BOOL),
        _f("data.dataloader_num_workers", default=0),
    ]


_PREFERENCE_DATA = [
    _f("data.prompt_key"),
    _f("data.chosen_key", default="chosen"),
    _f("data.rejected_key", default="rejected"),
]
_SFT = _supervised(5e-6, 8, 2, 2048, "User: {}\nAssistant: ")
_RM = [
    *_supervised(9e-6, 1, 1, 512, None),
    _f("ds.value_head_prefix", default="score"),
    _f("model.loss_type", default="sigmoid"),
    _f("model.margin_loss_enable", BOOL),
    _f("model.compute_fp32_loss_enable", BOOL),
    *_PREFERENCE_DATA,
]
_DPO = [
    *_supervised(1e-5, 1, 1, 512, None),
    _f("ref.model_name_or_path"),
    _f("ref.offload", BOOL),
    _f("model.beta", default=0.1),
    _f("model.ipo_enable", BOOL),
    _f("model.label_smoothing", default=0.0),
    _f("model.nll_loss_coef", default=0.0),
    *_PREFERENCE_DATA,
]

VOCABULARY: dict[str, dict[str, FlagDef]] = {
    entry: {f.name: f for f in flags}
    for entry, flags in (("train_ppo_ray", _PPO), ("train_sft", _SFT), ("train_rm", _RM), ("train_dpo", _DPO))
}
for _entry in ("train_dpo",):  # DPO's eval split defaults to test (section 2.4)
    VOCABULARY[_entry]["eval.split"] = _f("eval.split", default="test")

# -- flat names (before 2026-04, section 2.6) --------------------------------------------------------------------

# flat name -> [(canonical, fixed value or None to take the flag's own values)]
Alias = list[tuple[str, Any]]


def _same(*pairs: str) -> dict[str, Alias]:
    """Flat names that map one-to-one: 'flat=canonical' strings."""
    out = {}
    for pair in pairs:
        flat, _, canonical = pair.partition("=")
        out[flat] = [(canonical, None)]
    return out


_COMMON_FLAT: dict[str, Alias] = {
    **_same(
        "save_path=ckpt.output_dir",
        "ckpt_path=ckpt.path",
        "save_steps=ckpt.save_steps",
        "save_hf_ckpt=ckpt.save_hf",
        "disable_ds_ckpt=ckpt.disable_ds",
        "max_ckpt_num=ckpt.max_num",
        "max_ckpt_mem=ckpt.max_mem",
        "load_checkpoint=ckpt.load_enable",
        "best_metric_key=ckpt.best_metric_key",
        "use_ds_universal_ckpt=ds.use_universal_ckpt",
        "use_wandb=logger.wandb.key",
        "wandb_org=logger.wandb.org",
        "wandb_group=logger.wandb.group",
        "wandb_project=logger.wandb.project",
        "wandb_run_name=logger.wandb.run_name",
        "use_tensorboard=logger.tensorboard_dir",
        "logging_steps=logger.logging_steps",
        "eval_dataset=eval.dataset",
        "eval_split=eval.split",
        "eval_steps=eval.steps",
        "zero_stage=ds.zero_stage",
        "param_dtype=ds.param_dtype",
        "zpg=ds.zpg",
        "adam_offload=ds.adam_offload",
        "attn_implementation=ds.attn_implementation",
        "packing_samples=ds.packing_samples",
        "ring_attn_size=ds.ring_attn_size",
        "ring_head_stride=ds.ring_attn_head_stride",
        "ds_tensor_parallel_size=ds.tensor_parallel_size",
        "lora_rank=ds.lora.rank",
        "lora_alpha=ds.lora.alpha",
        "lora_dropout=ds.lora.dropout",
        "target_modules=ds.lora.target_modules",
        "load_in_4bit=ds.load_in_4bit",
        "train_batch_size=train.batch_size",
        "micro_train_batch_size=train.micro_batch_size",
        "max_epochs=train.max_epochs",
        "seed=train.seed",
        "full_determinism=train.full_determinism_enable",
        "max_len=data.max_len",
        "input_key=data.input_key",
        "input_template=data.input_template",
        "apply_chat_template=data.apply_chat_template",
        "max_samples=data.max_samples",
        "local_rank=local_rank",
        "use_ms=use_ms",
    ),
    "bf16": [("ds.param_dtype", "bf16")],  # earlier than --param_dtype
    "flash_attn": [("ds.attn_implementation", "flash_attention_2")],  # earlier than --attn_implementation
}
# Removed from OpenRLHF before the rename: reported as such, never silently dropped.
DROPPED_FLAT = {"ptx_coef": ONE, "actor_init_on_gpu": BOOL, "perf": BOOL}

_PPO_FLAT: dict[str, Alias] = {
    **_COMMON_FLAT,
    **_same(
        "pretrain=actor.model_name_or_path",
        "reward_pretrain=reward.model_name_or_path",
        "critic_pretrain=critic.model_name_or_path",
        "remote_rm_url=reward.remote_url",
        "agent_func_path=train.agent_func_path",
        *[f"{r}_{k}={r}.{k}" for r in ("actor", "ref", "critic", "reward") for k in ("num_nodes", "num_gpus_per_node")],
        "colocate_all_models=train.colocate_all",
        "colocate_actor_ref=train.colocate_actor_ref",
        "colocate_critic_reward=train.colocate_critic_reward",
        "vllm_num_engines=vllm.num_engines",
        "vllm_tensor_parallel_size=vllm.tensor_parallel_size",
        "vllm_sync_backend=vllm.sync_backend",
        "vllm_sync_with_ray=vllm.sync_with_ray",
        "vllm_gpu_memory_utilization=vllm.gpu_memory_utilization",
        "vllm_enable_sleep=vllm.enable_sleep",
        "enable_prefix_caching=vllm.enable_prefix_caching",
        "enforce_eager=vllm.enforce_eager",
        "deepspeed_enable_sleep=ds.enable_sleep",
        "enable_vllm_is_correction=algo.advantage.is_correction_enable",
        "vllm_is_truncated_threshold=algo.advantage.is_correction_threshold",
        "vllm_is_correction_type=algo.advantage.is_correction_type",
        "async_train=train.async_enable",
        "async_queue_size=train.async_queue_size",
        "partial_rollout=train.partial_rollout_enable",
        "advantage_estimator=algo.advantage.estimator",
        "gamma=algo.advantage.gamma",
        "lambd=algo.advantage.lambd",
        "no_advantage_std_norm=algo.advantage.no_std_norm",
        "init_kl_coef=algo.kl.init_coef",
        "kl_target=algo.kl.target",
        "kl_horizon=algo.kl.horizon",
        "use_kl_loss=algo.kl.use_loss",
        "kl_estimator=algo.kl.estimator",
        "dynamic_filtering=algo.dynamic_filtering_enable",
        "dynamic_filtering_reward_range=algo.dynamic_filtering_range",
        "eps_clip=actor.eps_clip",
        "eps_clip_low_high=actor.eps_clip_low_high",
        "dual_clip=actor.dual_clip",
        "policy_loss_type=actor.policy_loss_type",
        "entropy_loss_coef=actor.entropy_coef",
        "aux_loss_coef=actor.aux_loss_coef",
        "value_clip=critic.value_clip",
        "freezing_actor_steps=critic.freezing_steps",
        "save_value_network=critic.save_value_network",
        "actor_learning_rate=actor.adam.lr",
        "critic_learning_rate=critic.adam.lr",
        "normalize_reward=reward.normalize_enable",
        "reward_clip_range=reward.clip_range",
        "overlong_buffer_len=reward.overlong_buffer_len",
        "overlong_penalty_factor=reward.overlong_penalty_factor",
        "stop_properly_penalty_coef=reward.stop_properly_penalty_coef",
        "rollout_batch_size=rollout.batch_size",
        "micro_rollout_batch_size=rollout.micro_batch_size",
        "vllm_generate_batch_size=rollout.vllm_generate_batch_size",
        "n_samples_per_prompt=rollout.n_samples_per_prompt",
        "temperature=rollout.temperature",
        "top_p=rollout.top_p",
        "max_new_tokens=rollout.max_new_tokens",
        "generate_max_len=rollout.max_new_tokens",
        "num_episodes=train.num_episodes",
        "use_dynamic_batch=train.dynamic_batch_enable",
        "train_max_tokens_per_gpu=train.max_tokens_per_gpu",
        "rollout_max_tokens_per_gpu=rollout.max_tokens_per_gpu",
        "prompt_data=data.prompt_dataset",
        "prompt_data_probs=data.prompt_probs",
        "prompt_split=data.prompt_split",
        "label_key=data.label_key",
        "eval_temperature=eval.temperature",
        "eval_n_samples_per_prompt=eval.n_samples_per_prompt",
        "value_head_prefix=ds.value_head_prefix",
        # Named in the reference's own example commands (openrlhf-commands.md), flat forms of section 2.1's flags.
        "gradient_checkpointing=actor.gradient_checkpointing_enable",
        "gradient_checkpointing_use_reentrant=actor.gradient_checkpointing_reentrant",
    ),
    # One flat optimiser flag set both roles' values.
    **{
        flat: [(f"actor.{k}", None), (f"critic.{k}", None)]
        for flat, k in (
            ("adam_betas", "adam.betas"),
            ("l2", "adam.weight_decay"),
            ("lr_scheduler", "lr_scheduler"),
            ("lr_warmup_ratio", "lr_warmup_ratio"),
            ("max_norm", "max_norm"),
        )
    },
    "ref_reward_offload": [("ref.offload", None), ("reward.offload", None)],
    # Before --max_len: the prompt budget; data.max_len = prompt_max_len + generate_max_len.
    "prompt_max_len": [("legacy.prompt_max_len", None)],
}

_SUPERVISED_FLAT: dict[str, Alias] = {
    **_COMMON_FLAT,
    **_same(
        "pretrain=model.model_name_or_path",
        "learning_rate=adam.lr",
        "adam_betas=adam.betas",
        "l2=adam.weight_decay",
        "lr_scheduler=lr_scheduler",
        "lr_warmup_ratio=lr_warmup_ratio",
        "max_norm=max_norm",
        "gradient_checkpointing=model.gradient_checkpointing_enable",
        "gradient_checkpointing_use_reentrant=model.gradient_checkpointing_reentrant",
        "aux_loss_coef=model.aux_loss_coef",
        "pretrain_mode=model.pretrain_mode_enable",
        "multiturn=data.multiturn",
        "dataset=data.dataset",
        "dataset_probs=data.dataset_probs",
        "output_key=data.output_key",
        "tokenizer_chat_template=data.tokenizer_chat_template",
    ),
}
_PREFERENCE_FLAT = _same("prompt_key=data.prompt_key", "chosen_key=data.chosen_key", "rejected_key=data.rejected_key")

FLAT: dict[str, dict[str, Alias]] = {
    "train_ppo_ray": _PPO_FLAT,
    "train_sft": _SUPERVISED_FLAT,
    "train_rm": {
        **_SUPERVISED_FLAT,
        **_PREFERENCE_FLAT,
        **_same(
            "value_head_prefix=ds.value_head_prefix",
            "loss=model.loss_type",
            "margin_loss=model.margin_loss_enable",
            "compute_fp32_loss=model.compute_fp32_loss_enable",
        ),
    },
    "train_dpo": {
        **_SUPERVISED_FLAT,
        **_PREFERENCE_FLAT,
        **_same(
            "ref_pretrain=ref.model_name_or_path",
            "ref_offload=ref.offload",
            "beta=model.beta",
            "ipo=model.ipo_enable",
            "label_smoothing=model.label_smoothing",
            "nll_loss_coef=model.nll_loss_coef",
        ),
    },
}
LEGACY = {"legacy.prompt_max_len": _f("legacy.prompt_max_len", default=1024)}


def resolve(entry: str, name: str) -> Alias | None:
    """The canonical names (and fixed values) a flag as written sets, or None when ``entry`` has no such flag."""
    vocab = VOCABULARY[entry]
    if name in vocab:
        return [(name, None)]
    alias = FLAT[entry].get(name)
    if alias is None:
        return None
    return [(c, v) for c, v in alias if c in vocab or c in LEGACY]


def definition(entry: str, canonical: str) -> FlagDef:
    return VOCABULARY[entry].get(canonical) or LEGACY[canonical]


def arity(entry: str, name: str) -> int | None:
    """How many values the flag as written takes (None: unknown flag)."""
    if name in DROPPED_FLAT:
        return DROPPED_FLAT[name]
    alias = resolve(entry, name)
    if not alias:
        return None
    canonical, fixed = alias[0]
    return BOOL if fixed is not None else definition(entry, canonical).arity
