"""The ``hf`` rollout engine: transformers ``generate`` with a KV cache, in the process of its actor
(rlhf.backends.rollout.hf.actor.HFRolloutWorker, which keeps rlhf.backends.contract.rollout.RolloutEngine).

No extra dependency and no separate process: the CPU default, and a fallback wherever vLLM is missing. Its own parts
are generation, scoring and loading named tensors into its model; the weight sync's receiving side (one worker: this
process, on every route), the object-store route and reloading a folder are rlhf.backends.shared.rollout_engine's,
ending in :meth:`HFEngine.load_weights`. What its platform does differently: on GPUs it receives a sync straight into
its parameters and moves its model to host memory to sleep.

What it returns (one :class:`Rollout` per sample, the ``n`` samples of a prompt contiguous):
    output_ids      the sampled tokens, cut after the first eos / stop token (kept) or stop string (kept)
    logprobs        rlhf.backends.contract.logprob_meaning, as the vllm engine and the trainer's recomputation:
    log-softmax
                    (logits / temperature) over the full vocabulary at each sampled token, from the raw logits of
                    the forward that sampled it. top-k/top-p (transformers' warpers, after the recorder) and the
                    min_new_tokens mask (ours, after it too) decide what is sampled, not the number; temperature 0
                    (greedy) reports the untempered log-probs
    finish_reason   "stop" (eos, stop token or stop string) or "length" (max_new_tokens reached)
Sampling is reproducible given ``SamplingSpec.seed`` (the global RNG is forked, not disturbed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from rlhf.backends.contract.rollout import MEMORY_TAGS, Rollout, SamplingSpec
from rlhf.backends.shared.rollout_engine import RolloutEngineBase

_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}


class _LogprobRecorder(LogitsProcessor):
    """Records log p(sampled token) per step without keeping every step's logits.

    ``generate`` calls processors before sampling, so the token sampled from step t's logits is first visible at
    step t+1 (as ``input_ids[:, -1]``); the recorder keeps one step of log-softmax and gathers it then. It sits
    first among our processors, ahead of the sampling warpers ``generate`` appends, so it sees raw logits.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.prev: Tensor | None = None
        self.steps: list[Tensor] = []

    def _take(self, tokens: Tensor) -> None:
        assert self.prev is not None
        self.steps.append(self.prev.gather(-1, tokens.unsqueeze(-1)).squeeze(-1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self._take(input_ids[:, -1])
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, generated: Tensor) -> Tensor:
        """``[B, steps]`` log-probs aligned with ``generated`` (the new tokens)."""
        if self.prev is not None and len(self.steps) < generated.shape[1]:
            self._take(generated[:, -1])
        self.prev = None
        if not self.steps:
            return torch.zeros(generated.shape, dtype=torch.float32)
        return torch.stack(self.steps, dim=1)


class _MinNewTokens(LogitsProcessor):
    """Forbids the stop tokens until ``min_new`` tokens exist (ours rather than transformers' so that it runs
    after the recorder and the recorded log-probs stay those of the unmasked model)."""

    def __init__(self, stop_ids: Sequence[int], prompt_width: int, min_new: int) -> None:
        self.stop_ids = list(stop_ids)
        self.prompt_width = prompt_width
        self.min_new = min_new

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] - self.prompt_width < self.min_new:
            scores = scores.clone()
            scores[:, self.stop_ids] = -float("inf")
        return scores


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


def _plain_name(peft_name: str) -> str | None:
    """The plain HF name of a peft model's base tensor (``base_model.model.X.base_layer.weight`` -> ``X.weight``),
    None for an adapter tensor."""
    if ".lora_" in peft_name or not peft_name.startswith("base_model.model."):
        return None
    return peft_name.removeprefix("base_model.model.").replace(".base_layer.", ".")


