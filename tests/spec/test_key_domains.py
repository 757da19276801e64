"""Every key's domain is declared next to it in the schema and checked before anything starts: impossible values
with the right type are rejected, each naming the key, the value and the allowed range."""

from __future__ import annotations

import dataclasses
import math

import pytest

from rlhf.cli import plan as plan_cli
from rlhf.planning.plan import plan
from rlhf.spec import validate
from rlhf.spec.build import load_spec
from rlhf.spec.keys import Domain, walk
from rlhf.spec.schema import ExperimentSpec

CPU_RL = "+recipe=grpo_tiny_cpu"
GPU_RL = "+recipe=grpo_llama3_8b"
SFT = "+recipe=sft_tiny_cpu"

# (recipe, override, key, words the fix must contain)
# fmt: off
IMPOSSIBLE = [
    (CPU_RL, "launch.executor=mpi", "launch.executor", "one of auto, ray, local"),
    (CPU_RL, "algorithm.advantage.lambd=-1.0", "algorithm.advantage.lambd", "[0, 1]"),
    (CPU_RL, "algorithm.advantage.gamma=1.5", "algorithm.advantage.gamma", "[0, 1]"),
    (CPU_RL, "algorithm.policy_loss.eps_clip_low=1.2", "algorithm.policy_loss.eps_clip_low", "a value < 1"),
    (CPU_RL, "algorithm.policy_loss.eps_clip_high=-0.1", "algorithm.policy_loss.eps_clip_high", ">= 0"),
    (CPU_RL, "algorithm.policy_loss.dual_clip=0.5", "algorithm.policy_loss.dual_clip", "> 1"),
    (CPU_RL, "algorithm.policy_loss.aggregation_norm=0", "algorithm.policy_loss.aggregation_norm", ">= 1"),
    (CPU_RL, "algorithm.policy_loss.entropy_coef=-1", "algorithm.policy_loss.entropy_coef", ">= 0"),
    (CPU_RL, "algorithm.kl.coef=-0.1", "algorithm.kl.coef", ">= 0"),
    (CPU_RL, "algorithm.kl.target=0", "algorithm.kl.target", "> 0"),
    (CPU_RL, "algorithm.kl.horizon=0", "algorithm.kl.horizon", ">= 1"),
    (CPU_RL, "algorithm.is_correction.threshold=-1", "algorithm.is_correction.threshold", ">= 0"),
    (CPU_RL, "algorithm.is_correction.threshold=[-1,1]", "algorithm.is_correction.threshold", ">= 0"),
    (CPU_RL, "algorithm.is_correction.level=tok", "algorithm.is_correction.level", "one of off, token, seq"),
    (CPU_RL, "algorithm.is_correction.gating=kl", "algorithm.is_correction.gating", "one of ratio, binary_kl, tv"),
    (CPU_RL, "algorithm.filters.dynamic_filtering_range=[1.0,0.0]", "algorithm.filters.dynamic_filtering_range", "increasing"),
    (CPU_RL, "algorithm.filters.dynamic_filtering_range=[0.0]", "algorithm.filters.dynamic_filtering_range", "2 items"),
    (CPU_RL, "algorithm.filters.max_refill_rounds=-1", "algorithm.filters.max_refill_rounds", ">= 0"),
    (CPU_RL, "algorithm.filters.overlong_penalty_factor=-2", "algorithm.filters.overlong_penalty_factor", ">= 0"),
    (CPU_RL, "algorithm.filters.stop_properly_penalty_coef=1.5", "algorithm.filters.stop_properly_penalty_coef", "<= 1"),
    (CPU_RL, "algorithm.preference.beta=0", "algorithm.preference.beta", "> 0"),
    (CPU_RL, "algorithm.preference.label_smoothing=0.7", "algorithm.preference.label_smoothing", "[0, 0.5)"),
    (CPU_RL, "algorithm.family=ppo", "algorithm.family", "one of rl, sft, rm, dpo"),
    (CPU_RL, "model.lora.dropout=1.5", "model.lora.dropout", "[0, 1)"),
    (CPU_RL, "model.lora.rank=-4", "model.lora.rank", ">= 0"),
    (CPU_RL, "model.lora.alpha=0", "model.lora.alpha", "> 0"),
    (CPU_RL, "model.hidden_size=0", "model.hidden_size", ">= 1"),
    (CPU_RL, "model.architecture=gpt5", "model.architecture", "one of llama, qwen2, qwen3"),
    (GPU_RL, "placement.devices.policy=-2", "placement.devices.policy", ">= 0"),
    (CPU_RL, "rollout.top_p=0", "rollout.top_p", "in (0, 1]"),
    (CPU_RL, "rollout.top_p=1.5", "rollout.top_p", "in (0, 1]"),
    (CPU_RL, "rollout.top_k=-3", "rollout.top_k", ">= -1"),
    (CPU_RL, "rollout.temperature=-1", "rollout.temperature", ">= 0"),
    (CPU_RL, "rollout.samples_per_prompt=0", "rollout.samples_per_prompt", ">= 1"),
    (CPU_RL, "rollout.vllm.gpu_memory_utilization=1.5", "rollout.vllm.gpu_memory_utilization", "in (0, 1]"),
    (CPU_RL, "rollout.vllm.cpu_kv_cache_gb=0", "rollout.vllm.cpu_kv_cache_gb", ">= 1"),
    (CPU_RL, "rollout.vllm.max_num_seqs=0", "rollout.vllm.max_num_seqs", ">= 1"),
    (CPU_RL, "hardware.device_memory_gb=0", "hardware.device_memory_gb", "in (0, 1e+06]"),
    (CPU_RL, "hardware.cpus_per_node=0", "hardware.cpus_per_node", ">= 1"),
    (CPU_RL, "hardware.accelerator=tpu", "hardware.accelerator", "one of cpu, gpu"),
    (CPU_RL, "trainer.lr=-1e-6", "trainer.lr", "> 0"),
    (CPU_RL, "trainer.critic_lr=0", "trainer.critic_lr", "> 0"),
    (CPU_RL, "trainer.max_norm=-1", "trainer.max_norm", ">= 0"),
    (CPU_RL, "trainer.betas=[1.5,0.9]", "trainer.betas", "[0, 1)"),
    (CPU_RL, "trainer.betas=[0.9]", "trainer.betas", "2 items"),
    (CPU_RL, "trainer.warmup_ratio=2.0", "trainer.warmup_ratio", "[0, 1]"),
    (CPU_RL, "trainer.min_lr_ratio=-0.5", "trainer.min_lr_ratio", "[0, 1]"),
    (CPU_RL, "trainer.eps=0", "trainer.eps", "> 0"),
    (CPU_RL, "trainer.weight_decay=-0.01", "trainer.weight_decay", ">= 0"),
    (CPU_RL, "trainer.max_steps=0", "trainer.max_steps", ">= 1"),
    (CPU_RL, "trainer.epochs_per_rollout=0", "trainer.epochs_per_rollout", ">= 1"),
    (CPU_RL, "trainer.zero_stage=4", "trainer.zero_stage", "one of 0, 1, 2, 3"),
    (CPU_RL, "trainer.optimizer=sgd", "trainer.optimizer", "one of adamw"),
    (CPU_RL, "data.eval_fraction=1.0", "data.eval_fraction", "[0, 1)"),
    (CPU_RL, "data.max_len=1", "data.max_len", ">= 2"),
    (CPU_RL, "data.max_samples=0", "data.max_samples", ">= 1"),
    (CPU_RL, "data.train_probs=[0.5]", "data.train_probs", "summing to 1"),
    (CPU_RL, "data.train_probs=[1.5]", "data.train_probs", "[0, 1]"),
    (CPU_RL, "data.input_template='Q: A:'", "data.input_template", "must contain {}"),
    (CPU_RL, "data.on_bad_row=ignore", "data.on_bad_row", "one of error, skip"),
    (CPU_RL, "reward.retries=-1", "reward.retries", ">= 0"),
    (CPU_RL, "reward.request_batch=0", "reward.request_batch", ">= 1"),
    (CPU_RL, "reward.timeout_s=0", "reward.timeout_s", "> 0"),
    (CPU_RL, "reward.clip_range=[5.0,-5.0]", "reward.clip_range", "increasing"),
    (CPU_RL, "reward.verifier=maths", "reward.verifier", "one of math"),
    (CPU_RL, "critic.value_clip=0", "critic.value_clip", "> 0"),
    (CPU_RL, "critic.freezing_steps=-1", "critic.freezing_steps", ">= 0"),
    (CPU_RL, "teacher.params_b=0", "teacher.params_b", "in (0, 100000]"),
    (CPU_RL, "sft_warmup.steps=-1", "sft_warmup.steps", ">= 0"),
    (CPU_RL, "sft_warmup.lr=0", "sft_warmup.lr", "> 0"),
    (CPU_RL, "eval.samples_per_prompt=0", "eval.samples_per_prompt", ">= 1"),
    (CPU_RL, "eval.steps=-5", "eval.steps", ">= 0"),
    (CPU_RL, "eval.temperature=-0.1", "eval.temperature", ">= 0"),
    (CPU_RL, "eval.max_prompts=0", "eval.max_prompts", ">= 1"),
    (CPU_RL, "checkpoint.save_steps=-1", "checkpoint.save_steps", ">= 0"),
    (CPU_RL, "checkpoint.max_keep=0", "checkpoint.max_keep", ">= 1"),
    (CPU_RL, "logging.log_every=0", "logging.log_every", ">= 1"),
    (CPU_RL, "logging.experiment=''", "logging.experiment", "not be empty"),
    (CPU_RL, "agent.max_turns=0", "agent.max_turns", ">= 1"),
    (CPU_RL, "agent.step_timeout_s=-1", "agent.step_timeout_s", "> 0"),
    (CPU_RL, "ray.num_cpus=0", "ray.num_cpus", ">= 1"),
    (CPU_RL, "ray.worker_niceness=25", "ray.worker_niceness", "[0, 19]"),
    (CPU_RL, "sweep.direction=up", "sweep.direction", "one of maximize, minimize"),
    (CPU_RL, "seed=-1", "seed", ">= 0"),
    (SFT, "trainer.epochs=0", "trainer.epochs", ">= 1"),
    (SFT, "trainer.startup_timeout_s=0", "trainer.startup_timeout_s", "> 0"),
]
# fmt: on


