"""OpenRLHF command lines for the import tests.

FLAT: the commands of shared/reference/openrlhf-commands.md exactly as OpenRLHF's documentation gives them (flat
flags, before the 2026-04 rename). DOTTED: the same commands written by us in the dotted vocabulary from the flag
tables of shared/reference/openrlhf.md sections 2.1-2.6. REINFORCE_PP_BASELINE: a dotted script in the style of
OpenRLHF's examples (bash arrays, ${VAR} set earlier, comments inside the arrays). RING_ATTENTION: the settings of
OpenRLHF's long-context example (examples/scripts/train_reinforce_baseline_hybrid_engine.sh: Qwen3-4B-Thinking,
samples up to 74,240 tokens, ring attention over 2 of the 4 actor GPUs, head stride 2), written by us in the dotted
vocabulary of 0.11.2 with the DeepSpeed engine's sleep flag.
"""

FLAT = {
    "ppo": r"""ray job submit --address="http://127.0.0.1:8265" \
  --runtime-env-json='{"working_dir": "/openrlhf"}' \
  -- python3 -m openrlhf.cli.train_ppo_ray \
  --ref_num_nodes 1 --ref_num_gpus_per_node 8 \
  --reward_num_nodes 1 --reward_num_gpus_per_node 8 \
  --critic_num_nodes 1 --critic_num_gpus_per_node 8 \
  --actor_num_nodes 1 --actor_num_gpus_per_node 8 \
  --vllm_num_engines 4 --vllm_tensor_parallel_size 2 \
  --colocate_all_models \
  --vllm_gpu_memory_utilization 0.5 \
  --pretrain OpenRLHF/Llama-3-8b-sft-mixture \
  --reward_pretrain OpenRLHF/Llama-3-8b-rm-700k \
  --save_path ./output/llama3-8b-rlhf \
  --micro_train_batch_size 8 --train_batch_size 128 \
  --micro_rollout_batch_size 16 --rollout_batch_size 1024 \
  --max_epochs 1 --prompt_max_len 1024 --generate_max_len 1024 \
  --zero_stage 3 --bf16 \
  --actor_learning_rate 5e-7 --critic_learning_rate 9e-6 \
  --init_kl_coef 0.01 --normalize_reward \
  --gradient_checkpointing --packing_samples \
  --vllm_enable_sleep --deepspeed_enable_sleep
""",
    "rm": r"""deepspeed --module openrlhf.cli.train_rm \
  --save_path ./output/llama3-8b-rm \
  --save_steps -1 --logging_steps 1 \
  --eval_steps -1 --train_batch_size 256 \
  --micro_train_batch_size 1 --pretrain meta-llama/Meta-Llama-3-8B \
  --bf16 --max_epochs 1 --max_len 8192 \
  --zero_stage 3 --learning_rate 9e-6 \
  --dataset OpenRLHF/preference_dataset_mixture2_and_safe_pku \
  --apply_chat_template --chosen_key chosen \
  --rejected_key rejected --flash_attn --gradient_checkpointing
""",
    "ppo_own_rm": r"""ray job submit --address="http://127.0.0.1:8265" \
  -- python3 -m openrlhf.cli.train_ppo_ray \
  --ref_num_nodes 1 --ref_num_gpus_per_node 8 \
  --reward_num_nodes 1 --reward_num_gpus_per_node 8 \
  --critic_num_nodes 1 --critic_num_gpus_per_node 8 \
  --actor_num_nodes 1 --actor_num_gpus_per_node 8 \
  --vllm_num_engines 4 --vllm_tensor_parallel_size 2 \
  --colocate_all_models \
  --pretrain OpenRLHF/Llama-3-8b-sft-mixture \
  --reward_pretrain ./output/llama3-8b-rm \
  --save_path ./output/llama3-8b-ppo \
  --micro_train_batch_size 8 --train_batch_size 128 \
  --micro_rollout_batch_size 16 --rollout_batch_size 1024 \
  --max_epochs 1 --prompt_max_len 1024 --generate_max_len 1024 \
  --zero_stage 3 --bf16 \
  --actor_learning_rate 5e-7 --critic_learning_rate 9e-6 \
  --init_kl_coef 0.01 --normalize_reward \
  --vllm_enable_sleep --deepspeed_enable_sleep
""",
    "grpo": r"""ray job submit --address="http://127.0.0.1:8265" \
  -- python3 -m openrlhf.cli.train_ppo_ray \
  --advantage_estimator group_norm \
  --ref_num_nodes 1 --ref_num_gpus_per_node 8 \
  --reward_num_nodes 1 --reward_num_gpus_per_node 8 \
  --actor_num_nodes 1 --actor_num_gpus_per_node 8 \
  --vllm_num_engines 4 --vllm_tensor_parallel_size 2 \
  --colocate_all_models \
  --pretrain OpenRLHF/Llama-3-8b-sft-mixture \
  --reward_pretrain OpenRLHF/Llama-3-8b-rm-700k \
  --save_path ./output/llama3-8b-grpo \
  --micro_train_batch_size 8 --train_batch_size 128 \
  --micro_rollout_batch_size 16 --rollout_batch_size 1024 \
  --max_epochs 1 --bf16 \
  --actor_learning_rate 5e-7 \
  --init_kl_coef 0.01 --use_kl_loss --kl_estimator k3 \
  --normalize_reward --no_advantage_std_norm
""",
    "dpo": r"""deepspeed --module openrlhf.cli.train_dpo \
  --save_path ./output/llama3-8b-dpo \
  --save_steps -1 --logging_steps 1 \
  --eval_steps -1 --train_batch_size 256 \
  --micro_train_batch_size 2 --pretrain meta-llama/Meta-Llama-3-8B \
  --bf16 --max_epochs 1 --max_len 8192 \
  --zero_stage 3 --learning_rate 5e-7 --beta 0.1 \
  --dataset OpenRLHF/preference_dataset_mixture2_and_safe_pku \
  --apply_chat_template --chosen_key chosen \
  --rejected_key rejected --flash_attn --gradient_checkpointing
""",
    "sft": r"""deepspeed --module openrlhf.cli.train_sft \
   --max_len 4096 \
   --dataset Open-Orca/OpenOrca \
   --input_key question \
   --output_key response \
   --input_template $'User: {}\nAssistant: ' \
   --train_batch_size 256 \
   --micro_train_batch_size 2 \
   --max_samples 500000 \
   --pretrain meta-llama/Meta-Llama-3-8B \
   --save_path ./checkpoint/llama3-8b-sft \
   --save_steps -1 \
   --logging_steps 1 \
   --eval_steps -1 \
   --zero_stage 2 \
   --max_epochs 1 \
   --packing_samples \
   --param_dtype bf16 \
   --learning_rate 5e-6 \
   --gradient_checkpointing \
   --use_wandb {wandb_token}
""",
    "rm_packing": r"""deepspeed --module openrlhf.cli.train_rm \
   --save_path ./checkpoint/llama3-8b-rm \
   --save_steps -1 \
   --logging_steps 1 \
   --eval_steps -1 \
   --train_batch_size 256 \
   --micro_train_batch_size 1 \
   --pretrain OpenRLHF/Llama-3-8b-sft-mixture \
   --param_dtype bf16 \
   --max_epochs 1 \
   --max_len 8192 \
   --zero_stage 3 \
   --learning_rate 9e-6 \
   --dataset OpenRLHF/preference_dataset_mixture2_and_safe_pku \
   --apply_chat_template \
   --chosen_key chosen \
   --rejected_key rejected \
   --packing_samples \
   --gradient_checkpointing \
   --use_wandb {wandb_token}
""",
    "ppo_dynamic_batch": r"""ray job submit --address="http://127.0.0.1:8265" \
   --runtime-env-json='{"working_dir": "/openrlhf"}' \
   -- python3 -m openrlhf.cli.train_ppo_ray \
   --ref_num_nodes 1 \
   --ref_num_gpus_per_node 8 \
   --reward_num_nodes 1 \
   --reward_num_gpus_per_node 8 \
   --critic_num_nodes 1 \
   --critic_num_gpus_per_node 8 \
   --actor_num_nodes 1 \
   --actor_num_gpus_per_node 8 \
   --vllm_num_engines 4 \
   --vllm_tensor_parallel_size 2 \
   --colocate_all_models \
   --vllm_gpu_memory_utilization 0.5 \
   --pretrain OpenRLHF/Llama-3-8b-sft-mixture \
   --reward_pretrain OpenRLHF/Llama-3-8b-rm-700k \
   --save_path /openrlhf/examples/test_scripts/final/llama3-8b-rlhf \
   --ckpt_path /openrlhf/examples/test_scripts/ckpt/llama3-8b-rlhf \
   --save_hf_ckpt \
   --train_batch_size 128 \
   --rollout_batch_size 1024 \
   --use_dynamic_batch \
   --n_samples_per_prompt 1 \
   --max_epochs 1 \
   --prompt_max_len 1024 \
   --max_samples 100000 \
   --generate_max_len 1024 \
   --zero_stage 3 \
   --param_dtype bf16 \
   --actor_learning_rate 5e-7 \
   --critic_learning_rate 9e-6 \
   --init_kl_coef 0.01 \
   --prompt_data OpenRLHF/prompt-collection-v0.1 \
   --input_key context_messages \
   --apply_chat_template \
   --normalize_reward \
   --gradient_checkpointing \
   --packing_samples \
   --vllm_sync_backend nccl \
   --enforce_eager \
   --vllm_enable_sleep \
   --deepspeed_enable_sleep \
   --use_wandb {wandb_token}
""",
    "reward_func_fragment": r"""ray job submit --address="http://127.0.0.1:8265" \
  --runtime-env-json='{"working_dir": "/openrlhf"}' \
  -- python3 -m openrlhf.cli.train_ppo_ray \
  --pretrain meta-llama/Meta-Llama-3-8B \
  --use_dynamic_batch \
  --remote_rm_url /path/to/reward_func.py \
  --label_key answer \
  --prompt_data your_prompt_dataset \
  ... # 其他训练参数
""",
}

