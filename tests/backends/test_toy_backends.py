"""Adding a training or a rollout backend, keys of its own included, is its folder, its conf file and one registry
line per axis (README "Adding a backend"): toy backends written outside rlhf (tests/backends/toy_plugin/: the
DeepSpeed and hf backends under the name ``toy``, each with a key of its own that it reads), declared as an installed
package declares them (entry points: toy_plugin/rlhf_toy_plugin-0.1.dist-info, found on PYTHONPATH), validate under
their config strings and group options, take their keys from the command line (``trainer.toy.label``,
``rollout.toy.max_batch``: typed, checked against their domains, refused or warned of under another backend,
explained by ``rlhf-recipes explain``), pass each axis's conformance checks (imported from test_train_backends.py and
test_rollout_backends.py, not copied) and train a real GRPO job through the pipelines, DeepSpeed and an engine of the
toy's own actor class.

The schema is built with a sub-section per registered backend when rlhf.spec is first imported, so the tests that
need the toy's keys run in a process started with the plug-in on its path: one pytest process for the quick ones
(``test_the_toy_checks_pass_in_a_process_with_the_plugin_installed``), one for the engine's (the Ray tier). In that
process ``INSTALLED`` is true, and the wrappers are skipped; here, the tests they run are."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_rollout_backends as rollout_conformance
import test_train_backends as train_conformance
from ceilings import ceiling

from rlhf.spec import registry
from rlhf.spec.build import load_spec
from rlhf.spec.paths import config_dirs_on_search_path
from rlhf.spec.validate import validate
from rlhf.tracking.tracker import read_metrics

PLUGIN = Path(__file__).parent / "toy_plugin"
INIT_FROM = Path(__file__).parents[1] / "pipelines" / "test_init_from.py"
INSTALLED = "toy" in registry.TRAIN_BACKENDS  # this process started with the plug-in on its path
in_plugin_process = pytest.mark.skipif(not INSTALLED, reason="runs in a process with the plug-in installed")
outside = pytest.mark.skipif(INSTALLED, reason="starts the plug-in's process (this is it)")
TOY = ["+recipe=grpo_tiny_cpu", "trainer/backend=toy", "rollout=toy"]
SHORT = [
    "trainer.max_steps=1",
    "rollout.prompts_per_step=4",
    "trainer.global_batch=32",
    "trainer.micro_batch_per_device=16",
    "eval.steps=0",
    "logging.mlflow=false",
    "logging.progress=false",
]


def _plugin_env() -> dict[str, str]:
    """This environment with the plug-in's folder first on PYTHONPATH: a process started with it (a pytest run, a
    training rank, rlhf-run) finds the toy's entry points, its modules and its sections."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(PLUGIN), os.environ.get("PYTHONPATH")) if p)}


@pytest.fixture
def toy_conf():
    """The toy's conf files on Hydra's search path (``trainer/backend=toy``, ``rollout=toy``)."""
    with config_dirs_on_search_path(PLUGIN / "conf"):
        yield


