"""`rlhf-recipes import-verl`: veRL command lines and scripts (Hydra overrides, $@, ${VAR}, continuations) become
recipes that compose, validate and plan; every override is accounted for; veRL's batch arithmetic survives; the
keys this schema lacks (trainer.backend, logging.trackers) are reported as coming and written once they exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from verl_commands import DATA_FILES, LONG_CONTEXT_ULYSSES, SAMPLE

from rlhf.cli.recipes import main as recipes_main
from rlhf.importers.recipe import schema_has
from rlhf.importers.report import EQUAL, NONE, UNKNOWN, UNRECOGNISED, WRITTEN
from rlhf.importers.verl import mapping as verl_mapping
from rlhf.importers.verl import vocab
from rlhf.importers.verl.mapping import map_command, verl_grad_accum, verl_steps_per_rollout
from rlhf.importers.verl.overrides import split_command
from rlhf.importers.verl.verb import convert_words, words_from_script
from rlhf.planning.plan import plan
from rlhf.spec import derive
from rlhf.spec.build import compose
from rlhf.spec.required import check_with_stand_ins

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """An empty folder holding the data files the sample commands name (validation checks that they exist)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for name in DATA_FILES:
        (tmp_path / "data" / name).write_text("")
    return tmp_path


def _convert(text: str, **kw):
    return convert_words(words_from_script(text, "run.sh"), **kw)


def _rows(conv) -> dict[str, object]:
    return {r.flag: r for r in conv.rows()}


def _checked(conv, folder: Path, name: str = "r", *overrides: str):
    path = folder / f"{name}.yaml"
    path.write_text(conv.yaml())
    holders = conv.placeholders()
    return check_with_stand_ins(compose([f"+recipe={path}", *overrides]), {k: h.stand_in for k, h in holders.items()})


MODEL = "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"


def _real(errors) -> list:
    """The problems of a recipe, less what this machine lacks: a tracker's package (veRL's examples log to wandb)."""
    return [e for e in errors if "tracker needs the" not in e.fix]


def _cmd(*overrides: str, entry: str = "verl.trainer.main_ppo") -> str:
    return f"python3 -m {entry} " + " ".join(overrides)


@pytest.mark.parametrize("name", [n for n, (_, algo, _) in SAMPLE.items() if algo], ids=str)
def test_sample_command_becomes_a_recipe_that_validates_and_plans(name, in_tmp):
    script, algorithm, _ = SAMPLE[name]
    conv = _convert(script)
    assert conv.recipe.choices["algorithm"] == algorithm
    checked = _checked(conv, in_tmp, name)
    assert _real(checked.errors) == []
    assert plan(checked.spec).verdict()
    # Nothing left to the user: veRL's nested fields are read as they are (data.label_key, dotted), its scorer too.
    assert checked.needs == []
    if algorithm != "sft":
        assert checked.spec.data.label_key == "reward_model.ground_truth"
        assert checked.spec.reward.contract == "verl"


@pytest.mark.parametrize("name", [n for n, (_, algo, _) in SAMPLE.items() if not algo], ids=str)
def test_sample_out_of_reach_says_why(name, in_tmp):
    script, _, why = SAMPLE[name]
    conv = _convert(script)
    assert any(r.marker == NONE and why in r.detail for r in conv.rows()), conv.report("x")


def test_every_override_has_one_report_line_in_order(in_tmp):
    script = SAMPLE["grpo_math"][0]
    conv = _convert(script)
    written = [w for w in words_from_script(script, "run.sh").words if "=" in w or w.startswith("$")]
    assert [r.flag for r in conv.rows()][: len(written)] == [w for w in written if "verl.trainer" not in w]
    assert _rows(conv)["$@"].marker == UNKNOWN


# (train_batch_size, ppo_mini_batch_size, rollout.n, micro per GPU, GPUs per node, nodes, ppo_epochs)
BATCHES = [(1024, 256, 5, 16, 8, 1, 1), (512, 64, 8, 4, 8, 2, 2), (96, 32, 16, 2, 8, 1, 1)]


@pytest.mark.parametrize("b", BATCHES, ids=lambda b: "x".join(map(str, b)))
def test_derived_steps_and_accumulation_equal_verls(b, in_tmp):
    tbs, mini, n, micro, gpus, nodes, epochs = b
    conv = _convert(
        _cmd(
            "algorithm.adv_estimator=grpo data.train_files=./data/math_train.parquet",
            MODEL,
            f"data.train_batch_size={tbs} {A}.ppo_mini_batch_size={mini} {R}.n={n}",
            f"{A}.ppo_micro_batch_size_per_gpu={micro} {A}.ppo_epochs={epochs}",
            f"trainer.n_gpus_per_node={gpus} trainer.nnodes={nodes} {R}.name=vllm {R}.tensor_model_parallel_size=1",
        )
    )
    checked = _checked(conv, in_tmp)
    assert checked.errors == []
    d = derive(checked.spec)
    assert d.devices["policy"] == gpus * nodes
    assert d.optimizer_steps_per_rollout == verl_steps_per_rollout(tbs, mini, epochs)
    assert d.grad_accum["policy"] == verl_grad_accum(mini, n, gpus * nodes, micro)
    assert d.samples_per_step == tbs * n


