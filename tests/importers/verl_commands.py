"""veRL command lines for the import tests, written by us in the form veRL's examples/ use (Hydra overrides after
``python3 -m verl.trainer.main_ppo`` or ``torchrun ... -m verl.trainer.fsdp_sft_trainer``; variables set at the top,
``$@`` at the end). Each names the kind of example it stands for; none is a copy of one. Data paths point into
DATA, which the tests create (empty files: validation checks that they exist)."""

from __future__ import annotations

COMMON = """set -x
DATA=${DATA:-./data}
"""

# name: (script, our algorithm option, what the tests check besides validating)
# LONG_CONTEXT_ULYSSES stands for veRL's long-reasoning GRPO scripts (DAPO-style, 30k-token responses): Ulysses over 4
# ranks for the actor and the reference (the deprecated per-role keys, as veRL's examples still write them), padding
# removed, micro-batches cut by tokens per GPU, the FSDP states offloaded.
GRPO_MATH = (
    COMMON
    + r"""
train="['$DATA/gsm8k_train.parquet', '$DATA/math_train.parquet']"
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$train" data.val_files=$DATA/gsm8k_test.parquet \
    data.train_batch_size=512 data.max_prompt_length=1024 data.max_response_length=2048 \
    data.filter_overlong_prompts=True data.truncation='error' \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=128 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    algorithm.use_kl_in_reward=False \
    trainer.logger='["console","mlflow"]' trainer.project_name=demo trainer.experiment_name=grpo \
    trainer.n_gpus_per_node=8 trainer.nnodes=1 trainer.save_freq=20 trainer.test_freq=5 trainer.total_epochs=3 $@
"""
)

PPO_GAE = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae \
    data.train_files=$DATA/gsm8k_train.parquet data.train_batch_size=256 \
    data.max_prompt_length=512 data.max_response_length=512 \
    actor_rollout_ref.model.path=meta-llama/Llama-3.1-8B-Instruct \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.tensor_model_parallel_size=4 \
    critic.optim.lr=1e-5 critic.model.path=meta-llama/Llama-3.1-8B-Instruct \
    critic.ppo_micro_batch_size_per_gpu=4 algorithm.use_kl_in_reward=True algorithm.kl_ctrl.kl_coef=0.002 \
    trainer.critic_warmup=5 trainer.n_gpus_per_node=8 trainer.nnodes=2 trainer.total_epochs=1
"""
)

RLOO = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=rloo \
    data.train_files=$DATA/gsm8k_train.parquet data.train_batch_size=256 \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    algorithm.use_kl_in_reward=True algorithm.kl_penalty=kl trainer.n_gpus_per_node=8
"""
)

REINFORCE_PP_BASELINE = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=reinforce_plus_plus_baseline \
    data.train_files=$DATA/math_train.parquet \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_type=mse \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8 trainer.n_gpus_per_node=8
"""
)

# DAPO in veRL's terms: clip-higher, token-mean aggregation, dynamic sampling, the overlong buffer.
DAPO = (
    COMMON
    + r"""
max_prompt_length=$((1024 * 2))
max_response_length=$((1024 * 8))
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \
    data.train_files=$DATA/dapo_math.parquet data.train_batch_size=512 \
    data.max_prompt_length=${max_prompt_length} data.max_response_length=${max_response_length} \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B \
    actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    algorithm.use_kl_in_reward=False algorithm.filter_groups.enable=True algorithm.filter_groups.metric=acc \
    +reward_model.reward_kwargs.overlong_buffer_cfg.enable=True \
    +reward_model.reward_kwargs.overlong_buffer_cfg.len=$((1024 * 4)) \
    +reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0 \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=16 trainer.n_gpus_per_node=8
"""
)

GSPO = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.clip_ratio_low=0.0003 actor_rollout_ref.actor.clip_ratio_high=0.0004 \
    data.train_files=$DATA/math_train.parquet data.train_batch_size=256 \
    actor_rollout_ref.model.path=Qwen/Qwen3-8B actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8 trainer.n_gpus_per_node=8
"""
)

