"""How a config key is declared: its default, its one-line documentation and its domain, side by side.

Every field of the schema (rlhf/spec/schema.py) is declared with :func:`key`, which stores the documentation and
the :class:`Domain` in the dataclass field's metadata. Hydra and OmegaConf ignore that metadata (they type-check
only), so the same dataclasses stay the structured-config schema; validation reads the domains back
(:func:`rlhf.spec.validate.validate` checks every key's value against its domain, together with the cross-field
rules) and ``rlhf-recipes explain KEY`` prints them. Why field metadata rather than a Hydra feature: structured
configs check types, not ranges, and a separate table of ranges would drift away from the keys it describes.

Pure: imports nothing beyond the standard library.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Domain:
    """The values a key may take beyond its type. Every bound is optional; ``None`` values of optional keys
    (``int | None``) are always allowed, since null is their documented "off" or "derived"."""

    gt: float | None = None  # value > gt
    ge: float | None = None  # value >= ge
    lt: float | None = None  # value < lt
    le: float | None = None  # value <= le
    choices: tuple[Any, ...] | None = None  # one of these
    empty_ok: bool = False  # strings: "" allowed besides the choices (the key's "unset")
    nonempty: bool = False  # strings and lists: must not be empty
    items: Domain | None = None  # lists: the domain of every element
    length: int | None = None  # lists: exactly this many elements
    increasing: bool = False  # lists: strictly increasing (ranges [low, high])
    sums_to: float | None = None  # lists of numbers: their sum (probabilities: 1)
    contains: str | None = None  # strings: must contain this (a template's {})

    def describe(self) -> str:
        """The domain in words, e.g. ``> 0``, ``in [0, 1)``, ``one of k1, k2, k3``."""
        parts = []
        lo = (f"[{_num(self.ge)}" if self.ge is not None else f"({_num(self.gt)}") if _has_lo(self) else None
        hi = (f"{_num(self.le)}]" if self.le is not None else f"{_num(self.lt)})") if _has_hi(self) else None
        if lo and hi:
            parts.append(f"in {lo}, {hi}")
        elif lo:
            parts.append(f">= {_num(self.ge)}" if self.ge is not None else f"> {_num(self.gt)}")
        elif hi:
            parts.append(f"<= {_num(self.le)}" if self.le is not None else f"< {_num(self.lt)}")
        if self.choices is not None:
            listed = ", ".join(str(c) for c in self.choices)
            parts.append(f"empty or one of {listed}" if self.empty_ok else f"one of {listed}")
        if self.nonempty:
            parts.append("not empty")
        if self.length is not None:
            parts.append(f"{self.length} items")
        if self.items is not None:
            inner = self.items.describe()
            if inner:
                parts.append(f"each {inner}")
        if self.increasing:
            parts.append("increasing")
        if self.sums_to is not None:
            parts.append(f"summing to {_num(self.sums_to)}")
        if self.contains is not None:
            parts.append(f"containing {self.contains}")
        return ", ".join(parts)

    def violation(self, value: Any) -> str | None:
        """None when ``value`` is inside the domain, else what is wrong, as the fix to print."""
        if value is None:
            return None
        if isinstance(value, (list, tuple)):
            return self._list_violation(list(value))
        if isinstance(value, str):
            if self.nonempty and not value:
                return "must not be empty"
            if self.choices is not None and value not in self.choices and not (self.empty_ok and value == ""):
                return f"must be {self.describe()}"
            if self.contains is not None and value and self.contains not in value:
                return f"must contain {self.contains}"
            return None
        if self.choices is not None and value not in self.choices:
            return f"must be {self.describe()}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            # inf passes every bound one side and nan none, and either reaches the plan's arithmetic (int(inf))
            return f"must be a finite number {self.describe()}".rstrip()
        if (
            (self.gt is not None and not value > self.gt)
            or (self.ge is not None and not value >= self.ge)
            or (self.lt is not None and not value < self.lt)
            or (self.le is not None and not value <= self.le)
        ):
            return f"must be {self._bounds_only()}"
        return None

    def _bounds_only(self) -> str:
        return dataclasses.replace(self, choices=None, nonempty=False, items=None).describe()

    def _list_violation(self, values: list[Any]) -> str | None:
        whole = f"must be {self.describe()}"
        if self.nonempty and not values:
            return "must not be empty"
        if self.length is not None and len(values) != self.length:
            return f"{whole} (got {len(values)})"
        if self.items is not None:
            for i, v in enumerate(values):
                bad = self.items.violation(v)
                if bad:
                    return f"item {i} ({v!r}) {bad}"
        if self.increasing and any(not a < b for a, b in zip(values, values[1:], strict=False)):
            return whole
        if self.sums_to is not None and values and abs(sum(values) - self.sums_to) > 1e-6:
            return f"{whole} (sum {sum(values):g})"
        return None


def _has_lo(d: Domain) -> bool:
    return d.ge is not None or d.gt is not None


def _has_hi(d: Domain) -> bool:
    return d.le is not None or d.lt is not None


def _num(x: float | None) -> str:
    return f"{x:g}"


def key(default: Any = MISSING, doc: str = "", *, factory: Any = MISSING, **domain: Any) -> Any:
    """A schema field: ``default`` (or ``factory`` for lists and dicts), one line of ``doc``, and the keyword
    arguments of :class:`Domain`."""
    meta = {"doc": doc, "domain": Domain(**domain)}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def items(**domain: Any) -> Domain:
    """The domain of each element of a list key: ``key(factory=..., items=items(ge=0))``."""
    return Domain(**domain)


@dataclass(frozen=True)
class KeyInfo:
    """One leaf key of the schema, for ``explain`` and for validation."""

    path: str  # dotted, e.g. trainer.lr
    type: str  # as written in the schema, e.g. "float", "int | None", "list[float]"
    default: Any
    doc: str
    domain: Domain
    section_doc: str = ""  # the docstring of the section's dataclass


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return MISSING


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def walk(cls: type, prefix: str = "") -> Iterator[KeyInfo]:
    """Every leaf key of the dataclass ``cls`` (sections are followed), in declaration order."""
    return iter(_keys_of(cls, prefix))


# The schema is built once, at import (rlhf.spec.sections.backends refuses a section registered later), so a class's
# keys are read once: resolving its type hints costs milliseconds, and the importers ask of thousands of keys.
@functools.cache
def _keys_of(cls: type, prefix: str) -> tuple[KeyInfo, ...]:
    import typing

    out: list[KeyInfo] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        path = f"{prefix}{f.name}"
        if _is_section(tp):
            out.extend(_keys_of(tp, path + "."))
            continue
        meta = f.metadata or {}
        out.append(
            KeyInfo(
                path=path,
                type=str(f.type).replace("typing.", ""),
                default=_default_of(f),
                doc=meta.get("doc", ""),
                domain=meta.get("domain", Domain()),
                section_doc=(cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
            )
        )
    return tuple(out)


@functools.cache
def _by_path(cls: type) -> dict[str, KeyInfo]:
    return {k.path: k for k in _keys_of(cls, "")}


def domain_violations(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any, str]]:
    """``(full key, value, fix)`` for every value of the dataclass instance ``obj`` outside its key's domain."""
    for name, d in _domains_of(type(obj)):
        value = getattr(obj, name)
        path = f"{prefix}{name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from domain_violations(value, path + ".")
            continue
        if d is None:
            continue
        bad = d.violation(value)
        if bad:
            yield path, value, bad