class HFEngine(RolloutEngineBase):
    """Generation, scoring and weight loading over an already-loaded causal LM.

    Args:
        model: a transformers causal LM (``generate`` and ``state_dict`` are used); put in eval mode.
        pad_token_id, eos_token_id: the tokenizer's ids (eos always stops a sample).
        tokenizer: needed only for stop strings (they are matched on decoded text).
        max_batch_size: sequences per ``generate`` call; larger requests are split into chunks in order.
    """

    keeps_received_tensors = False  # load_weights copies each streamed tensor as it comes: one buffer per bucket

    def __init__(
        self,
        model: nn.Module,
        pad_token_id: int,
        eos_token_id: int,
        tokenizer: Any = None,
        max_batch_size: int = 512,
    ) -> None:
        # ``awake`` (the base's): the weights, and (nominally: transformers allocates it per generate call) the KV
        # cache; on the CPU nothing ever leaves.
        super().__init__()
        self.model = model.eval()
        self.pad_token_id = int(pad_token_id)
        self.eos_token_id = int(eos_token_id)
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        self.load_dtype = next(model.parameters()).dtype  # load_from_path reads a folder in the model's dtype

    @classmethod
    def from_path(
        cls,
        path: str,
        dtype: str | torch.dtype = "float32",
        device: str = "cpu",
        tokenizer_path: str | None = None,
        lora: dict[str, Any] | None = None,
    ) -> HFEngine:
        """Load model and tokenizer with ``from_pretrained`` (pad falls back to eos, as OpenRLHF does). ``lora``
        (rlhf.spec.schema.LoraSpec's fields; rollout.weight_sync_lora=adapter): the base wrapped with peft's
        ``get_peft_model`` and the trainer's LoraConfig, so generation runs base + adapter and a sync of the adapter
        tensors (peft's parameter names, the same as the trainer's) replaces them in place."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch_dtype = _DTYPES[dtype] if isinstance(dtype, str) else dtype
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        if lora is not None:
            from rlhf.models.lora import apply_lora
            from rlhf.spec.schema import LoraSpec

            model = apply_lora(model, LoraSpec(**lora))
        model = model.to(device)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path or path)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"the tokenizer at {tokenizer_path or path} has no eos token")
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        return cls(model, pad, eos, tokenizer)

    # -- generation ---------------------------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        """``len(prompts) * sampling.n`` rollouts, prompt-major (the n samples of a prompt are contiguous)."""
        if sampling.n < 1 or sampling.max_new_tokens < 1:
            raise ValueError(f"need n >= 1 and max_new_tokens >= 1, got n={sampling.n}, {sampling.max_new_tokens}")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if sampling.stop and self.tokenizer is None:
            raise ValueError("stop strings need the tokenizer; pass tokenizer= to HFEngine")
        self.wake()
        expanded = [list(p) for p in prompts for _ in range(sampling.n)]
        chunks = [expanded[i : i + self.max_batch_size] for i in range(0, len(expanded), self.max_batch_size)]
        devices = [self.device] if self.device.type == "cuda" else []
        out: list[Rollout] = []
        with torch.inference_mode(), torch.random.fork_rng(devices=devices, enabled=sampling.seed is not None):
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            for chunk in chunks:
                out += self._generate_chunk(chunk, sampling)
        return out

    def _stop_ids(self, sampling: SamplingSpec) -> list[int]:
        return list(dict.fromkeys([self.eos_token_id, *sampling.stop_token_ids]))

    def _generation_config(self, sampling: SamplingSpec, stop_ids: list[int]) -> GenerationConfig:
        greedy = sampling.temperature <= 0
        kwargs: dict[str, Any] = {}
        if not greedy:
            # top_k=0 switches transformers' top-k off (its default is 50); -1 is our "off".
            kwargs = {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": max(sampling.top_k, 0)}
        return GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            eos_token_id=stop_ids,
            pad_token_id=self.pad_token_id,
            stop_strings=list(sampling.stop) or None,
            use_cache=True,
            **kwargs,
        )

    def _generate_chunk(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        ids, mask = _left_pad(prompts, self.pad_token_id, self.device)
        stop_ids = self._stop_ids(sampling)
        recorder = _LogprobRecorder(sampling.temperature if sampling.temperature > 0 else 1.0)
        processors = LogitsProcessorList([recorder])
        if sampling.min_new_tokens > 0:
            processors.append(_MinNewTokens(stop_ids, ids.shape[1], sampling.min_new_tokens))
        sequences = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=self._generation_config(sampling, stop_ids),
            logits_processor=processors,
            tokenizer=self.tokenizer if sampling.stop else None,
        )
        generated = sequences[:, ids.shape[1] :]
        logprobs = recorder.finish(generated).cpu().tolist()
        rows = generated.cpu().tolist()
        out = []
        for prompt, row, lps in zip(prompts, rows, logprobs, strict=True):
            end, reason = self._cut(row, set(stop_ids), sampling.stop)
            out.append(
                Rollout(
                    prompt_ids=prompt,
                    output_ids=row[:end],
                    action_mask=[1] * end,
                    logprobs=lps[:end] if sampling.logprobs else [0.0] * end,
                    finish_reason=reason,
                )
            )
        return out

    def _cut(self, row: list[int], stop_ids: set[int], stop: Sequence[str]) -> tuple[int, str]:
        """Where the sample ends (exclusive) and why; tokens after the end are generate's padding (which may
        be the eos id, so a stop string is looked for only before the first stop token)."""
        end = next((j + 1 for j, tok in enumerate(row) if tok in stop_ids), None)
        if stop:
            by_string = self._stop_string_end(row[:end] if end else row, stop)
            if by_string is not None:
                return by_string, "stop"
        return (end, "stop") if end else (len(row), "length")

    def _stop_string_end(self, row: list[int], stop: Sequence[str]) -> int | None:
        """The shortest prefix whose text contains a stop string (binary search: containment only grows)."""

        def hit(k: int) -> bool:
            text = self.tokenizer.decode(row[:k], skip_special_tokens=False)
            return any(s in text for s in stop)

        if not hit(len(row)):
            return None
        lo, hi = 1, len(row)
        while lo < hi:
            mid = (lo + hi) // 2
            if hit(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- weights and memory -----------------------------------------------------------------------------------

    def _targets(self) -> dict[str, Tensor]:
        # Tied weights appear under every name (lm_head.weight and the embedding), so either may be sent.
        targets = dict(self.model.named_parameters(remove_duplicate=False))
        targets.update(dict(self.model.named_buffers(remove_duplicate=False)))
        if self.lora:
            # A peft engine also answers to the base's plain HF names (a merged-format load: load_from_path), each
            # landing in its base layer; the adapters keep their peft names.
            for name, t in list(targets.items()):
                plain = _plain_name(name)
                if plain is not None:
                    targets.setdefault(plain, t)
        return targets

    @property
    def lora(self) -> bool:
        """The engine holds the base plus a peft LoRA adapter (rollout.weight_sync_lora=adapter)."""
        return hasattr(self.model, "peft_config")

    def direct_targets(self) -> Any:
        """``lookup(name, dtype, shape)``: the model's own tensor for ``name`` when a weight sync can write into it
        directly (same dtype, shape, contiguous), else None. Tied weights share one tensor, so either name lands
        in it. Build it once per sync: collecting the model's tensors walks every module."""
        targets = self._targets()

        def lookup(name: str, dtype: str, shape: tuple[int, ...]) -> Tensor | None:
            t = targets.get(name)
            if t is None or str(t.dtype).removeprefix("torch.") != dtype or tuple(t.shape) != tuple(shape):
                return None
            return t.data if t.is_contiguous() else None

        return lookup

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy the given tensors into the model in place (names as in the HF state dict); names not given keep
        their values. A list or tuple is checked whole first (every name must exist and match in shape; nothing is
        copied when one does not). Any other iterable is streamed: each tensor is checked and copied as it comes
        and may be reused by the producer afterwards (a weight sync's bucket views), so a bad one stops the load
        with the earlier ones already in place."""
        targets = self._targets()
        if isinstance(named_tensors, (list, tuple)):
            items = list(named_tensors)
            unknown = [n for n, _ in items if n not in targets]
            if unknown:
                more = "..." if len(unknown) > 5 else ""
                raise KeyError(f"load_weights: unknown parameter names {unknown[:5]}{more}")
            wrong = [
                f"{n} {tuple(t.shape)} vs {tuple(targets[n].shape)}" for n, t in items if t.shape != targets[n].shape
            ]
            if wrong:
                raise ValueError(f"load_weights: shape mismatch (given vs model): {wrong[:5]}")
            named_tensors = items
        with torch.no_grad():
            for name, tensor in named_tensors:
                target = targets.get(name)
                if target is None:
                    raise KeyError(f"load_weights: unknown parameter name {name!r}")
                if tensor.shape != target.shape:
                    raise ValueError(
                        f"load_weights: {name} has shape {tuple(tensor.shape)}, the model {tuple(target.shape)}"
                    )
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))

    @torch.no_grad()
    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        """Teacher-forced log-probs (temperature 1) of each ``(prompt, output)``'s output tokens: deterministic, so
        the weight-sync probe can tell whether the weights moved."""
        out = []
        for prompt, output in sequences:
            ids = torch.tensor([list(prompt) + list(output)], dtype=torch.long, device=self.device)
            logits = self.model(input_ids=ids).logits.float()[0, len(prompt) - 1 : -1]
            lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt) :].unsqueeze(-1)).squeeze(-1)
            out.append(lp.cpu().tolist())
        return out

    def load_from_path(self, path: str) -> None:
        """Reload every weight from a Hugging Face folder (what a fresh engine started on ``path`` would hold)."""
        super().load_from_path(path)
        if self.lora:
            # a fresh peft engine's adapter is peft's initial one: B = 0, so base + adapter is the base
            with torch.no_grad():
                for name, p in self.model.named_parameters():
                    if ".lora_B." in name:
                        p.zero_()

    # -- device memory: on GPUs the model moves to host memory between phases -------------------------------------
    def sleep(self, level: int = 1) -> None:
        """Move the model to host memory between rollouts (accelerators only; a no-op on CPU). ``level`` has no
        meaning here: the host copy is the model itself."""
        if self.device.type != "cpu" and self.awake:
            self.model.to("cpu")
            self.empty_cache()
            self.awake = set()

    def wake(self, tags: list[str] | None = None) -> None:
        """Bring back ``tags`` (None: both); the weights move back to the device with the first of them."""
        wanted = set(tags or MEMORY_TAGS)
        if wanted - self.awake and "weights" not in self.awake:
            self.model.to(self.device)
        self.awake |= wanted | {"weights"}

    def empty_cache(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