@pytest.mark.parametrize(
    ("estimator", "ours"),
    [
        ("gae", "gae"),
        ("grpo", "group_norm"),
        ("rloo", "rloo"),
        ("reinforce_plus_plus", "reinforce"),
        ("reinforce_plus_plus_baseline", "reinforce_baseline"),
        ("grpo_vectorized", "group_norm"),
        ("opo", "opo"),
        ("grpo_passk", "grpo_passk"),
        ("remax", "remax"),
        ("optimal_token_baseline", "optimal_token_baseline"),
        ("tir_optimal_token_baseline", "tir_optimal_token_baseline"),
    ],
)
def test_estimators_with_the_same_arithmetic_map(estimator, ours):
    m = map_command(split_command(_cmd(f"algorithm.adv_estimator={estimator}", f"{R}.n=4").split()))
    assert m.values["algorithm.advantage.estimator"] == ours
    assert not m.outcomes[0].none


@pytest.mark.parametrize("estimator", ["gdpo"])
def test_other_estimators_are_reported_with_the_closest_one_used(estimator):
    m = map_command(split_command(_cmd(f"algorithm.adv_estimator={estimator}").split()))
    assert m.outcomes[0].none.startswith("unsupported")
    assert "closest" in m.outcomes[0].none and m.values["algorithm.advantage.estimator"] in m.outcomes[0].none


def test_grpo_without_the_std_is_dr_grpo():
    m = map_command(split_command(_cmd("algorithm.adv_estimator=grpo algorithm.norm_adv_by_std_in_grpo=False").split()))
    assert m.values["algorithm.advantage.estimator"] == "dr_grpo"


@pytest.mark.parametrize(
    ("overrides", "placement", "coef", "estimator"),
    [
        ([f"{A}.use_kl_loss=True", f"{A}.kl_loss_coef=0.01", f"{A}.kl_loss_type=low_var_kl"], "loss", 0.01, "k3"),
        ([f"{A}.use_kl_loss=True", f"{A}.kl_loss_type=mse"], "loss", 0.001, "k2"),
        (["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.kl_coef=0.005"], "reward", 0.005, "k1"),
        ([f"{A}.use_kl_loss=False", "algorithm.use_kl_in_reward=False"], None, 0.0, None),
    ],
)
def test_kl_in_the_loss_in_the_reward_or_none(overrides, placement, coef, estimator):
    m = map_command(split_command(_cmd(*overrides).split()))
    assert m.values["algorithm.kl.coef"] == coef
    assert m.values.get("algorithm.kl.placement") == placement
    assert m.values.get("algorithm.kl.estimator") == estimator
    assert ("reference" in m.groups[0][0]) == (coef > 0)


def test_adaptive_kl_controller_carries_target_and_horizon():
    over = ["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0.05"]
    m = map_command(split_command(_cmd(*over).split()))
    assert (m.values["algorithm.kl.target"], m.values["algorithm.kl.horizon"]) == (0.05, 10000)


def test_fsdp_is_reported_as_coming_until_the_schema_has_trainer_backend(monkeypatch):
    cmd = split_command(_cmd(f"{A}.strategy=fsdp2", f"{A}.fsdp_config.param_offload=True").split())
    m = map_command(cmd)
    if schema_has("trainer.backend"):  # the key has landed: written as fsdp2
        assert m.values["trainer.backend"] == "fsdp2"
    else:
        assert m.outcomes[0].none.startswith("coming: trainer.backend=fsdp2")
        assert m.values["trainer.zero_stage"] == 3 and m.values["trainer.offload_params"] is True
    # Either way the branch that writes the key: as it will run once the schema has it.
    monkeypatch.setattr(verl_mapping, "schema_allows", lambda key, value: key == "trainer.backend")
    monkeypatch.setattr(verl_mapping, "schema_has", lambda key: key in ("trainer.backend", "trainer.fsdp2.cpu_offload"))
    m = map_command(cmd)
    assert m.values["trainer.backend"] == "fsdp2" and m.values["trainer.fsdp2.cpu_offload"] is True
    assert "trainer.zero_stage" not in m.values and not m.outcomes[0].none


def test_trainer_logger_becomes_logging_trackers_once_the_key_exists(monkeypatch):
    cmd = split_command(_cmd("trainer.logger=[console,wandb,swanlab]").split())
    if not schema_has("logging.trackers"):
        assert map_command(cmd).outcomes[0].none.startswith("coming: logging.trackers=[console, wandb]")
    monkeypatch.setattr(verl_mapping, "schema_has", lambda key: key == "logging.trackers")
    m = map_command(cmd)
    assert m.values["logging.trackers"] == ["console", "wandb"]
    assert "swanlab: not trackers here" in m.outcomes[0].note


