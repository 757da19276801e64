"""TRL 1.16's vocabulary: its trainers, the defaults of their config dataclasses (GRPOConfig, RLOOConfig, DPOConfig,
SFTConfig, RewardConfig, KTOConfig, with ModelConfig and ScriptArguments), and the fields with no equivalent here.

The defaults are TRL's values as its dataclasses declare them (a test compares them with the installed TRL where
it is installed). ``bf16`` is written as TRL resolves it: None becomes True unless fp16 is set.
"""

from __future__ import annotations

from typing import Any

# trainer (the `trl` sub-command) -> our algorithm family
FAMILY = {"grpo": "rl", "rloo": "rl", "dpo": "dpo", "sft": "sft", "reward": "rm", "kto": "dpo"}
CONFIG_CLASS = {
    "grpo": "GRPOConfig",
    "rloo": "RLOOConfig",
    "dpo": "DPOConfig",
    "sft": "SFTConfig",
    "reward": "RewardConfig",
    "kto": "KTOConfig",
}
# TRL's example scripts (trl/scripts/*.py, or copies of them) by file name -> the trainer they run.
SCRIPTS = {
    "grpo.py": "grpo",
    "rloo.py": "rloo",
    "dpo.py": "dpo",
    "sft.py": "sft",
    "reward.py": "reward",
    "reward_modeling.py": "reward",
    "kto.py": "kto",
}

# What every TrainingArguments-based config of TRL 1.16 starts from (transformers' values, TRL's overrides applied).
_COMMON: dict[str, Any] = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "num_train_epochs": 3.0,
    "max_steps": -1,
    "logging_steps": 10,
    "save_steps": 500,
    "gradient_checkpointing": True,
    "bf16": True,
    "seed": 42,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "report_to": "none",
    "output_dir": "trainer_output",
    "dataset_train_split": "train",
}
_ONLINE: dict[str, Any] = {
    "max_completion_length": 512,
    "epsilon": 0.2,
    "epsilon_high": None,
    "num_iterations": 1,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "use_vllm": False,
    "vllm_mode": "colocate",
    "mask_truncated_completions": False,
    "steps_per_generation": None,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "grpo": {
        **_COMMON,
        **_ONLINE,
        "learning_rate": 1e-6,
        "num_generations": 8,
        "beta": 0.0,
        "loss_type": "dapo",
        "scale_rewards": "group",
        "importance_sampling_level": "token",
        "use_bias_correction_kl": True,
    },
    "rloo": {**_COMMON, **_ONLINE, "learning_rate": 1e-6, "num_generations": 2, "beta": 0.05},
    "dpo": {**_COMMON, "learning_rate": 1e-6, "beta": 0.1, "loss_type": ["sigmoid"], "max_length": 1024},
    "sft": {**_COMMON, "learning_rate": 2e-5, "max_length": 1024, "packing": False},
    "reward": {**_COMMON, "learning_rate": 1e-4, "max_length": 1024},
    "kto": {**_COMMON, "learning_rate": 1e-6, "beta": 0.1, "loss_type": "kto", "max_length": 1024},
}

# TRL's GRPO loss_type -> (our policy_loss.type, our aggregation): where TRL's normalisation is ours.
LOSS_TYPES = {
    "dapo": ("ppo", "token_mean"),  # sum over the accumulation window's active tokens
    "grpo": ("ppo", "seq_mean"),  # each sequence's token mean, then the mean
    "dr_grpo": ("ppo", "seq_mean_token_sum_norm"),  # sum / (sequences x max_completion_length)
    "bnpo": ("ppo", "token_mean"),  # a token mean per micro-batch: ours over the step (equal with one micro-batch)
    "cispo": ("cispo", "token_mean"),
    "luspo": ("ppo", "seq_mean_token_sum"),  # each sequence's token sum, then the mean
}
# loss_types this schema has no objective for: what is trained instead, in a few words.
OTHER_LOSS_TYPES = {
    "sapo": "PPO's hard clip instead of SAPO's sigmoid gates (sapo_temperature_pos/neg)",
    "vespo": "PPO's hard clip instead of VESPO's Gamma-shaped sequence weights",
}
# scale_rewards (TRL also takes the old booleans) -> our advantage estimator.
# TRL 1.16 adds this to the group std before dividing (scale_rewards group) -> algorithm.advantage.std_eps
GROUP_STD_EPS = 1e-4
SCALE_REWARDS = {"group": "group_norm", True: "group_norm", "none": "dr_grpo", False: "dr_grpo", "batch": None}
# DPO's loss_type -> our preference.loss
DPO_LOSSES = {"sigmoid": "dpo", "ipo": "ipo", "kto_pair": "kto"}
# TRL's CLI short names of its own reward functions (trl/scripts/grpo.py) -> their import path.
REWARD_NAMES = {
    n: f"trl.rewards.{n}"
    for n in ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward", "get_soft_overlong_punishment")
}
TRACKERS = {"wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow"}
# accelerate's shipped config names (trl --accelerate_config NAME) -> (backend, zero stage)
ACCELERATE_NAMES = {
    "zero1": ("deepspeed", 1),
    "zero2": ("deepspeed", 2),
    "zero3": ("deepspeed", 3),
    "fsdp1": ("fsdp2", None),
    "fsdp2": ("fsdp2", None),
    "multi_gpu": ("ddp", None),
    "single_gpu": ("ddp", None),
}

