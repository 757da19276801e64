"""import-verl reads veRL's ``actor_rollout_ref.rollout.name`` against our rollout registry
(rlhf.spec.registry.ROLLOUT_BACKENDS): a name that is a registered backend of ours is that backend, so a backend
added to the registry (sglang, say) is imported without an edit to the importer; any other name runs on vLLM."""

from __future__ import annotations

from rlhf.importers.verl.mapping import map_command
from rlhf.importers.verl.overrides import split_command
from rlhf.spec.registry import ROLLOUT_BACKENDS, Backend

R = "actor_rollout_ref.rollout"


def _map(*overrides: str):
    return map_command(split_command(["python3", "-m", "verl.trainer.main_ppo", *overrides]))


def test_a_rollout_name_registered_here_is_that_backend(monkeypatch):
    monkeypatch.setitem(ROLLOUT_BACKENDS, "sglang", Backend("tests.no_such_module:BACKEND"))
    m = _map(f"{R}.name=sglang", f"{R}.gpu_memory_utilization=0.7")
    assert m.rollout_backend == "sglang"
    assert m.outcomes[0].note == "rollout=sglang" and not m.outcomes[0].none
    # vLLM's own keys are not written for another backend: reported instead
    assert m.outcomes[1].none.endswith("rollout=sglang has none")
    assert not [k for k in m.values if k.startswith("rollout.vllm.")]


def test_every_registered_backend_is_taken_by_its_name():
    for name in ROLLOUT_BACKENDS:
        assert _map(f"{R}.name={name}").rollout_backend == name


def test_a_name_not_registered_here_runs_on_vllm_and_says_so():
    assert "sglang" not in ROLLOUT_BACKENDS  # registered, it would be the case above
    m = _map(f"{R}.name=sglang")
    assert m.rollout_backend == "vllm"
    assert m.outcomes[0].none == "unsupported: sglang as a rollout engine; the recipe uses vllm"
