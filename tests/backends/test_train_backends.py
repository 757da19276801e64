"""Every registered training backend through its contract (rlhf.backends.contract.training): the backend itself
(registry, config
group, rules, memory, no torch at import), then its engines in a real two-rank gloo group (backend_conformance.py:
the token-mean step, exact resume, weight buckets equal to the named weights, the HF export, LoRA, gradient
checkpointing, CPU offload, a frozen engine), and the per-step losses of every backend on the same data compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

from rlhf.backends.contract.training import TrainBackend
from rlhf.spec import names
from rlhf.spec.build import load_spec
from rlhf.spec.paths import conf_dir
from rlhf.spec.registry import TRAIN_BACKENDS, train_backend
from rlhf.spec.train_backend_rules import sections
from rlhf.spec.validate import validate

HERE = Path(__file__).parent
BACKENDS = sorted(TRAIN_BACKENDS)

# The cases each backend's two ranks run (name=overrides): the plain case is the one compared across backends; fsdp2
# adds LoRA with gradient checkpointing and the CPUOffloadPolicy, and bf16 mixed precision with units kept gathered.
CASES = {
    "deepspeed": ["plain=trainer.zero_stage=3"],
    "fsdp2": [
        "plain=",
        "lora_gc_offload=model.lora.rank=8,trainer.gradient_checkpointing=true,trainer.fsdp2.cpu_offload=true",
        "bf16_kept=trainer.precision=bf16,trainer.fsdp2.reshard_after_forward=false",
    ],
}


def test_the_config_names_every_registered_backend_and_each_has_its_parts():
    assert set(names.TRAIN_BACKENDS) == set(TRAIN_BACKENDS) == set(CASES)
    assert set(sections()) <= set(TRAIN_BACKENDS)  # optional: a backend may have no keys of its own
    for name in BACKENDS:
        backend = train_backend(name)
        assert isinstance(backend, TrainBackend) and backend.name == name
        assert (conf_dir() / "trainer" / "backend" / f"{name}.yaml").is_file()
        assert load_spec([f"trainer/backend={name}"]).trainer.backend == name  # the group option selects it
        assert load_spec([f"trainer.backend={name}"]).trainer.backend == name


def test_an_unknown_backend_fails_naming_the_key_and_the_valid_names():
    with pytest.raises(ValueError, match=r"trainer.backend='megatron'.*deepspeed, fsdp2"):
        train_backend("megatron")


def test_backends_load_without_torch():
    code = (
        "import sys\n"
        "from rlhf.spec.registry import TRAIN_BACKENDS, train_backend\n"
        "for n in TRAIN_BACKENDS: train_backend(n)\n"
        "assert 'torch' not in sys.modules, 'a backend module imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", BACKENDS)
def test_memory_shards_over_ranks_and_offload_moves_to_the_host(name):
    backend = train_backend(name)
    spec = load_spec(["+recipe=grpo_llama3_8b", f"trainer.backend={name}", "trainer.zero_stage=3"])
    p, layer = 8_030_000_000, 525_000_000

    def total(s):
        return s.weights + s.grads + s.optimizer

    one, eight = (backend.trained_states(spec, params=p, largest_layer=layer, dp=dp) for dp in (1, 8))
    assert total(eight) < total(one) / 2
    lora = backend.trained_states(spec, params=p, largest_layer=layer, dp=8, trainable=p // 100)
    assert total(lora) < total(eight)
    resident = backend.frozen_states(spec, params=p, largest_layer=layer, dp=8, offload=False)
    offloaded = backend.frozen_states(spec, params=p, largest_layer=layer, dp=8, offload=True)
    assert offloaded.host > 0 and offloaded.weights < resident.weights
    assert backend.gathers_on_every_rank(spec) in (True, False)
    assert backend.describe(spec)


def test_fsdp2_memory_follows_its_keys():
    from rlhf.planning.plan import plan

    def policy(*extra):
        spec = load_spec(["+recipe=grpo_llama3_8b", "trainer.backend=fsdp2", *extra])
        return plan(spec).memory[0].per_role["policy"]

    base, offload, kept = (
        policy(),
        policy("trainer.fsdp2.cpu_offload=true"),
        policy("trainer.fsdp2.reshard_after_forward=false"),
    )
    assert offload.host > 0 and offload.device < base.device and base.host == 0
    # fp32 shards (4P/N) + two gathered bf16 units (the embedding: 128256 x 4096) on 8 ranks
    params = 8_030_261_248
    assert base.weights == pytest.approx(4 * params / 8 + 2 * 2 * 128256 * 4096, rel=1e-3)
    assert kept.weights == pytest.approx(4 * params / 8 + 2 * params, rel=1e-3)  # every unit stays gathered


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["trainer.backend=fsdp2", "trainer.offload_optimizer=true"], "trainer.offload_optimizer"),
        (["trainer.backend=fsdp2", "trainer.optimizer=cpu_adam"], "trainer.optimizer"),
        (["trainer.backend=deepspeed", "trainer.fsdp2.cpu_offload=true"], "trainer.fsdp2.cpu_offload"),
        (["trainer.backend=deepspeed", "trainer.zero_stage=0", "trainer.on_nonfinite=skip"], "trainer.on_nonfinite"),
    ],
)
def test_each_backend_rejects_keys_it_would_ignore(overrides, key):
    errors = validate(load_spec(["+recipe=sft_tiny_cpu", *overrides]))
    assert key in [e.key for e in errors], errors


def test_fsdp2_accepts_what_deepspeed_refuses_and_the_headline_recipe():
    # fsdp2 drops a non-finite step itself (no ZeRO stage needed); the 8B recipe keeps its zero_stage (ignored there)
    assert (
        validate(
            load_spec(
                ["+recipe=sft_tiny_cpu", "trainer.backend=fsdp2", "trainer.zero_stage=0", "trainer.on_nonfinite=skip"]
            )
        )
        == []
    )
    assert validate(load_spec(["+recipe=grpo_llama3_8b", "trainer.backend=fsdp2"])) == []


def _two_ranks(backend: str, cases: list[str], out: Path) -> None:
    from rlhf.launch.ports import free_port

    port = free_port()
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "backend_conformance.py"), str(out), backend, *cases],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=ceiling(600))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"{backend} rank {r} failed:\n{log[-4000:]}"


@pytest.mark.slow
@pytest.mark.ray  # two ranks: the tier of several processes (README, Set-up)
def test_every_backend_keeps_the_engine_contract_on_two_ranks_and_they_agree(tmp_path):
    records = {}
    for backend in BACKENDS:
        out = tmp_path / backend
        out.mkdir()
        _two_ranks(backend, CASES[backend], out)
        for case in CASES[backend]:
            name = case.partition("=")[0]
            ranks = [json.loads((out / f"{name}.rank{r}.json").read_text()) for r in range(2)]
            assert ranks[0] == ranks[1], "metrics are averaged over the ranks: every rank reports the same"
            records[(backend, name)] = ranks[0]
    # Same data, same initial weights, same optimizer: DeepSpeed ZeRO-3 and FSDP2 take the same steps. They differ only
    # in the order of floating-point sums (the gradient norm, hence the clipping factor), which stays at rounding level.
    ds, fs = records[("deepspeed", "plain")], records[("fsdp2", "plain")]
    assert fs["loss"] == pytest.approx(ds["loss"], rel=1e-6)
    assert fs["grad_norm"] == pytest.approx(ds["grad_norm"], rel=1e-6)
