"""The vLLM logits processor that gives vLLM's log-probs the meaning of rlhf.backends.contract.logprob_meaning.

vLLM 0.32 has no log-prob mode for the tempered full distribution: ``raw_logprobs`` is untempered, and
``processed_logprobs`` is renormalised after min-tokens masking and top-k/top-p. So VLLMEngine asks for
``processed_logits`` (the sampler's final logits, read off at the sampled token) and installs this processor,
which vLLM's V1 sampler runs before temperature, penalties, min-p and top-k/top-p:

1. each row is shifted by ``τ · logsumexp(z / τ)``; after vLLM divides by τ the row is ``log_softmax(z / τ)``, and
   top-k/top-p only set other tokens to -inf, so the value read off at the sampled token is the log-prob we report.
   The shift is a constant per row, so what is sampled does not change.
2. min_new_tokens is applied here, after the shift (vLLM's own min_tokens masks before any custom processor and
   would put the mask into the normaliser): stop tokens are set to -inf while fewer than that many tokens exist.
   It arrives as ``SamplingParams.extra_args["rlhf_min_new_tokens"]`` with vLLM's ``min_tokens`` left at 0, so
   stop strings are not held back by it (as in the hf engine).
3. teacher forcing (``extra_args["rlhf_force_tokens"]``): after the shift every token but the next forced one is
   set to -inf, so the sampler draws exactly the given tokens and reports their log-probs under the full
   distribution. vLLM's prompt log-probs cannot serve here: with ``processed_logits`` they are raw logits (prompt
   tokens skip the sampling processors; vllm/v1/worker/gpu_model_runner.py ``_get_prompt_logprobs_dict``).

V1 model-runner interface only (VLLMEngine selects that runner). Imported by vLLM from its fully qualified name,
in the vLLM venv.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

# vLLM's own helper that keeps per-request state in step with the persistent batch's adds, removes and moves (its
# built-in processors use it). Not in the package's __all__: no public API does this bookkeeping, and writing it
# again would mean depending on BatchUpdate's move semantics ourselves. Pinned by VLLM_SUPPORTED.
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from rlhf.backends.contract.logprob_meaning import FORCE_TOKENS_ARG, MIN_NEW_TOKENS_ARG, shift_to_tempered_logprobs_


class TemperedLogprobs(LogitsProcessor):
    """Shift to tempered log-probs, then mask stop tokens before min_new_tokens (see the module docstring)."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.device = device
        self.temperature: dict[int, float] = {}  # batch row -> sampling temperature
        self.min_new: dict[int, tuple[int, Sequence[int], tuple[int, ...]]] = {}  # row -> (min, outputs, stops)
        self.force: dict[int, tuple[Sequence[int], tuple[int, ...]]] = {}  # row -> (outputs so far, forced tokens)
        self.batch_size = 0
        self.temperature_rows = torch.empty(0, device=device)
        self.mask_rows = (torch.empty(0, dtype=torch.long, device=device),) * 2

    @classmethod
    def validate_params(cls, params: SamplingParams) -> None:
        # These act on absolute logit values or change the distribution before the shift: the sampled token or
        # the reported log-prob would no longer be the model's.
        if params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty:
            raise ValueError("rlhf's vLLM engine reports model log-probs; repetition/presence/frequency penalties")
        if params.logit_bias or params.bad_words or params.allowed_token_ids:
            raise ValueError("rlhf's vLLM engine reports model log-probs; logit_bias/bad_words/allowed_token_ids")
        if params.min_tokens:
            raise ValueError(f"pass min tokens as extra_args[{MIN_NEW_TOKENS_ARG!r}]: vLLM's own mask would count")

    def is_argmax_invariant(self) -> bool:
        # The min_new_tokens mask can change the argmax; this also keeps the processor on the greedy path.
        return False

    @staticmethod
    def _min_new_entry(
        params: SamplingParams, _prompt: list[int] | None, outputs: list[int]
    ) -> tuple[int, Sequence[int], tuple[int, ...]] | None:
        n = int((params.extra_args or {}).get(MIN_NEW_TOKENS_ARG, 0))
        if n <= len(outputs):
            return None
        return n, outputs, tuple(sorted(params.all_stop_token_ids))

    @staticmethod
    def _force_entry(
        params: SamplingParams, _prompt: list[int] | None, outputs: list[int]
    ) -> tuple[Sequence[int], tuple[int, ...]] | None:
        forced = (params.extra_args or {}).get(FORCE_TOKENS_ARG)
        return (outputs, tuple(int(t) for t in forced)) if forced else None

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None:
            # Rebuilt on every batch change: process_dict_updates's own "changed" misses a removed greedy request
            # (it tests the popped value's truth, and a temperature of 0.0 is falsy).
            self.batch_size = batch_update.batch_size
            process_dict_updates(self.temperature, batch_update, lambda p, _i, _o: float(p.temperature))
            process_dict_updates(self.min_new, batch_update, self._min_new_entry)
            process_dict_updates(self.force, batch_update, self._force_entry)
        reached = [row for row, (n, outputs, _) in self.min_new.items() if len(outputs) >= n]
        for row in reached:
            del self.min_new[row]
        if batch_update is not None or reached:
            self._rebuild()

    def _rebuild(self) -> None:
        temps = [self.temperature.get(row, 1.0) for row in range(self.batch_size)]
        self.temperature_rows = torch.tensor(temps, dtype=torch.float32, device=self.device)
        rows = [row for row, (_, _, stops) in self.min_new.items() for _ in stops]
        toks = [tok for _, _, stops in self.min_new.values() for tok in stops]
        self.mask_rows = (
            torch.tensor(rows, dtype=torch.long, device=self.device),
            torch.tensor(toks, dtype=torch.long, device=self.device),
        )

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[0] != self.temperature_rows.shape[0]:
            # One logits row per request is what V1 gives without speculative decoding (which VLLMEngine never
            # enables); anything else would shift rows by another request's temperature.
            raise RuntimeError(f"{logits.shape[0]} logits rows for {self.temperature_rows.shape[0]} requests")
        shift_to_tempered_logprobs_(logits, self.temperature_rows)
        if self.min_new:
            logits[self.mask_rows] = -float("inf")
        for row, (outputs, forced) in self.force.items():
            k = len(outputs)
            if k < len(forced):
                keep = logits[row, forced[k]].clone()
                logits[row] = -float("inf")
                logits[row, forced[k]] = keep
        return logits