def test_at_least_forty_impossible_values_across_every_section():
    sections = {key.split(".")[0] for _, _, key, _ in IMPOSSIBLE}
    # every section with at least one constrained key gets an impossible value
    constrained = {k.path.split(".")[0] for k in walk(ExperimentSpec) if "." in k.path and k.domain.describe()}
    assert len(IMPOSSIBLE) >= 40
    assert constrained <= sections, constrained - sections


@pytest.mark.parametrize(("recipe", "override", "key", "words"), IMPOSSIBLE, ids=[o for _, o, _, _ in IMPOSSIBLE])
def test_impossible_value_is_rejected_naming_key_and_range(recipe, override, key, words):
    errors = [e for e in validate(load_spec([recipe, override])) if e.key == key]
    assert errors, f"{override} was accepted"
    assert words in errors[0].fix, errors[0]


@pytest.mark.parametrize("override", ["trainer.lr=-1e-6", "rollout.top_p=1.5", "trainer.betas=[1.5,0.9]"])
def test_rlhf_plan_refuses_without_a_traceback(override, capsys):
    with pytest.raises(SystemExit) as e:
        plan_cli.main([CPU_RL, override])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert override.split("=")[0] in err and "Traceback" not in err


def test_every_leaf_key_is_documented():
    undocumented = [k.path for k in walk(ExperimentSpec) if not k.doc]
    assert undocumented == []


