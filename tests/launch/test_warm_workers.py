"""Warm workers: a private cluster's prestarted workers import the actors' modules while the driver works, and the
job's actors take those idle workers because their ranks' variables are set in the process, not in runtime_env.

The end-to-end test runs a real private cluster in a subprocess (the test session shares another one): the
actors of the plan land on the very processes that preloaded (their pids hold the slots), with torch already
imported before ``__init__`` and their rank's variables set; Ray's default would have ended those idle workers
when the placement groups took every CPU (``num_workers_soft_limit``) and started fresh ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from ceilings import ceiling

from rlhf.launch import actor_env, worker_preload


def test_rank_variables_move_into_the_process_when_the_workers_start_env_is_known():
    env = {"RANK": "1", "OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
    assert actor_env.split({"env_vars": env}, {"OMP_WAIT_POLICY": "PASSIVE"}) == ({}, env)


def test_a_start_only_variable_the_workers_lack_stays_in_runtime_env():
    env = {"RANK": "0", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    at_start, in_process = actor_env.split({"env_vars": env}, {})
    assert at_start == {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "OMP_WAIT_POLICY": "PASSIVE"}}
    assert in_process == {"RANK": "0"}


def test_the_interpreters_and_openmps_start_variables_stay_but_the_thread_count_moves():
    env = {"PYTHONPATH": "/plugins", "LD_PRELOAD": "x.so", "OMP_PROC_BIND": "true", "OMP_NUM_THREADS": "2"}
    at_start, in_process = actor_env.split({"env_vars": env}, {"PYTHONPATH": "/other"})
    assert set(at_start["env_vars"]) == {"PYTHONPATH", "LD_PRELOAD", "OMP_PROC_BIND"} and in_process == {
        "OMP_NUM_THREADS": "2"
    }


def test_everything_stays_in_runtime_env_on_a_cluster_this_process_did_not_start():
    runtime_env = {"env_vars": {"RANK": "0"}}
    assert actor_env.split(runtime_env, None) == (runtime_env, {})


def test_a_runtime_env_with_another_interpreter_is_left_whole():
    runtime_env = {"py_executable": "/venv/bin/python", "env_vars": {"RANK": "0"}}
    assert actor_env.split(runtime_env, {}) == (runtime_env, {})


class _Seen:
    def __init__(self, tag: str) -> None:
        self.tag, self.rank = tag, os.environ.get("RLHF_TEST_RANK")


def test_the_wrapped_class_sets_the_variables_before_init_and_keeps_its_name(monkeypatch):
    monkeypatch.delenv("RLHF_TEST_RANK", raising=False)
    cls = actor_env.with_env(_Seen)
    obj = cls("x", **{actor_env.ENV_KWARG: {"RLHF_TEST_RANK": "3"}})
    monkeypatch.delenv("RLHF_TEST_RANK")  # set by the wrapper, in this (the actor's) process
    assert (obj.tag, obj.rank) == ("x", "3") and isinstance(obj, _Seen)
    assert cls.__name__ == "_Seen" and actor_env.with_env(_Seen) is cls


def test_each_preloading_worker_claims_its_own_slot_and_the_rest_none(tmp_path):
    slots = [worker_preload._claim(str(tmp_path), 2) for _ in range(3)]
    assert slots == [0, 1, None]
    assert (tmp_path / "slot-0").read_text() == str(os.getpid())


def test_the_driver_waits_for_ready_workers_and_not_for_workers_that_never_came(tmp_path):
    (tmp_path / "slot-0").touch()
    (tmp_path / "ready-0").touch()
    assert worker_preload.wait_ready(tmp_path, 1, timeout_s=5) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    t = time.monotonic()
    assert worker_preload.wait_ready(empty, 2, claim_s=0.2, timeout_s=30) == 0
    assert time.monotonic() - t < 5


def test_a_gone_drivers_slot_folders_are_removed_and_other_drivers_kept(tmp_path):
    mine = [tmp_path / (worker_preload.folder_prefix(4242) + s) for s in ("a1", "b2")]
    other = tmp_path / (worker_preload.folder_prefix(42420) + "c3")  # a pid that only starts with the same digits
    for folder in [*mine, other]:
        folder.mkdir()
        (folder / "slot-0").write_text("1")
    assert worker_preload.remove_folders(4242, tmp_path) == mine
    assert not any(f.exists() for f in mine) and other.exists()


def test_the_workers_warmed_are_the_processes_the_plan_starts():
    from rlhf.launch.realize import warm_count
    from rlhf.planning.plan import plan
    from rlhf.spec.build import load_spec

    engines = load_spec(["+recipe=grpo_tiny_cpu"])
    in_policy = load_spec(["+recipe=grpo_tiny_cpu", "rollout.hf.in_policy=true"])
    assert warm_count(engines, plan(engines)) == 2  # the policy rank and the hf engine (the reference is fused)
    assert warm_count(in_policy, plan(in_policy)) == 1  # the policy rank generates: no engine process to warm


def test_no_preload_variables_without_modules_or_count(tmp_path):
    assert set(worker_preload.env()) == {worker_preload.PYTHON_ENV}  # SIGTERM is still unblocked in every worker
    assert worker_preload.env(("torch",), tmp_path, 2)[worker_preload.SLOTS_ENV] == f"{tmp_path}:2"


_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from rlhf.planning.plan import plan
    from rlhf.launch.realize import realize
    from rlhf.spec.build import load_spec

    class Probe:
        def __init__(self):
            self.torch_before_init = "torch" in sys.modules
            self.pid = os.getpid()

        def report(self):
            return {"pid": self.pid, "torch_before_init": self.torch_before_init, "rank": os.environ.get("RANK"),
                    "omp": os.environ.get("OMP_NUM_THREADS"), "policy": os.environ.get("OMP_WAIT_POLICY")}

    spec = load_spec(["+recipe=grpo_tiny_cpu", "trainer.backend=fsdp2", "hardware.devices_per_node=2",
                      "placement=colocate_all", "placement.devices.policy=2", "rollout.num_engines=2"])
    realized = realize(spec, plan(spec))
    folder = realized.executor.cluster.warm_folder
    group = realized.create_group("policy", Probe)
    reports = group.run_all("report")
    slots = sorted(open(os.path.join(folder, n)).read() for n in os.listdir(folder) if n.startswith("slot-"))
    print(json.dumps({"reports": reports, "slot_pids": slots, "warm": realized.executor.cluster.warm_count}))
    realized.shutdown()
    """
)


@pytest.mark.ray
def test_the_plans_actors_take_the_workers_that_preloaded_for_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=ceiling(220)
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    reports = out["reports"]
    assert [rep["rank"] for rep in reports] == ["0", "1"]
    assert {str(rep["pid"]) for rep in reports} <= set(out["slot_pids"])  # the preloaded processes, no fresh ones
    assert all(rep["torch_before_init"] for rep in reports)
    assert all(rep["policy"] == "PASSIVE" and rep["omp"] for rep in reports)


def test_a_cluster_started_another_way_gets_no_start_variables_of_an_earlier_one(monkeypatch):
    from rlhf.launch import cluster

    ray = pytest.importorskip("ray")
    monkeypatch.setattr(cluster, "_worker_start_env", ("127.0.0.1:1", {"OMP_WAIT_POLICY": "PASSIVE"}))
    monkeypatch.setattr(ray, "is_initialized", lambda: True)

    class Context:
        gcs_address = "127.0.0.1:2"

    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context())
    assert cluster.worker_start_env() is None
    Context.gcs_address = "127.0.0.1:1"
    assert cluster.worker_start_env() == {"OMP_WAIT_POLICY": "PASSIVE"}
