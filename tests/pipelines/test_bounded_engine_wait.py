"""Finding 2 of issue 17, its second half: a wait for an engine is bounded. An engine actor Ray cannot place (as a
TP engine asking for whole GPUs in bundles colocated trainers share) is named with what it needs and what its
bundles have free, instead of the run hanging silently."""

from __future__ import annotations

import pytest


def test_an_engine_that_cannot_be_placed_is_named_with_what_it_needs(ray_cluster):
    import ray

    from rlhf.errors import WorkerFailure
    from rlhf.launch.rollout import RolloutEngineGroup, wait_ready

    class Never:
        def ready(self) -> dict:
            return {}

    actor = ray.remote(Never).options(resources={"GPU_that_never_frees": 1}).remote()
    started = RolloutEngineGroup("vllm", [None] * 3 + [actor], timeout_s=2)
    started.needs = [lambda: ""] * 3 + [lambda: "it needs GPU 1 in bundle 5; free there: 0.25"]
    try:
        late = r"rollout engine 3 \(vllm\) did not finish start-up within 2 s .*needs GPU 1 in bundle 5"
        with pytest.raises(WorkerFailure, match=late) as err:
            wait_ready(started, [3])
        assert err.value.role == "rollout" and err.value.rank == 3 and err.value.kind == "hung"
    finally:
        ray.kill(actor)


def test_an_engine_start_up_is_bounded_by_the_startup_timeout_not_the_remote_timeout(ray_cluster):
    import ray

    from rlhf.errors import WorkerFailure
    from rlhf.launch.rollout import RolloutEngineGroup, wait_ready

    class Slow:
        def ready(self) -> dict:
            import time

            time.sleep(3)
            return {"pid": 1}

    actor = ray.remote(num_cpus=0)(Slow).remote()
    try:
        # A deadline of 1 s on every call, 60 s on start-up: the engine that needs 3 s to start is waited for.
        started = RolloutEngineGroup("hf", [actor], timeout_s=1, startup_timeout_s=60)
        started.needs = [lambda: ""]
        assert wait_ready(started, [0]) == [{"pid": 1}]
        started = RolloutEngineGroup("hf", [actor], timeout_s=60, startup_timeout_s=1)
        started.needs = [lambda: ""]
        with pytest.raises(WorkerFailure, match=r"did not finish start-up within 1 s \(trainer.startup_timeout_s\)"):
            wait_ready(started, [0])
    finally:
        ray.kill(actor)
