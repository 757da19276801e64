"""Finding 4 of issue 17 (colocated engine memory): OpenRLHF's order for engines and trainers sharing GPUs --
engines built and asleep before the trainers load; the trainers' states out (any ZeRO stage) and the engines fully
awake for generation; level-2 sleep when a sync comes next; only the weights woken for a sync; the allocator's
cache emptied between phases -- and the plan's phases are exactly what the schedule does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlhf.backends.rollout.vllm.engine import VLLMEngine
from rlhf.spec.build import load_spec


class _Engines:
    def __init__(self, log: list) -> None:
        self.log = log

    def sleep(self, level: int = 1) -> None:
        self.log.append(("sleep", level))

    def wake(self, tags=None) -> None:
        self.log.append(("wake", tuple(tags) if tags else None))


def test_the_schedule_follows_openrlhfs_order_and_the_plans_phases():
    from rlhf.pipelines.rl_roles import HybridSchedule, engines_first, takes_turns
    from rlhf.planning.memory import phases

    spec = load_spec(["+recipe=grpo_llama3_8b"])
    assert takes_turns(spec, True) and engines_first(spec, True)
    log: list = []
    s = HybridSchedule(True, _Engines(log), lambda: log.append("offload"), lambda: log.append("reload"))
    s.engines_started()
    s.begin_generation()
    s.end_generation(next_is_sync=True)
    s.begin_sync()
    s.begin_generation()
    s.end_generation(next_is_sync=False)
    assert log == [
        ("sleep", 1),  # before the trainers load: a step-0 eval may generate before any sync
        "offload",
        ("wake", None),
        ("sleep", 2),
        "reload",  # the sync overwrites every weight: nothing backed up
        ("wake", ("weights",)),  # the KV cache stays asleep during the sync
        "offload",
        ("wake", ("kv_cache",)),
        ("sleep", 1),
        "reload",
    ]
    plan_phases = phases(spec, ("policy", "reference", "reward", "rollout"))
    for phase, tags, resident in s.history:
        assert tuple(sorted(tags)) == plan_phases[phase]["rollout"], phase
        assert resident == (plan_phases[phase]["trained"] == ("states", "weights")), phase


def test_nothing_moves_when_the_engines_have_devices_of_their_own():
    from rlhf.pipelines.rl_roles import HybridSchedule, engines_first, takes_turns

    spec = load_spec(["+recipe=grpo_llama3_8b", "placement=colocate_actor_ref", "placement.devices.policy=4"])
    log: list = []
    s = HybridSchedule(takes_turns(spec, False), _Engines(log), lambda: log.append("x"), lambda: log.append("y"))
    s.engines_started()
    s.begin_generation()
    s.end_generation()
    s.begin_sync()
    assert log == [] and not engines_first(spec, False)


class _LLM:
    def __init__(self) -> None:
        self.calls: list = []

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None) -> None:
        self.calls.append(("wake_up", tags))

    def collective_rpc(self, method: str, args=(), kwargs=None):
        self.calls.append(("rpc", method))
        return [{"digest": "d"}]

    def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache",))


def _engine() -> VLLMEngine:
    engine = object.__new__(VLLMEngine)  # the engine's memory logic, without building vLLM
    engine.llm, engine.sleep_supported, engine.on_cpu = _LLM(), True, False
    engine.awake = {"weights", "kv_cache"}
    engine.lora = None  # full-weight syncs (rollout.weight_sync_lora=merged)
    return engine


def test_a_sync_wakes_only_the_weights_and_empties_the_cache_after():
    engine = _engine()
    engine.sleep(2)
    engine.sync_pull(1)
    assert engine.llm.calls == [
        ("sleep", 2),
        ("wake_up", ["weights"]),
        ("rpc", "rlhf_sync_pull"),
        ("reset_prefix_cache",),
        ("rpc", "rlhf_empty_cache"),
    ]
    with pytest.raises(RuntimeError, match="only .*weights.* awake"):
        engine.generate([[1, 2]], SimpleNamespace())
    engine.wake()
    assert engine.llm.calls[-1] == ("wake_up", ["kv_cache"]) and engine.awake == {"weights", "kv_cache"}


def test_trainers_offload_their_states_whatever_the_zero_stage(monkeypatch):
    from rlhf.backends.train.deepspeed.engine import DeepSpeedTrainEngine

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    for stage in (1, 2, 3):
        engine = object.__new__(DeepSpeedTrainEngine)
        engine.device, engine.zero_stage = torch.device("cuda", 0), stage
        engine.engine = SimpleNamespace(
            offload_states=lambda stage=stage, **kw: calls.append(("offload", stage)),
            reload_states=lambda stage=stage, **kw: calls.append(("reload", stage)),
            empty_partition_cache=lambda: calls.append("partition"),
        )
        engine.offload_states()
        engine.reload_states()
    assert [c for c in calls if isinstance(c, tuple)] == [(k, s) for s in (1, 2, 3) for k in ("offload", "reload")]
    assert calls.count("empty_cache") == 6