def _pytest_with_the_plugin(*args: str, timeout: float) -> str:
    """This file's tests selected by ``args``, in a pytest process with the plug-in installed; their output (every
    passed test named), shown on failure."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-n", "0", "-p", "no:cacheprovider", __file__, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_plugin_env(), timeout=ceiling(timeout))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]
    return done.stdout


# ------------------------------------------------------------------------------------------------ from here


@outside
def test_the_toy_checks_pass_in_a_process_with_the_plugin_installed():
    """This file's quick tests, and tests/pipelines/test_init_from.py's tests parametrized by training backend, in
    one process: the toy saves its weights in a layout of its own, which nothing in rlhf names, and its checkpoints
    are refused when incomplete and read back whole through its answers alone (checkpoint_weights, ...)."""
    out = _pytest_with_the_plugin(str(INIT_FROM), "-m", "not slow and not ray", "-k", "toy", timeout=600)
    toy_init_from = [ln for ln in out.splitlines() if ln.startswith("PASSED tests/pipelines/test_init_from.py::")]
    assert len(toy_init_from) == 3 and all("toy" in ln for ln in toy_init_from), out[-3000:]


@outside
@pytest.mark.slow
@pytest.mark.ray  # its test asks for a Ray cluster: the Ray tier (tests/conftest.py)
def test_the_toy_rollout_engine_passes_in_a_process_with_the_plugin_installed():
    _pytest_with_the_plugin("-m", "ray", "-k", "toy_rollout_engine_keeps_the_engine_contract", timeout=900)


@outside
@pytest.mark.parametrize("axis", ["trainer", "rollout"])
def test_a_backend_with_keys_registered_after_the_schema_fails_saying_how_to_register_it(monkeypatch, axis):
    """A line with keys added to a table at run time (as sitecustomize.py once did) cannot have its section in the
    schema: its keys are never silently dropped, the next compose and validation say how to register it."""
    from rlhf.spec.sections.backends import SectionNotBuilt

    spec = load_spec(["+recipe=grpo_tiny_cpu"])
    table, group = {
        "trainer": (registry.TRAIN_BACKENDS, "rlhf.train_backends"),
        "rollout": (registry.ROLLOUT_BACKENDS, "rlhf.rollout_backends"),
    }[axis]
    line = registry.Backend(f"toy_{axis}.descriptor:BACKEND", section="rlhf.backends.train.fsdp2.config:FSDP2Spec")
    monkeypatch.setitem(table, "late", line)
    given = ["+recipe=grpo_tiny_cpu", f"{axis}.late.cpu_offload=true"]  # its key, as a user would set it
    for attempt in (lambda: load_spec(given), lambda: validate(spec)):
        with pytest.raises(SectionNotBuilt) as e:
            attempt()
        said = str(e.value)
        assert f"{axis}.backend=late" in said and f"{axis}.late.*" in said
        assert f"as an entry point of group {group}" in said and "late = <module>:<its Backend line>" in said


@outside
def test_a_backend_without_keys_registered_after_the_schema_is_valid_at_once(monkeypatch):
    hf_line = registry.Backend("rlhf.backends.rollout.hf.descriptor:BACKEND")  # as a test patching a table does
    monkeypatch.setitem(registry.ROLLOUT_BACKENDS, "late", hf_line)
    spec = load_spec(["+recipe=grpo_tiny_cpu", "rollout.backend=late"])
    assert spec.rollout.backend == "late" and validate(spec) == []


@outside
@pytest.mark.slow
@pytest.mark.ray  # two ranks: the tier of several processes (README, Set-up)
def test_the_toy_training_backend_keeps_the_engine_contract_on_two_ranks(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", _plugin_env()["PYTHONPATH"])  # each rank finds the toy's entry points
    train_conformance._two_ranks("toy", ["plain=trainer.zero_stage=3"], tmp_path)
    ranks = [json.loads((tmp_path / f"plain.rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1] and ranks[0]["loss"] and all(x > 0 for x in ranks[0]["loss"])  # per-step losses


@outside
@pytest.mark.slow
def test_a_grpo_job_trains_through_the_toy_backends(ray_cluster, tmp_path):
    import ray

    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "rlhf.cli.run",
        "-cd",
        str(PLUGIN / "conf"),
        *TOY,
        *SHORT,
        "trainer.toy.label=mine",
        f"hydra.run.dir={run_dir}",
        f"ray.address={ray.get_runtime_context().gcs_address}",
        f"+ray.runtime_env.PYTHONPATH={PLUGIN}",  # the job's Ray workers: the toy's entry points
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=_plugin_env(), timeout=ceiling(900))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = [r for r in read_metrics(run_dir) if "train/reward" in r]
    assert row["step"] == 1 and row["train/policy_loss"] == row["train/policy_loss"]  # a real, finite step
    assert json.loads((run_dir / "plan.json").read_text())["training_engine"].startswith("mine (a plug-in")


# ------------------------------------------------------------------------- in the plug-in's own process


@in_plugin_process
def test_the_toy_backends_validate_under_their_config_strings_and_plan(toy_conf):
    from rlhf.planning.plan import plan

    spec = load_spec(TOY)
    assert (spec.trainer.backend, spec.rollout.backend) == ("toy", "toy")
    assert load_spec(["+recipe=grpo_tiny_cpu", "trainer.backend=toy"]).trainer.backend == "toy"  # the same
    assert validate(spec) == []
    p = json.loads(plan(spec).to_json())
    assert p["training_engine"].startswith("toy (a plug-in over deepspeed")
    assert p["rollout_engine"].startswith("toy (a plug-in over")


@in_plugin_process
def test_the_toy_backends_keys_come_from_the_command_line_and_change_what_they_do(toy_conf):
    """Each toy backend reads its own key: trainer.toy.label names it in the plan and --auto's labels;
    rollout.toy.max_batch is what its engine generates at once, which its launch passes to the actor and the cost
    model prices (fewer sequences at once: more decode waves)."""
    from rlhf.backends.contract.rollout import EnginePlacement
    from rlhf.planning.cost import estimate
    from rlhf.planning.plan import plan
    from rlhf.spec.registry import rollout_backend, train_backend

    spec = load_spec([*TOY, "trainer.toy.label=mine", "rollout.toy.max_batch=2"])
    assert (spec.trainer.toy.label, spec.rollout.toy.max_batch) == ("mine", 2) and validate(spec) == []
    assert json.loads(plan(spec).to_json())["training_engine"].startswith("mine (a plug-in over deepspeed")
    assert train_backend("toy").label(spec).startswith("mine ")
    placement = EnginePlacement(0, (0,), 1.0, 0.0, None)
    launch = rollout_backend("toy").launch(spec, placement, "/models/x", role_env=None, base_env={})
    assert launch.kwargs["max_batch"] == 2
    big = load_spec([*TOY, *SHORT, "rollout.samples_per_prompt=8"])
    small = load_spec([*TOY, *SHORT, "rollout.samples_per_prompt=8", "rollout.toy.max_batch=2"])
    assert estimate(small, plan(small)).phases["generation"] > estimate(big, plan(big)).phases["generation"]


@in_plugin_process
def test_the_toy_keys_are_typed_checked_and_refused_or_warned_of_under_another_backend(toy_conf):
    from rlhf.planning.preflight.engine import check_rollout_engine
    from rlhf.spec.build import compose

    with pytest.raises(Exception, match="max_batch"):
        compose([*TOY, "rollout.toy.max_batch=many"])  # typed at compose time
    bad = {e.key: e.fix for e in validate(load_spec([*TOY, "rollout.toy.max_batch=0", "trainer.toy.label="]))}
    assert bad["rollout.toy.max_batch"] == "must be >= 1" and bad["trainer.toy.label"] == "must not be empty"
    # the training axis refuses a key another backend would ignore; the rollout axis warns of it
    refused = {e.key: e.fix for e in validate(load_spec(["+recipe=grpo_tiny_cpu", "trainer.toy.label=mine"]))}
    assert "applies to trainer.backend=toy only (this run uses deepspeed)" in refused["trainer.toy.label"]
    spec = load_spec(["+recipe=grpo_tiny_cpu", "rollout=hf", "rollout.toy.max_batch=8"])
    assert not [e for e in validate(spec) if e.key.startswith("rollout.toy")]
    (warning,) = [f for f in check_rollout_engine(spec) if f.key.startswith("rollout.toy")]
    assert warning.warning and "ignored: applies to rollout.backend=toy only" in warning.problem


@in_plugin_process
def test_rlhf_recipes_explains_the_toy_keys():
    from rlhf.cli.recipes import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(["explain", "rollout.toy"])
    assert done.value.code == 0
    assert "rollout.toy.max_batch: int = 512" in out.getvalue() and "allowed: >= 1" in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["explain", "trainer.toy.label"])
    assert "trainer.toy.label: str = 'toy'" in out.getvalue()


@in_plugin_process
def test_the_toy_backends_are_options_of_auto_and_priced_by_their_own_answers(toy_conf):
    """rlhf-plan --auto tries the toy training backend's own options, and the cost model prices a toy job from the
    toy's answers (DeepSpeed's and the hf engine's, to which it delegates): nothing in the planner names either."""
    from rlhf.planning.auto import _engines, search
    from rlhf.planning.cost import estimate
    from rlhf.planning.plan import plan

    gpu = ["+recipe=grpo_qwen3_8b_h100"]
    options = _engines(load_spec(gpu))
    toy = [o for o in options if o["trainer.backend"] == "toy"]
    deepspeed = [o for o in options if o["trainer.backend"] == "deepspeed"]
    assert toy and [{**o, "trainer.backend": "deepspeed"} for o in toy] == deepspeed
    for stage in (2, 3):
        ours = load_spec([*gpu, f"trainer.zero_stage={stage}", "trainer.backend=deepspeed", "rollout=hf"])
        as_toy = load_spec([*gpu, f"trainer.zero_stage={stage}", "trainer.backend=toy", "rollout=toy"])
        assert estimate(as_toy, plan(as_toy)).phases == estimate(ours, plan(ours)).phases
    best = search(load_spec([*TOY, "trainer.max_steps=1"]), top=3)
    assert best.ranked and {c.spec.trainer.backend for c in best.ranked} <= {"toy", "deepspeed", "fsdp2"}


