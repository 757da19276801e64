"""Weight sync under stress, through real Ray actors, DeepSpeed ranks and hf engines: the driver's memory stays
flat as the model grows, a non-sender rank holds at most one bucket more, a corrupted tensor stops the run naming
it, and an engine dying mid-sync is named within the sync timeout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_weight_sync import _policy, _spec

from rlhf.backends.weight_sync.driver import WeightSync, WeightSyncError
from rlhf.backends.weight_sync.memory import PeakRSS
from rlhf.launch.realize import realize
from rlhf.models.loading import resolve_model_path
from rlhf.pipelines.lifecycle import RunFailed
from rlhf.pipelines.rollout_engines import RolloutEngines
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec

pytestmark = pytest.mark.slow


def test_driver_memory_stays_flat_and_a_peer_rank_holds_one_bucket(ray_cluster):
    """ZeRO-3, two ranks, two hf engines, broadcast route: a 25M and a 127M model."""
    sizes = {
        "25M": ["model=small"],
        "127M": [
            "model=small",
            "model.hidden_size=768",
            "model.num_layers=18",
            "model.num_heads=12",
            "model.num_kv_heads=12",
            "model.intermediate_size=2048",
        ],
    }
    bucket_mb = 32
    driver, peer, params = {}, {}, {}
    for name, model in sizes.items():
        spec = _spec(
            "trainer.zero_stage=3",
            "rollout.weight_sync=broadcast",
            f"rollout.weight_sync_bucket_mb={bucket_mb}",
            "data.max_len=64",
            "rollout.max_new_tokens=8",
            *model,
        )
        p = plan(spec)
        params[name] = p.params
        realized = realize(spec, p)
        try:
            engines = RolloutEngines(spec, realized, resolve_model_path(spec.model), None)
            # Large allocations straight from mmap: freed memory leaves the resident set at once, so the sampled
            # RSS follows the live tensors instead of glibc's heap fragmentation.
            policy = _policy(realized, spec, env={"MALLOC_MMAP_THRESHOLD_": "131072"})
            ws = WeightSync(spec, policy, engines, measure_memory=True)
            ws.sync()  # warm: first-touch allocations
            with PeakRSS() as m:
                result = ws.sync()
            driver[name] = m.delta_mb
            peer[name] = result.gathers[0]["peak_rss_delta_mb"]
            ws.close()
        finally:
            realized.shutdown()
    print(f"driver RSS growth during a sync (MB): {driver}; peer rank: {peer}; bucket {bucket_mb} MB")
    assert params["127M"] > 4 * params["25M"]
    model_mb = params["127M"] * 4 / 2**20
    assert driver["127M"] < 16 and driver["127M"] - driver["25M"] < 8, (driver, model_mb)
    # one bucket of gathered weights, plus the transport's staging of the one parameter being gathered (gloo)
    largest_mb = 768 * 2048 * 4 / 2**20
    for name in sizes:
        assert peer[name] <= bucket_mb + largest_mb + 2, (name, peer, bucket_mb)


def _run(tmp_path: Path, *overrides: str):
    from rlhf.launch.job import run

    spec = load_spec(
        [
            "+recipe=grpo_tiny_cpu",
            "launch.executor=ray",  # the sync between processes, and an engine process that dies in it
            "trainer.max_steps=2",
            "logging.mlflow=false",
            "logging.progress=false",
            "eval.steps=0",
            *overrides,
        ]
    )
    return run(spec, plan(spec), tmp_path)


@pytest.mark.parametrize("route", ["broadcast", "shared_memory"])
def test_a_corrupted_tensor_stops_the_run_naming_it(ray_cluster, tmp_path, monkeypatch, route):
    monkeypatch.setenv("RLHF_FAULTS", "sync.corrupt:model.layers.1.mlp.up_proj.weight")
    with pytest.raises(RunFailed) as e:
        _run(tmp_path, f"rollout.weight_sync={route}")
    # A corrupted sync is never retried: the run stops at once, naming the tensor and the engine.
    msg, cause = str(e.value), e.value.__cause__
    assert isinstance(cause, WeightSyncError) and cause.kind == "checksum" and cause.engine in (0, 1)
    assert "model.layers.1.mlp.up_proj.weight" in msg and "not a crash or a hang" in msg
    assert re.search(r"rollout engine [01] \(hf", msg)


def test_an_engine_dying_mid_sync_is_named_within_the_timeout(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_FAULTS", "sync.exit_after_bucket:1")
    with pytest.raises(RunFailed) as e:
        _run(
            tmp_path,
            "rollout.weight_sync=broadcast",
            "rollout.weight_sync_timeout_s=20",
            "rollout.weight_sync_bucket_mb=0.25",
            "trainer.max_restarts=0",  # restarts after a death are tests/pipelines/test_faults.py's subject
        )
    cause = e.value.__cause__
    assert re.search(r"rollout engine [01] \(hf, pid \d+\) died", str(e.value)), str(e.value)
    assert isinstance(cause, WeightSyncError) and cause.engine in (0, 1) and cause.kind == "died"  # not a timeout
