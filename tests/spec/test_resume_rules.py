"""What a resume may change (rlhf.spec.resume_rules): what is trained is refused, what extends or observes the run
passes silently, anything else passes and is named."""

from __future__ import annotations

from rlhf.spec.resume_rules import Change, flatten, judge, refusal

BASE = flatten(
    {
        "algorithm": {"name": "grpo", "advantage": {"estimator": "group_norm"}, "kl": {"coef": 0.001}},
        "model": {"name": "tiny", "hidden_size": 128, "attn_implementation": "sdpa", "lora": {"rank": 0}},
        "data": {"train_files": ["a.jsonl"], "label_key": "label"},
        "trainer": {"backend": "deepspeed", "zero_stage": 2, "lr": 1e-3, "max_steps": 4, "remote_timeout_s": 60.0},
        "logging": {"trackers": ["mlflow"]},
        "checkpoint": {"save_steps": 2},
    }
)


def _with(**changed) -> dict:
    return {**BASE, **{k.replace("__", "."): v for k, v in changed.items()}}


def test_flatten_joins_nested_keys_and_keeps_lists_as_values():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": 1, "a.c": [1, 2], "d": {}}


def test_a_changed_algorithm_model_or_training_data_is_refused_naming_each_key():
    new = _with(algorithm__name="rloo", algorithm__advantage__estimator="rloo", model__hidden_size=512)
    new["data.label_key"] = "answer"
    refused, noted = judge(BASE, new)
    assert [str(c) for c in refused] == [
        "algorithm.advantage.estimator: 'group_norm' -> 'rloo'",
        "algorithm.name: 'grpo' -> 'rloo'",
        "data.label_key: 'label' -> 'answer'",
        "model.hidden_size: 128 -> 512",
    ]
    assert noted == []


def test_extending_or_observing_the_run_passes_silently():
    new = _with(
        trainer__max_steps=8, trainer__remote_timeout_s=600.0, checkpoint__save_steps=4, logging__trackers=["console"]
    )
    assert judge(BASE, new) == ([], [])


def test_other_changes_pass_and_are_named():
    refused, noted = judge(BASE, _with(trainer__lr=5e-4, algorithm__kl__coef=0.01, model__attn_implementation="eager"))
    assert refused == []
    assert [c.key for c in noted] == ["algorithm.kl.coef", "model.attn_implementation", "trainer.lr"]


def test_a_key_only_one_config_has_is_not_a_change():
    assert judge(BASE, {**BASE, "trainer.new_knob": 1}) == ([], [])


def test_new_rank_counts_are_refused_where_zero_shards_the_optimizer_and_allowed_where_fsdp2_reshards():
    refused, _ = judge(BASE, BASE, {"policy": 2}, {"policy": 4})
    split = "ranks of policy (the deepspeed optimizer state is split over the ranks that saved it)"
    assert refused == [Change(split, 2, 4)]
    fsdp2 = _with(trainer__backend="fsdp2")
    assert judge(fsdp2, fsdp2, {"policy": 2}, {"policy": 4}) == ([], [])
    zero0 = _with(trainer__zero_stage=0)
    assert judge(zero0, zero0, {"policy": 2}, {"policy": 4}) == ([], [])


def test_the_refusal_names_the_run_the_keys_and_how_to_start_from_its_weights():
    line = refusal([Change("algorithm.name", "grpo", "rloo")], "/runs/a")
    assert "cannot resume /runs/a" in line and "algorithm.name: 'grpo' -> 'rloo'" in line
    assert "checkpoint.init_from=/runs/a" in line
