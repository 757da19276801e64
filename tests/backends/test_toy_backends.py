"""Adding a training or a rollout backend is its module(s), its conf file and one registry line per axis (README
"Adding a backend"): toy backends written outside rlhf (tests/backends/toy_plugin/: the DeepSpeed and hf backends
under the name ``toy``), registered by their lines alone (toy_registry.py), validate under their config strings and
group options, pass each axis's conformance checks (imported from test_train_backends.py and
test_rollout_backends.py, not copied) and train a real GRPO job through the pipelines, DeepSpeed and an engine of the
toy's own actor class."""

from __future__ import annotations

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


@pytest.fixture
def toy_registered(monkeypatch):
    """The toy's registry lines in this process (and, through PYTHONPATH and toy_plugin/sitecustomize.py, in every
    process this test starts), its folder importable and its conf files on Hydra's search path."""
    monkeypatch.syspath_prepend(str(PLUGIN))
    import toy_registry

    for table, (name, line) in (
        (registry.TRAIN_BACKENDS, toy_registry.LINES["train"]),
        (registry.ROLLOUT_BACKENDS, toy_registry.LINES["rollout"]),
    ):
        monkeypatch.setitem(table, name, line)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(PLUGIN), os.environ.get("PYTHONPATH")) if p))
    with config_dirs_on_search_path(PLUGIN / "conf"):
        yield


def test_the_toy_backends_validate_under_their_config_strings_and_plan(toy_registered):
    from rlhf.planning.plan import plan

    spec = load_spec(TOY)
    assert (spec.trainer.backend, spec.rollout.backend) == ("toy", "toy")
    assert load_spec(["+recipe=grpo_tiny_cpu", "trainer.backend=toy"]).trainer.backend == "toy"  # the same
    assert validate(spec) == []
    p = json.loads(plan(spec).to_json())
    assert p["training_engine"].startswith("toy (a plug-in over deepspeed")
    assert p["rollout_engine"].startswith("toy (a plug-in over")


def test_the_toy_backends_are_options_of_auto_and_priced_by_their_own_answers(toy_registered):
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


def test_the_toy_backends_pass_each_axis_conformance_checks(toy_registered):
    from rlhf.backends.contract.rollout import RolloutBackend
    from rlhf.backends.contract.training import TrainBackend
    from rlhf.spec.registry import rollout_backend, train_backend

    assert isinstance(train_backend("toy"), TrainBackend) and train_backend("toy").name == "toy"
    assert isinstance(rollout_backend("toy"), RolloutBackend) and rollout_backend("toy").name == "toy"
    train_conformance.test_memory_shards_over_ranks_and_offload_moves_to_the_host("toy")
    rollout_conformance.test_memory_grows_with_the_model_and_tensor_parallelism_splits_the_weights("toy")
    rollout_conformance.test_launch_names_an_actor_class_with_every_method_of_the_engine_contract("toy")
    # no torch at import, in a fresh process that registers the toy lines at start-up (sitecustomize.py)
    train_conformance.test_backends_load_without_torch()
    rollout_conformance.test_backends_load_without_torch()
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rlhf.spec import names; print(sorted(names.TRAIN_BACKENDS), sorted(names.ROLLOUT_BACKENDS))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert listed.count("'toy'") == 2, listed  # the start-up registration reached that process


@pytest.mark.slow
@pytest.mark.ray  # two ranks: the tier of several processes (README, Set-up)
def test_the_toy_training_backend_keeps_the_engine_contract_on_two_ranks(toy_registered, tmp_path):
    train_conformance._two_ranks("toy", ["plain=trainer.zero_stage=3"], tmp_path)
    ranks = [json.loads((tmp_path / f"plain.rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1] and ranks[0]["loss"] and all(x > 0 for x in ranks[0]["loss"])  # per-step losses


@pytest.mark.slow
def test_the_toy_rollout_engine_keeps_the_engine_contract(toy_registered, ray_cluster):
    from rlhf.launch.realize import realize
    from rlhf.models.loading import resolve_model_path
    from rlhf.planning.plan import plan

    spec = load_spec([*rollout_conformance.TINY, "rollout=toy"])
    realized = realize(spec, plan(spec))
    try:
        started = realized.start_rollout(resolve_model_path(spec.model), None, start=False)
        engine = {"spec": spec, "started": started, "actor": started.actors[0], "path": resolve_model_path(spec.model)}
        rollout_conformance.test_an_engine_keeps_the_contract(engine)
    finally:
        realized.shutdown()


@pytest.mark.slow
def test_a_grpo_job_trains_through_the_toy_backends(toy_registered, ray_cluster, tmp_path):
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
        f"hydra.run.dir={run_dir}",
        f"ray.address={ray.get_runtime_context().gcs_address}",
        f"+ray.runtime_env.PYTHONPATH={PLUGIN}",  # the job's Ray workers: the registry lines at start-up
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=ceiling(900))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = [r for r in read_metrics(run_dir) if "train/reward" in r]
    assert row["step"] == 1 and row["train/policy_loss"] == row["train/policy_loss"]  # a real, finite step
    assert json.loads((run_dir / "plan.json").read_text())["training_engine"].startswith("toy (a plug-in")