UNSUPPORTED, NOT_NEEDED, GPU_ONLY = "unsupported", "not needed", "GPU-only"
# TRL fields known to have no equivalent here: category and reason.
NO_EQUIVALENT: dict[str, tuple[str, str]] = {
    "env": (NOT_NEEDED, "environment variables TRL's CLI exports: export them before rlhf-run"),
    "attn_implementation": (NOT_NEEDED, "the attention kernel is chosen here per device"),
    "dtype": (NOT_NEEDED, "weights load in trainer.precision"),
    "torch_dtype": (NOT_NEEDED, "weights load in trainer.precision"),
    "trust_remote_code": (UNSUPPORTED, "models load without remote code here"),
    "model_revision": (UNSUPPORTED, "the model path is loaded as given"),
    "load_in_4bit": (GPU_ONLY, "quantised loading is not offered here"),
    "load_in_8bit": (GPU_ONLY, "quantised loading is not offered here"),
    "log_completions": (NOT_NEEDED, "rollout.record keeps completions"),
    "num_completions_to_print": (NOT_NEEDED, "rollout.record keeps completions"),
    "eval_strategy": (UNSUPPORTED, "evaluation runs on data.eval_files here"),
    "eval_steps": (UNSUPPORTED, "evaluation runs on data.eval_files here"),
    "per_device_eval_batch_size": (NOT_NEEDED, "evaluation batches are sized here"),
    "dataset_test_split": (UNSUPPORTED, "give data.eval_files for an evaluation set"),
    "dataset_streaming": (UNSUPPORTED, "datasets are read whole"),
    "save_strategy": (NOT_NEEDED, "checkpoint.save_steps or checkpoint.every_minutes decide"),
    "save_total_limit": (NOT_NEEDED, "checkpoint.max_keep keeps the last checkpoints"),
    "push_to_hub": (UNSUPPORTED, "the model is written to checkpoint.output_dir"),
    "hub_model_id": (UNSUPPORTED, "the model is written to checkpoint.output_dir"),
    "run_name": (NOT_NEEDED, "logging.run_name names the tracker's run"),
    "logging_first_step": (NOT_NEEDED, "every logging.log_every step is logged"),
    "ddp_find_unused_parameters": (NOT_NEEDED, "the engine decides"),
    "dataloader_num_workers": (NOT_NEEDED, "data loading is sized here"),
    "remove_unused_columns": (NOT_NEEDED, "reward functions get the dataset's columns"),
    "shuffle_dataset": (NOT_NEEDED, "the data order is shuffled by seed"),
    "generation_batch_size": (NOT_NEEDED, "rollout.prompts_per_step x samples_per_prompt is the generation batch"),
    "vllm_server_host": (UNSUPPORTED, "the engines are started by the run itself"),
    "vllm_server_port": (UNSUPPORTED, "the engines are started by the run itself"),
    "vllm_server_base_url": (UNSUPPORTED, "the engines are started by the run itself"),
    "vllm_importance_sampling_correction": (UNSUPPORTED, "TRL's vLLM correction; see algorithm.is_correction"),
    "vllm_importance_sampling_mode": (UNSUPPORTED, "TRL's vLLM correction; see algorithm.is_correction"),
    "vllm_importance_sampling_cap": (UNSUPPORTED, "TRL's vLLM correction; see algorithm.is_correction"),
    "center_rewards_coefficient": (UNSUPPORTED, "no reward-centring term in the reward-model loss here"),
    "sync_ref_model": (UNSUPPORTED, "the reference model stays fixed here"),
    "use_liger_kernel": (NOT_NEEDED, "the kernels are chosen here"),
    "torch_compile": (NOT_NEEDED, "the kernels are chosen here"),
}
# Keys TRL's CLI hands to `accelerate launch` (a YAML or CLI key no dataclass owns).
ACCELERATE_KEYS = ("num_processes", "num_machines", "accelerate_config", "config_file", "mixed_precision")