def test_vllm_keys_go_under_rollout_vllm_and_are_reported_not_written_for_hf(in_tmp):
    keys = f"{R}.gpu_memory_utilization=0.7 {R}.enforce_eager=true {R}.max_num_seqs=64"
    shape = f"{R}.n=4 {R}.tensor_model_parallel_size=1"
    base = f"algorithm.adv_estimator=grpo data.train_files=./data/math_train.parquet {MODEL} {shape} {keys}"
    vllm = _convert(_cmd(base, f"{R}.name=vllm")).recipe.values
    assert {k: v for k, v in vllm.items() if k.startswith("rollout.vllm.")} == {
        "rollout.vllm.gpu_memory_utilization": 0.7,
        "rollout.vllm.enforce_eager": True,
        "rollout.vllm.max_num_seqs": 64,
        "rollout.vllm.enable_prefix_caching": True,  # veRL's default, carried
    }
    hf = _convert(_cmd(base, f"{R}.name=hf"))
    assert not [k for k in hf.recipe.values if k.startswith("rollout.vllm")]
    assert "vLLM's own key (rollout.vllm.gpu_memory_utilization); rollout=hf has none" in (
        _rows(hf)[f"{R}.gpu_memory_utilization=0.7"].detail
    )
    assert _real(_checked(hf, in_tmp).errors) == []


def test_megatron_strategy_is_reported_and_trains_sharded_instead():
    m = map_command(split_command(_cmd(f"{A}.strategy=megatron", f"{A}.megatron.tensor_model_parallel_size=4").split()))
    assert "Megatron-LM training" in m.outcomes[0].none
    assert "Megatron-LM parallelism" in m.outcomes[1].none


def test_rollout_hardware_and_data(in_tmp):
    conv = _convert(
        _cmd(
            "algorithm.adv_estimator=grpo data.train_files=./data/math_train.parquet",
            f"data.val_files=./data/gsm8k_test.parquet {MODEL}",
            "data.max_prompt_length=256 data.max_response_length=768 trainer.test_freq=10",
            f"{R}.name=vllm {R}.tensor_model_parallel_size=4 {R}.gpu_memory_utilization=0.7 {R}.n=4",
            f"{A}.ppo_mini_batch_size=64 {A}.ppo_micro_batch_size_per_gpu=4",
            "trainer.n_gpus_per_node=8 trainer.nnodes=2",
        ),
        hardware="h100",
    )
    v = conv.recipe.values
    assert conv.recipe.choices["hardware"] == "2x8xh100" and conv.recipe.choices["rollout"] == "vllm"
    assert (v["rollout.tensor_parallel_size"], v["rollout.num_engines"], v["rollout.vllm.gpu_memory_utilization"]) == (
        4,
        4,
        0.7,
    )
    assert (v["data.max_prompt_len"], v["rollout.max_new_tokens"], v["data.max_len"]) == (256, 768, 1024)
    assert v["data.eval_files"] == ["./data/gsm8k_test.parquet"] and v["eval.steps"] == 10
    assert _real(_checked(conv, in_tmp).errors) == []


def test_sft_devices_come_from_torchrun_and_nested_fields_are_read_by_dotted_keys(in_tmp):
    conv = _convert(
        "torchrun --nnodes=1 --nproc_per_node=2 -m verl.trainer.fsdp_sft_trainer "
        "data.train_files=./data/sft_train.parquet "
        "data.prompt_key=extra_info data.response_key=extra_info data.prompt_dict_keys=['question'] "
        "+data.response_dict_keys=['answer'] data.micro_batch_size_per_gpu=4 data.train_batch_size=32 "
        "model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct trainer.total_epochs=2"
    )
    checked = _checked(conv, in_tmp)
    assert checked.errors == [] and checked.needs == []
    assert (checked.spec.hardware.devices_per_node, checked.spec.trainer.epochs) == (2, 2)
    assert (checked.spec.data.input_key, checked.spec.data.output_key) == ("extra_info.question", "extra_info.answer")


def test_values_set_outside_the_script_become_placeholders_never_a_crash(in_tmp):
    conv = _convert(
        "MODEL=${MODEL_PATH:-$HOME/models/x}\n"
        + _cmd(
            "algorithm.adv_estimator=grpo data.train_files=${TRAIN_FILE}",
            f"actor_rollout_ref.model.path=$(cat model.txt) {R}.n=${{N}} trainer.default_local_dir=${{CKPT}} $@",
        )
    )
    holders = conv.placeholders()
    assert {k for k, h in holders.items() if h.required} >= {
        "data.train_files",
        "model.path",
        "rollout.samples_per_prompt",
    }
    assert not holders["checkpoint.dir"].required  # where to write: the default here stands, commented
    text = conv.yaml()
    assert "  train_files: ???  # data.train_files=${TRAIN_FILE}: set from ${TRAIN_FILE}, unknown here" in text
    assert "#   checkpoint.dir=...  # trainer.default_local_dir=${CKPT}" in text
    rows = _rows(conv)
    assert rows["$@"].marker == UNKNOWN and rows[f"{R}.n=${{N}}"].marker == UNKNOWN
    assert _real(_checked(conv, in_tmp).errors) == []


