"""Validation of the training backend's keys (``trainer.backend``), asked of the backend itself.

Each backend's rules live in its own folder, on its descriptor (rlhf.backends.train.<name>.descriptor:
``problems``, ``weights_split``, ``beside_an_engine``, ``optimizer_bound_to_ranks``); this module reaches the
descriptor through its registry line (rlhf.spec.registry), never by name, and its own keys' dataclass through the
line's ``section``. Each rule returns ``(full key, value given, fix)`` triples; rlhf.spec.validate reports them with
every other problem. Besides its own rules, a backend's sub-section (``trainer.<name>``) must keep its defaults when
another backend is selected, so a key that would be ignored is never silently accepted.
"""

from __future__ import annotations

from typing import Any

from rlhf.spec.derive import Derived
from rlhf.spec.registry import TRAIN_BACKENDS, train_backend, unused_sections
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.sections import backends

Problem = tuple[str, Any, str]


def _selected(name: str) -> Any:
    """The descriptor of ``name``, or None when no line registers it (the key's domain check reports that)."""
    return train_backend(name) if name in TRAIN_BACKENDS else None


def sections() -> dict[str, type]:
    """Backend name -> the dataclass of its own sub-section ``trainer.<name>`` (the registry lines' ``section``;
    backends without keys have none). rlhf.spec.sections.backends.SectionNotBuilt for a line with keys registered
    after the schema was built."""
    return backends.sections("trainer")


def weights_split(spec: ExperimentSpec) -> Problem | None:
    """``(key, value, what splits them)`` when the training backend splits the weights over the ranks (so no rank
    holds the whole model between passes), else None."""
    backend = _selected(spec.trainer.backend)
    return backend.weights_split(spec) if backend is not None else None


def beside_an_engine(spec: ExperimentSpec) -> list[Problem]:
    """What keeps the training backend from sharing its process with a rollout engine (the local executor)."""
    backend = _selected(spec.trainer.backend)
    return backend.beside_an_engine(spec) if backend is not None else []


def optimizer_bound_to_ranks(name: str, flat: dict[str, Any]) -> bool:
    """Whether backend ``name``'s checkpoint, written under the flattened config ``flat``, holds optimizer state split
    over as many ranks as saved it (so it cannot resume on another count)."""
    backend = _selected(name)
    return bool(backend is not None and backend.optimizer_bound_to_ranks(flat))


def backend_problems(spec: ExperimentSpec, d: Derived) -> list[Problem]:
    """The selected backend's rules and the keys of the others that were changed (unknown backends are reported by
    the key's own domain check)."""
    backend = _selected(spec.trainer.backend)
    rules = backend.problems(spec, d) if backend is not None else []
    return rules + unused_sections("trainer", spec.trainer, sections(), spec.trainer.backend)
