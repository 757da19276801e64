"""The local executor (rlhf.launch.local) and its choice (rlhf.spec.executor): roles on lanes in this process behind
the role groups' calls, waits on their futures with the same messages as on Ray, the rank's variables set for the
job and given back after it, and ``launch.executor=auto`` choosing as documented for every shipped recipe."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rlhf.errors import UserError, WorkerFailure
from rlhf.launch.local import Lane, LocalActor, LocalRoleGroup
from rlhf.spec import SpecInvalid, check
from rlhf.spec.build import load_spec
from rlhf.spec.executor import choose, heartbeat_s, max_restarts
from rlhf.waits import Call, wait

REPO = Path(__file__).resolve().parents[2]


class _Member:
    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.seen: list[int] = []

    def answer(self, x):
        self.seen.append(x)
        return x

    def thread(self):
        return threading.current_thread().name

    def raise_(self, text):
        raise ValueError(text)

    def user_error(self):
        raise UserError("reward.function: line 3 is not valid Python")

    def checksum(self):
        from rlhf.backends.weight_sync.wire import ChecksumMismatch

        raise ChecksumMismatch("weight sync v1: tensor embed.weight differs")

    def block(self):
        self.gate.wait()  # released by the test: the call is "hung" until then, whatever the machine's speed
        return "released"

    def shutdown(self):
        return None


class _Broken:
    def __init__(self) -> None:
        raise RuntimeError("no model at /nowhere")


@pytest.fixture
def lane():
    lane = Lane("test-lane")
    yield lane
    lane.close()


def _group(lane: Lane, cls: type = _Member, *args, spec=None) -> LocalRoleGroup:
    return LocalRoleGroup("policy", LocalActor(lane, cls, args, {}, "role policy"), spec or load_spec([]))


def test_a_local_role_runs_its_calls_in_order_on_its_own_lane(lane):
    group = _group(lane)
    refs = [group.actors[0].answer.remote(i) for i in range(5)]
    assert group.get(refs) == [0, 1, 2, 3, 4]
    assert group.run_all("thread") == ["test-lane"]
    assert group.run_per_rank("answer", [7]) == [7]


def test_a_role_that_failed_to_start_fails_every_call_naming_role_and_cause(lane):
    group = _group(lane, _Broken)
    with pytest.raises(WorkerFailure, match=r"role policy rank 0 failed in init_trained: .*no model at /nowhere") as e:
        group.start_all("init_trained")
    assert e.value.kind == "failed" and not e.value.restartable


def test_a_raising_call_is_named_with_its_traceback_and_where_it_ran(lane):
    group = _group(lane)
    named = r"role policy rank 0 failed in step: ValueError: bad; in the driver's"
    with pytest.raises(WorkerFailure, match=named) as e:
        group.get([group.actors[0].raise_.remote("bad")], "step")
    assert "in raise_\n    raise ValueError(text)" in str(e.value)  # the traceback travels with it, as from Ray
    assert (e.value.role, e.value.rank, e.value.kind) == ("policy", 0, "failed")


def test_a_users_error_in_a_local_role_is_the_users(lane):
    group = _group(lane)
    with pytest.raises(UserError, match="line 3 is not valid Python"):
        group.get([group.actors[0].user_error.remote()], "score")


def test_a_checksum_mismatch_in_a_local_role_is_its_own_kind(lane):
    group = _group(lane)
    with pytest.raises(WorkerFailure, match="tensor embed.weight differs") as e:
        group.get([group.actors[0].checksum.remote()], "weight sync v1")
    assert e.value.kind == "checksum"


def test_a_local_call_past_its_deadline_is_hung_naming_the_key(lane):
    gate = threading.Event()
    group = _group(lane, _Member, gate)
    ref = group.actors[0].block.remote()
    try:
        hung = r"did not finish sync within 0 s \(rollout.weight_sync_timeout_s\)"
        with pytest.raises(WorkerFailure, match=hung) as e:
            wait([Call(ref, "rollout", 0)], "sync", 0.05, timeout_key="rollout.weight_sync_timeout_s")
        assert e.value.kind == "hung"
    finally:
        gate.set()
    assert ref.result(timeout_s=60) == "released"


def test_with_a_grace_period_the_blamed_role_is_named_first(lane):
    other = Lane("test-lane-2")
    try:
        sender = _group(lane)
        engine = LocalRoleGroup("rollout", LocalActor(other, _Member, (), {}, "engine"), load_spec([]))
        calls = [
            Call(sender.actors[0].raise_.remote("connection reset by peer"), "policy", 0),
            Call(engine.actors[0].raise_.remote("bucket 3 arrived short"), "rollout", 0),
        ]
        with pytest.raises(WorkerFailure, match="role rollout rank 0 failed in weight sync: .*bucket 3 arrived short"):
            wait(calls, "weight sync", 60, grace_s=60, blame_first="rollout")
    finally:
        other.close()


def test_the_job_sets_the_ranks_variables_and_gives_them_back(monkeypatch):
    from rlhf.launch.local import realize
    from rlhf.planning.plan import plan

    monkeypatch.setenv("RANK", "5")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    spec = load_spec(["+recipe=sft_tiny_cpu", "+ray.runtime_env.RLHF_TEST_VAR=on"])
    realized = realize(spec, plan(spec))
    try:
        assert os.environ["RANK"] == "0" and os.environ["WORLD_SIZE"] == "1"
        assert os.environ["MASTER_ADDR"] == "127.0.0.1" and os.environ["MASTER_PORT"].isdigit()
        assert os.environ["RLHF_TEST_VAR"] == "on"  # ray.runtime_env: every worker's variables, this process's here
    finally:
        realized.shutdown()
    assert os.environ["RANK"] == "5"
    assert "MASTER_PORT" not in os.environ and "RLHF_TEST_VAR" not in os.environ


def test_a_one_process_job_is_realized_as_rays_are_only_its_executor_differs():
    """The pipelines get the same Realized on both executors (rlhf.launch.realized): the plan's questions and their
    errors are one implementation; only how a role starts is the executor's."""
    from rlhf.launch.local import realize
    from rlhf.launch.realized import PlacementError, Realized
    from rlhf.planning.plan import plan

    spec = load_spec(["+recipe=sft_tiny_cpu"])
    realized = realize(spec, plan(spec))
    try:
        assert type(realized) is Realized and realized.executor.name == "local"
        assert realized.worker_env() == {} and realized.colocated("policy", "policy")
        with pytest.raises(PlacementError, match="role critic is not in the plan"):
            realized.create_group("critic", _Member)
        with pytest.raises(UserError, match="the local executor restarts nothing"):
            realized.restart_rollout_engine(None, 0)
    finally:
        realized.shutdown()
    assert realized.role_groups == [] and realized.rollout_groups == []