def test_malformed_values_and_unknown_keys_are_reported():
    conv = _convert(
        _cmd(
            "data.train_batch_size=many",
            "not_a_section.key=1",
            "trainer.balance_batch=True",
            "data.max_prompt_length=512 data.max_prompt_length=1024",
            f"{R}.n=1,2",
            "stray",
        )
    )
    rows = conv.rows()
    assert "takes an int" in rows[0].detail and rows[0].marker == UNRECOGNISED
    assert rows[1].marker == UNRECOGNISED and "not a key of veRL's trainer config" in rows[1].detail
    assert rows[2].marker == NONE
    assert rows[3].marker == "~~" and conv.recipe.values["data.max_prompt_len"] == 1024
    assert rows[5].marker == UNRECOGNISED and "sweep" in rows[5].detail
    assert rows[6].marker == UNRECOGNISED


def _any_value(v):
    return {bool: "True", int: "2", float: "0.5", list: "[a,b]", str: "x"}.get(type(v), "x")


@pytest.mark.parametrize("entry", list(vocab.DEFAULTS))
def test_every_key_veRL_defaults_here_has_a_meaning_or_a_reason(entry):
    module = next(m for m, e in vocab.ENTRY_POINTS.items() if e == entry)
    overrides = [f"{k}={_any_value(v)}" for k, v in vocab.DEFAULTS[entry].items()]
    cmd = split_command(["python3", "-m", module, *overrides])
    m = map_command(cmd)
    for o, out in zip(cmd.overrides, m.outcomes, strict=True):
        assert out.keys or out.none or out.note or out.problem, o.text
        assert "a veRL setting with no equivalent here" not in out.none, o.text


