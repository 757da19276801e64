"""checkpoint.init_from: a new run from another run's weights, not a resume.

One SFT run (2 ranks, ZeRO-3, 4 steps, checkpoints and evals at steps 2 and 4, tracked in MLflow) feeds the
end-to-end tests: an SFT run started from its step-2 checkpoint (DeepSpeed ZeRO-3 shards of 2 ranks, consolidated)
evaluates at step 0 exactly as the source did at step 2 (same eval set, same 2 ranks and batches), then trains with a
fresh optimizer, schedule and data order in a new MLflow run that names its source; a GRPO run started from the SFT
run folder evaluates at step 0 exactly as the same weights do when given as model.path (both evals sampled with the
same seed), and not as the untrained model does; a LoRA run's final adapters and its checkpoint (one rank, ZeRO-2)
merge into the same weights. The rest pins, without Ray, what is refused before anything starts and how adapters and
critics become Hugging Face folders.

Every registered training backend owns its checkpoint layout (rlhf.backends.contract.training.TrainBackend:
checkpoint_weights, checkpoint_state_dict): for each one (rlhf.spec.registry.TRAIN_BACKENDS, so a new backend is
covered without an edit here), one-step runs in this process (the local executor) write an RL checkpoint (policy/ and
critic/) and a LoRA SFT checkpoint, a new run starts from each, and its weights are those the source run saved. The
toy plug-in (tests/backends/toy_plugin/toy_train/, its own layout) runs the same tests in a process with the plug-in
on its path (tests/backends/test_toy_backends.py starts it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from rlhf.pipelines.init_from import starting_weights, value_head_trained
from rlhf.run_files.init_source import InitFromError, check
from rlhf.spec import validate
from rlhf.spec.build import load_spec
from rlhf.spec.registry import TRAIN_BACKENDS, train_backend

TWO_RANKS = ["hardware.devices_per_node=2", "trainer.global_batch=32", "trainer.micro_batch_per_device=8"]
QUIET = ["logging.progress=false"]
GRPO = ["+recipe=grpo_tiny_cpu", "logging.progress=false", "logging.mlflow=false", "trainer.max_steps=1"]
# Seeded evals (the eval's sampling seed is seed x 7919 + 10^6 + step, and the hf engine samples reproducibly given
# it): the same weights give the same eval exactly, and the mean length of 64 sampled answers tells weights apart.
SEEDED = ["eval.steps=1", "eval.temperature=1.0", "eval.samples_per_prompt=4", "eval.max_prompts=16"]
BACKENDS = sorted(TRAIN_BACKENDS)  # every registered training backend (the toy's too, in the plug-in's process)


# -- refused before anything starts ---------------------------------------------------------------------------------


def _mlflow_run_id(run_dir: Path) -> str:
    """The MLflow run of a run folder (its tracking.json holds every tracker's record)."""
    return json.loads((run_dir / "tracking.json").read_text())["trackers"]["mlflow"]["run_id"]


def test_validation_names_a_missing_folder_and_a_resume_path_given_with_it(tmp_path):
    errors = validate(load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={tmp_path / 'nowhere'}"]))
    (bad,) = [e for e in errors if e.key == "checkpoint.init_from"]
    assert "no such folder" in bad.fix and "checkpoint folder" in bad.fix
    both = load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={tmp_path}", f"checkpoint.resume={tmp_path}"])
    (conflict,) = [e for e in validate(both) if e.key == "checkpoint.resume"]
    assert "continues that run" in conflict.fix and "drop checkpoint.init_from" in conflict.fix


def _tiny(*overrides: str):
    from rlhf.models.loading import resolve_model_path

    spec = load_spec(["+recipe=grpo_tiny_cpu", *overrides])
    return spec, Path(resolve_model_path(spec.model))


def test_preflight_refuses_what_holds_no_weights_or_does_not_fit_model(tmp_path):
    from rlhf.models.value_head import load_value_model
    from rlhf.planning.preflight import PreflightFailed, require_preflight

    (tmp_path / "notes.txt").write_text("not a model")
    spec = load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={tmp_path}"])
    (none,) = check(spec)
    assert none.key == "checkpoint.init_from" and "none of the three forms" in none.problem
    with pytest.raises(PreflightFailed, match="checkpoint.init_from"):
        require_preflight(spec)

    _, wide = _tiny("model.vocab_size=512")  # a model of other sizes than model=tiny's
    (sizes,) = check(load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={wide}"]))
    assert "vocab_size=512 (model.vocab_size=264)" in sizes.problem and "model=" in sizes.fix

    _, base = _tiny()
    rm = tmp_path / "rm"
    load_value_model(str(base), "reward", init_value_head=True).save_pretrained(rm)
    (kind,) = check(load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={rm}"]))
    assert "reward model or critic" in kind.problem and "reward.model_path" in kind.fix
    assert check(load_spec(["+recipe=rm_tiny_cpu", f"checkpoint.init_from={rm}"])) == []  # an RM may start from one
    assert value_head_trained(rm) and not value_head_trained(base)  # what decides that it keeps its trained head


def test_resume_with_an_init_from_the_run_was_not_started_with_is_refused(tmp_path, capsys):
    from rlhf.cli.resume import resume_argv

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "command.json").write_text(json.dumps({"argv": ["+recipe=grpo_tiny_cpu"], "cwd": str(tmp_path)}))
    with pytest.raises(SystemExit):
        resume_argv(["--resume", str(run_dir), f"checkpoint.init_from={tmp_path}"])
    assert "continues that run" in capsys.readouterr().err


def test_a_run_folder_holding_another_runs_checkpoints_is_refused(tmp_path):
    _, base = _tiny()
    step = tmp_path / "run" / "checkpoints" / "step00000003"
    step.mkdir(parents=True)
    (step / "driver_state.json").write_text(json.dumps({"step": 3}))
    spec = load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={base}"])
    with pytest.raises(InitFromError, match="already holds checkpoints"):
        starting_weights(spec, tmp_path / "run")


def _checkpoint_of(tmp_path: Path, backend: str) -> Path:
    """A run folder whose config says ``backend`` trained it, with a step checkpoint whose policy/ holds nothing."""
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "step00000003"
    (checkpoint / "policy").mkdir(parents=True)
    (run / "resolved_config.yaml").write_text(f"trainer:\n  backend: {backend}\n")
    (checkpoint / "driver_state.json").write_text(json.dumps({"step": 3, "family": "rl"}))
    return checkpoint


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_missing_its_weights_is_refused_in_the_words_of_the_backend_that_wrote_it(backend, tmp_path):
    checkpoint = _checkpoint_of(tmp_path, backend)
    (problem,) = check(load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={checkpoint}"]))
    said = train_backend(backend).checkpoint_weights(checkpoint / "policy").problem
    assert problem.key == "checkpoint.init_from" and problem.value == str(checkpoint)
    assert problem.problem == said and str(checkpoint / "policy") in said
    assert "earlier checkpoint" in problem.fix and "final model/" in problem.fix


def test_a_checkpoint_of_a_backend_not_registered_here_or_damaged_is_refused_naming_the_fix(tmp_path):
    checkpoint = _checkpoint_of(tmp_path / "a", "megatron")
    (problem,) = check(load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={checkpoint}"]))
    assert "trainer.backend=megatron, which is not registered here" in problem.problem
    assert "registers the megatron backend" in problem.fix and "final model/" in problem.fix

    checkpoint = _checkpoint_of(tmp_path / "b", BACKENDS[0])
    manifest = {"format": 1, "files": {"policy/shard.bin": {"bytes": 10}}}  # what the save wrote, now gone
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    (problem,) = check(load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={checkpoint}"]))
    assert f"the checkpoint {checkpoint} is damaged: policy/shard.bin: missing" in problem.problem
    assert "earlier checkpoint" in problem.fix


# -- LoRA sources are merged -----------------------------------------------------------------------------------------
def _adapted(base: Path):
    """The tiny model with LoRA adapters whose B is not zero (so they change the outputs)."""
    from transformers import AutoModelForCausalLM

    from rlhf.models.lora import apply_lora
    from rlhf.spec.schema import LoraSpec

    model = apply_lora(AutoModelForCausalLM.from_pretrained(base), LoraSpec(rank=4, alpha=8))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    return model.eval()


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_a_lora_adapter_folder_is_merged_into_its_base(tmp_path):
    from transformers import AutoModelForCausalLM

    _, base = _tiny()
    adapted = _adapted(base)
    adapted.save_pretrained(tmp_path / "adapter")  # what a LoRA run's model/ holds (its base named inside)
    spec = load_spec(["+recipe=grpo_tiny_cpu", f"checkpoint.init_from={tmp_path / 'adapter'}"])
    started, params = starting_weights(spec, tmp_path / "run")
    assert started.model.path == str(tmp_path / "run" / "init_from" / "policy") and not started.model.make_local
    assert params["init_from.lora_merged"] == "true" and params["init_from.form"] == "hf"
    ids = torch.tensor([[3, 17, 42, 99, 7]])
    merged = AutoModelForCausalLM.from_pretrained(started.model.path).eval()
    torch.testing.assert_close(_logits(merged, ids), _logits(adapted, ids), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(_logits(AutoModelForCausalLM.from_pretrained(base), ids), _logits(adapted, ids))


def test_a_critics_state_dict_becomes_a_value_model_folder_with_its_head(tmp_path):
    from rlhf.models.checkpoint_weights import VALUE, write_hf_model
    from rlhf.models.value_head import load_value_model

    _, base = _tiny()
    critic = load_value_model(str(base), "critic", init_value_head=True).eval()
    state = {k: v.clone() for k, v in critic.state_dict().items()}  # what an RL checkpoint's critic/ holds
    out = write_hf_model(state, tmp_path / "critic", base=str(base), tokenizer=str(base), kind=VALUE)
    ids = torch.tensor([[9, 8, 7, 6]])
    with torch.no_grad():
        torch.testing.assert_close(load_value_model(str(out), "critic").eval()(ids), critic(ids))
    assert value_head_trained(out)


# -- end to end -------------------------------------------------------------------------------------------------------
@dataclass
class SFTRun:
    run_dir: Path
    rows: list[dict]
    tracking_uri: str
    run_id: str


def _job(run_dir: Path, *overrides: str) -> tuple[dict, list[dict]]:
    from rlhf.launch.job import run
    from rlhf.planning.plan import plan
    from rlhf.spec import check as check_spec
    from rlhf.tracking.tracker import read_metrics

    spec = load_spec(list(overrides))
    check_spec(spec)
    return run(spec, plan(spec), run_dir), read_metrics(run_dir)


@pytest.fixture(scope="module")
def sft_run(ray_cluster, tmp_path_factory) -> SFTRun:
    root = tmp_path_factory.mktemp("sft")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    result, rows = _job(
        root / "run",
        "+recipe=sft_tiny_cpu",
        *TWO_RANKS,
        *QUIET,
        "trainer.zero_stage=3",
        "trainer.max_steps=4",
        "checkpoint.save_steps=2",
        "eval.steps=2",
        f"logging.tracking_uri={uri}",
    )
    return SFTRun(root / "run", rows, uri, _mlflow_run_id(root / "run"))


def _at(rows: list[dict], step: int) -> dict:
    return next(r for r in rows if r["step"] == step)


def _ds_states(checkpoint: Path) -> tuple[dict, dict]:
    """(rank 0's model states, rank 0's optimizer states) of one of our ZeRO-3 checkpoints."""
    ds = checkpoint / "ds"
    model = torch.load(ds / "zero_pp_rank_0_mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)
    optim = torch.load(ds / "zero_pp_rank_0_mp_rank_00_optim_states.pt", map_location="cpu", weights_only=False)
    return model, optim["optimizer_state_dict"]["optimizer_state_dict"]


@pytest.mark.slow
def test_sft_from_a_zero3_checkpoint_is_a_new_run_from_its_weights(sft_run, tmp_path):
    from mlflow.tracking import MlflowClient

    source = sft_run.run_dir / "checkpoints" / "step00000002"
    result, rows = _job(
        tmp_path / "run",
        "+recipe=sft_tiny_cpu",
        *TWO_RANKS,
        *QUIET,
        "trainer.zero_stage=3",
        "trainer.max_steps=2",
        "seed=7",
        f"checkpoint.init_from={source}",
        f"logging.tracking_uri={sft_run.tracking_uri}",
    )
    # Step 0 holds the checkpoint's weights: the same eval loss as the source at step 2, not the untrained model's.
    assert _at(rows, 0)["eval/loss"] == _at(sft_run.rows, 2)["eval/loss"] != _at(sft_run.rows, 0)["eval/loss"]
    # A new run: steps from 1, the schedule from its start (the source was 2 steps into it), a fresh optimizer.
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2]
    assert _at(rows, 1)["train/lr"] == _at(sft_run.rows, 1)["train/lr"] != _at(sft_run.rows, 3)["train/lr"]
    mine = Path(result["checkpoint"])
    model, optim = _ds_states(mine)  # after 2 steps; continuing the source's optimizer would count 4
    assert model["global_steps"] == model["engine_global_step"] == model["lr_scheduler"]["last_epoch"] == 2
    assert optim["state"] and {int(s["step"]) for s in optim["state"].values()} == {2}  # Adam's own count
    # ... and a fresh data order, the new seed's, from its start (a resume would stand at the source's position).
    sampler = json.loads((mine / "driver_state.json").read_text())["sampler"]
    assert (sampler["seed"], sampler["epoch"], sampler["position"]) == (7, 0, 2 * 32)
    client = MlflowClient(sft_run.tracking_uri)
    new = client.get_run(_mlflow_run_id(Path(result["run_dir"])))
    assert new.info.run_id != sft_run.run_id and new.info.status == "FINISHED"
    p = new.data.params
    assert (p["init_from.source"], p["init_from.form"], p["init_from.step"]) == (str(source), "checkpoint", "2")
    assert p["init_from.source_mlflow_run_id"] == sft_run.run_id and p["checkpoint.init_from"] == str(source)
    assert len(client.get_metric_history(sft_run.run_id, "train/loss")) == 4  # the source's run is untouched


@pytest.mark.slow
def test_grpo_from_an_sft_run_starts_at_step_0_from_its_weights(sft_run, tmp_path):
    result, rows = _job(tmp_path / "grpo", *GRPO, *SEEDED, f"checkpoint.init_from={sft_run.run_dir}")
    origin = json.loads((tmp_path / "grpo" / "init_from" / "origin.json").read_text())
    # The run folder's final model/ is its last checkpoint's weights (step 4), already a Hugging Face folder.
    assert (origin["form"], origin["step"], origin["policy"]) == ("run", 4, str(sft_run.run_dir / "model"))
    assert [r["step"] for r in rows if "train/policy_loss" in r] == [1]
    assert abs(_at(rows, 1)["train/kl"]) < 1e-6  # the reference is the init_from weights too (KL before the update)

    # The same weights given as model.path, and the untrained model, evaluated alike without training anything.
    only = [*GRPO, *SEEDED, "rollout.only=true"]
    _, same = _job(tmp_path / "same", *only, "model.make_local=false", f"model.path={sft_run.run_dir / 'model'}")
    _, untrained = _job(tmp_path / "untrained", *only)

    def evals(rows: list[dict]) -> dict:
        return {k: v for k, v in _at(rows, 0).items() if k.startswith("eval/")}

    assert evals(rows) and evals(rows) == evals(same) != evals(untrained)
    assert Path(result["model_dir"], "config.json").is_file()


@pytest.mark.slow
def test_a_lora_run_folder_and_its_checkpoint_merge_to_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    src = tmp_path / "lora"  # one rank, ZeRO-2 (the CPU default): its checkpoints hold peft's names
    _job(src, "+recipe=sft_tiny_cpu", *QUIET, "logging.mlflow=false", "trainer.max_steps=2", "model.lora.rank=8")
    assert (src / "model" / "adapter_config.json").is_file()
    merged = {}
    for name, given in (("adapters", src), ("checkpoint", src / "checkpoints" / "step00000002")):
        spec = load_spec(["+recipe=dpo_tiny_cpu", f"checkpoint.init_from={given}"])
        started, params = starting_weights(spec, tmp_path / name)
        assert (params["init_from.lora_merged"], params["init_from.step"]) == ("true", "2")
        merged[name] = load_file(Path(started.model.path) / "model.safetensors")
        assert params["init_from.source"] == str(src / "model" if name == "adapters" else given)
    base = load_file(_tiny()[1] / "model.safetensors")
    a, b = merged["adapters"], merged["checkpoint"]
    assert a.keys() == b.keys() == base.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], base[k]) for k in a)  # the adapters trained: merged, not dropped


# -- every registered training backend's checkpoint ------------------------------------------------------------------
# one step at the full learning rate (no warm-up, no decay to its end): the step changes the weights
ONE_STEP = [
    "trainer.max_steps=1",
    "trainer.lr_scheduler=constant",
    "trainer.warmup_ratio=0.0",
    "checkpoint.save_steps=1",
    "logging.mlflow=false",
    *QUIET,
]
PPO = [
    "+recipe=ppo_tiny_cpu",
    "rollout.prompts_per_step=8",
    "rollout.micro_batch_per_device=8",
    "trainer.global_batch=8",
    "trainer.micro_batch_per_device=8",
    "eval.steps=0",
]
TOY_PLUGIN = Path(__file__).parents[1] / "backends" / "toy_plugin"


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


def _assert_equal_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    differ = [k for k in want if not torch.equal(got[k], want[k])]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"


def _found_by_its_backend_alone(backend: str, role: Path) -> None:
    """The role folder is whole by its backend's answer, and no other backend takes it for one of its own (so the
    weights read back are its backend's reading)."""
    saved = train_backend(backend).checkpoint_weights(role)
    assert saved.problem == "" and saved.where.exists() and role in (saved.where, *saved.where.parents), saved
    for other in TRAIN_BACKENDS:
        if other != backend:
            assert train_backend(other).checkpoint_weights(role).problem, f"{other} reads {backend}'s {role}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_run_starts_from_an_rl_checkpoint_of_every_backend_with_its_policy_and_critic(backend, tmp_path):
    """A PPO run on ``backend`` saves a checkpoint (policy/ and critic/) and its final policy and critic; a new PPO
    run (the default backend) started from the checkpoint holds exactly those weights in both roles."""
    src = tmp_path / "src"
    _job(src, *PPO, *ONE_STEP, f"trainer.backend={backend}", "critic.save_value_network=true")
    checkpoint = src / "checkpoints" / "step00000001"
    for role in ("policy", "critic"):
        _found_by_its_backend_alone(backend, checkpoint / role)

    _, rows = _job(tmp_path / "new", *PPO, *ONE_STEP, f"checkpoint.init_from={checkpoint}")
    origin = json.loads((tmp_path / "new" / "init_from" / "origin.json").read_text())
    assert (origin["form"], origin["step"], origin["source"]) == ("checkpoint", 1, str(checkpoint))
    _assert_equal_weights(_tensors(origin["policy"]), _tensors(src / "model"))
    _assert_equal_weights(_tensors(origin["critic"]), _tensors(src / "model_critic"))
    assert [r["step"] for r in rows if "train/policy_loss" in r] == [1]  # a new run: its own first step


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lora_sft_checkpoint_of_every_backend_merges_into_what_its_adapters_give(backend, tmp_path):
    """A LoRA SFT run on ``backend`` saves a checkpoint (the step folder is the role's) and its final adapters; the
    weights a new run starts from are those adapters merged into the base, and give the adapted model's log-probs."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlhf.models.merge_lora import merge_lora

    src = tmp_path / "src"
    _job(src, "+recipe=sft_tiny_cpu", *ONE_STEP, f"trainer.backend={backend}", "model.lora.rank=8", "eval.steps=0")
    checkpoint = src / "checkpoints" / "step00000001"
    _found_by_its_backend_alone(backend, checkpoint)

    started, params = starting_weights(
        load_spec(["+recipe=sft_tiny_cpu", f"checkpoint.init_from={checkpoint}"]), tmp_path / "new"
    )
    assert (params["init_from.lora_merged"], params["init_from.step"]) == ("true", "1")
    _, base = _tiny()
    merge_lora(str(base), str(src / "model"), str(tmp_path / "merged"))
    _assert_equal_weights(_tensors(started.model.path), _tensors(tmp_path / "merged"))

    ids = torch.tensor([[3, 17, 42, 99, 7, 11]])
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), src / "model").eval()
    first = AutoModelForCausalLM.from_pretrained(started.model.path).eval()
    torch.testing.assert_close(_logits(first, ids), _logits(adapted, ids), atol=1e-5, rtol=1e-5)
    untrained = AutoModelForCausalLM.from_pretrained(base).eval()
    assert (_logits(first, ids) - _logits(untrained, ids)).abs().max() > 1e-3  # the adapters trained: merged
