"""Reward references -> the callables they name: a python file imported as a fresh module (an OpenRLHF file's
``import openrlhf.utils`` resolving to rlhf.compat.openrlhf where OpenRLHF is absent), or an import path (TRL's own
``trl.rewards`` functions, with TRL's code)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rlhf.compat import openrlhf as openrlhf_compat
from rlhf.rewards.contracts.openrlhf import DEFINITION
from rlhf.rewards.refs import DEFAULT_NAMES, RewardRef
from rlhf.rewards.result import RewardError

#: veRL's default scorers, reproduced here (rlhf.rewards.verl_scorers), stand in for veRL's own where veRL is not
#: installed: a converted veRL command names them as veRL does.
VERL_STAND_INS = {
    "verl.utils.reward_score.default_compute_score": "rlhf.rewards.verl_scorers.default_compute_score",
    "verl.utils.reward_score.gsm8k.compute_score": "rlhf.rewards.verl_scorers.gsm8k_score",
    "verl.utils.reward_score.math_reward.compute_score": "rlhf.rewards.verl_scorers.math_score",
}


@dataclass
class Loaded:
    """A reference's callable; ``name`` for its logs (TRL's: the function's ``__name__``), ``path`` the file its
    errors name."""

    ref: RewardRef
    fn: Callable[..., Any]
    name: str
    path: str


def import_file(path: str | Path) -> ModuleType:
    """Import ``path`` as a fresh module; a RewardError names what is wrong."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise RewardError(f"reward function file {path} does not exist; set reward.function to a .py file")
    name = "rlhf_reward_func_" + hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise RewardError(f"reward function file {path} cannot be imported (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    openrlhf_compat.install()  # OpenRLHF reward files import openrlhf.utils (grade_answer, ...)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise RewardError(f"reward function file {path} failed to import: {type(e).__name__}: {e}") from e
    return module


def _functions(module: ModuleType) -> str:
    names = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__)
    return f" (it defines: {', '.join(names)})" if names else ""


def _from_file(ref: RewardRef, modules: dict[str, ModuleType]) -> tuple[Any, str]:
    key = str(Path(ref.file).expanduser().resolve())
    if key not in modules:  # a file named twice (FILE.py:a, FILE.py:b) is one module, its globals shared
        modules[key] = import_file(ref.file)
    module = modules[key]
    if ref.name is not None:
        if not hasattr(module, ref.name):
            raise RewardError(f"reward function file {ref.file} defines no {ref.name}{_functions(module)}")
        return getattr(module, ref.name), ref.name
    for name in DEFAULT_NAMES:
        if hasattr(module, name):
            return getattr(module, name), name
    raise RewardError(
        f"reward function file {ref.file} defines no {' (nor '.join(DEFAULT_NAMES)}){_functions(module)}; add "
        f"{DEFINITION}, or name the function: reward.function={ref.file}:NAME"
    )


def _import(dotted: str) -> Any:
    module_name, _, attr = dotted.rpartition(".")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def _from_module(ref: RewardRef) -> Any:
    dotted = f"{ref.module}.{ref.name}"
    try:
        return _import(dotted)
    except ImportError as e:
        stand_in = VERL_STAND_INS.get(dotted)
        if stand_in is not None:
            return _import(stand_in)
        root = ref.module.split(".")[0]
        hint = " (pip install 'rlhf[trl]' or pip install trl)" if root == "trl" else f" (is {root} installed?)"
        raise RewardError(f"reward function {ref.text}: cannot import {ref.module}: {e}{hint}") from e
    except AttributeError as e:
        raise RewardError(f"reward function {ref.text}: {ref.module} has no {ref.name}") from e


def load(ref: RewardRef, modules: dict[str, ModuleType] | None = None) -> Loaded:
    """The callable ``ref`` names (a factory's product where the reference fixes its arguments); ``modules``: the
    files already imported for the same reward, by resolved path."""
    if ref.is_file:
        fn, name = _from_file(ref, {} if modules is None else modules)
        path = str(Path(ref.file).expanduser())
    else:
        fn = _from_module(ref)
        name = ref.name or ref.text
        path = ""
    if ref.factory_kwargs is not None:
        fn = fn(**ref.factory_kwargs)
    if not callable(fn):
        raise RewardError(f"reward function {ref.text}: {name} is {type(fn).__name__}, not a function")
    name = getattr(fn, "__name__", None) or type(fn).__name__
    if not path:
        try:
            path = inspect.getsourcefile(fn) or inspect.getsourcefile(type(fn)) or ref.text
        except TypeError:
            path = ref.text
    return Loaded(ref, fn, name, path)
