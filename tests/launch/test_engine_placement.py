"""Finding 2 of issue 17 (tensor parallelism above 1 never schedules), as pure rules: each engine names its own
bundles and its workers' GPU share in the variables vLLM's Ray executor reads, so engines of one role sit on
distinct devices and their workers fit beside colocated trainers; a bundle asked for more than it has is refused at
once, naming who holds it, instead of a silent hang."""

from __future__ import annotations

import pytest

from rlhf.backends.rollout.vllm.placement import (
    BUNDLE_INDICES_ENV,
    PER_WORKER_GPUS_ENV,
    assign_devices,
    configure_device_env,
    worker_bundles,
)
from rlhf.launch.ledger import OverBooked
from rlhf.launch.realize import ledger_of
from rlhf.launch.rollout import engine_placements
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec


def _placements(*overrides):
    spec = load_spec(["+recipe=grpo_llama3_8b", *overrides])
    p = plan(spec)
    ro = p.roles["rollout"]
    g = p.groups[ro.group]
    order = list(range(g.size))
    return p, engine_placements(ro.engine_bundles, order, g.bundle, ro.fraction)


def test_each_tp_engine_gets_bundles_of_its_own_and_its_share_of_each():
    p, placements = _placements()
    bundles = [b for e in placements for b in e.bundles]
    assert len(bundles) == len(set(bundles)) == 8  # 4 engines x TP 2, no bundle twice
    share = p.roles["rollout"].fraction
    for e in placements:
        assert e.actor_gpus == 0 and e.worker_gpus == pytest.approx(share) and share < 1
    env = {"CUDA_VISIBLE_DEVICES": ""}  # what Ray gives a GPU-less actor
    assert configure_device_env(env, 2, placements[1].bundles, placements[1].worker_gpus) == {
        BUNDLE_INDICES_ENV: "2,3",
        PER_WORKER_GPUS_ENV: f"{share:g}",
    }
    assert "CUDA_VISIBLE_DEVICES" not in env  # vLLM would copy it to its workers


def test_without_the_variables_every_engine_would_take_the_same_bundles():
    gpu_bundles = list(range(8))
    assert worker_bundles({}, gpu_bundles, 2) == [0, 1]  # vLLM's default, for every engine: the hang of finding 2
    assert worker_bundles({BUNDLE_INDICES_ENV: "6,7"}, gpu_bundles, 2) == [6, 7]
    with pytest.raises(ValueError, match="distinct"):
        worker_bundles({BUNDLE_INDICES_ENV: "3,3"}, gpu_bundles, 2)


def test_workers_take_the_nodes_gpus_in_local_rank_order():
    workers = assign_devices([(4, "n0", [5]), (5, "n0", [4]), (0, "n1", [0])], 0.25)
    assert [(w.local_rank, w.device) for w in workers] == [(0, 4), (1, 5), (0, 0)]


def test_every_share_of_the_plan_fits_its_bundle_and_one_more_gpu_does_not():
    p, placements = _placements()
    ledger = ledger_of(p)
    g = p.roles["policy"].group
    frac = p.roles["policy"].fraction + p.roles["reference"].fraction + p.roles["reward"].fraction
    for rank in range(8):
        ledger.claim(f"policy rank {rank}", g, rank, {"GPU": frac, "CPU": 1})
    for e in placements:
        for label, b, res in e.claims():
            ledger.claim(label, g, b, res)
    assert ledger.free(g, 3)["GPU"] == pytest.approx(0)
    with pytest.raises(OverBooked, match=r"rollout engine 9 worker 0 needs \{GPU: 1\} in bundle 3 .*policy rank 3"):
        ledger.claim("rollout engine 9 worker 0", g, 3, {"GPU": 1.0})  # vLLM's default share: never schedulable
