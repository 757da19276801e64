"""Finding 2 of issue 17, its second half: a wait for an engine is bounded. An engine actor Ray cannot place (as a
TP engine asking for whole GPUs in bundles colocated trainers share) is named with what it needs and what its
bundles have free, instead of the run hanging silently."""

from __future__ import annotations

import pytest


def test_an_engine_that_cannot_be_placed_is_named_with_what_it_needs(ray_cluster):
    import ray

    from rlhf.launch.rollout import _wait_ready

    class Never:
        def ready(self) -> dict:
            return {}

    actor = ray.remote(Never).options(resources={"GPU_that_never_frees": 1}).remote()
    try:
        with pytest.raises(RuntimeError, match=r"vllm engine 3 did not start within 2 s .*needs GPU 1 in bundle 5"):
            _wait_ready("vllm", [actor], first=3, timeout_s=2, where=["it needs GPU 1 in bundle 5; free there: 0.25"])
    finally:
        ray.kill(actor)
