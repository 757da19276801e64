"""The backends' own sub-sections of ``trainer`` and ``rollout``, built from the registry.

A training or rollout backend with keys of its own names their dataclass on its registry line
(rlhf.spec.registry.Backend ``section``: "module:Class", a module in the backend's folder importing only
rlhf.spec.keys). :func:`with_backend_sections` makes ``TrainerSpec`` and ``RolloutSpec`` frozen dataclasses with one
field per such line, named by the backend's config string, right after ``backend``: so ``trainer.fsdp2.*`` and
``rollout.vllm.*`` are typed at compose time, documented by ``rlhf-recipes explain`` and the reference, checked
against their domains, and a new backend's keys need no edit here or in the schema.

The sub-sections are fixed when the schema is built, at the first import of rlhf.spec. A line added to a table
later (a test patching it) works for a backend without keys; one with keys fails by :class:`SectionNotBuilt`,
saying how to register it in time (an entry point: rlhf.spec.registry.ENTRY_POINTS), never by dropping its keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rlhf.spec.registry import Backend, group_of, section_class

# parent section name -> (its built dataclass, the registry table it was built from)
_BUILT: dict[str, tuple[type, Mapping[str, Backend]]] = {}


class SectionNotBuilt(RuntimeError):
    """A registry line names keys of its own but was added after the schema was built."""


def with_backend_sections(parent: str, table: Mapping[str, Backend], after: str = "backend") -> Callable[[type], type]:
    """Class decorator: the class as a frozen dataclass, with ``<parent>.<name>`` (the line's section, defaults
    and all) inserted after the field ``after`` for each line of ``table`` that has a section, in the table's
    order."""

    def build(cls: type) -> type:
        declared = dict(cls.__dict__.get("__annotations__", {}))
        if after not in declared:
            raise TypeError(f"{cls.__name__} has no field {after!r} to put the backends' sections after")
        annotations: dict[str, object] = {}
        for name, annotation in declared.items():
            annotations[name] = annotation
            if name != after:
                continue
            for backend, line in table.items():
                section = section_class(line)
                if section is None:
                    continue
                _check_section(parent, backend, line, section, declared)
                annotations[backend] = section  # a class, not a string: resolved without this module's names
                setattr(cls, backend, field(default_factory=section))
        cls.__annotations__ = annotations
        built = dataclass(frozen=True)(cls)
        _BUILT[parent] = (built, table)
        return built

    return build


def _check_section(parent: str, backend: str, line: Backend, section: object, declared: Mapping[str, object]) -> None:
    if backend in declared:
        raise TypeError(
            f"{parent}.{backend}: the {backend} backend's keys ({line.section}) would replace the key "
            f"{parent}.{backend}; register the backend under another name"
        )
    params = getattr(section, "__dataclass_params__", None)
    if not (isinstance(section, type) and dataclasses.is_dataclass(section) and params is not None and params.frozen):
        raise TypeError(
            f"{line.section} ({parent}.{backend}.*): a backend's section must be a frozen dataclass "
            "(@dataclass(frozen=True)) whose fields are declared with rlhf.spec.keys.key"
        )


def sections(parent: str) -> dict[str, type]:
    """Backend name -> the dataclass of its sub-section ``<parent>.<name>``, for each line of the table ``parent``
    was built from that has keys of its own; :class:`SectionNotBuilt` for a line with keys added after the build."""
    cls, table = _BUILT[parent]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, type] = {}
    for name, line in table.items():
        section = section_class(line)
        if section is None:
            continue
        built = fields.get(name)
        if built is None or built.default_factory is not section:
            raise SectionNotBuilt(
                f"{parent}.backend={name}: its registry line ({line.target}) has keys of its own, {parent}.{name}.* "
                f"({line.section}), but was added to rlhf.spec.registry's table after the schema was built, so the "
                f"schema has no {parent}.{name} section. Register it before rlhf.spec is imported, as an entry point "
                f"of group {group_of(table)} ({name} = <module>:<its Backend line>, in its package's "
                "entry_points.txt; docs/contributing/backends.md), not by adding it to the table at run time"
            )
        out[name] = section
    return out


def check_built() -> None:
    """:class:`SectionNotBuilt` when any table holds a line with keys that its parent section was built without
    (before a compose: the keys would otherwise be refused as unknown, without the reason)."""
    for parent in _BUILT:
        sections(parent)