@in_plugin_process
def test_the_toy_backends_pass_each_axis_conformance_checks(toy_conf):
    from rlhf.backends.contract.rollout import RolloutBackend
    from rlhf.backends.contract.training import TrainBackend
    from rlhf.spec import names
    from rlhf.spec.registry import rollout_backend, train_backend

    assert "toy" in names.TRAIN_BACKENDS and "toy" in names.ROLLOUT_BACKENDS  # the entry points' lines
    assert isinstance(train_backend("toy"), TrainBackend) and train_backend("toy").name == "toy"
    assert isinstance(rollout_backend("toy"), RolloutBackend) and rollout_backend("toy").name == "toy"
    train_conformance.test_memory_shards_over_ranks_and_offload_moves_to_the_host("toy")
    rollout_conformance.test_memory_grows_with_the_model_and_tensor_parallelism_splits_the_weights("toy")
    rollout_conformance.test_launch_names_an_actor_class_with_every_method_of_the_engine_contract("toy")
    # no torch at import, in fresh processes that find the toy's entry points (PYTHONPATH, inherited)
    train_conformance.test_backends_load_without_torch()
    rollout_conformance.test_backends_load_without_torch()


@in_plugin_process
@pytest.mark.slow
def test_the_toy_rollout_engine_keeps_the_engine_contract(toy_conf, ray_cluster):
    from toy_rollout.actor import ToyRolloutWorker

    from rlhf.launch.realize import realize
    from rlhf.models.loading import resolve_model_path
    from rlhf.planning.plan import plan

    spec = load_spec([*rollout_conformance.TINY, "rollout=toy", "rollout.toy.max_batch=64"])
    realized = realize(spec, plan(spec))
    try:
        started = realized.start_rollout(resolve_model_path(spec.model), None, start=False)
        engine = {"spec": spec, "started": started, "actor": started.actors[0], "path": resolve_model_path(spec.model)}
        rollout_conformance.test_an_engine_keeps_the_contract(engine)
    finally:
        realized.shutdown()
    # its own key reaches its engine (in this process: the actor class as the local executor hosts it)
    assert ToyRolloutWorker(resolve_model_path(spec.model), max_batch=3).ready()["max_batch"] == 3
