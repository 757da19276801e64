"""`rlhf-recipes import-trl`: a `trl grpo --config x.yaml` line, an `accelerate launch ... grpo.py` line or a TRL
YAML file alone becomes a recipe; TRL 1.16's defaults are carried, its batch counting in completions becomes ours,
each loss_type and scale_rewards gets its marker, and every setting is accounted for in the report."""

from __future__ import annotations

import dataclasses

import pytest

from rlhf.cli.recipes import main as recipes_main
from rlhf.importers.report import DIFFERS, EQUAL, NONE, OVERRIDDEN, UNRECOGNISED, WRITTEN
from rlhf.importers.trl import vocab
from rlhf.importers.trl.command import split_command
from rlhf.importers.trl.mapping import map_command
from rlhf.importers.trl.verb import convert, convert_words, convert_yaml, words_from_script

GRPO_YAML = """\
model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct
dataset_name: data/train.jsonl
per_device_train_batch_size: 4
num_generations: 4
reward_funcs: [accuracy_reward]
beta: 0.02
"""
ZERO3 = """\
compute_environment: LOCAL_MACHINE
deepspeed_config:
  zero_stage: 3
  offload_optimizer_device: cpu
distributed_type: DEEPSPEED
num_machines: 1
num_processes: 8
"""


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"prompt": "1+1?", "solution": "2"}\n')
    (tmp_path / "grpo.yaml").write_text(GRPO_YAML)
    (tmp_path / "zero3.yaml").write_text(ZERO3)
    return tmp_path


def _rows(conv) -> dict[str, object]:
    return {r.flag: r for r in conv.rows()}


def _map(line: str, hardware: str | None = None):
    return map_command(split_command(line.split()), hardware)


def test_trl_line_reads_the_config_file_then_the_flags_over_it(in_tmp):
    conv = convert(
        "trl grpo --config grpo.yaml --beta 0.04 --learning_rate 3e-6 --use_bias_correction_kl false".split()
    )
    rows = _rows(conv)
    assert rows["beta: 0.02 (grpo.yaml)"].marker == OVERRIDDEN
    assert rows["--beta 0.04"].marker == WRITTEN and conv.recipe.values["algorithm.kl.coef"] == 0.04
    assert rows["--use_bias_correction_kl false"].marker == EQUAL
    assert conv.recipe.values["trainer.lr"] == 3e-6
    assert conv.recipe.choices["algorithm"] == "grpo" and conv.mapping.model_path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert conv.recipe.values["reward.function"] == ["trl.rewards.accuracy_reward"]
    assert conv.report("r.yaml").startswith("trl grpo: ")


def test_accelerate_line_takes_backend_stage_and_devices_from_its_config_file(in_tmp):
    line = "accelerate launch --config_file zero3.yaml trl/scripts/grpo.py --config grpo.yaml"
    conv = convert(line.split(), hardware="8xh100")
    v = conv.recipe.values
    assert v["trainer.zero_stage"] == 3 and v["trainer.offload_optimizer"] is True
    assert conv.mapping.nodes * conv.mapping.devices_per_node == 8
    assert conv.recipe.choices["hardware"] == "8xh100"
    row = _rows(conv)["--config_file zero3.yaml"]
    assert row.marker == WRITTEN and "8 device(s)" in row.detail
    assert any("launcher `accelerate launch" in n for n in conv.notes)


def test_a_missing_accelerate_config_is_reported_and_the_defaults_here_stand(in_tmp):
    conv = convert("accelerate launch --config_file elsewhere/zero3.yaml grpo.py --config grpo.yaml".split())
    row = _rows(conv)["--config_file elsewhere/zero3.yaml"]
    assert row.marker == NONE and "is not here" in row.detail
    assert "trainer.zero_stage" not in conv.recipe.values


def test_trl_accelerate_config_names_a_shipped_file(in_tmp):
    m = _map("trl grpo --config grpo.yaml --accelerate_config zero3")
    assert m.values["trainer.backend"] == "deepspeed" and m.values["trainer.zero_stage"] == 3