SFT_LORA = (
    COMMON
    + r"""
nproc_per_node=4
torchrun --standalone --nnodes=1 --nproc_per_node=$nproc_per_node -m verl.trainer.fsdp_sft_trainer \
    data.train_files=$DATA/sft_train.parquet data.val_files=$DATA/sft_test.parquet \
    data.prompt_key=question data.response_key=answer \
    data.micro_batch_size_per_gpu=4 data.train_batch_size=64 data.max_length=2048 \
    optim.lr=1e-4 model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct \
    model.lora_rank=32 model.lora_alpha=16 model.target_modules=all-linear \
    trainer.project_name=sft trainer.total_epochs=2 trainer.logger=console $@
"""
)

# The kind of examples/cispo_trainer/run_cispo_qwen2_5_0_5b_gsm8k.sh: GRPO advantages, the CISPO loss with the ratio
# unbounded below (clip_ratio_low=10) and clipped above at 1.2, a k3 KL loss.
CISPO = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \
    data.train_files=$DATA/gsm8k_train.parquet data.val_files=$DATA/gsm8k_test.parquet \
    data.train_batch_size=256 data.max_prompt_length=512 data.max_response_length=1024 \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.policy_loss.loss_mode=cispo \
    actor_rollout_ref.actor.clip_ratio_low=10 actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 algorithm.use_kl_in_reward=False \
    trainer.n_gpus_per_node=2 trainer.nnodes=1 trainer.total_epochs=15 $@
"""
)

# The kind of examples/gpg_trainer: GPG's estimator and loss together, no KL.
GPG = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gpg \
    data.train_files=$DATA/gsm8k_train.parquet data.train_batch_size=128 \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.policy_loss.loss_mode=gpg actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8 algorithm.use_kl_in_reward=False \
    trainer.n_gpus_per_node=4 trainer.nnodes=1
"""
)

# Out of reach: a policy loss with no equivalent (GMPO's geometric mean), a Megatron-only config.
GMPO = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean \
    data.train_files=$DATA/math_train.parquet actor_rollout_ref.model.path=Qwen/Qwen2.5-7B \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 actor_rollout_ref.actor.ppo_mini_batch_size=128 \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8 trainer.n_gpus_per_node=8
"""
)
MEGATRON = (
    COMMON
    + r"""
python3 -m verl.trainer.main_ppo --config-path=config --config-name='ppo_megatron_trainer.yaml' \
    algorithm.adv_estimator=grpo data.train_files=$DATA/math_train.parquet \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8 trainer.n_gpus_per_node=8
"""
)

# name: (script, algorithm option or None when out of reach, the report line that says why when out of reach)
LONG_CONTEXT_ULYSSES = (
    COMMON
    + r"""
max_prompt_length=$((1024 * 2))
max_response_length=$((1024 * 30))
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo algorithm.use_kl_in_reward=False \
    data.train_files=$DATA/dapo_math.parquet data.train_batch_size=64 \
    data.max_prompt_length=${max_prompt_length} data.max_response_length=${max_response_length} \
    actor_rollout_ref.model.path=Qwen/Qwen3-8B actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((max_prompt_length + max_response_length)) \
    actor_rollout_ref.actor.ulysses_sequence_parallel_size=4 actor_rollout_ref.ref.ulysses_sequence_parallel_size=4 \
    actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.fsdp_config.param_offload=True actor_rollout_ref.actor.fsdp_config.optimizer_offload=True \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=16 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=4 actor_rollout_ref.rollout.gpu_memory_utilization=0.8 \
    trainer.n_gpus_per_node=8 trainer.nnodes=1
"""
)

SAMPLE = {
    "grpo_math": (GRPO_MATH, "grpo", None),
    "ppo_gae": (PPO_GAE, "ppo", None),
    "rloo": (RLOO, "rloo", None),
    "reinforce_pp_baseline": (REINFORCE_PP_BASELINE, "reinforce_pp_baseline", None),
    "dapo": (DAPO, "dapo", None),
    "gspo": (GSPO, "gspo", None),
    "sft_lora": (SFT_LORA, "sft", None),
    "cispo": (CISPO, "cispo", None),
    "gpg": (GPG, "gpg", None),
    "gmpo": (GMPO, "geo_mean", None),
    "long_context_ulysses": (LONG_CONTEXT_ULYSSES, "grpo", None),
    "megatron": (MEGATRON, None, "Megatron-LM's trainer config"),
}
DATA_FILES = (
    "gsm8k_train.parquet",
    "gsm8k_test.parquet",
    "math_train.parquet",
    "dapo_math.parquet",
    "sft_train.parquet",
    "sft_test.parquet",
)