# -- the choice ----------------------------------------------------------------------------------------------------

# Every shipped recipe and the executor auto picks for it: the CPU recipes are one process (one rank; hf generation
# in the policy's process or one engine beside it), every GPU recipe has several ranks or vLLM engines.
SHIPPED = {
    "agent_arith_tiny_cpu": "local",
    "agent_calculator_tiny_cpu": "local",
    "dapo_tiny_cpu": "local",
    "dpo_llama3_8b": "ray",
    "dpo_tiny_cpu": "local",
    "dr_grpo_tiny_cpu": "local",
    "flash_reinforce_tiny_cpu": "local",
    "grpo_binary_kl_tiny_cpu": "local",
    "grpo_llama3_8b": "ray",
    "grpo_qwen2_5_0_5b": "ray",
    "grpo_qwen2_5_0_5b_h200": "ray",
    "grpo_reasoning_gym_tiny_cpu": "local",
    "grpo_tiny_cpu": "local",
    "gspo_tiny_cpu": "local",
    "opd_tiny_cpu": "local",
    "ppo_llama3_70b": "ray",
    "ppo_llama3_8b": "ray",
    "ppo_tiny_cpu": "local",
    "quickstart_cpu": "local",
    "reinforce_pp_baseline_llama3_8b": "ray",
    "reinforce_pp_baseline_tiny_cpu": "local",
    "reinforce_pp_tiny_cpu": "local",
    "rloo_llama3_8b": "ray",
    "rloo_tiny_cpu": "local",
    "rm_llama3_8b": "ray",
    "rm_tiny_cpu": "local",
    "sft_llama3_8b": "ray",
    "sft_reasoning_gym_tiny_cpu": "local",
    "sft_tiny_cpu": "local",
}
# Today's models on each GPU target (issue 36): every one on Ray (several ranks, or vLLM engines in their own venv).
SHIPPED.update(
    dict.fromkeys(
        sorted(
            p.stem
            for p in (REPO / "recipes").glob("*.yaml")
            if any(m in p.stem for m in ("qwen3_", "llama3_1_8b", "r1_distill"))
        ),
        "ray",
    )
)


