"""``rlhf-plan --rehearse`` in CI: every shipped GPU recipe on a loopback Ray cluster declaring its hardware, and the
matrix tensor parallelism 1/2/4 x placement colocate_all / colocate_actor_ref / split x 1 and 2 nodes, all passing
every check (device shares, each process on its own reservation, TP workers on devices of their own, no
communicator with two members on one device, colocated roles on exactly their group's devices, the memory phases
of the plan). One cluster per hardware shape, in a process of its own, shared by all its configs; no model is
loaded anywhere. A violation exits rlhf-plan non-zero naming role, process and device.

Every rehearsal starts a Ray cluster of several processes, so all of them are the Ray tier's (``-m ray``); the default
tier keeps the check that every shipped GPU recipe is in the matrix, which starts nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ceilings import ceiling

from rlhf.backends.rollout.vllm.interpreter import vllm_cpu_available
from rlhf.spec.paths import conf_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_cpu_available(), reason="the engine actors run with the vLLM interpreter"),
]

HERE = Path(__file__).parent
GRPO = ["+recipe=grpo_llama3_8b"]  # GRPO with a reference (k3 KL as loss) and a reward model
MATRIX = [*GRPO, "reward.model_path=", "reward.verifier=math"]  # policy, reference and rollout only


def _matrix(nodes: int) -> list[tuple[str, list[str]]]:
    """TP 1/2/4 x placement on one node of 6 GPUs, or two nodes of 4 (where the colocated group of 8 spans both
    nodes and the other placements put the engines on one node, the trainers on the other); as few GPUs as each
    case needs, so the rehearsal starts few processes."""
    if nodes == 1:
        hw = ["hardware=8xh100", "hardware.devices_per_node=6", "hardware.cpus_per_node=48"]
        colocated, rollout, policy = 4, None, 2
    else:
        hw = ["hardware=2x8xh100", "hardware.devices_per_node=4", "hardware.cpus_per_node=32"]
        colocated, rollout, policy = 8, 4, 4
    out = []
    for tp in (1, 2, 4):
        ro = [f"rollout.tensor_parallel_size={tp}"]
        engines = (rollout or tp) // tp
        out.append(
            (
                f"colocate_all-tp{tp}-{nodes}n",
                [*MATRIX, *hw, "placement=colocate_all", f"rollout.num_engines={colocated // tp}", *ro],
            )
        )
        out.append(
            (
                f"colocate_actor_ref-tp{tp}-{nodes}n",
                [
                    *MATRIX,
                    *hw,
                    "placement=colocate_actor_ref",
                    f"rollout.num_engines={engines}",
                    f"placement.devices.policy={policy}",
                    *ro,
                ],
            )
        )
        out.append(
            (
                f"split-tp{tp}-{nodes}n",
                [
                    *MATRIX,
                    *hw,
                    "placement=split",
                    f"rollout.num_engines={engines}",
                    f"placement.devices.policy={policy // 2}",
                    f"placement.devices.reference={policy // 2}",
                    *ro,
                ],
            )
        )
    return out


# The shipped GPU recipes by hardware target; each target's recipes share one cluster of its shape.
RECIPES_8X = [
    "ppo_llama3_8b",
    "grpo_llama3_8b",
    "rloo_llama3_8b",
    "reinforce_pp_baseline_llama3_8b",
    "sft_llama3_8b",
    "rm_llama3_8b",
    "dpo_llama3_8b",
    "grpo_qwen3_4b_8xh100",
    "grpo_qwen3_8b_8xh100",
    "grpo_qwen3_14b_8xh100",
    "grpo_qwen3_32b_8xh100",
    "grpo_llama3_1_8b_8xh100",
    "grpo_r1_distill_qwen_7b_8xh100",
    "sft_qwen3_8b_8xh100",
    "dpo_qwen3_8b_8xh100",
    "grpo_qwen3_8b_32k_8xh100",  # sequence parallelism (long contexts)
    "grpo_r1_distill_qwen_7b_32k_8xh100",
    "grpo_qwen3_32b_64k_8xh100",
]
RECIPES_1X = [
    "grpo_qwen2_5_0_5b",
    "grpo_qwen3_0_6b_h100",
    "grpo_qwen3_1_7b_h100",
    "grpo_qwen3_4b_h100",
    "grpo_qwen3_8b_h100",
    "grpo_llama3_1_8b_h100",
    "grpo_r1_distill_qwen_1_5b_h100",
    "grpo_r1_distill_qwen_7b_h100",
    "grpo_qwen2_5_0_5b_h200",
    "grpo_qwen3_1_7b_h200",
    "grpo_qwen3_4b_h200",
    "grpo_qwen3_8b_h200",
    "grpo_llama3_1_8b_h200",
    "grpo_r1_distill_qwen_1_5b_h200",
    "grpo_r1_distill_qwen_7b_h200",
]  # one H100 or one H200: the same shape
RECIPES_2X8 = ["grpo_qwen3_14b_2x8xh100", "grpo_qwen3_32b_2x8xh100", "sft_qwen3_32b_2x8xh100", "dpo_qwen3_32b_2x8xh100"]
SHAPES = {
    "1x8x192": [(r, [f"+recipe={r}"]) for r in RECIPES_8X]
    + [("grpo_llama3_8b-zero3", [*GRPO, "trainer.zero_stage=3"])],
    # the matrix, and hf engines beside the trainers (each computes on the GPU Ray reserved for it, not cuda:0)
    "1x6x48": _matrix(1) + [("colocate_all-hf-1n", [*_matrix(1)[0][1], "rollout=hf"])],
    "2x4x32": _matrix(2),
    "2x8x192": [(r, [f"+recipe={r}"]) for r in RECIPES_2X8],
    "6x8x96": [("ppo_llama3_70b", ["+recipe=ppo_llama3_70b"])],
    "1x1x26": [(r, [f"+recipe={r}"]) for r in RECIPES_1X],
}
CASES = [(shape, name) for shape, configs in SHAPES.items() for name, _ in configs]
_results: dict[str, dict] = {}
WALL: dict[str, float] = {}


def _run_shape(shape: str) -> dict[str, dict]:
    """The rehearsal results of ``shape``'s configs, one cluster for them."""
    key = shape
    if key not in _results:
        configs = SHAPES[shape]
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(HERE / "rehearse_configs.py"), shape, json.dumps([c for _, c in configs])],
            capture_output=True,
            text=True,
            timeout=ceiling(1800),
        )
        WALL[key] = time.monotonic() - t0
        lines = [json.loads(ln[len("RESULT ") :]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert len(lines) == len(configs), proc.stdout[-3000:] + proc.stderr[-3000:]
        _results[key] = {name: r for (name, _), r in zip(configs, lines, strict=True)}
        print(f"rehearsal cluster {shape}: {len(configs)} config(s) in {WALL[key]:.1f} s", file=sys.stderr)
    return _results[key]


@pytest.mark.ray
@pytest.mark.parametrize(("shape", "name"), CASES, ids=[n for _, n in CASES])
def test_the_rehearsal_passes(shape, name):
    result = _run_shape(shape)[name]
    assert result["ok"], "\n".join(result["violations"]) + "\n" + result["map"]


def test_every_shipped_gpu_recipe_is_rehearsed_on_its_hardware_shape():
    from rlhf.spec.store import find_recipes

    shape_of = {}
    for recipe in find_recipes().values():
        match = re.search(r"^\s*- override /hardware: (\S+)", recipe.path.read_text(), re.M)
        hardware = match.group(1) if match else "cpu"
        if hardware != "cpu":
            hw = yaml.safe_load((conf_dir() / "hardware" / f"{hardware}.yaml").read_text())
            shape_of[recipe.name] = f"{hw['nodes']}x{hw['devices_per_node']}x{hw['cpus_per_node']}"
    rehearsed = {
        c[0].removeprefix("+recipe="): shape
        for shape, configs in SHAPES.items()
        for _, c in configs
        if len(c) == 1 and c[0].startswith("+recipe=")
    }
    assert rehearsed == shape_of


@pytest.mark.ray
def test_the_device_map_gives_each_tp_engine_its_own_bundles_and_a_share_beside_the_trainers():
    text = _run_shape("1x8x192")["grpo_llama3_8b-zero3"]["map"]
    for e in range(4):
        assert f"VLLM_RAY_BUNDLE_INDICES={2 * e},{2 * e + 1} VLLM_RAY_PER_WORKER_GPUS=0.25" in text
    assert "rollout engine 0 worker 0      shared_memory  node0:gpu0" in text  # beside the sender: CUDA IPC
    assert "rollout engine 0 worker 1      broadcast      node0:gpu1" in text
    assert "sync        trainers states+weights; engines weights" in text


@pytest.mark.ray
def test_each_shape_hands_the_ranks_their_variables_as_its_run_would():
    # one node: rlhf-run's private cluster, whose actors set their rank's variables in their own process (so they can
    # take a preloaded idle worker); several nodes: a cluster joined by ray.address, where runtime_env carries them
    one_node = _run_shape("1x8x192")["sft_llama3_8b"]["map"]
    assert "rank variables: set in each process by the actor" in one_node
    two_nodes = _run_shape("2x4x32")["split-tp1-2n"]["map"]
    assert "rank variables: through each actor's runtime_env" in two_nodes


@pytest.mark.ray
def test_the_70b_engines_span_their_own_node_and_the_sync_broadcasts_to_every_worker():
    text = _run_shape("6x8x96")["ppo_llama3_70b"]["map"]
    workers = [ln for ln in text.splitlines() if ln.startswith("  rollout") and "TP worker" in ln]
    assert len(workers) == 16 and "shared_memory" not in text  # split placement: every worker elsewhere
    engine_nodes = {ln.split()[-1].split(":")[0] for ln in workers}
    trainers = [ln for ln in text.splitlines() if ln.startswith(("  policy", "  critic"))]
    assert len(engine_nodes) == 2 and len(trainers) == 32  # the engines' own two nodes ...
    assert not engine_nodes & {ln.split()[-1].split(":")[0] for ln in trainers}  # ... where no trainer computes


@pytest.mark.ray
def test_a_violation_exits_non_zero_naming_role_process_and_device(tmp_path):
    # a broadcast asked for on a single GPU: the engine's worker would join the sender's GPU in one NCCL group
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlhf.cli.plan",
            "--rehearse",
            "+recipe=grpo_qwen2_5_0_5b",
            "rollout.weight_sync=broadcast",
        ],
        capture_output=True,
        text=True,
        timeout=ceiling(900),
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "rehearsal FAILED" in proc.stdout
    assert "rollout engine 0 worker 0 and policy rank 0 would join one NCCL communicator on the same GPU" in proc.stdout