# The same commands in the dotted vocabulary (section 2.6: --pretrain -> --actor.model_name_or_path, ...). Where the
# flat form has --prompt_max_len P --generate_max_len G, the dotted one has --data.max_len P+G
# --rollout.max_new_tokens G; --bf16 is --ds.param_dtype bf16 and --flash_attn --ds.attn_implementation
# flash_attention_2, their later spellings.
DOTTED = {
    "ppo": r"""ray job submit --address="http://127.0.0.1:8265" \
  --runtime-env-json='{"working_dir": "/openrlhf"}' \
  -- python3 -m openrlhf.cli.train_ppo_ray \
  --ref.num_nodes 1 --ref.num_gpus_per_node 8 \
  --reward.num_nodes 1 --reward.num_gpus_per_node 8 \
  --critic.num_nodes 1 --critic.num_gpus_per_node 8 \
  --actor.num_nodes 1 --actor.num_gpus_per_node 8 \
  --vllm.num_engines 4 --vllm.tensor_parallel_size 2 \
  --train.colocate_all \
  --vllm.gpu_memory_utilization 0.5 \
  --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture \
  --reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k \
  --ckpt.output_dir ./output/llama3-8b-rlhf \
  --train.micro_batch_size 8 --train.batch_size 128 \
  --rollout.micro_batch_size 16 --rollout.batch_size 1024 \
  --train.max_epochs 1 --data.max_len 2048 --rollout.max_new_tokens 1024 \
  --ds.zero_stage 3 --ds.param_dtype bf16 \
  --actor.adam.lr 5e-7 --critic.adam.lr 9e-6 \
  --algo.kl.init_coef 0.01 --reward.normalize_enable \
  --actor.gradient_checkpointing_enable --ds.packing_samples \
  --vllm.enable_sleep --ds.enable_sleep
""",
    "rm": r"""deepspeed --module openrlhf.cli.train_rm \
  --ckpt.output_dir ./output/llama3-8b-rm \
  --ckpt.save_steps -1 --logger.logging_steps 1 \
  --eval.steps -1 --train.batch_size 256 \
  --train.micro_batch_size 1 --model.model_name_or_path meta-llama/Meta-Llama-3-8B \
  --ds.param_dtype bf16 --train.max_epochs 1 --data.max_len 8192 \
  --ds.zero_stage 3 --adam.lr 9e-6 \
  --data.dataset OpenRLHF/preference_dataset_mixture2_and_safe_pku \
  --data.apply_chat_template --data.chosen_key chosen \
  --data.rejected_key rejected --ds.attn_implementation flash_attention_2 \
  --model.gradient_checkpointing_enable
""",
    "grpo": r"""ray job submit --address="http://127.0.0.1:8265" \
  -- python3 -m openrlhf.cli.train_ppo_ray \
  --algo.advantage.estimator group_norm \
  --ref.num_nodes 1 --ref.num_gpus_per_node 8 \
  --reward.num_nodes 1 --reward.num_gpus_per_node 8 \
  --actor.num_nodes 1 --actor.num_gpus_per_node 8 \
  --vllm.num_engines 4 --vllm.tensor_parallel_size 2 \
  --train.colocate_all \
  --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture \
  --reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k \
  --ckpt.output_dir ./output/llama3-8b-grpo \
  --train.micro_batch_size 8 --train.batch_size 128 \
  --rollout.micro_batch_size 16 --rollout.batch_size 1024 \
  --train.max_epochs 1 --ds.param_dtype bf16 \
  --actor.adam.lr 5e-7 \
  --algo.kl.init_coef 0.01 --algo.kl.use_loss --algo.kl.estimator k3 \
  --reward.normalize_enable --algo.advantage.no_std_norm
""",
    "dpo": r"""deepspeed --module openrlhf.cli.train_dpo \
  --ckpt.output_dir ./output/llama3-8b-dpo \
  --ckpt.save_steps -1 --logger.logging_steps 1 \
  --eval.steps -1 --train.batch_size 256 \
  --train.micro_batch_size 2 --model.model_name_or_path meta-llama/Meta-Llama-3-8B \
  --ds.param_dtype bf16 --train.max_epochs 1 --data.max_len 8192 \
  --ds.zero_stage 3 --adam.lr 5e-7 --model.beta 0.1 \
  --data.dataset OpenRLHF/preference_dataset_mixture2_and_safe_pku \
  --data.apply_chat_template --data.chosen_key chosen \
  --data.rejected_key rejected --ds.attn_implementation flash_attention_2 \
  --model.gradient_checkpointing_enable
""",
    "sft": r"""deepspeed --module openrlhf.cli.train_sft \
   --data.max_len 4096 \
   --data.dataset Open-Orca/OpenOrca \
   --data.input_key question \
   --data.output_key response \
   --data.input_template $'User: {}\nAssistant: ' \
   --train.batch_size 256 \
   --train.micro_batch_size 2 \
   --data.max_samples 500000 \
   --model.model_name_or_path meta-llama/Meta-Llama-3-8B \
   --ckpt.output_dir ./checkpoint/llama3-8b-sft \
   --ckpt.save_steps -1 \
   --logger.logging_steps 1 \
   --eval.steps -1 \
   --ds.zero_stage 2 \
   --train.max_epochs 1 \
   --ds.packing_samples \
   --ds.param_dtype bf16 \
   --adam.lr 5e-6 \
   --model.gradient_checkpointing_enable \
   --logger.wandb.key {wandb_token}
""",
    "ppo_dynamic_batch": r"""ray job submit --address="http://127.0.0.1:8265" \
   --runtime-env-json='{"working_dir": "/openrlhf"}' \
   -- python3 -m openrlhf.cli.train_ppo_ray \
   --ref.num_nodes 1 --ref.num_gpus_per_node 8 \
   --reward.num_nodes 1 --reward.num_gpus_per_node 8 \
   --critic.num_nodes 1 --critic.num_gpus_per_node 8 \
   --actor.num_nodes 1 --actor.num_gpus_per_node 8 \
   --vllm.num_engines 4 --vllm.tensor_parallel_size 2 \
   --train.colocate_all \
   --vllm.gpu_memory_utilization 0.5 \
   --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture \
   --reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k \
   --ckpt.output_dir /openrlhf/examples/test_scripts/final/llama3-8b-rlhf \
   --ckpt.path /openrlhf/examples/test_scripts/ckpt/llama3-8b-rlhf \
   --ckpt.save_hf \
   --train.batch_size 128 \
   --rollout.batch_size 1024 \
   --train.dynamic_batch_enable \
   --rollout.n_samples_per_prompt 1 \
   --train.max_epochs 1 \
   --data.max_len 2048 \
   --data.max_samples 100000 \
   --rollout.max_new_tokens 1024 \
   --ds.zero_stage 3 \
   --ds.param_dtype bf16 \
   --actor.adam.lr 5e-7 \
   --critic.adam.lr 9e-6 \
   --algo.kl.init_coef 0.01 \
   --data.prompt_dataset OpenRLHF/prompt-collection-v0.1 \
   --data.input_key context_messages \
   --data.apply_chat_template \
   --reward.normalize_enable \
   --actor.gradient_checkpointing_enable \
   --ds.packing_samples \
   --vllm.sync_backend nccl \
   --vllm.enforce_eager \
   --vllm.enable_sleep \
   --ds.enable_sleep \
   --logger.wandb.key {wandb_token}
""",
}

