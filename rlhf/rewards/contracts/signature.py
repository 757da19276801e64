"""A function's parameters as the contracts read them, from a live function (``inspect``) or from a file's syntax
tree (``ast``, for the static check before start-up), so both decide the contract the same way."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Params:
    """``positional``: the parameters a positional call fills, in order (``positional_only`` among them);
    ``required``: the names with no default (positional and keyword-only); ``keyword_only``; ``var_positional`` /
    ``var_keyword``: ``*args`` / ``**kwargs``."""

    positional: tuple[str, ...] = ()
    positional_only: tuple[str, ...] = ()
    keyword_only: tuple[str, ...] = ()
    required: frozenset[str] = frozenset()
    var_positional: bool = False
    var_keyword: bool = False

    @property
    def names(self) -> set[str]:
        return set(self.positional) | set(self.keyword_only)

    def by_keyword(self, name: str) -> bool:
        """Whether a keyword call may pass ``name``."""
        return (name in self.names and name not in self.positional_only) or self.var_keyword

    def shown(self) -> str:
        """The parameter list as written, e.g. ``prompts, completions, **kwargs``."""
        parts = list(self.positional)
        if self.var_positional:
            parts.append("*args")
        elif self.keyword_only:
            parts.append("*")
        parts += self.keyword_only
        if self.var_keyword:
            parts.append("**kwargs")
        return ", ".join(parts)

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Params | None:
        """The parameters of ``fn`` (a function, a method or a callable object); None when Python cannot tell."""
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return None
        ps = list(sig.parameters.values())
        positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return cls(
            positional=tuple(p.name for p in positional),
            positional_only=tuple(p.name for p in ps if p.kind is p.POSITIONAL_ONLY),
            keyword_only=tuple(p.name for p in ps if p.kind is p.KEYWORD_ONLY),
            required=frozenset(
                p.name for p in ps if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ),
            var_positional=any(p.kind is p.VAR_POSITIONAL for p in ps),
            var_keyword=any(p.kind is p.VAR_KEYWORD for p in ps),
        )

    @classmethod
    def from_ast(cls, a: ast.arguments) -> Params:
        """The parameters of a ``def`` in a syntax tree."""
        positional = [p.arg for p in a.posonlyargs + a.args]
        with_default = positional[len(positional) - len(a.defaults) :] if a.defaults else []
        required = {p for p in positional if p not in with_default}
        required |= {k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None}
        return cls(
            positional=tuple(positional),
            positional_only=tuple(p.arg for p in a.posonlyargs),
            keyword_only=tuple(k.arg for k in a.kwonlyargs),
            required=frozenset(required),
            var_positional=a.vararg is not None,
            var_keyword=a.kwarg is not None,
        )
