"""`rlhf-recipes import-openrlhf`: OpenRLHF's documented commands (flat flags), dotted versions of them and a
REINFORCE++-baseline script become recipes that compose, validate and plan; the report accounts for every flag;
OpenRLHF's batch arithmetic survives the conversion."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from openrlhf_commands import DOTTED, FLAT, REINFORCE_PP_BASELINE, RING_ATTENTION

from rlhf.cli.recipes import main as recipes_main
from rlhf.importers.openrlhf.args import ImportProblem, find_entry
from rlhf.importers.openrlhf.mapping import openrlhf_grad_accum, openrlhf_steps_per_rollout
from rlhf.importers.openrlhf.report import NONE, UNRECOGNISED, lines
from rlhf.importers.openrlhf.verb import convert_words, words_from_script
from rlhf.importers.report import EQUAL, WRITTEN
from rlhf.planning.plan import plan
from rlhf.spec import build, derive, validate
from rlhf.spec.build import compose

PROMPTS = "data.train_files=[OpenRLHF/prompt-collection-v0.1]"
# name: (algorithm option, the keys validation names for the command exactly as documented, overrides that fix it)
EXPECTED = {
    "ppo": ("ppo", {"data.train_files"}, [PROMPTS]),  # the documented command names no prompt dataset
    "rm": ("rm", set(), []),
    "ppo_own_rm": ("ppo", {"data.train_files"}, [PROMPTS]),
    # OpenRLHF refuses this one too: group estimators need n_samples_per_prompt > 1.
    "grpo": ("grpo", {"data.train_files", "rollout.samples_per_prompt"}, [PROMPTS, "rollout.samples_per_prompt=8"]),
    "dpo": ("dpo", set(), []),
    "sft": ("sft", set(), []),
    "rm_packing": ("rm", set(), []),
    "ppo_dynamic_batch": ("ppo", set(), []),
    "reward_func_fragment": ("ppo", {"reward.function", "data.train_files[0]"}, None),  # fixed in its own test
}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty folder holding what the commands point at (the RM trained by command 2, a reward file)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "output" / "llama3-8b-rm").mkdir(parents=True)
    (tmp_path / "reward_func.py").write_text(
        "def reward_func(queries, prompts, labels):\n    return [0.0] * len(queries)\n"
    )
    return tmp_path


def _convert_script(text: str, **kw):
    return convert_words(words_from_script(text, "test.sh"), **kw)


def _written(conv, folder: Path, name: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(conv.yaml())
    return path


def _problems(path: Path, *overrides: str) -> list:
    return validate(build(compose([f"+recipe={path}", *overrides])))


def _flag_words(text: str) -> list[str]:
    words = words_from_script(text, "test.sh").words
    return words[find_entry(words)[0] + 1 :]


@pytest.mark.parametrize("name", list(FLAT))
def test_documented_flat_command_becomes_a_recipe_that_validates_and_plans(name, in_tmp):
    algorithm, problems, fixes = EXPECTED[name]
    conv = _convert_script(FLAT[name])
    assert conv.cmd.vocabulary() == "flat"
    assert conv.recipe.choices["algorithm"] == algorithm
    path = _written(conv, in_tmp, name)
    assert {e.key for e in _problems(path)} == problems
    if fixes is not None:
        spec = build(compose([f"+recipe={path}", *fixes]))
        assert validate(spec) == []
        assert plan(spec).verdict()


def test_reward_function_fragment_validates_once_its_file_and_dataset_exist(in_tmp):
    conv = _convert_script(FLAT["reward_func_fragment"])
    report = {r.flag: r for r in lines(conv.cmd, conv.mapping, conv.recipe)}
    assert report["..."].marker == UNRECOGNISED  # the fragment's "..." is reported, never dropped
    path = _written(conv, in_tmp, "fragment")
    spec = build(compose([f"+recipe={path}", "reward.function=./reward_func.py", PROMPTS]))
    assert validate(spec) == []
    assert derive(spec).reward_source == "function"


@pytest.mark.parametrize("text", [*FLAT.values(), *DOTTED.values(), REINFORCE_PP_BASELINE], ids=lambda t: t[:40])
def test_report_accounts_for_every_flag_in_order(text, in_tmp):
    conv = _convert_script(text)
    rows = lines(conv.cmd, conv.mapping, conv.recipe)
    words = _flag_words(text)
    flag_words = [w for w in words if w.startswith("--")]
    assert [r.flag.split()[0] for r in rows if r.flag.startswith("--")] == flag_words
    assert all(r.marker and r.detail for r in rows)
    # Nothing falls through to the catch-all: every flag of the vocabulary has a meaning here or a reason.
    assert not [r for r in rows if "not carried over by this importer" in r.detail]


@pytest.mark.parametrize("name", list(DOTTED))
def test_flat_and_dotted_versions_of_a_command_give_the_same_recipe(name, in_tmp):
    flat, dotted = _convert_script(FLAT[name]), _convert_script(DOTTED[name])
    assert dotted.cmd.vocabulary() == "dotted"
    assert flat.recipe.choices == dotted.recipe.choices
    assert flat.recipe.values == dotted.recipe.values


def test_reinforce_pp_baseline_script_with_arrays_and_variables(in_tmp):
    conv = _convert_script(REINFORCE_PP_BASELINE)
    r = conv.recipe
    assert r.choices == {
        "algorithm": "reinforce_pp_baseline",
        "model": "qwen2_5_7b",
        "placement": "colocate_all",
        "rollout": "vllm",
        "hardware": "8xh100",
        "trainer": "default",
    }
    assert r.values["checkpoint.dir"] == "/data/exp/qwen2.5-7b-rpp-baseline/ckpt"  # ${EXP_DIR:-/data/exp}
    assert r.values["reward.function"] == "./reward_func.py"
    # --algo.advantage.is_correction_enable/_type icepop (before 0.11.2): 0.11.2's axes, token mask ratio.
    assert r.values["algorithm.is_correction.level"] == "token"
    assert (r.equal["algorithm.is_correction.mode"], r.equal["algorithm.is_correction.gating"]) == ("mask", "ratio")
    assert r.values["algorithm.filters.dynamic_filtering"] is True
    # 1e-3, k2, as a loss: the preset's own values, so carried over but not written.
    assert (r.equal["algorithm.kl.coef"], r.equal["algorithm.kl.estimator"]) == (0.001, "k2")
    assert r.equal["algorithm.kl.placement"] == "loss"
    path = _written(conv, in_tmp, "rpp")
    spec = build(compose([f"+recipe={path}"]))
    assert validate(spec) == []
    assert derive(spec).roles == ("policy", "reference", "rollout")


def _dotted_ppo(*flags: str) -> str:
    return "python3 -m openrlhf.cli.train_ppo_ray --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture " + (
        " ".join(flags)
    )


# OpenRLHF 0.11.2's flags: FlashREINFORCE (one sample, batch baseline, seq binary-KL trust region, sample mean).
FLASH_REINFORCE = [
    "--train.colocate_all --vllm.num_engines 8 --reward.remote_url ./reward_func.py",
    "--rollout.batch_size 128 --rollout.n_samples_per_prompt 1 --train.batch_size 128 --train.max_epochs 1",
    "--algo.advantage.estimator flash_reinforce --algo.kl.init_coef 0",
    "--algo.advantage.is_correction_level seq --algo.advantage.is_correction_gating binary_kl",
    "--algo.advantage.is_correction_threshold 5e-3 --actor.loss_agg_mode seq-mean-token-mean",
]


def test_openrlhf_0_11_2_flags_become_the_same_keys_and_validate(in_tmp):
    conv = _convert_script(_dotted_ppo(*FLASH_REINFORCE))
    r = conv.recipe
    assert r.choices["algorithm"] == "flash_reinforce"  # the preset that says all of it
    merged = {**r.equal, **r.values}
    assert merged["algorithm.advantage.estimator"] == "flash_reinforce"
    assert merged["algorithm.is_correction.level"] == "seq"
    assert merged["algorithm.is_correction.mode"] == "mask"
    assert merged["algorithm.is_correction.gating"] == "binary_kl"
    assert merged["algorithm.is_correction.threshold"] == [0.005]  # HIGH alone, as the flag took it
    assert merged["algorithm.policy_loss.aggregation"] == "seq_mean"
    path = _written(conv, in_tmp, "flash")
    spec = build(compose([f"+recipe={path}", PROMPTS]))
    assert validate(spec) == []
    assert spec.algorithm.is_correction.bounds() == (0.0, 0.005)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "--algo.advantage.is_correction_enable --algo.advantage.is_correction_type tis",
            "--algo.advantage.is_correction_level token --algo.advantage.is_correction_mode clip",
        ),
        (
            "--algo.advantage.is_correction_enable --algo.advantage.is_correction_type seq-mask-tis",
            "--algo.advantage.is_correction_level seq",
        ),
        (
            "--enable_vllm_is_correction --vllm_is_correction_type icepop --vllm_is_truncated_threshold 0.5 2",
            "--algo.advantage.is_correction_level token --algo.advantage.is_correction_threshold 0.5 2",
        ),
    ],
)
def test_both_vocabularies_of_the_is_correction_give_the_same_recipe(old, new, in_tmp):
    base = "--train.colocate_all --vllm.num_engines 8 --reward.remote_url http://127.0.0.1:1/r"
    before, after = _convert_script(_dotted_ppo(base, old)), _convert_script(_dotted_ppo(base, new))
    assert before.recipe.values == after.recipe.values and before.recipe.choices == after.recipe.choices
    rows = lines(before.cmd, before.mapping, before.recipe)
    assert not [r for r in rows if "not carried over by this importer" in r.detail]


def test_unbiased_kl_gradient_and_loss_agg_mode(in_tmp):
    base = "--train.colocate_all --vllm.num_engines 8 --reward.remote_url http://127.0.0.1:1/r"
    loss = _convert_script(_dotted_ppo(base, "--algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.unbiased_gradient"))
    assert {**loss.recipe.equal, **loss.recipe.values}["algorithm.kl.unbiased_gradient"] is True
    reward = _convert_script(_dotted_ppo(base, "--algo.kl.unbiased_gradient"))
    assert not {**reward.recipe.equal, **reward.recipe.values}.get("algorithm.kl.unbiased_gradient")
    rows = {r.flag: r for r in lines(reward.cmd, reward.mapping, reward.recipe)}
    assert "no effect with the KL in the reward" in rows["--algo.kl.unbiased_gradient"].detail
    gspo = _convert_script(_dotted_ppo(base, "--actor.policy_loss_type gspo --actor.loss_agg_mode token-mean"))
    assert {**gspo.recipe.equal, **gspo.recipe.values}["algorithm.policy_loss.aggregation"] == "seq_mean"


# (flags, actor GPUs): colocated on one node; and split over three nodes with actor+ref sharing two of them.
BATCHES = [
    (
        [
            "--train.colocate_all",
            "--vllm.num_engines 8",
            "--train.batch_size 128 --train.micro_batch_size 4",
            "--rollout.batch_size 64 --rollout.n_samples_per_prompt 8 --train.max_epochs 2",
            "--algo.advantage.estimator group_norm",
            "--reward.remote_url http://127.0.0.1:5000/get_reward",
        ],
        8,
    ),
    (
        [
            "--actor.num_nodes 2 --ref.num_nodes 2 --train.colocate_actor_ref",
            "--critic.num_nodes 1 --critic.num_gpus_per_node 4 --reward.num_nodes 1 --reward.num_gpus_per_node 4",
            "--train.colocate_critic_reward --vllm.num_engines 4 --vllm.tensor_parallel_size 2",
            "--train.batch_size 512 --train.micro_batch_size 2",
            "--rollout.batch_size 256 --rollout.n_samples_per_prompt 4 --train.max_epochs 1",
            "--reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k",
        ],
        16,
    ),
]


@pytest.mark.parametrize(("flags", "actor_gpus"), BATCHES, ids=["colocated", "split_3_nodes"])
def test_derived_accumulation_and_steps_per_rollout_equal_openrlhfs(flags, actor_gpus, in_tmp):
    conv = _convert_script(_dotted_ppo(*flags))
    s = conv.mapping.values
    train_batch, micro = s["trainer.global_batch"], s["trainer.micro_batch_per_device"]
    path = _written(conv, in_tmp, "batches")
    spec = build(compose([f"+recipe={path}", PROMPTS]))
    assert validate(spec) == []
    d = derive(spec)
    assert d.devices["policy"] == actor_gpus
    assert d.grad_accum["policy"] == openrlhf_grad_accum(train_batch, micro, actor_gpus)
    steps = openrlhf_steps_per_rollout(
        s["rollout.prompts_per_step"], s["rollout.samples_per_prompt"], train_batch, s["trainer.epochs_per_rollout"]
    )
    assert d.optimizer_steps_per_rollout == steps


def test_split_placement_devices_and_hardware_follow_openrlhfs_groups(in_tmp):
    conv = _convert_script(_dotted_ppo(*BATCHES[1][0]))
    assert conv.recipe.choices["placement"] == "split"
    assert conv.recipe.values["placement.colocate"] == [["policy", "reference"], ["critic", "reward"]]
    spec = conv.recipe.spec
    d = derive(spec)
    assert {r: d.devices[r] for r in d.roles} == {"policy": 16, "reference": 16, "critic": 4, "reward": 4, "rollout": 8}
    assert (spec.hardware.nodes, spec.hardware.devices_per_node) == (4, 8)  # 16 + 4 + 8 = 28 GPUs


def test_openrlhf_defaults_are_carried_where_ours_differ(in_tmp):
    conv = _convert_script(_dotted_ppo("--train.colocate_all --vllm.num_engines 8", "--reward.remote_url http://h:1/r"))
    v = conv.recipe.values
    assert v["rollout.prompts_per_step"] == 1024  # --rollout.batch_size default
    assert v["data.apply_chat_template"] is False  # off unless asked in OpenRLHF
    assert v["algorithm.advantage.lambd"] == 1.0  # OpenRLHF's GAE lambda default
    assert v["rollout.enable_sleep"] is False
    assert set(conv.mapping.carried) >= {"rollout.prompts_per_step", "data.apply_chat_template"}


def test_unknown_flags_bad_values_and_repeated_flags_are_reported(in_tmp):
    conv = _convert_script(
        _dotted_ppo(
            "--not.a_flag 3 4",
            "--train.batch_size many",
            "--rollout.batch_size 64 --rollout.batch_size 32",
            "--ptx_coef 0.05",
            "--ds.ring_attn_size 2",
        )
    )
    rows = {r.flag: r for r in lines(conv.cmd, conv.mapping, conv.recipe)}
    assert rows["--not.a_flag 3 4"].marker == UNRECOGNISED
    assert "takes an int" in rows["--train.batch_size many"].detail
    assert rows["--rollout.batch_size 64"].marker == "~~"
    assert conv.recipe.values["rollout.prompts_per_step"] == 32
    assert rows["--ptx_coef 0.05"].marker == NONE and "removed from OpenRLHF" in rows["--ptx_coef 0.05"].detail
    assert rows["--ds.ring_attn_size 2"].marker == WRITTEN


def test_unknown_model_gets_the_nearest_dimensions_and_says_so(in_tmp):
    conv = _convert_script(
        _dotted_ppo("--train.colocate_all --vllm.num_engines 8").replace(
            "OpenRLHF/Llama-3-8b-sft-mixture", "Qwen/Qwen3-4B-Thinking-2507"
        )
    )
    assert conv.recipe.choices["model"] == "qwen3_4b"  # the Qwen3-4B dimensions; the path stays the user's
    assert conv.recipe.values["model.path"] == "Qwen/Qwen3-4B-Thinking-2507"
    assert "model: Qwen/Qwen3-4B-Thinking-2507 with the dimensions of option qwen3_4b" in conv.recipe.notes[0]
    other = _convert_script(
        _dotted_ppo("--train.colocate_all --vllm.num_engines 8").replace(
            "OpenRLHF/Llama-3-8b-sft-mixture", "mistralai/Mistral-7B-v0.3"
        )
    )
    assert "no conf/model option for mistralai/Mistral-7B-v0.3 (7B)" in other.recipe.notes[0]


def test_hardware_option_or_gpu_type(in_tmp):
    h200 = _convert_script(FLAT["ppo"], hardware="h200")
    assert h200.recipe.choices["hardware"] == "1xh200"
    assert h200.recipe.values["hardware.devices_per_node"] == 8
    assert _convert_script(FLAT["ppo"], hardware="8xa100_80g").recipe.choices["hardware"] == "8xa100_80g"
    with pytest.raises(ImportProblem, match="--hardware tpu"):
        _convert_script(FLAT["ppo"], hardware="tpu")


def test_cli_writes_recipe_and_report_and_checks_the_plan(in_tmp, capsys):
    script = in_tmp / "train_dpo.sh"
    script.write_text(FLAT["dpo"])
    with pytest.raises(SystemExit) as done:
        recipes_main(["import-openrlhf", str(script), "-o", "dpo.yaml", "--report", "report.txt", "--check"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "OpenRLHF train_dpo, flat flags" in out and "verdict:" in out
    assert (in_tmp / "report.txt").read_text() in out
    text = (in_tmp / "dpo.yaml").read_text()
    assert text.startswith("# @package _global_\n") and "  - override /algorithm: dpo" in text
    assert "lr: 5.0e-07  # --learning_rate" in text


def test_cli_takes_the_command_after_double_dash(in_tmp, capsys):
    argv = ["import-openrlhf", "--hardware", "h100", "-o", "sft.yaml", "--", "deepspeed", "--num_gpus", "4"]
    argv += ["--module", "openrlhf.cli.train_sft", "--pretrain", "Qwen/Qwen2.5-0.5B-Instruct", "--dataset", "a/b"]
    with pytest.raises(SystemExit) as done:
        recipes_main(argv)
    assert done.value.code == 0
    spec = build(compose([f"+recipe={in_tmp / 'sft.yaml'}"]))
    assert (spec.model.name, spec.hardware.devices_per_node) == ("qwen2_5_0_5b", 4)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("echo hello\n", "runs no OpenRLHF command"),
        ("deepspeed --module openrlhf.cli.train_kto --pretrain x\n", "train_kto: removed from OpenRLHF"),
        ("python -m openrlhf.cli.train_sft --x 1\npython -m openrlhf.cli.train_rm\n", "runs 2 OpenRLHF commands"),
        ("python -m openrlhf.cli.train_sft --input_template 'unterminated\n", "unterminated '"),
    ],
)
def test_cli_errors_name_the_problem_without_a_traceback(script, message, in_tmp, capsys):
    (in_tmp / "s.sh").write_text(script)
    with pytest.raises(SystemExit) as done:
        recipes_main(["import-openrlhf", "s.sh"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_refuses_to_overwrite_without_force(in_tmp, capsys):
    (in_tmp / "s.sh").write_text(FLAT["sft"])
    (in_tmp / "taken.yaml").write_text("x: 1\n")
    with pytest.raises(SystemExit) as done:
        recipes_main(["import-openrlhf", "s.sh", "-o", "taken.yaml"])
    assert done.value.code == 2
    assert "taken.yaml exists" in capsys.readouterr().err
    assert os.path.getsize(in_tmp / "taken.yaml") == 5


def _any_value(d) -> list[str]:
    from rlhf.importers.openrlhf import flags as vocab

    one = {int: "2", float: "0.5"}.get(d.type, "x")
    many = ["q_proj", "v_proj"] if one == "x" else [one]  # e.g. target modules; a threshold's HIGH alone
    return {vocab.BOOL: [], vocab.ONE: [one], vocab.TWO: [one, one], vocab.MANY: many}[d.arity]


@pytest.mark.parametrize("entry", ["train_ppo_ray", "train_sft", "train_rm", "train_dpo"])
def test_every_flag_of_every_vocabulary_has_a_meaning_or_a_reason(entry):
    from rlhf.importers.openrlhf import flags as vocab
    from rlhf.importers.openrlhf.args import split_command
    from rlhf.importers.openrlhf.mapping import map_command

    words = ["python", "-m", f"openrlhf.cli.{entry}"]
    for name, d in vocab.VOCABULARY[entry].items():
        words += [f"--{name}", *_any_value(d)]
    cmd = split_command(words)
    assert all(not f.problem for f in cmd.flags)
    outcomes = map_command(cmd).outcomes
    for flag, o in zip(cmd.flags, outcomes, strict=True):
        assert o.keys or o.none or o.note or o.overridden_by, flag.text
        assert "not carried over by this importer" not in o.none, flag.text
    for flat in vocab.FLAT[entry]:  # every flat name resolves to flags of this entry point
        assert vocab.resolve(entry, flat), flat


def test_save_path_set_from_a_substitution_outside_the_script_is_a_placeholder_not_a_crash(in_tmp, capsys):
    """The crash of issue 20: `--ckpt.output_dir ${SAVE_PATH}` where SAVE_PATH comes from $(...)."""
    (in_tmp / "prompts.jsonl").write_text('{"input": "1+1=", "label": "2"}\n')
    (in_tmp / "s.sh").write_text(
        'WORK_DIR=$(cd "$(dirname "$0")/../.." && pwd)\nSAVE_PATH="${WORK_DIR}/exp/run"\n'
        "python3 -m openrlhf.cli.train_ppo_ray --actor.model_name_or_path Qwen/Qwen2.5-0.5B-Instruct \\\n"
        "  --ckpt.output_dir ${SAVE_PATH} --ckpt.path ${SAVE_PATH}/ckpt --train.colocate_all --vllm.num_engines 8 \\\n"
        "  --reward.remote_url ./reward_func.py --data.prompt_dataset ./prompts.jsonl \\\n"
        "  --algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 8 --rollout.batch_size 16 \\\n"
        "  --train.batch_size 128 --logger.wandb.run_name ${RUN_NAME}\n"
    )
    with pytest.raises(SystemExit) as done:
        recipes_main(["import-openrlhf", "s.sh", "-o", "out.yaml", "--check"])
    out = capsys.readouterr()
    assert done.value.code == 0, out.out + out.err
    assert "Traceback" not in out.out + out.err
    assert '--ckpt.output_dir \'$(cd "$(dirname "$0")/../..' in out.out and "?? set from $(cd" in out.out
    text = (in_tmp / "out.yaml").read_text()
    assert "#   checkpoint.output_dir=...  # --ckpt.output_dir" in text and "#   logging.run_name=..." in text
    assert "output_dir: " not in text.split("# ?? set outside the script")[0]  # not written as a value
    assert "set outside the script, defaults here used (3)" in out.out  # output_dir, dir, run_name


def test_a_required_value_set_outside_the_script_is_written_as_hydra_missing(in_tmp):
    conv = _convert_script(_dotted_ppo("--train.colocate_all --vllm.num_engines 8", "--rollout.batch_size ${RBS}"))
    assert conv.recipe.placeholders["rollout.prompts_per_step"].required
    assert "  prompts_per_step: ???  # --rollout.batch_size '${RBS}': set from ${RBS}, unknown here" in conv.yaml()
    path = _written(conv, in_tmp, "rbs")
    from rlhf.spec.required import MissingValues

    with pytest.raises(MissingValues) as missing:
        build(compose([f"+recipe={path}"]))
    assert missing.value.keys == ["rollout.prompts_per_step"]
    given = build(compose([f"+recipe={path}", "rollout.prompts_per_step=64"]))
    assert given.rollout.prompts_per_step == 64


# OpenRLHF's examples/scripts, in our words: a short command of each kind (DAPO, ProRL-style correction and stop
# penalty, an async agent, REINFORCE++-baseline hybrid, DPO, LoRA SFT) and the option it must become.
EXAMPLE_KINDS = {
    "dapo": (
        "--algo.advantage.estimator group_norm --actor.eps_clip_low_high 0.2 0.28 --algo.dynamic_filtering_enable "
        "--algo.dynamic_filtering_range 0.0 1.0 --reward.overlong_buffer_len 1024 --reward.overlong_penalty_factor 1.0 "
        "--algo.kl.init_coef 0 --rollout.n_samples_per_prompt 16 --rollout.batch_size 64 --train.batch_size 128",
        "dapo",
    ),
    "prorl": (
        "--algo.advantage.estimator reinforce_baseline --algo.kl.use_loss --algo.kl.estimator k2 "
        "--algo.kl.init_coef 1e-4 --algo.advantage.is_correction_enable --algo.advantage.is_correction_type icepop "
        "--reward.stop_properly_penalty_coef 0.0 --rollout.n_samples_per_prompt 16 --rollout.batch_size 64 "
        "--train.batch_size 128",
        "reinforce_pp_baseline",
    ),
    "agent_async": (
        "--algo.advantage.estimator reinforce_baseline --train.agent_func_path ./agent.py --train.async_enable "
        "--rollout.n_samples_per_prompt 8 --rollout.batch_size 16 --train.batch_size 128",
        "reinforce_pp_baseline",
    ),
}


@pytest.mark.parametrize("kind", list(EXAMPLE_KINDS))
def test_example_kinds_become_their_presets_and_validate(kind, in_tmp):
    flags, algorithm = EXAMPLE_KINDS[kind]
    (in_tmp / "agent.py").write_text("class AgentInstance:\n    async def step(self, states):\n        return {}\n")
    (in_tmp / "prompts.jsonl").write_text('{"input": "1+1=", "label": "2"}\n')
    reward = "" if "agent" in kind else "--reward.remote_url ./reward_func.py"
    data = "--data.prompt_dataset ./prompts.jsonl --train.colocate_all --vllm.num_engines 8"
    conv = _convert_script(_dotted_ppo(data, reward, flags))
    assert conv.recipe.choices["algorithm"] == algorithm
    assert validate(build(compose([f"+recipe={_written(conv, in_tmp, kind)}"]))) == []


def test_a_flag_table_row_whose_key_has_not_landed_is_reported_as_coming(monkeypatch):
    from rlhf.importers.openrlhf import mapping as orl_mapping

    monkeypatch.setitem(orl_mapping._DIRECT_RL, "actor.entropy_coef", ("algorithm.no_such_key_yet", True))
    conv = _convert_script(_dotted_ppo("--train.colocate_all --vllm.num_engines 8", "--actor.entropy_coef 0.01"))
    row = next(r for r in lines(conv.cmd, conv.mapping, conv.recipe) if r.flag.startswith("--actor.entropy_coef"))
    assert (row.marker, row.detail) == (NONE, "coming: algorithm.no_such_key_yet=0.01 once that key exists here")
    assert "algorithm.no_such_key_yet" not in conv.recipe.values


def test_dynamic_batching_becomes_the_token_budgets_and_packing(in_tmp):
    # OpenRLHF's --use_dynamic_batch forces packing and cuts micro-batches by --train_max_tokens_per_gpu (16192 by
    # default); the forwards take --rollout_max_tokens_per_gpu, else the same budget.
    s = _convert_script(FLAT["ppo_dynamic_batch"]).mapping.values
    assert (s["trainer.packing"], s["trainer.max_tokens_per_micro_batch"], s["trainer.max_tokens_per_forward"]) == (
        True,
        16192,
        16192,
    )
    base = "python3 -m openrlhf.cli.train_ppo_ray --pretrain m --prompt_data d "
    both = _convert_script(
        base + "--use_dynamic_batch --train_max_tokens_per_gpu 4096 --rollout_max_tokens_per_gpu 8192"
    )
    assert (
        both.mapping.values["trainer.max_tokens_per_micro_batch"],
        both.mapping.values["trainer.max_tokens_per_forward"],
    ) == (
        4096,
        8192,
    )
    off = _convert_script(base + "--train_max_tokens_per_gpu 4096")
    assert "trainer.max_tokens_per_micro_batch" not in off.mapping.values
    assert any("used only with --train.dynamic_batch_enable" in (o.note or "") for o in off.mapping.outcomes)


def test_the_long_context_example_converts_validates_and_plans(in_tmp):
    # OpenRLHF's train_reinforce_baseline_hybrid_engine.sh: samples up to 74,240 tokens, micro-batches cut at 16,192
    # tokens; a longer sample trains in a micro-batch of its own there and here (before: refused)
    conv = _convert_script(
        "python3 -m openrlhf.cli.train_ppo_ray --pretrain OpenRLHF/Llama-3-8b-sft-mixture --prompt_data d "
        "--remote_rm_url http://127.0.0.1:5000/get_reward --advantage_estimator reinforce_baseline "
        "--n_samples_per_prompt 8 --use_dynamic_batch --train_max_tokens_per_gpu 16192 "
        "--prompt_max_len 1024 --generate_max_len 73216"
    )
    assert conv.mapping.values["trainer.max_tokens_per_micro_batch"] == 16192
    spec = build(compose([f"+recipe={_written(conv, in_tmp, 'long')}", PROMPTS]))
    assert spec.data.max_len == 74240 and validate(spec) == []
    assert plan(spec).verdict()


def test_the_ring_attention_example_splits_each_sample_over_the_same_ranks(in_tmp):
    # OpenRLHF's long-context example: ring attention over 2 of 4 actor GPUs, head stride 2
    (in_tmp / "agent_func.py").write_text("async def step(observation, action, label, **kwargs):\n    return {}\n")
    conv = _convert_script(RING_ATTENTION)
    rows = {r.flag: r for r in lines(conv.cmd, conv.mapping, conv.recipe)}
    ring = rows["--ds.ring_attn_size 2"]
    assert ring.marker == WRITTEN
    assert ring.detail.startswith("trainer.sequence_parallel_size=2; each sample split over 2 ranks by Ulysses")
    assert "OpenRLHF runs ring attention" in ring.detail and "the same attention" in ring.detail
    stride = rows["--ds.ring_attn_head_stride 2"]
    assert stride.marker == NONE and "not needed: ring attention's kv heads per gather" in stride.detail
    spec = build(compose([f"+recipe={_written(conv, in_tmp, 'ring')}"]))
    assert validate(spec) == []
    d = derive(spec)
    assert (d.mesh["policy"].data, d.mesh["policy"].sequence) == (2, 2)
    s = conv.mapping.values
    assert s["trainer.max_tokens_per_micro_batch"] == 16192  # per GPU in both (a group of 2 takes 2 x 16192)
    assert d.grad_accum["policy"] == openrlhf_grad_accum(s["trainer.global_batch"], 1, 4, ring=2)  # 1024*2/1/4
    assert plan(spec).verdict()


def test_a_head_stride_of_one_and_a_ring_of_one_are_openrlhfs_defaults(in_tmp):
    conv = _convert_script(_dotted_ppo("--ds.ring_attn_size 1 --ds.ring_attn_head_stride 1"))
    rows = {r.flag: r for r in lines(conv.cmd, conv.mapping, conv.recipe)}
    assert rows["--ds.ring_attn_size 1"].marker == EQUAL
    assert rows["--ds.ring_attn_head_stride 1"].marker == EQUAL
    assert "trainer.sequence_parallel_size" not in conv.mapping.values


@pytest.mark.parametrize("ring", [2, 4])
def test_gradient_accumulation_with_a_ring_equals_openrlhfs(ring, in_tmp):
    flags = [*BATCHES[0][0], f"--ds.ring_attn_size {ring}"]
    conv = _convert_script(_dotted_ppo(*flags))
    s = conv.mapping.values
    spec = build(compose([f"+recipe={_written(conv, in_tmp, 'ring')}", PROMPTS]))
    assert validate(spec) == []
    got = derive(spec).grad_accum["policy"]
    assert got == openrlhf_grad_accum(s["trainer.global_batch"], s["trainer.micro_batch_per_device"], 8, ring=ring)
