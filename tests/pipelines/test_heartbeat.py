"""rlhf.waits' heartbeat against real Ray actors in their own processes: an actor SIGSTOPped during a long call is
reported stalled by its unanswered heartbeat (not by the call's far deadline), no sooner than
trainer.heartbeat_timeout_s, named with its pid, node and what it was doing, and its process is ended; an actor busy
for longer than the heartbeat timeout still answers (its heartbeat runs in a concurrency group of its own) and is
not stalled; an actor class without a heartbeat is not watched. No bound here races the machine: the stalls are
told from the deadline by their kind, and the only time compared is a lower bound."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import ray
from ceilings import ceiling

from rlhf.backends.contract.rollout import LIVENESS
from rlhf.backends.shared import liveness
from rlhf.errors import WorkerFailure
from rlhf.waits import Call, last_heartbeat, wait

HEARTBEAT_S = 3.0
FAR_S = 600.0  # the calls' own deadline: a stall must be found by its heartbeat long before it


class _Worker:
    def __init__(self) -> None:
        self._busy = None

    def work(self, seconds: float) -> str:
        self._busy = ("work", time.monotonic())
        try:
            time.sleep(seconds)
        finally:
            self._busy = None
        return "done"

    @ray.method(concurrency_group=LIVENESS)
    def heartbeat(self) -> dict:
        return liveness.answer(self._busy)


class _Plain:  # no heartbeat method
    def work(self, seconds: float) -> str:
        time.sleep(seconds)
        return "done"


@pytest.fixture
def worker(ray_cluster):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    actor = liveness.remote_class(_Worker, num_cpus=0).remote()
    pid = ray.get(actor.heartbeat.remote(), timeout=ceiling(60))["pid"]
    try:
        yield actor, pid
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):  # whatever the test did to it, our own process ends here
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        ray.kill(actor)


def test_an_actor_stopped_during_a_long_call_is_stalled_within_the_timeout_naming_pid_node_and_what(worker):
    actor, pid = worker
    ref = actor.work.remote(120)
    calls = [Call(ref, "rollout", 0, f"rollout engine 0 (hf, pid {pid})", actor=actor)]
    # the heartbeat answers while work runs; then the process is stopped mid-call
    deadline = time.monotonic() + ceiling(60)
    while (last_heartbeat(actor) or {}).get("doing") != "work":
        try:
            wait(calls, "generate", 2 * HEARTBEAT_S / 5 + 0.5, heartbeat_s=HEARTBEAT_S)  # room for one heartbeat
        except WorkerFailure as e:
            assert e.kind == "hung"  # the short deadline, while the heartbeat is answered
        assert time.monotonic() < deadline, "the heartbeat never said it was working"
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    with pytest.raises(WorkerFailure) as e:
        wait(calls, "generate", ceiling(FAR_S), heartbeat_s=HEARTBEAT_S)
    took = time.monotonic() - stopped
    assert e.value.kind == "stalled" and e.value.restartable and (e.value.role, e.value.rank) == ("rollout", 0)
    msg = str(e.value)
    assert msg.startswith(f"rollout engine 0 (hf, pid {pid}) stalled during generate: no answer to a heartbeat for")
    assert f"pid {pid} on node {ray.util.get_node_ip_address()}" in msg and "said it was doing work (for" in msg
    assert "trainer.heartbeat_timeout_s=3" in msg
    assert took >= HEARTBEAT_S, took  # not before its heartbeat timeout (kind "stalled": not the far deadline)
    with pytest.raises(ray.exceptions.RayActorError):  # the stalled actor is ended (Ray kills its process)
        ray.get(ref, timeout=ceiling(30))


def test_an_actor_stopped_between_waits_is_stalled_in_the_next_one(worker):
    actor, pid = worker
    # seen alive once: its first heartbeat goes out at once (an answer after the wait is taken by the next one)
    wait([Call(actor.work.remote(1), "policy", 1, actor=actor)], "train_step", ceiling(60), heartbeat_s=HEARTBEAT_S)
    assert last_heartbeat(actor)["pid"] == pid
    os.kill(pid, signal.SIGSTOP)
    with pytest.raises(WorkerFailure, match=r"role policy rank 1 stalled during train_step") as e:
        calls = [Call(actor.work.remote(0), "policy", 1, actor=actor)]
        wait(calls, "train_step", ceiling(FAR_S), heartbeat_s=HEARTBEAT_S)
    assert e.value.kind == "stalled"  # found by its heartbeat, not by the far deadline (kind "hung")


def test_a_busy_actor_that_answers_its_heartbeat_is_not_stalled(worker):
    actor, _ = worker
    t0 = time.monotonic()
    calls = [Call(actor.work.remote(3 * HEARTBEAT_S), "rollout", 0, actor=actor)]
    assert wait(calls, "generate", ceiling(FAR_S), heartbeat_s=HEARTBEAT_S) == ["done"]
    assert time.monotonic() - t0 >= 3 * HEARTBEAT_S


def test_an_actor_without_a_heartbeat_is_not_watched(ray_cluster):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    actor = ray.remote(num_cpus=0)(_Plain).remote()
    try:
        calls = [Call(actor.work.remote(2 * 0.5), "reward", 0, actor=actor)]
        assert wait(calls, "score", ceiling(120), heartbeat_s=0.5) == ["done"]
    finally:
        ray.kill(actor)