def test_cli_writes_recipe_and_report_and_checks_the_plan(in_tmp, capsys):
    (in_tmp / "run.sh").write_text(SAMPLE["grpo_math"][0])
    with pytest.raises(SystemExit) as done:
        recipes_main(["import-verl", "run.sh", "-o", "grpo.yaml", "--report", "report.txt", "--check"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "veRL verl.trainer.main_ppo: " in out and "verdict:" in out
    assert "fill in before running" not in out and "data.label_key=reward_model.ground_truth" in out
    assert "reward.function=verl.utils.reward_score.default_compute_score" in out
    assert (in_tmp / "report.txt").read_text() in out
    text = (in_tmp / "grpo.yaml").read_text()
    assert "  - override /algorithm: grpo" in text and "  label_key: reward_model.ground_truth" in text
    assert f"  samples_per_prompt: 8  # {R}.n" in text


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("echo hi\n", "runs no veRL command"),
        ("python3 -m verl.trainer.main_generation data.path=x\n", "generation only"),
        ("python3 -m verl.trainer.main_ppo data.x='open\n", "unterminated '"),
    ],
)
def test_cli_errors_name_the_problem_without_a_traceback(script, message, in_tmp, capsys):
    (in_tmp / "s.sh").write_text(script)
    with pytest.raises(SystemExit) as done:
        recipes_main(["import-verl", "s.sh"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


GRPO = f"algorithm.adv_estimator=grpo data.train_files=./data/math_train.parquet {MODEL} {R}.n=4"
LENGTHS = "data.max_prompt_length=512 data.max_response_length=1024"


def test_dynamic_batch_size_becomes_token_budgets_for_updates_and_forwards(in_tmp):
    conv = _convert(
        _cmd(GRPO, LENGTHS, f"{A}.use_dynamic_bsz=True {A}.ppo_max_token_len_per_gpu=4096")
        + f" {R}.log_prob_max_token_len_per_gpu=8192"
    )
    v = conv.recipe.values
    assert (v["trainer.max_tokens_per_micro_batch"], v["trainer.max_tokens_per_forward"]) == (4096, 8192)
    rows = _rows(conv)
    assert rows[f"{A}.ppo_max_token_len_per_gpu=4096"].marker not in (NONE, UNRECOGNISED)
    assert rows[f"{R}.log_prob_max_token_len_per_gpu=8192"].marker not in (NONE, UNRECOGNISED)
    checked = _checked(conv, in_tmp)
    assert _real(checked.errors) == []
    t = checked.spec.trainer
    assert (t.packing, t.max_tokens_per_micro_batch, t.max_tokens_per_forward) == (True, 4096, 8192)


def test_the_log_prob_passes_take_the_actors_switch_and_budget_when_unset():
    v = _convert(_cmd(GRPO, f"{A}.use_dynamic_bsz=True {A}.ppo_max_token_len_per_gpu=6000")).recipe.values
    assert (v["trainer.max_tokens_per_micro_batch"], v["trainer.max_tokens_per_forward"]) == (6000, 6000)
    default = _convert(_cmd(GRPO, f"{A}.use_dynamic_bsz=True")).recipe.values
    assert default["trainer.max_tokens_per_micro_batch"] == 16384  # veRL's default budget, carried


def test_budgets_without_the_switch_are_explained_and_not_written():
    conv = _convert(_cmd(GRPO, f"{A}.ppo_max_token_len_per_gpu=4096 {R}.log_prob_max_token_len_per_gpu=4096"))
    assert "trainer.max_tokens_per_micro_batch" not in conv.recipe.values
    assert "trainer.max_tokens_per_forward" not in conv.recipe.values
    rows = _rows(conv)
    assert "used only with use_dynamic_bsz=true" in rows[f"{A}.ppo_max_token_len_per_gpu=4096"].detail
    assert "used only with log_prob_use_dynamic_bsz=true" in rows[f"{R}.log_prob_max_token_len_per_gpu=4096"].detail


def test_a_second_forward_budget_or_a_critic_budget_of_its_own_is_reported_and_the_first_kept():
    dyn = f"{A}.use_dynamic_bsz=True {A}.ppo_max_token_len_per_gpu=4096"
    budgets = f"{R}.log_prob_max_token_len_per_gpu=8192 actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=2048"
    conv = _convert(_cmd(GRPO, dyn, budgets, "critic.ppo_max_token_len_per_gpu=9999"))
    assert conv.recipe.values["trainer.max_tokens_per_forward"] == 8192
    rows = _rows(conv)
    ref = rows["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=2048"]
    assert ref.marker == NONE and "one forward budget here (8192)" in ref.detail
    assert rows["critic.ppo_max_token_len_per_gpu=9999"].marker == NONE


def test_the_sft_trainers_token_budget_is_carried(in_tmp):
    conv = _convert(
        "torchrun --nnodes=1 --nproc_per_node=2 -m verl.trainer.sft_trainer "
        "data.train_files=./data/sft_train.parquet data.max_token_len_per_gpu=4096 model.path=Qwen/Qwen2.5-0.5B"
    )
    v = conv.recipe.values
    assert (v["trainer.max_tokens_per_micro_batch"], v["trainer.max_tokens_per_forward"]) == (4096, 4096)
    off = _convert(
        "torchrun --nnodes=1 --nproc_per_node=2 -m verl.trainer.sft_trainer data.train_files=./data/sft_train.parquet "
        "data.use_dynamic_bsz=False data.max_token_len_per_gpu=4096 model.path=Qwen/Qwen2.5-0.5B"
    )
    assert "trainer.max_tokens_per_micro_batch" not in off.recipe.values


# -- where veRL's math differs from OpenRLHF's: the converter writes veRL's choice (issue 35) ------------------------


def _values(*overrides: str) -> dict:
    return map_command(split_command(_cmd(*overrides).split())).values


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus_baseline"])
def test_kl_in_the_reward_of_a_group_estimator_comes_off_the_score_before_the_baseline(estimator):
    v = _values(f"algorithm.adv_estimator={estimator}", "algorithm.use_kl_in_reward=True")
    assert v["algorithm.kl.placement"] == "reward"
    assert v["algorithm.kl.before_baseline"] is True
    # Without a baseline (gae, reinforce_plus_plus) veRL folds the KL per token, as here: nothing to write.
    assert "algorithm.kl.before_baseline" not in _values(
        "algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=True"
    )
    assert "algorithm.kl.before_baseline" not in _values(
        f"algorithm.adv_estimator={estimator}", f"{A}.use_kl_loss=True"
    )


def test_scores_are_never_clipped_in_a_converted_recipe():
    assert _values("algorithm.adv_estimator=grpo")["reward.clip_range"] is None


def test_clip_ratio_alone_changes_nothing_in_verl_0_9_1():
    conv = convert_words(words_from_script(_cmd("algorithm.adv_estimator=grpo", f"{A}.clip_ratio=0.3", MODEL), "r"))
    v = conv.mapping.values
    assert (v["algorithm.policy_loss.eps_clip_low"], v["algorithm.policy_loss.eps_clip_high"]) == (0.2, 0.2)
    assert "no effect in veRL 0.9.1" in _rows(conv)[f"{A}.clip_ratio=0.3"].detail
    v = _values(f"{A}.clip_ratio_low=0.1", f"{A}.clip_ratio_high=0.28")
    assert (v["algorithm.policy_loss.eps_clip_low"], v["algorithm.policy_loss.eps_clip_high"]) == (0.1, 0.28)


@pytest.mark.parametrize(
    ("mode", "terms", "norm_from"),
    [
        ("token-mean", None, None),
        ("seq-mean-token-mean", "policy", None),
        ("seq-mean-token-sum-norm", "policy", "micro_batch_width"),
    ],
)
def test_kl_and_entropy_terms_and_dr_grpo_divisor_follow_loss_agg_mode(mode, terms, norm_from):
    v = _values("algorithm.adv_estimator=grpo", f"{A}.loss_agg_mode={mode}")
    assert v.get("algorithm.policy_loss.terms_aggregation") == terms
    assert v.get("algorithm.policy_loss.aggregation_norm_from") == norm_from
    # loss_scale_factor is a constant divisor: the width no longer matters.
    v = _values(f"{A}.loss_agg_mode=seq-mean-token-sum-norm", f"{A}.loss_scale_factor=512")
    assert v["algorithm.policy_loss.aggregation_norm"] == 512
    assert "algorithm.policy_loss.aggregation_norm_from" not in v


def test_the_critic_aggregates_by_its_own_mode_else_the_actors():
    gae = "algorithm.adv_estimator=gae"
    assert _values(gae)["critic.aggregation"] == "token_mean"
    assert _values(gae, f"{A}.loss_agg_mode=seq-mean-token-sum")["critic.aggregation"] == "seq_mean_token_sum"
    own = _values(gae, f"{A}.loss_agg_mode=seq-mean-token-sum", "critic.loss_agg_mode=token-mean")
    assert own["critic.aggregation"] == "token_mean"
    assert "critic.aggregation" not in _values("algorithm.adv_estimator=grpo")


def test_cispo_example_converts_to_the_cispo_preset_without_a_dual_clip(in_tmp):
    conv = _convert(SAMPLE["cispo"][0])
    v = conv.mapping.values
    assert conv.recipe.choices["algorithm"] == "cispo"
    assert (v["algorithm.policy_loss.type"], v["algorithm.policy_loss.eps_clip_low"]) == ("cispo", 10.0)
    assert "algorithm.policy_loss.dual_clip" not in v
    checked = _checked(conv, in_tmp, "cispo")
    assert _real(checked.errors) == []
    assert checked.spec.algorithm.policy_loss.dual_clip is None
    assert plan(checked.spec).verdict()


@pytest.mark.parametrize(
    ("override", "extra", "words"),
    [
        (f"{A}.loss_agg_mode=token-sum", f"{A}.policy_loss.loss_mode=sapo", "aggregate by seq_mean here"),
    ],
)
def test_report_marks_what_computes_otherwise_with_a_tilde_arrow(override, extra, words):
    text = _cmd(f"{A}.use_kl_loss=True", extra, override, MODEL)
    row = _rows(convert_words(words_from_script(text, "r")))[override]
    assert row.marker == "~>"
    assert words in row.detail


def test_the_entropy_bonus_is_taken_on_the_tempered_logits_as_veRLs():
    m = map_command(split_command(_cmd(f"{A}.entropy_coeff=0.01", f"{R}.temperature=0.7").split()))
    assert m.values["algorithm.policy_loss.entropy_coef"] == 0.01
    assert m.values["algorithm.policy_loss.entropy_logits"] == "tempered"


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_gspo_maps_to_veRLs_gspo_token_with_a_plain_arrow(agg, in_tmp):
    """Issue 35: veRL's GSPO aggregates by loss_agg_mode, weighs each token by its rollout IS weight, has no dual
    clip and differentiates each token's ratio through its own log-prob; the recipe says so, and no line is '~>'."""
    loss, c, tis = (
        f"{A}.policy_loss.loss_mode=gspo",
        f"{A}.clip_ratio_c=10.0",
        "algorithm.rollout_correction.rollout_is=token",
    )
    data = "data.train_files=data/gsm8k_train.parquet"
    conv = convert_words(words_from_script(_cmd(loss, c, f"{A}.loss_agg_mode={agg}", tis, data, MODEL), "r"))
    v = conv.mapping.values
    assert v["algorithm.policy_loss.type"] == "gspo"
    assert v["algorithm.policy_loss.aggregation"] == {
        "token-mean": "token_mean",
        "seq-mean-token-mean": "seq_mean",
    }.get(agg, "seq_mean_token_sum")
    assert v["algorithm.policy_loss.seq_ratio_aggregation"] == "configured"
    assert v["algorithm.policy_loss.seq_ratio_is_correction"] == "token_weights"
    assert v["algorithm.policy_loss.seq_ratio_gradient"] == "token"
    assert v.get("algorithm.policy_loss.dual_clip") is None
    assert v["algorithm.is_correction.type"] == "tis"
    rows = _rows(conv)
    assert rows[loss].marker == "->"
    assert "no dual clip" in rows[c].detail
    assert all(r.marker != "~>" for r in rows.values()), [r for r in rows.values() if r.marker == "~>"]
    checked = _checked(conv, in_tmp, "gspo")
    assert _real(checked.errors) == []
    pl = checked.spec.algorithm.policy_loss
    assert (pl.seq_ratio_aggregation, pl.seq_ratio_is_correction, pl.seq_ratio_gradient, pl.dual_clip) == (
        "configured",
        "token_weights",
        "token",
        None,
    )


def test_report_keeps_the_plain_arrow_where_the_math_is_equal():
    text = _cmd(
        "algorithm.adv_estimator=rloo", f"{A}.loss_agg_mode=seq-mean-token-sum", "algorithm.use_kl_in_reward=True"
    )
    rows = _rows(convert_words(words_from_script(text, "r")))
    assert rows[f"{A}.loss_agg_mode=seq-mean-token-sum"].marker == "->"
    assert rows["algorithm.use_kl_in_reward=True"].marker == "->"


@pytest.mark.parametrize(
    ("override", "key", "value"),
    [
        (f"{A}.kl_loss_type=low_var_kl+", "algorithm.kl.straight_through", True),
        (f"{A}.kl_loss_type=k1+", "algorithm.kl.straight_through", True),
        (f"{A}.kl_loss_type=mse", "algorithm.kl.clamp_k3_only", True),
        (f"{A}.kl_loss_type=abs", "algorithm.kl.clamp_k3_only", True),
        ("algorithm.adv_estimator=reinforce_plus_plus", "algorithm.advantage.whiten_variance", "unbiased"),
        ("algorithm.adv_estimator=grpo", "algorithm.advantage.std_eps", 1e-6),
        ("algorithm.adv_estimator=grpo_passk", "algorithm.advantage.std_eps", 1e-6),
    ],
)
def test_veRLs_conventions_are_written_with_a_plain_arrow(override, key, value):
    """Issue 35 items 2, 6, 10: what was a '~>' line is now a key the recipe carries, and the math is equal."""
    text = _cmd(f"{A}.use_kl_loss=True", override, MODEL)
    conv = convert_words(words_from_script(text, "r"))
    assert conv.mapping.values[key] == value
    assert _rows(conv)[override].marker in ("->", "==")  # '==': the preset already holds the value


def test_the_adaptive_controller_reads_veRLs_kl():
    text = _cmd(
        "algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0.1", MODEL
    )
    conv = convert_words(words_from_script(text, "r"))
    assert conv.mapping.values["algorithm.kl.controller_kl"] == "seq_mean"
    assert _rows(conv)["algorithm.kl_ctrl.type=adaptive"].marker == "->"


@pytest.mark.parametrize("loss", ["sapo", "geo_mean", "clip_cov", "kl_cov"])
def test_the_new_policy_losses_map_with_a_plain_arrow(loss):
    override = f"{A}.policy_loss.loss_mode={loss}"
    conv = convert_words(words_from_script(_cmd(override, MODEL), "r"))
    assert conv.mapping.values["algorithm.policy_loss.type"] == loss
    assert _rows(conv)[override].marker == "->"


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_rollout_is_and_its_batch_normalisation_map_with_a_plain_arrow(level, in_tmp):
    """Issue 35: veRL's rollout IS weights per token (TIS) or per sequence (the product of its token ratios,
    truncated) and rollout_is_batch_normalize are carried, and so are its rejection sampling and its bypass mode with
    the reinforce loss (issue 47)."""
    c = "algorithm.rollout_correction"
    is_, thr, norm = f"{c}.rollout_is={level}", f"{c}.rollout_is_threshold=1.5", f"{c}.rollout_is_batch_normalize=True"
    rs, rs_thr = f"{c}.rollout_rs=seq_mean_k3", f"{c}.rollout_rs_threshold=0.01"
    bypass, loss_type = f"{c}.bypass_mode=True", f"{c}.loss_type=reinforce"
    data = "data.train_files=data/gsm8k_train.parquet"
    overrides = (is_, thr, norm, rs, rs_thr, bypass, loss_type, data, MODEL)
    conv = convert_words(words_from_script(_cmd("algorithm.adv_estimator=grpo", f"{R}.n=4", *overrides), "r"))
    v = conv.mapping.values
    if level == "token":
        assert v["algorithm.is_correction.type"] == "tis"
    else:
        got = {k: v[f"algorithm.is_correction.{k}"] for k in ("level", "mode", "gating", "seq_ratio")}
        assert got == {"level": "seq", "mode": "clip", "gating": "ratio", "seq_ratio": "product"}
    assert v["algorithm.is_correction.threshold"] == [0.0, 1.5]
    assert v["algorithm.is_correction.batch_normalize"] is True
    rows = _rows(conv)
    assert v["algorithm.rejection.criteria"] == ["seq_mean_k3"] and v["algorithm.rejection.upper"] == [0.01]
    assert v["algorithm.old_logprobs"] == "rollout" and v["algorithm.policy_loss.type"] == "gpg"
    for carried in (is_, thr, norm, rs, rs_thr, bypass, loss_type):
        assert rows[carried].marker == "->", rows[carried]
    assert all(r.marker != "~>" for r in rows.values())
    checked = _checked(conv, in_tmp, f"is-{level}")
    assert _real(checked.errors) == []
    isc = checked.spec.algorithm.is_correction
    assert (isc.batch_normalize, isc.axes()[0]) == (True, "seq" if level == "sequence" else "token")


def test_rollout_is_with_an_icepop_band_masks_and_normalise_alone_is_explained():
    c = "algorithm.rollout_correction"
    v = mapped_values(f"{c}.rollout_is=sequence", f"{c}.rollout_is_threshold=0.5_2.0")
    assert (v["algorithm.is_correction.mode"], v["algorithm.is_correction.threshold"]) == ("mask", [0.5, 2.0])
    assert "algorithm.is_correction.batch_normalize" not in v
    v = mapped_values(f"{c}.rollout_is=token", f"{c}.rollout_is_threshold=0.5_2.0")
    assert (v["algorithm.is_correction.type"], v["algorithm.is_correction.threshold"]) == ("icepop", [0.5, 2.0])
    # Normalising with no IS weights: nothing written, in veRL nothing done.
    conv = _convert(_cmd("algorithm.adv_estimator=grpo", f"{c}.rollout_is_batch_normalize=True"))
    assert not any(k.startswith("algorithm.is_correction.") for k in conv.mapping.values)
    assert "no IS weights" in _rows(conv)[f"{c}.rollout_is_batch_normalize=True"].detail


def mapped_values(*overrides: str) -> dict:
    return map_command(split_command(["python3", "-m", "verl.trainer.main_ppo", *overrides])).values


def test_bypass_modes_loss_type_is_carried_where_bypass_mode_reads_it():
    c = "algorithm.rollout_correction"
    for bypass in ("True", "False"):
        for loss_type, ours in (("ppo_clip", "ppo"), ("reinforce", "gpg")):
            line = f"{c}.loss_type={loss_type}"
            conv = _convert(_cmd("algorithm.adv_estimator=grpo", f"{c}.bypass_mode={bypass}", line))
            # read: carried (ppo is the options' own loss already: ==); not read without bypass mode: ==
            marker = "->" if bypass == "True" and loss_type == "reinforce" else "=="
            assert _rows(conv)[line].marker == marker, (bypass, loss_type, _rows(conv)[line])
            if bypass == "True":
                assert conv.mapping.values["algorithm.policy_loss.type"] == ours
                assert conv.mapping.values["algorithm.old_logprobs"] == "rollout"
    line = f"{c}.loss_type=reinforce_plus"
    conv = _convert(_cmd("algorithm.adv_estimator=grpo", f"{c}.bypass_mode=True", line))
    assert _rows(conv)[line].marker == NONE and "ppo_clip and reinforce" in _rows(conv)[line].detail


# -- Ulysses sequence parallelism: one key for every model role, the batches as veRL's --------------------------------
SP = "trainer.sequence_parallel_size"


def test_the_long_context_ulysses_command_splits_each_sample_over_four_ranks(in_tmp):
    conv = _convert(LONG_CONTEXT_ULYSSES)
    rows = _rows(conv)
    actor = rows[f"{A}.ulysses_sequence_parallel_size=4"]
    assert actor.marker == WRITTEN and actor.detail.startswith(f"{SP}=4; Ulysses here as in veRL")
    ref = rows["actor_rollout_ref.ref.ulysses_sequence_parallel_size=4"]
    assert ref.marker == EQUAL and "the policy's size" in ref.detail
    checked = _checked(conv, in_tmp, "ulysses")
    assert _real(checked.errors) == []
    d = derive(checked.spec)
    assert (d.mesh["policy"].data, d.mesh["policy"].sequence) == (2, 4)
    assert checked.spec.trainer.max_tokens_per_micro_batch == 32768  # per GPU in both: a group takes 4 x it
    # veRL: ppo_mini_batch_size x n over world / Ulysses data-parallel ranks, one sample per micro-batch here
    assert d.grad_accum["policy"] == verl_grad_accum(16, 16, 8 // 4, 1)
    assert plan(checked.spec).fits


@pytest.mark.parametrize(
    ("overrides", "size"),
    [
        ([f"{A}.fsdp_config.ulysses_sequence_parallel_size=2"], 2),  # veRL 0.9.1's own key
        ([f"{A}.ulysses_sequence_parallel_size=4", f"{A}.fsdp_config.ulysses_sequence_parallel_size=2"], 4),
        ([f"{A}.ulysses_sequence_parallel_size=1", f"{A}.fsdp_config.ulysses_sequence_parallel_size=2"], 2),
    ],
)
def test_the_deprecated_actor_key_wins_above_one_as_in_verl(overrides, size):
    assert _values("algorithm.adv_estimator=grpo", *overrides)[SP] == size


def test_a_reference_or_critic_size_of_its_own_is_reported_and_the_policys_kept():
    conv = map_command(
        split_command(
            _cmd(
                "algorithm.adv_estimator=gae",
                f"{A}.ulysses_sequence_parallel_size=4",
                "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=2",
                "critic.ulysses_sequence_parallel_size=2",
            ).split()
        )
    )
    assert conv.values[SP] == 4
    nones = [o.none for o in conv.outcomes if o.none]
    assert (
        "unsupported: a reference size of its own (2); trainer.sequence_parallel_size splits every model role's "
        in (" ".join(nones))
    )
    assert any(n.startswith("unsupported: a critic size of its own (2)") for n in nones)


def test_size_one_writes_nothing():
    v = _values("algorithm.adv_estimator=grpo", f"{A}.ulysses_sequence_parallel_size=1")
    assert SP not in v


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("verl.trainer.fsdp_sft_trainer", "ulysses_sequence_parallel_size"),
        ("verl.trainer.sft_trainer", "engine.ulysses_sequence_parallel_size"),
    ],
)
def test_the_sft_trainers_size_maps(entry, key):
    v = map_command(split_command(f"torchrun --nproc_per_node=8 -m {entry} {key}=2".split())).values
    assert v[SP] == 2


def test_a_global_micro_batch_is_divided_by_the_data_parallel_ranks():
    v = _values(
        "algorithm.adv_estimator=grpo",
        f"{A}.ppo_micro_batch_size=8",
        f"{A}.ulysses_sequence_parallel_size=2",
        "trainer.n_gpus_per_node=8",
    )
    assert v["trainer.micro_batch_per_device"] == 2  # 8 / (8 GPUs / 2)


def test_an_rl_recipe_logs_veRLs_actor_metrics_under_its_names_and_says_so():
    m = map_command(split_command(_cmd("algorithm.adv_estimator=grpo").split()))
    assert m.values["logging.verl_metrics"] is True
    assert any(n.startswith("logging.verl_metrics=true: the actor also logs veRL's actor/pg_clipfrac") for n in m.notes)
    sft = map_command(split_command("torchrun --nproc_per_node=8 -m verl.trainer.fsdp_sft_trainer".split()))
    assert "logging.verl_metrics" not in sft.values  # no actor metrics in an SFT run