def test_a_script_running_trl_and_its_yaml_env_and_lora(in_tmp):
    (in_tmp / "grpo.yaml").write_text(GRPO_YAML + "env:\n  WANDB_MODE: offline\nuse_peft: true\nlora_r: 8\n")
    conv = convert_words(words_from_script("set -e\nexport X=1\ntrl grpo --config grpo.yaml\n", "run.sh"))
    rows = _rows(conv)
    assert rows["env: {WANDB_MODE: offline} (grpo.yaml)"].marker == NONE
    assert conv.recipe.values["model.lora.rank"] == 8 and conv.recipe.values["model.lora.alpha"] == 32


def test_a_yaml_file_alone_converts_the_trainer_told_or_given(in_tmp):
    conv = convert_yaml("grpo.yaml")
    assert conv.cmd.trainer == "grpo" and conv.recipe.values["algorithm.kl.coef"] == 0.02
    (in_tmp / "sft.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\n")
    conv = convert_yaml("sft.yaml", "sft")
    assert conv.recipe.choices["algorithm"] == "sft" and conv.recipe.values["data.max_len"] == 512
    assert conv.recipe.values["trainer.lr"] == 2e-5  # SFTConfig's default, carried


def test_grpo_defaults_of_trl_are_carried(in_tmp):
    m = _map("trl grpo --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name data/train.jsonl")
    v = m.values
    assert v["algorithm.kl.coef"] == 0.0 and m.carried["algorithm.kl.coef"] == "beta"
    assert v["algorithm.policy_loss.aggregation"] == "token_mean"  # loss_type dapo
    assert v["algorithm.advantage.estimator"] == "group_norm"  # scale_rewards group
    assert v["trainer.lr"] == 1e-6 and v["trainer.betas"] == [0.9, 0.999] and v["trainer.warmup_ratio"] == 0.0
    assert v["trainer.gradient_checkpointing"] is True and v["rollout.max_new_tokens"] == 512
    assert v["rollout.samples_per_prompt"] == 8 and v["logging.log_every"] == 10
    assert m.rollout_backend == "hf" and v["rollout.hf.in_policy"] is True  # use_vllm False: transformers' generate


def test_defaults_are_trl_1_16s_own():
    trl = pytest.importorskip("trl")
    classes = {"grpo": trl.GRPOConfig, "rloo": trl.RLOOConfig, "dpo": trl.DPOConfig, "sft": trl.SFTConfig}
    classes |= {"reward": trl.RewardConfig, "kto": trl.KTOConfig}
    for trainer, cls in classes.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name, ours in vocab.DEFAULTS[trainer].items():
            if name in ("bf16", "output_dir", "report_to", "dataset_train_split") or name not in fields:
                continue  # resolved in __post_init__, or a ScriptArguments field
            f = fields[name]
            theirs = f.default_factory() if f.default is dataclasses.MISSING else f.default
            assert theirs == ours, (trainer, name, theirs, ours)


def test_batch_arithmetic_counts_completions_as_trl_does(in_tmp):
    line = (
        "accelerate launch --num_processes 2 grpo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct "
        "--per_device_train_batch_size 4 --gradient_accumulation_steps 2 --num_generations 4"
    )
    m = _map(line)
    # 4 completions per device x 2 devices x 2 accumulation steps = 16 samples per optimizer step; the generation
    # batch (steps_per_generation defaults to the accumulation) is 16 completions = 4 prompts x 4.
    assert m.values["trainer.global_batch"] == 16 and m.values["trainer.micro_batch_per_device"] == 4
    assert m.values["rollout.prompts_per_step"] == 4 and m.values["rollout.samples_per_prompt"] == 4
    m = _map(line + " --steps_per_generation 4 --num_iterations 2 --max_steps 100")
    assert m.values["rollout.prompts_per_step"] == 8 and m.values["trainer.epochs_per_rollout"] == 2
    assert m.values["trainer.max_steps"] == 25  # TRL's 100 optimizer steps, 4 per generation
    conv = convert(line.split())
    assert "TRL counts completions: 4 per device x 2 device(s) x 2 accumulation = 16" in conv.report("r.yaml")


