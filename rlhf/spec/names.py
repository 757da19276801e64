"""The strings the config accepts, kept here so validation runs without importing torch.

tests/spec/test_names_match_registries.py checks that these equal the keys of rlhf.algo's registries.
"""

from __future__ import annotations

FAMILIES = ("rl", "sft", "rm", "dpo")
ADVANTAGE_ESTIMATORS = ("gae", "reinforce", "reinforce_baseline", "rloo", "group_norm", "dr_grpo", "opd")
# Estimators that compute a baseline over the samples of one prompt: gamma is forced to 1, no critic.
GROUP_ESTIMATORS = ("reinforce_baseline", "rloo", "group_norm", "dr_grpo")
CRITIC_ESTIMATORS = ("gae",)
# On-policy distillation: advantages from a frozen teacher's per-token log-probs (the teacher role exists only here).
TEACHER_ESTIMATORS = ("opd",)
POLICY_LOSSES = ("ppo", "gspo")
KL_ESTIMATORS = ("k1", "k2", "k3")
KL_PLACEMENTS = ("reward", "loss")
LOSS_AGGREGATIONS = ("token_mean", "seq_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
IS_CORRECTIONS = ("none", "tis", "icepop", "seq_mask_tis")
PREFERENCE_LOSSES = ("dpo", "cdpo", "ipo", "kto", "simpo", "orpo")
RM_LOSSES = ("sigmoid", "logexp")
ROLLOUT_BACKENDS = ("vllm", "hf")
# trainer.backend: the keys of rlhf.engines.backends.TRAIN_BACKENDS (tests/engines/test_train_backends.py checks)
TRAIN_BACKENDS = ("deepspeed", "fsdp2")
PRECISIONS = ("bf16", "fp32", "fp16")
OPTIMIZERS = ("adamw", "fused_adam", "cpu_adam")
LR_SCHEDULERS = ("cosine_with_min_lr", "constant_with_warmup", "constant")
ACCELERATORS = ("cpu", "gpu")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
BAD_ROW_POLICIES = ("error", "skip")
TOO_LONG_POLICIES = ("truncate", "drop")
AGENT_EXECUTORS = ("single_turn", "multi_turn", "openai")
VERIFIERS = ("math", "format", "exact", "reasoning_gym")