REQUIRED = {"opd_tiny_cpu": ["teacher.model_path=/a/teacher"]}  # a recipe's ??? values


def test_auto_chooses_as_documented_for_every_shipped_recipe():
    shipped = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))
    assert shipped == sorted(SHIPPED), "a recipe was added or removed: say here which executor it gets"
    specs = {name: load_spec([f"+recipe={name}", *REQUIRED.get(name, [])]) for name in shipped}
    assert {name: choose(spec).name for name, spec in specs.items()} == SHIPPED
    for name, executor in SHIPPED.items():  # every GPU recipe: several ranks or engines in a side environment
        assert (specs[name].hardware.accelerator == "gpu") == (executor == "ray"), name


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["hardware.devices_per_node=2", "rollout.num_engines=2"], "placement.devices.policy=2: 2 policy ranks"),
        (["rollout=vllm"], "rollout.backend='vllm': its engines run in an interpreter of their own"),
        (["ray.address=127.0.0.1:6379"], "ray.address='127.0.0.1:6379': attaches to a Ray cluster"),
        (["trainer.max_restarts=2"], "trainer.max_restarts=2: in-run restarts replace processes"),
        (["trainer.heartbeat_timeout_s=60"], "trainer.heartbeat_timeout_s=60.0: heartbeats watch other processes"),
        (
            ["placement=split", "hardware.devices_per_node=3", "rollout.num_engines=2"],
            "rollout.num_engines=2: one engine beside the policy at most",
        ),
        (["trainer.zero_stage=3"], "trainer.zero_stage=3: ZeRO-3 builds every model of its process partitioned"),
        (["launch.executor=ray"], "launch.executor=ray"),
    ],
)
def test_auto_takes_ray_for_what_only_ray_hosts_and_says_why(overrides, reason):
    choice = choose(load_spec(["+recipe=grpo_tiny_cpu", *overrides]))
    assert choice.name == "ray" and reason in choice.reason


def test_local_asked_for_what_it_cannot_host_is_refused_naming_each_key_and_the_fix():
    spec = load_spec(
        ["+recipe=grpo_tiny_cpu", "launch.executor=local", "rollout=vllm", "trainer.max_restarts=1", "ray.address=auto"]
    )
    with pytest.raises(SpecInvalid) as e:
        check(spec)
    text = str(e.value)
    for key in ("rollout.backend='vllm'", "trainer.max_restarts=1", "ray.address='auto'"):
        assert key in text
    assert text.count("use launch.executor=ray (or auto)") == 3


def test_a_zero3_job_without_an_engine_beside_it_stays_local():
    # ZeRO-3 is refused only beside an engine in the same process (its model would be built partitioned too)
    assert choose(load_spec(["+recipe=sft_tiny_cpu", "trainer.zero_stage=3"])).name == "local"
    assert choose(load_spec(["+recipe=dpo_tiny_cpu", "trainer.zero_stage=3"])).name == "local"


def test_a_rank_leaving_drops_zero3s_process_wide_model_construction():
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    from rlhf.backends.train.deepspeed.descriptor import BACKEND

    BACKEND._hf_zero3({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
    assert is_deepspeed_zero3_enabled()  # every from_pretrained in this process would be partitioned now
    BACKEND.leave()
    assert not is_deepspeed_zero3_enabled()  # the next job in this process (the local executor's) builds plainly


def test_restarts_and_heartbeats_default_by_executor():
    local, on_ray = load_spec(["+recipe=grpo_tiny_cpu"]), load_spec(["+recipe=grpo_tiny_cpu", "launch.executor=ray"])
    assert (max_restarts(local), heartbeat_s(local)) == (0, None)  # a local run: checkpoint and --resume
    assert (max_restarts(on_ray), heartbeat_s(on_ray)) == (3, 30.0)
    assert max_restarts(load_spec(["+recipe=grpo_tiny_cpu", "trainer.max_restarts=0"])) == 0


def test_rlhf_plan_says_which_executor_and_why(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "rlhf.cli.plan", "+recipe=grpo_tiny_cpu"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert "executor: local (auto: one process on this machine" in out
    out = subprocess.run(
        [sys.executable, "-m", "rlhf.cli.plan", "+recipe=grpo_llama3_8b"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert "executor: ray (auto: placement.devices.policy=8: 8 policy ranks" in out