@pytest.mark.parametrize(
    ("loss", "marker", "ptype", "aggregation"),
    [
        ("dapo", EQUAL, "ppo", "token_mean"),
        ("grpo", WRITTEN, "ppo", "seq_mean"),
        ("dr_grpo", WRITTEN, "ppo", "seq_mean_token_sum_norm"),
        ("bnpo", DIFFERS, "ppo", "token_mean"),
        ("cispo", WRITTEN, "cispo", "token_mean"),
        ("sapo", DIFFERS, "ppo", "seq_mean"),
        ("nonsense", UNRECOGNISED, "ppo", "token_mean"),
    ],
)
def test_each_loss_type_gets_its_marker(loss, marker, ptype, aggregation, in_tmp):
    extra = " --epsilon_high 5.0" if loss == "cispo" else ""
    conv = convert(f"trl grpo --config grpo.yaml --gradient_accumulation_steps 2 --loss_type {loss}{extra}".split())
    row = _rows(conv)[f"--loss_type {loss}"]
    assert row.marker == marker, row.detail
    values = conv.mapping.values
    assert values["algorithm.policy_loss.type"] == ptype
    assert values["algorithm.policy_loss.aggregation"] == aggregation
    if loss == "dr_grpo":
        assert values["algorithm.policy_loss.aggregation_norm"] == 512  # TRL's max_completion_length
    if loss == "cispo":  # TRL caps the ratio at epsilon_high itself, ours at 1 + eps_clip_high
        assert values["algorithm.policy_loss.eps_clip_high"] == 4.0
    if marker == DIFFERS:
        assert "differs:" in row.detail


@pytest.mark.parametrize(
    ("scale", "marker", "estimator"),
    [("group", WRITTEN, "group_norm"), ("none", EQUAL, "dr_grpo"), ("batch", DIFFERS, "reinforce_baseline")],
)
def test_scale_rewards_chooses_the_estimator(scale, marker, estimator, in_tmp):
    conv = convert(f"trl grpo --config grpo.yaml --scale_rewards {scale}".split())
    assert conv.mapping.values["algorithm.advantage.estimator"] == estimator
    row = _rows(conv)[f"--scale_rewards {scale}"]
    assert row.marker == marker and f"algorithm.advantage.estimator={estimator}" in row.detail
    if scale == "group":  # TRL's group std + 1e-4
        assert conv.mapping.values["algorithm.advantage.std_eps"] == 1e-4


def test_trls_bias_corrected_kl_is_reported_as_differing(in_tmp):
    """TRL 1.16 multiplies the KL by the ratio by default (use_bias_correction_kl): the beta row says ~>."""
    row = _rows(convert("trl grpo --config grpo.yaml --beta 0.04".split()))["--beta 0.04"]
    assert row.marker == DIFFERS and "use_bias_correction_kl" in row.detail
    rows = _rows(convert("trl grpo --config grpo.yaml --use_bias_correction_kl true".split()))
    assert rows["--use_bias_correction_kl true"].marker == DIFFERS  # beta 0.02 from the file


def test_sequence_importance_sampling_is_gspo(in_tmp):
    conv = convert("trl grpo --config grpo.yaml --loss_type grpo --importance_sampling_level sequence".split())
    assert conv.mapping.values["algorithm.policy_loss.type"] == "gspo"
    assert _rows(conv)["--importance_sampling_level sequence"].marker == WRITTEN
    # TRL's default dapo aggregates the sequence-ratio loss per token: so does gspo with the configured aggregation.
    conv = convert("trl grpo --config grpo.yaml --importance_sampling_level sequence".split())
    v = conv.mapping.values
    assert (v["algorithm.policy_loss.type"], v["algorithm.policy_loss.aggregation"]) == ("gspo", "token_mean")
    assert v["algorithm.policy_loss.seq_ratio_aggregation"] == "configured"
    assert _rows(conv)["--importance_sampling_level sequence"].marker == WRITTEN


