"""Finding 6 of issue 17: optimizer offload on GPUs steps with DeepSpeed's CPU Adam (DeepSpeed's guard against a
client optimizer under offload stays on there; ppo_llama3_70b offloads with trainer=default's FusedAdam, which
cannot step host tensors), and the combinations DeepSpeed refuses are rejected at validation naming the keys."""

from __future__ import annotations

import pytest

from rlhf.backends.train.deepspeed.ds_config import train_ds_config
from rlhf.spec.build import load_spec
from rlhf.spec.validate import validate


def _config(spec, accelerator: str) -> dict:
    return train_ds_config(spec.trainer, micro_batch=1, grad_accum=1, dp_size=16, accelerator=accelerator)


def test_deepspeeds_cpu_optimizer_guard_stays_on_under_gpu_offload():
    spec = load_spec(["+recipe=ppo_llama3_70b"])
    assert spec.trainer.offload_optimizer and spec.trainer.optimizer == "fused_adam"
    assert _config(spec, "gpu").get("zero_force_ds_cpu_optimizer", True) is True
    # on CPU every tensor is on the host: torch's AdamW steps them without DeepSpeedCPUAdam's compile
    assert _config(spec, "cpu")["zero_force_ds_cpu_optimizer"] is False


def test_offloaded_states_are_stepped_by_deepspeeds_cpu_adam_on_gpus():
    from rlhf.backends.train.deepspeed.ds_config import optimizer_name

    spec = load_spec(["+recipe=ppo_llama3_70b"])
    assert optimizer_name(spec.trainer, "gpu") == "cpu_adam"
    assert optimizer_name(spec.trainer, "cpu") == "fused_adam"
    assert optimizer_name(load_spec(["+recipe=grpo_llama3_8b"]).trainer, "gpu") == "fused_adam"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["trainer.offload_optimizer=true"], "trainer.offload_optimizer"),
        (["trainer.zero_stage=3", "trainer.offload_params=true"], "trainer.offload_params"),
        (["trainer.zero_stage=0"], "trainer.zero_stage"),
        (["trainer.zero_stage=3", "trainer.optimizer=adamw"], "trainer.optimizer"),
        (
            ["trainer.optimizer=cpu_adam", "placement=colocate_actor_ref", "placement.devices.policy=4"],
            "trainer.optimizer",
        ),
        (
            [
                "trainer.zero_stage=2",
                "trainer.offload_params=true",
                "placement=colocate_actor_ref",
                "placement.devices.policy=4",
            ],
            "trainer.offload_params",
        ),
    ],
)
def test_combinations_deepspeed_refuses_on_gpus_are_named_at_validation(overrides, key):
    errors = validate(load_spec(["+recipe=grpo_llama3_8b", *overrides]))
    assert any(e.key == key for e in errors), [str(e) for e in errors]


def test_the_shipped_gpu_recipes_pass_the_new_rules():
    for recipe in ("ppo_llama3_70b", "grpo_llama3_8b", "ppo_llama3_8b", "grpo_qwen2_5_0_5b_h200"):
        assert validate(load_spec([f"+recipe={recipe}"])) == [], recipe
