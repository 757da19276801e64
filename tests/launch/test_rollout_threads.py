"""How many OpenMP threads a CPU vLLM engine gets from its placement."""

from __future__ import annotations

from rlhf.backends.rollout.vllm.descriptor import cpu_engine_threads


def test_a_colocated_engine_in_sync_mode_uses_the_threads_of_the_roles_it_takes_turns_with():
    assert cpu_engine_threads(1.0, {"OMP_NUM_THREADS": "2"}, async_mode=False) == 2


def test_an_engine_running_beside_training_keeps_its_share():
    assert cpu_engine_threads(1.0, {"OMP_NUM_THREADS": "2"}, async_mode=True) == 1


def test_an_engine_on_its_own_bundle_keeps_at_least_its_share():
    assert cpu_engine_threads(4.0, {"OMP_NUM_THREADS": "2"}, async_mode=False) == 4
    assert cpu_engine_threads(0.5, None, async_mode=False) == 1