# REINFORCE++-baseline with a reward function, dotted flags, in the form of OpenRLHF's example scripts.
REINFORCE_PP_BASELINE = r"""#!/bin/bash
set -x

MODEL_PATH="Qwen/Qwen2.5-7B-Instruct"
SAVE_PATH="${EXP_DIR:-/data/exp}/qwen2.5-7b-rpp-baseline"
REWARD_FUNC=./reward_func.py

CKPT_ARGS=(
   --actor.model_name_or_path ${MODEL_PATH}
   --ckpt.output_dir ${SAVE_PATH}
   --ckpt.path "${SAVE_PATH}/ckpt"
   --ckpt.max_num 2
   --ckpt.save_steps 10
)

ROLLOUT_ARGS=(
   --reward.remote_url ${REWARD_FUNC}
   # --reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k
   --data.prompt_dataset OpenRLHF/prompt-collection-v0.1
   --data.input_key prompt
   --data.label_key label
   --data.max_len 4096
   --rollout.max_new_tokens 2048
   --data.apply_chat_template

   --rollout.batch_size 128
   --rollout.n_samples_per_prompt 8
   --train.batch_size 1024
   --train.micro_batch_size 2
   --rollout.micro_batch_size 4
   --algo.dynamic_filtering_enable
   --algo.dynamic_filtering_range 0.0 1.0
   --train.max_epochs 1
)

ENGINE_ARGS=(
   --ref.num_nodes 1
   --ref.num_gpus_per_node 8
   --actor.num_nodes 1
   --actor.num_gpus_per_node 8
   --vllm.num_engines 4
   --vllm.tensor_parallel_size 2
   --vllm.gpu_memory_utilization 0.6
   --train.colocate_all
   --vllm.enable_sleep
   --ds.enable_sleep
   --vllm.enforce_eager
   --ds.zero_stage 3
   --actor.gradient_checkpointing_enable
   --ds.param_dtype bf16
)

OPTIMIZER_ARGS=(
   --algo.advantage.estimator reinforce_baseline
   --actor.adam.lr 5e-7
   --actor.entropy_coef 0.0
   --algo.kl.init_coef 1e-3
   --algo.kl.use_loss
   --algo.kl.estimator k2
   --algo.advantage.is_correction_enable
   --algo.advantage.is_correction_type icepop
)

ray job submit --address="http://127.0.0.1:8265" \
   -- python3 -m openrlhf.cli.train_ppo_ray \
   "${CKPT_ARGS[@]}" \
   ${ROLLOUT_ARGS[@]} \
   ${ENGINE_ARGS[@]} \
   ${OPTIMIZER_ARGS[@]}
"""