@functools.cache
def _domains_of(cls: type) -> tuple[tuple[str, Domain | None], ...]:
    """Each field of ``cls`` with its domain (validation checks every spec, the layout search thousands)."""
    return tuple((f.name, (f.metadata or {}).get("domain")) for f in dataclasses.fields(cls))


def find_key(cls: type, path: str) -> KeyInfo | None:
    return _by_path(cls).get(path)


def keys_under(cls: type, prefix: str) -> list[KeyInfo]:
    """The leaf keys whose path starts with ``prefix.`` (a section), or equals it."""
    return [k for k in walk(cls) if k.path == prefix or k.path.startswith(prefix + ".")]


def close_matches(cls: type, path: str, n: int = 3) -> Sequence[str]:
    """The dotted keys (or sections) of ``cls`` closest to ``path``, a mistyped key, the closest first: the names
    in its own section compared with its last part (``trainer.zero_stag`` -> ``trainer.zero_stage``, not every
    ``trainer.*`` that shares the prefix; ``trainr`` -> ``trainer``), else every dotted key."""
    from rlhf.spec.suggest import nearest

    paths = [k.path for k in walk(cls)]
    section, _, leaf = path.rpartition(".")
    under = f"{section}." if section else ""
    names = sorted({p[len(under) :].split(".")[0] for p in paths if p.startswith(under)})
    near = nearest(leaf, names, n=n)
    if near:
        return [f"{under}{name}" for name in near]
    return nearest(path, paths, n=n)
