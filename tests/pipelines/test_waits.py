"""rlhf.waits: the one bounded wait every layer uses (role groups, engine start-up, generation, the weight sync),
against real Ray actors that answer, raise, die and hang: each failure names who, what it waited for and the hint,
with the kind the run lifecycle decides on."""

from __future__ import annotations

import os
import sys
import time

import pytest

from rlhf.errors import UserError, WorkerFailure
from rlhf.waits import Call, wait


class _Member:
    def answer(self, x):
        return x

    def raise_(self, text):
        raise ValueError(text)

    def user_error(self):
        raise UserError("reward.function: line 3 is not valid Python")

    def checksum(self):
        from rlhf.backends.weight_sync.wire import ChecksumMismatch

        raise ChecksumMismatch("weight sync v1: tensor embed.weight differs")

    def die(self, after_s=0.0):
        time.sleep(after_s)
        os._exit(1)

    def hang(self):
        time.sleep(120)


@pytest.fixture
def members(ray_cluster):
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    actors = [ray.remote(num_cpus=0)(_Member).remote() for _ in range(3)]
    yield actors
    for a in actors:
        ray.kill(a)


class _Failure(WorkerFailure):
    pass


def test_results_come_back_in_call_order(members):
    calls = [Call(a.answer.remote(i), "policy", i) for i, a in enumerate(members)]
    assert wait(calls, "answer", 60) == [0, 1, 2]


def test_a_raising_call_is_named_with_its_cause_traceback_and_hint(members):
    calls = [
        Call(members[0].answer.remote(1), "policy", 0),
        Call(members[1].raise_.remote("bad"), "policy", 1, hint=lambda: "its log: /tmp/x.log"),
    ]
    with pytest.raises(_Failure, match=r"role policy rank 1 failed in step: ValueError: bad; its log: /tmp/x.log") as e:
        wait(calls, "step", 60, error=_Failure)
    assert (e.value.role, e.value.rank, e.value.kind) == ("policy", 1, "failed")
    assert "in raise_\n    raise ValueError(text)" in str(e.value)  # the remote traceback travels with it


def test_a_users_error_raised_remotely_is_the_users_not_a_worker_failure(members):
    with pytest.raises(UserError, match="line 3 is not valid Python"):
        wait([Call(members[0].user_error.remote(), "reward", 0)], "score", 60)


def test_a_dead_process_is_named_died(members):
    with pytest.raises(WorkerFailure, match=r"rollout engine 2 \(hf, pid 7\) died during generate") as e:
        wait([Call(members[2].die.remote(), "rollout", 2, "rollout engine 2 (hf, pid 7)")], "generate", 60)
    assert e.value.kind == "died" and e.value.restartable


def test_a_checksum_mismatch_is_its_own_kind(members):
    with pytest.raises(WorkerFailure, match="tensor embed.weight differs") as e:
        wait([Call(members[0].checksum.remote(), "rollout", 0)], "weight sync v1", 60)
    assert e.value.kind == "checksum" and not e.value.restartable


def test_calls_past_the_deadline_are_hung_the_blamed_role_first(members):
    calls = [
        Call(members[0].hang.remote(), "policy", 0),
        Call(members[1].hang.remote(), "rollout", 1, hint="it needs GPU 1 in bundle 5"),
    ]
    with pytest.raises(
        WorkerFailure,
        match=r"role rollout rank 1, role policy rank 0 did not finish weight sync v3 "
        r"within 1 s \(rollout.weight_sync_timeout_s\); it needs GPU 1 in bundle 5",
    ) as e:
        wait(calls, "weight sync v3", 1, timeout_key="rollout.weight_sync_timeout_s", blame_first="rollout")
    assert (e.value.role, e.value.rank, e.value.kind) == ("rollout", 1, "hung")


def test_with_a_grace_period_a_death_is_blamed_before_the_error_it_caused(members):
    # the sender raises at once (its peer is gone), the engine's process dies just after: the engine is named
    calls = [
        Call(members[0].raise_.remote("connection reset by peer"), "policy", 0),
        Call(members[1].die.remote(0.5), "rollout", 1),
    ]
    with pytest.raises(WorkerFailure, match="role rollout rank 1 died during weight sync") as e:
        wait(calls, "weight sync", 60, grace_s=20, blame_first="rollout")
    assert e.value.kind == "died"