RING_ATTENTION = r"""#!/bin/bash
MODEL_PATH="Qwen/Qwen3-4B-Thinking-2507"
SAVE_PATH=./exp/qwen3-4b-thinking
AGENT_FUNC_PATH=./agent_func.py

python3 -m openrlhf.cli.train_ppo_ray \
   --actor.model_name_or_path ${MODEL_PATH} \
   --ckpt.output_dir ${SAVE_PATH} --ckpt.path "${SAVE_PATH}/ckpt" --ckpt.max_num 3 --ckpt.save_steps 10 \
   --train.agent_func_path ${AGENT_FUNC_PATH} \
   --data.prompt_dataset zhuzilin/dapo-math-17k --data.input_key prompt --data.label_key label \
   --data.max_len 74240 --rollout.max_new_tokens 64000 --data.apply_chat_template --ds.packing_samples \
   --rollout.batch_size 128 --rollout.n_samples_per_prompt 8 --train.batch_size 1024 \
   --algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0.0 1.0 \
   --train.dynamic_batch_enable --train.max_tokens_per_gpu 16192 --rollout.max_tokens_per_gpu 32768 \
   --train.micro_batch_size 1 --rollout.micro_batch_size 8 --train.max_epochs 1 --train.num_episodes 1 \
   --ref.num_nodes 1 --ref.num_gpus_per_node 4 --actor.num_nodes 1 --actor.num_gpus_per_node 4 \
   --vllm.num_engines 2 --vllm.tensor_parallel_size 2 --vllm.gpu_memory_utilization 0.7 \
   --train.colocate_all --vllm.enable_sleep --ds.enable_sleep --vllm.enforce_eager \
   --ds.zero_stage 3 --actor.gradient_checkpointing_enable \
   --ds.ring_attn_size 2 --ds.ring_attn_head_stride 2 --ds.param_dtype bf16 \
   --algo.advantage.estimator reinforce_baseline --actor.adam.lr 5e-7 --actor.entropy_coef 0.0 \
   --algo.kl.init_coef 1e-5 --algo.kl.use_loss --algo.kl.estimator k2 \
   --algo.advantage.is_correction_enable --algo.advantage.is_correction_type icepop \
   --logger.logging_steps 1 --eval.steps -1
"""
