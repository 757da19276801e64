"""A tiny name -> object registry, keyed by the exact strings the config uses.

Algorithm presets in conf/ only name entries of these registries; the spec layer resolves the names early so that a
typo fails at validation time with the list of valid names, not deep inside a training step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """An unregistered name was looked up. Both a ``KeyError`` (it is a lookup) and a ``ValueError`` (it is a bad
    config value), so callers can catch whichever they think of."""

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message and wrap it in quotes.
        return str(self.args[0])


class DuplicateNameError(ValueError):
    """A name was registered twice; the second definition would silently shadow the first."""


class Registry(Generic[T]):
    """Maps config strings to implementations: ``@REG.register("name")`` on a function, or ``REG.add("name", obj)``
    for any object; ``REG.get("name")`` looks it up."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # used in error messages: "unknown <kind> 'x'; valid: ..."
        self._entries: dict[str, T] = {}

    def add(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name``; raises :class:`DuplicateNameError` if the name is taken."""
        if name in self._entries:
            raise DuplicateNameError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`; returns the decorated object unchanged."""

        def decorator(obj: T) -> T:
            return self.add(name, obj)

        return decorator

    def get(self, name: str) -> T:
        """The entry for ``name``; raises :class:`UnknownNameError` listing the valid names."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}") from None

    def names(self) -> tuple[str, ...]:
        """All registered names, sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return name in self._entries
