"""OpenRLHF 0.11.2's own pure functions, read from its wheel, for the parity tests.

The wheel (``pip download openrlhf==0.11.2 --no-deps``; ``scripts/install.sh --dev`` puts it in ``.cache/reference``,
git-ignored) is never installed: installing it would pull its pinned deepspeed, vllm and transformers. Its modules
cannot be imported as they are either: ``openrlhf/models/utils.py`` imports deepspeed at module level,
``openrlhf/models/loss.py`` imports it through ``.utils``, and the experience maker imports ray and the Ray launcher
(which imports vLLM-facing code). So each module's source is read from the zip, parsed, and only the top-level
definitions asked for (functions, classes and constants, by name) are compiled and executed, in a namespace that
supplies what they use: torch, typing names, and the other loaded functions. No import statement of the wheel is
executed; a name the namespace does not supply is a NameError at call time, naming it.
"""

from __future__ import annotations

import ast
import itertools
import logging
import os
import typing
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

VERSION = "0.11.2"
#: Where scripts/install.sh --dev puts the wheel; RLHF_OPENRLHF_WHEEL names another file.
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "reference"
HOW_TO_GET = (
    f"the OpenRLHF {VERSION} wheel is not in {CACHE} nor named by RLHF_OPENRLHF_WHEEL (scripts/install.sh --dev "
    f"fetches it; or pip download openrlhf=={VERSION} --no-deps -d {CACHE})"
)


def wheel_path() -> Path | None:
    """The wheel to read, or None when there is none here."""
    named = os.environ.get("RLHF_OPENRLHF_WHEEL")
    if named:
        return Path(named) if Path(named).is_file() else None
    found = sorted(CACHE.glob(f"openrlhf-{VERSION}-*.whl"))
    return found[0] if found else None


class _NotLoaded:
    """Stands for a name the wheel imports but the loaded definitions only mention in annotations (a Ray actor
    group, the Experience class): touching it says so instead of silently working."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise RuntimeError(f"openrlhf's {self._name} is not loaded (its module needs GPU-only imports)")


def _source(wheel: zipfile.ZipFile, module: str) -> str:
    # Wheels of this project keep the package under <name>.data/purelib/.
    for name in wheel.namelist():
        if name.endswith(f"purelib/{module}") or name == module:
            return wheel.read(name).decode()
    raise FileNotFoundError(f"{module} is not in the wheel")


def _definitions(source: str, module: str, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute only the top-level definitions of ``source`` named in ``names``."""
    tree = ast.parse(source, filename=module)
    kept = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            kept.append(node)
        elif isinstance(node, ast.Assign) and {getattr(t, "id", None) for t in node.targets} <= names:
            kept.append(node)
    missing = names - {getattr(n, "name", None) or n.targets[0].id for n in kept}
    if missing:
        raise LookupError(f"{module} of OpenRLHF {VERSION} defines no {sorted(missing)}")
    code = compile(ast.Module(body=kept, type_ignores=[]), f"openrlhf-{VERSION}/{module}", "exec")
    exec(code, namespace)  # noqa: S102 - the reference's own code, read from its wheel
    return {name: namespace[name] for name in names}


def load(wheel_file: Path) -> SimpleNamespace:
    """``compute_approx_kl``, ``compute_reward``, ``masked_mean``, ``KL_IS_WEIGHT_CLIP`` (models/utils.py),
    ``aggregate_loss``, ``PolicyLoss``, ``ValueLoss`` (models/loss.py), ``RemoteExperienceMaker``
    (trainer/ppo_utils/experience_maker.py, for its advantage methods) and ``apply_length_penalties``."""
    # The wheel's annotations are evaluated when its functions are defined: they need these typing names.
    typing_names = {name: getattr(typing, name) for name in ("Optional", "Tuple", "Union", "List")}
    logger = logging.getLogger("openrlhf-reference")
    with zipfile.ZipFile(wheel_file) as wheel:
        utils = _definitions(
            _source(wheel, "openrlhf/models/utils.py"),
            "openrlhf/models/utils.py",
            {"KL_IS_WEIGHT_CLIP", "compute_approx_kl", "compute_reward", "masked_mean"},
            {"torch": torch, **typing_names},
        )
        loss = _definitions(
            _source(wheel, "openrlhf/models/loss.py"),
            "openrlhf/models/loss.py",
            {"aggregate_loss", "PolicyLoss", "ValueLoss"},
            {"torch": torch, "nn": nn, "F": F, "masked_mean": utils["masked_mean"], **typing_names},
        )
        penalties = _definitions(
            _source(wheel, "openrlhf/trainer/ppo_utils/length_penalty.py"),
            "openrlhf/trainer/ppo_utils/length_penalty.py",
            {"apply_overlong_penalty", "apply_stop_properly_penalty", "apply_length_penalties"},
            {"logger": logger, **typing_names},
        )
        maker = _definitions(
            _source(wheel, "openrlhf/trainer/ppo_utils/experience_maker.py"),
            "openrlhf/trainer/ppo_utils/experience_maker.py",
            {"RemoteExperienceMaker"},
            {
                "torch": torch,
                "itertools": itertools,
                "logger": logger,
                "compute_approx_kl": utils["compute_approx_kl"],
                "compute_reward": utils["compute_reward"],
                "masked_mean": utils["masked_mean"],
                "apply_length_penalties": penalties["apply_length_penalties"],
                "RayActorGroup": _NotLoaded("RayActorGroup"),
                "Experience": _NotLoaded("Experience"),
                **typing_names,
            },
        )
    return SimpleNamespace(**utils, **loss, **penalties, **maker)
