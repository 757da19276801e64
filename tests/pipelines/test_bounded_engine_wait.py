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
