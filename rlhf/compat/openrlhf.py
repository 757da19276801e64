"""OpenRLHF reward, agent and environment files run unchanged: their ``openrlhf`` imports resolve to rlhf's own
implementations when no real ``openrlhf`` package can be imported.

Names provided (:data:`PROVIDED`); importing any other ``openrlhf`` module or name fails with a message naming it:

    openrlhf.utils.agent       AgentExecutorBase, AgentInstanceBase, MultiTurnAgentExecutor, SingleTurnAgentExecutor
                               (rlhf.agents: same protocol, see rlhf/agents/base.py)
    openrlhf.utils             extract_boxed_answer, grade_answer (OpenRLHF's grader: rlhf.compat.openrlhf_math)
    openrlhf.utils.math_utils  extract_boxed_answer, grade_answer, grade_answer_mathd, grade_answer_sympy

How: :func:`install` appends one finder to the *end* of ``sys.meta_path``. Python consults it only after every
other finder has failed to find ``openrlhf``, so an installed OpenRLHF (or any ``openrlhf`` package on
``sys.path``) is always the one imported, and nothing is installed into the environment. rlhf calls
:func:`install` just before it executes a user's reward function file (rlhf.rewards.function) or agent file
(rlhf.agents.loader), so the fallback is active in the driver and in every Ray worker that loads one. It imports
nothing until a user file asks for one of the names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rlhf.errors import UserError

ROOT = "openrlhf"
_MARK = "__rlhf_fallback__"  # set on the fallback's modules, so a real package's submodules are never served


@dataclass(frozen=True)
class _Module:
    package: bool
    names: dict[str, str]  # attribute -> "module:attribute" of its implementation here


_AGENT = "rlhf.agents"
_MATH = "rlhf.compat.openrlhf_math"
PROVIDED: dict[str, _Module] = {
    "openrlhf": _Module(True, {}),
    "openrlhf.utils": _Module(
        True, {"extract_boxed_answer": f"{_MATH}:extract_boxed_answer", "grade_answer": f"{_MATH}:grade_answer"}
    ),
    "openrlhf.utils.agent": _Module(
        False,
        {
            "AgentExecutorBase": f"{_AGENT}:AgentExecutorBase",
            "AgentInstanceBase": f"{_AGENT}:AgentInstanceBase",
            "MultiTurnAgentExecutor": f"{_AGENT}:MultiTurnAgentExecutor",
            # OpenRLHF's takes remote_rm_url=None; ours takes nothing (rewards come from the reward section).
            "SingleTurnAgentExecutor": "rlhf.agents.openrlhf_single_turn:SingleTurnAgentExecutor",
        },
    ),
    "openrlhf.utils.math_utils": _Module(
        False,
        {
            name: f"{_MATH}:{name}"
            for name in ("extract_boxed_answer", "grade_answer", "grade_answer_mathd", "grade_answer_sympy")
        },
    ),
}


def provided_names() -> list[str]:
    """Every importable name, dotted (``openrlhf.utils.agent.AgentInstanceBase``, ...)."""
    return [f"{mod}.{name}" for mod, m in PROVIDED.items() for name in m.names]


class OpenRLHFNameNotProvided(ModuleNotFoundError, UserError):
    """An ``openrlhf`` module or name the fallback does not provide (and no real OpenRLHF is installed)."""


def _not_provided(what: str) -> OpenRLHFNameNotProvided:
    listing = "; ".join(f"{mod}: {', '.join(m.names)}" for mod, m in PROVIDED.items() if m.names)
    return OpenRLHFNameNotProvided(
        f"{what} is not available: no openrlhf package is installed, and rlhf's stand-in for OpenRLHF's reward "
        f"and agent protocols provides only {listing}. Use rlhf's own API for the rest (rlhf.agents, "
        "rlhf.rewards), or install OpenRLHF itself, which is then used instead of the stand-in.",
        name=what,
    )


def _module_getattr(module_name: str):
    spec = PROVIDED[module_name]

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):  # dunders and privates: ordinary lookups (pickle, inspect, typing) must not fail
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        if f"{module_name}.{name}" in PROVIDED:  # `from openrlhf.utils import agent`
            return importlib.import_module(f"{module_name}.{name}")
        target = spec.names.get(name)
        if target is None:
            # ImportError, not AttributeError: `from openrlhf.utils import X` then shows this message as it is.
            raise _not_provided(f"{module_name}.{name}")
        impl, _, attr = target.partition(":")
        value = getattr(importlib.import_module(impl), attr)
        setattr(sys.modules[module_name], name, value)
        return value

    return __getattr__


class _FallbackFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``openrlhf`` and its provided submodules; asked last, so a real package always wins."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        if fullname != ROOT:
            parent = sys.modules.get(fullname.rpartition(".")[0])
            if parent is None or not getattr(parent, _MARK, False):
                return None  # a submodule of a real openrlhf: not ours to serve
        elif self._later_finders_find(fullname, path, target):
            return None  # a finder added after ours (a late editable install) knows a real one: let it serve
        module = PROVIDED.get(fullname)
        if module is None:
            raise _not_provided(f"module {fullname}")
        return importlib.util.spec_from_loader(fullname, self, is_package=module.package)

    def _later_finders_find(self, fullname: str, path: Any, target: Any) -> bool:
        finders = sys.meta_path[sys.meta_path.index(self) + 1 :] if self in sys.meta_path else []
        return any(getattr(f, "find_spec", None) and f.find_spec(fullname, path, target) for f in finders)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        spec = PROVIDED[name]
        module.__doc__ = f"rlhf's stand-in for {name} (see rlhf.compat.openrlhf); provides {', '.join(spec.names)}"
        module.__all__ = list(spec.names)
        setattr(module, _MARK, True)
        module.__getattr__ = _module_getattr(name)  # type: ignore[method-assign]


def _finder() -> _FallbackFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, _FallbackFinder)), None)


def install() -> None:
    """Make ``import openrlhf...`` resolve to the stand-in wherever no real package is found. Idempotent."""
    finder = _finder()
    if finder is None:
        sys.meta_path.append(_FallbackFinder())
    elif sys.meta_path[-1] is not finder:  # finders appended since: ours goes back to the end
        sys.meta_path.remove(finder)
        sys.meta_path.append(finder)


def real_openrlhf_spec() -> importlib.machinery.ModuleSpec | None:
    """Where a real ``openrlhf`` would be imported from (None: the stand-in would serve it), importing nothing."""
    loaded = sys.modules.get(ROOT)
    if loaded is not None:
        return None if getattr(loaded, _MARK, False) else loaded.__spec__
    for finder in sys.meta_path:
        if isinstance(finder, _FallbackFinder) or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(ROOT, None)
        if spec is not None:
            return spec
    return None


def fallback_active() -> bool:
    """True when an ``import openrlhf`` here would get the stand-in."""
    return real_openrlhf_spec() is None