def test_shipped_defaults_are_inside_their_domains():
    outside = [(k.path, k.default) for k in walk(ExperimentSpec) if k.domain.violation(k.default)]
    assert outside == []


def test_domain_describes_itself_in_words():
    assert Domain(gt=0).describe() == "> 0"
    assert Domain(ge=0, lt=1).describe() == "in [0, 1)"
    assert Domain(gt=0, le=1).describe() == "in (0, 1]"
    assert Domain(choices=("a", "b"), empty_ok=True).describe() == "empty or one of a, b"


# Every key whose value reaches a division (or a modulo) in the spec, the plan or a pipeline, with where: 0 must be
# outside its domain, so `rlhf-plan` names the key instead of ending in ZeroDivisionError.
# fmt: off
DIVISORS = [
    (CPU_RL, "trainer.micro_batch_per_device"),  # derive: gradient accumulation; validate: batch divisibility
    (SFT, "trainer.micro_batch_per_device"),
    (CPU_RL, "trainer.global_batch"),  # derive: optimizer steps per rollout; pipelines/supervised: steps per epoch
    (CPU_RL, "rollout.prompts_per_step"),  # pipelines/rl: RL steps per episode
    (CPU_RL, "rollout.samples_per_prompt"),  # algo/advantages: groups of n samples
    (GPU_RL, "rollout.tensor_parallel_size"),  # planning/memory: weights per engine device
    (GPU_RL, "rollout.num_engines"),  # planning/memory: sequences per engine
    (CPU_RL, "hardware.devices_per_node"),  # planning/plan: CPUs per bundle; pipelines/rl_roles: threads per rank
    (CPU_RL, "hardware.nodes"),  # derive: devices shared out between groups
    (CPU_RL, "algorithm.kl.target"),  # algo/kl: adaptive controller, current / target
    (CPU_RL, "algorithm.kl.horizon"),  # algo/kl: n_steps / horizon
    (CPU_RL, "algorithm.policy_loss.aggregation_norm"),  # algo/aggregation: seq_mean_token_sum_norm constant
    (CPU_RL, "model.num_heads"),  # head_dim and the plan's attention sizes
]
# fmt: on


