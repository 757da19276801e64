"""Validation of the rollout backend's keys (``rollout.backend``), asked of the backend itself.

Each backend's rules live in its own folder, on its descriptor (rlhf.backends.rollout.<name>.descriptor:
``problems``, ``moved_keys``); this module reaches the descriptor through its registry line (rlhf.spec.registry),
never by name, and its own keys' dataclass through the line's ``section``. Each rule returns ``(full key, value
given, fix)`` triples; rlhf.spec.validate reports them with every other problem.

A backend's sub-section (``rollout.<name>``) changed while another backend is selected is reported as a warning by
the preflight (:func:`ignored_keys`), not refused: the GPU recipes set vLLM's memory fraction, and
``rlhf-run +recipe=grpo_llama3_8b rollout=hf`` must still start (the key is ignored, and said so).
"""

from __future__ import annotations

from typing import Any

from rlhf.spec.derive import Derived
from rlhf.spec.registry import ROLLOUT_BACKENDS, rollout_backend, unused_sections
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.sections import backends

Problem = tuple[str, Any, str]


def _selected(name: str) -> Any:
    """The descriptor of ``name``, or None when no line registers it (the key's domain check reports that)."""
    return rollout_backend(name) if name in ROLLOUT_BACKENDS else None


def sections() -> dict[str, type]:
    """Backend name -> the dataclass of its own sub-section ``rollout.<name>`` (the registry lines' ``section``;
    backends without keys have none). rlhf.spec.sections.backends.SectionNotBuilt for a line with keys registered
    after the schema was built."""
    return backends.sections("rollout")


def moved_keys() -> dict[str, str]:
    """Keys that moved into a backend's sub-section, old spelling -> new: the old one fails at compose time naming
    the new one (no aliases: one spelling per key), gathered from every registered backend's ``moved_keys``."""
    out: dict[str, str] = {}
    for name in ROLLOUT_BACKENDS:
        out.update(getattr(rollout_backend(name), "moved_keys", {}))
    return out


def generates_in_policy(spec: ExperimentSpec) -> bool:
    """Whether the policy's ranks generate with the weights they train (``rollout.<backend>.in_policy``, the hf
    backend's): no engine processes, no weight sync, nothing taking turns on the devices."""
    section = getattr(spec.rollout, spec.rollout.backend, None)  # the selected backend's own keys, if it has any
    return bool(getattr(section, "in_policy", False))


def lora_sync_problems(spec: ExperimentSpec) -> list[Problem]:
    """``rollout.weight_sync_lora=adapter`` needs LoRA on and a backend that declares adapter loading
    (rlhf.spec.registry.Backend.lora_adapter)."""
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
    able = ", ".join(f"rollout={n}" for n, b in sorted(ROLLOUT_BACKENDS.items()) if b.lora_adapter)
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
    sections()  # a backend's keys missing from the schema fail whether or not the run has engines
    if "rollout" not in d.roles:
        return []
    backend = _selected(spec.rollout.backend)
    return (backend.problems(spec, d) if backend is not None else []) + lora_sync_problems(spec)


def ignored_keys(spec: ExperimentSpec) -> list[Problem]:
    """The keys of other backends' sub-sections that were changed: this run ignores them."""
    return unused_sections("rollout", spec.rollout, sections(), spec.rollout.backend)
