"""Ray placement from a plan on a real local cluster: one placement group per device group, ranks with their
process-group environment, fractional shares for colocated roles, fused roles, clear errors (no silent hang)."""

from __future__ import annotations

import os
import sys

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

from rlhf.errors import UserError  # noqa: E402
from rlhf.launch.realize import PlacementError, WorkerError, realize  # noqa: E402
from rlhf.launch.realized import Realized  # noqa: E402
from rlhf.planning.plan import plan  # noqa: E402
from rlhf.spec.build import load_spec  # noqa: E402


class Probe:
    """A stand-in worker: reports what its rank sees."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def env(self) -> dict:
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_WAIT_POLICY", "RLHF_ROLE")
        out = {k: os.environ.get(k) for k in keys}
        out["cpu"] = ray.get_runtime_context().get_assigned_resources().get("CPU")
        out["tag"] = self.tag
        return out

    def echo(self, x: int, y: int = 0) -> int:
        return x + y

    def nap(self, seconds: float) -> float:
        import time

        time.sleep(seconds)
        return seconds

    def fail(self, user: bool) -> None:
        raise UserError("bad row in f.jsonl") if user else RuntimeError("boom")

    def shutdown(self) -> None:
        return None


@pytest.fixture(scope="module")
def cluster():
    # Test-local classes travel by value (the workers cannot import this test module).
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    from rlhf.launch.cluster import start_or_attach
    from rlhf.spec.schema import RaySpec

    started = not ray.is_initialized()
    start_or_attach(RaySpec(num_cpus=4))  # a private cluster on 127.0.0.1, shared by these tests
    yield
    if started:
        ray.shutdown()


def _spec(*overrides: str):
    return load_spec(
        [
            "algorithm=dpo",
            "hardware.devices_per_node=2",
            "trainer.global_batch=4",
            "trainer.micro_batch_per_device=2",
            *overrides,
        ]
    )


def test_colocated_roles_share_bundles_with_rank_environment(cluster):
    spec = _spec("placement=colocate_actor_ref")
    realized = realize(spec, plan(spec))
    try:
        assert type(realized) is Realized and realized.executor.name == "ray"  # the local executor's too
        assert len(realized.executor.slots) == 1 and realized.colocated("policy", "reference")
        policy = realized.create_group("policy", Probe, "p")
        reference = realized.create_group("reference", Probe, "r")
        envs = policy.run_all("env")
        assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
        assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]  # one node: local rank = rank
        assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"} and len({e["MASTER_PORT"] for e in envs}) == 1
        assert {e["cpu"] for e in envs} == {0.5} and {e["OMP_WAIT_POLICY"] for e in envs} == {"PASSIVE"}
        ref_envs = reference.run_all("env")
        assert ref_envs[0]["MASTER_PORT"] != envs[0]["MASTER_PORT"]  # each role its own process group
        assert {e["RLHF_ROLE"] for e in ref_envs} == {"reference"}
        assert policy.run_per_rank("echo", [(1,), (2,)], y=10) == [11, 12]
        # Both ranks fail; the first failure to arrive is reported, naming its role and rank.
        with pytest.raises(WorkerError, match=r"role policy rank [01] failed in fail"):
            policy.run_all("fail", False)
        with pytest.raises(UserError, match="bad row"):  # the user's error, not wrapped in Ray's
            policy.run_all("fail", True)
    finally:
        realized.shutdown()


def test_a_start_up_call_is_bounded_by_the_startup_timeout_and_any_other_by_the_remote_timeout(cluster):
    # A big model's load may take longer than a step is allowed to hang: two bounds, each named when it ends a wait.
    spec = _spec("placement=colocate_actor_ref", "trainer.remote_timeout_s=1", "trainer.startup_timeout_s=30")
    realized = realize(spec, plan(spec))
    try:
        policy = realized.create_group("policy", Probe, "p")
        assert policy.start_all("nap", 2.0) == [2.0, 2.0]  # past remote_timeout_s, within startup_timeout_s
        with pytest.raises(WorkerError, match=r"did not finish nap within 1 s \(trainer.remote_timeout_s\)"):
            policy.run_all("nap", 2.0)
    finally:
        realized.shutdown()
    spec = _spec("placement=colocate_actor_ref", "trainer.remote_timeout_s=30", "trainer.startup_timeout_s=1")
    realized = realize(spec, plan(spec))
    try:
        policy = realized.create_group("policy", Probe, "p")
        assert policy.run_all("nap", 2.0) == [2.0, 2.0]
        with pytest.raises(WorkerError, match=r"did not finish nap within 1 s \(trainer.startup_timeout_s\)"):
            policy.start_all("nap", 2.0)
    finally:
        realized.shutdown()


def test_fused_roles_take_both_shares(cluster):
    spec = _spec("placement=colocate_actor_ref")
    realized = realize(spec, plan(spec))
    try:
        fused = realized.create_group("policy", Probe, "p", fused=("reference",))
        assert {e["cpu"] for e in fused.run_all("env")} == {1.0}
    finally:
        realized.shutdown()


def test_split_roles_get_their_own_placement_groups(cluster):
    spec = _spec("placement=split", "hardware.devices_per_node=4", "hardware.cpus_per_node=4")
    p = plan(spec)
    realized = realize(spec, p)
    try:
        assert len(realized.executor.slots) == 2 and not realized.colocated("policy", "reference")
        assert not realized.can_fuse("policy", "reference")
        with pytest.raises(PlacementError, match="cannot share"):
            realized.create_group("policy", Probe, "p", fused=("reference",))
        envs = realized.create_group("reference", Probe, "r").run_all("env")
        assert [e["RANK"] for e in envs] == ["0", "1"] and {e["cpu"] for e in envs} == {1.0}
    finally:
        realized.shutdown()


def test_missing_resources_fail_fast_naming_roles_and_resources(cluster):
    spec = _spec("placement=colocate_actor_ref", "hardware.devices_per_node=8", "hardware.cpus_per_node=8")
    with pytest.raises(PlacementError) as err:
        realize(spec, plan(spec), timeout_s=3)
    msg = str(err.value)
    assert "policy+reference" in msg and "CPU: need 8" in msg and "available" in msg
    assert ray.is_initialized()  # the shared cluster is left alone


def test_workers_of_a_cluster_rlhf_starts_run_at_the_drivers_priority(cluster):
    # Ray's default starts workers at nice 15, where any other busy process takes the cores from training.
    @ray.remote(num_cpus=0)
    def niceness() -> int:
        import os

        return os.nice(0)

    assert ray.get(niceness.remote()) == os.nice(0)