@pytest.mark.parametrize(("recipe", "key"), DIVISORS, ids=[f"{k}@{r.split('=')[1]}" for r, k in DIVISORS])
def test_zero_where_a_value_divides_is_named_by_rlhf_plan_not_a_zero_division(recipe, key, capsys):
    with pytest.raises(SystemExit) as e:
        plan_cli.main([recipe, f"{key}=0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{key}=0" in err and "Traceback" not in err and "ZeroDivision" not in err


def _with(spec, path: str, value):
    head, _, rest = path.partition(".")
    return dataclasses.replace(spec, **{head: _with(getattr(spec, head), rest, value) if rest else value})


def test_no_number_anywhere_in_the_schema_crashes_validation_or_the_plan():
    """Every int and float key, set to 0, -1 and (floats) inf, nan and 1e300 in RL, PPO, SFT, GPU and OPD recipes:
    validation reports or accepts each, and an accepted one plans; nothing raises."""
    bases = [load_spec([r]) for r in (CPU_RL, "+recipe=ppo_tiny_cpu", SFT, GPU_RL)]
    bases.append(load_spec(["+recipe=opd_tiny_cpu", "teacher.model_path=/"]))
    numeric = [k for k in walk(ExperimentSpec) if k.type.replace(" | None", "") in ("int", "float")]
    assert len(numeric) > 80
    crashed = []
    for k in numeric:
        values = [0, -1] if k.type.startswith("int") else [0.0, -1.0, math.inf, math.nan, 1e300]
        for base in bases:
            for v in values:
                spec = _with(base, k.path, v)
                try:
                    if not validate(spec):
                        plan_cli.render(plan(spec))
                except Exception as e:  # noqa: BLE001 - the point: name every crash at once
                    crashed.append(f"{k.path}={v} ({spec.recipe}): {type(e).__name__}: {e}")
    assert crashed == []


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_numbers_are_outside_every_domain(value):
    errors = [e for e in validate(load_spec([CPU_RL, f"trainer.lr={value}"])) if e.key == "trainer.lr"]
    assert errors and "finite" in errors[0].fix


def test_start_up_is_bounded_by_the_remote_timeout_until_given_a_bound_of_its_own():
    assert load_spec([SFT, "trainer.remote_timeout_s=40"]).trainer.startup_s == 40.0
    assert load_spec([SFT, "trainer.remote_timeout_s=40", "trainer.startup_timeout_s=900"]).trainer.startup_s == 900.0