def test_a_reward_list_with_weights_and_a_file(in_tmp):
    (in_tmp / "my_rewards.py").write_text(
        "def reward_func(prompts, completions, **kw):\n    return [1.0] * len(prompts)\n"
    )
    line = "trl grpo --config grpo.yaml --reward_funcs think_format_reward my_rewards.py --reward_weights 0.5 1"
    conv = convert(line.split())
    v = conv.recipe.values
    assert v["reward.function"] == ["trl.rewards.think_format_reward", "my_rewards.py"]
    assert v["reward.contract"] == "trl" and v["reward.weights"] == [0.5, 1.0]
    bad = convert("trl grpo --config grpo.yaml --reward_weights 1 2".split())
    assert _rows(bad)["--reward_weights 1 2"].marker == UNRECOGNISED


def test_unknown_flags_and_stray_words_are_reported(in_tmp):
    conv = convert("trl grpo --config grpo.yaml --not_a_field 3 --log_completions stray".split())
    rows = _rows(conv)
    assert rows["--not_a_field 3"].marker == UNRECOGNISED and "GRPOConfig" in rows["--not_a_field 3"].detail
    assert rows["--log_completions stray"].marker == NONE  # a TRL field with no equivalent here
    every = [r for r in conv.rows() if r.flag.startswith(("--", "model_name"))]
    assert all(r.detail for r in every)


def test_dpo_and_kto_map_their_losses(in_tmp):
    dpo = convert("trl dpo --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name data/train.jsonl --beta 0.2".split())
    assert dpo.recipe.choices["algorithm"] == "dpo" and dpo.mapping.values["algorithm.preference.beta"] == 0.2
    ipo = convert("trl dpo --model_name_or_path Qwen/Qwen2.5-0.5B --loss_type ipo".split())
    assert ipo.recipe.choices["algorithm"] == "ipo"
    kto = convert("trl kto --model_name_or_path Qwen/Qwen2.5-0.5B --desirable_weight 1.5".split())
    assert kto.recipe.choices["algorithm"] == "kto"
    assert kto.recipe.choices["placement"] == dpo.recipe.choices["placement"] == "colocate_actor_ref"  # as TRL
    assert kto.mapping.values["algorithm.preference.kto_desirable_weight"] == 1.5


def test_check_converts_a_grpo_config_to_a_recipe_that_validates_and_plans(in_tmp, capsys):
    with pytest.raises(SystemExit) as done:
        recipes_main(
            ["import-trl", "-o", "grpo_r.yaml", "--report", "report.txt", "--check", "--", "trl", "grpo"]
            + ["--config", "grpo.yaml", "--loss_type", "grpo"]
        )
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "trl grpo: " in out and "verdict: fits" in out and "check: invalid" not in out
    assert (in_tmp / "report.txt").read_text() in out
    text = (in_tmp / "grpo_r.yaml").read_text()
    assert "  - override /algorithm: grpo" in text and "  aggregation: seq_mean  # loss_type" in text
    assert "  contract: trl  # reward_funcs" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--", "python", "train.py", "--lr", "1"], "no TRL command in the line"),
        (["--", "trl", "grpo", "--config", "missing.yaml"], "missing.yaml: no such config file"),
        (["other.yaml"], "--trainer"),
    ],
)
def test_errors_are_one_line_naming_the_fix(argv, message, in_tmp, capsys):
    (in_tmp / "other.yaml").write_text("learning_rate: 1.0e-5\n")
    with pytest.raises(SystemExit) as done:
        recipes_main(["import-trl", *argv])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
