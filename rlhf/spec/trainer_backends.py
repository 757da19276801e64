"""Validation of the training backend's keys (``trainer.backend``): the rules of each backend, by name.

A backend's code lives in rlhf/engines/ (rlhf.engines.backends); these are its config facts, here because the spec
layer imports nothing else. Each rule returns ``(full key, value given, fix)`` triples; rlhf.spec.validate reports
them with every other problem. Besides its own rules, a backend's sub-section (``trainer.<name>``) must keep its
defaults when another backend is selected, so a key that would be ignored is never silently accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlhf.spec.backends import unused_sections
from rlhf.spec.schema import ExperimentSpec, FSDP2Spec

Problem = tuple[str, Any, str]

# backend name -> its sub-section's dataclass (backends without keys of their own have none)
SECTIONS: dict[str, type] = {"fsdp2": FSDP2Spec}


def _deepspeed(spec: ExperimentSpec) -> list[Problem]:
    t, out = spec.trainer, []
    if t.on_nonfinite == "skip" and t.zero_stage < 1:
        out.append(
            (
                "trainer.on_nonfinite",
                t.on_nonfinite,
                "skip needs trainer.zero_stage >= 1 (DeepSpeed's ZeRO optimizer is what drops a non-finite step)",
            )
        )
    if spec.model.lora.rank > 0 and t.offload_params:
        out.append(
            (
                "trainer.offload_params",
                True,
                "LoRA with ZeRO-3 parameter offload is not supported; set trainer.offload_params=false",
            )
        )
    return out


def _fsdp2(spec: ExperimentSpec) -> list[Problem]:
    t, out = spec.trainer, []
    if t.precision == "fp16":
        out.append(("trainer.precision", "fp16", "fsdp2 trains in bf16 or fp32 (no loss scaling); use bf16"))
    if t.optimizer == "cpu_adam":
        out.append(
            (
                "trainer.optimizer",
                "cpu_adam",
                "DeepSpeed's CPU Adam cannot step FSDP2's sharded parameters; use adamw (with "
                "trainer.fsdp2.cpu_offload=true the step runs in host memory)",
            )
        )
    for name in ("offload_optimizer", "offload_params"):
        if getattr(t, name):
            out.append(
                (
                    f"trainer.{name}",
                    True,
                    "a DeepSpeed key; under trainer.backend=fsdp2 use trainer.fsdp2.cpu_offload=true (parameters, "
                    "gradients and the optimizer step in host memory)",
                )
            )
    return out


RULES: dict[str, Callable[[ExperimentSpec], list[Problem]]] = {"deepspeed": _deepspeed, "fsdp2": _fsdp2}


def _deepspeed_in_one_process(spec: ExperimentSpec) -> list[Problem]:
    if spec.trainer.zero_stage != 3:
        return []
    why = (
        "ZeRO-3 builds every model of its process partitioned (transformers' HfDeepSpeedConfig is process-wide), "
        "the rollout engine's beside the policy too"
    )
    return [("trainer.zero_stage", 3, why)]


def _deepspeed_split_weights(spec: ExperimentSpec) -> Problem | None:
    return ("trainer.zero_stage", spec.trainer.zero_stage, "ZeRO-3") if spec.trainer.zero_stage > 2 else None


# Which key splits the weights over the ranks (so no rank holds the whole model between passes), with the value
# given and what does it; a backend without a line is taken to split them (FSDP2 always does).
SPLIT_WEIGHTS: dict[str, Callable[[ExperimentSpec], Problem | None]] = {"deepspeed": _deepspeed_split_weights}


def weights_split(spec: ExperimentSpec) -> Problem | None:
    """``(key, value, what splits them)`` when the training backend splits the weights over the ranks, else None."""
    rule = SPLIT_WEIGHTS.get(spec.trainer.backend)
    return rule(spec) if rule else ("trainer.backend", spec.trainer.backend, spec.trainer.backend)


# What keeps a backend from sharing its process with a rollout engine (the local executor): backend -> rule
BESIDE_AN_ENGINE: dict[str, Callable[[ExperimentSpec], list[Problem]]] = {"deepspeed": _deepspeed_in_one_process}


def _deepspeed_optimizer_bound(flat: dict[str, Any]) -> bool:
    return int(flat.get("trainer.zero_stage") or 0) >= 1


# Whether a backend's checkpoint holds optimizer state split over as many ranks as saved it, so it cannot resume on
# another count (flattened config -> bool): DeepSpeed ZeRO 1-3 does; FSDP2's DCP checkpoints reshard.
OPTIMIZER_BOUND_TO_RANKS: dict[str, Callable[[dict[str, Any]], bool]] = {"deepspeed": _deepspeed_optimizer_bound}


def backend_problems(spec: ExperimentSpec) -> list[Problem]:
    """The selected backend's rules and the keys of the others that were changed (unknown backends are reported by
    the key's own domain check)."""
    rules = RULES.get(spec.trainer.backend)
    unused = unused_sections("trainer", spec.trainer, SECTIONS, spec.trainer.backend)
    return (rules(spec) if rules else []) + unused
