"""Whether a model folder holds trained value-head weights, read from the weight names alone.

A reward model is a transformer body plus a linear head stored under ``value_head_prefix`` (``score.weight``; see
rlhf.models.value_head). A folder without those weights, such as a policy (a causal LM with ``lm_head.weight``),
still loads, with a freshly initialised head that scores at random, and transformers only logs a warning. These
helpers let ``rlhf-serve-rm`` and the preflight refuse it.

The names come from the safetensors headers (an 8-byte length, then a JSON table of tensors) or the sharded
checkpoint's index: no torch, nothing loaded, milliseconds for any model size. A folder with only
``pytorch_model.bin`` (a pickle) or a hub name cannot be read this way: :func:`missing_value_head` says None
(unknown) and ``load_value_model(..., require_trained_head=True)`` decides after loading instead.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path

from rlhf.errors import UserError

SAFETENSORS_INDEX = "model.safetensors.index.json"


class UntrainedValueHead(UserError):
    """A reward model folder whose checkpoint has no value-head weights; the message names the folder, the
    missing weight, what the checkpoint holds instead and ``fix``."""

    def __init__(self, folder: str | Path, prefix: str, names: Iterable[str], fix: str = "") -> None:
        self.folder, self.prefix, self.names, self.fix = str(folder), prefix, set(names), fix
        self.problem = head_problem(self.folder, prefix, self.names)
        super().__init__(f"{self.folder}: {self.problem}. Fix: {fix or default_fix(prefix)}")

    def __reduce__(self):  # pickled by its fields (Ray, multiprocessing), not by the message
        return (UntrainedValueHead, (self.folder, self.prefix, sorted(self.names), self.fix))

    def with_fix(self, fix: str) -> UntrainedValueHead:
        """The same problem with the fix the caller's user can apply (a CLI flag rather than a config key)."""
        return UntrainedValueHead(self.folder, self.prefix, self.names, fix)


def safetensors_names(file: str | Path) -> list[str]:
    """The tensor names in one safetensors file, from its header."""
    with Path(file).open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return [k for k in header if k != "__metadata__"]


def weight_names(folder: str | Path) -> set[str] | None:
    """Every weight name of the checkpoint in ``folder``; None when it has no safetensors weights to read (or they
    cannot be read: the loader will say what is wrong with them)."""
    root = Path(folder).expanduser()
    index = root / SAFETENSORS_INDEX
    try:
        if index.is_file():
            return set(json.loads(index.read_text()).get("weight_map", {}))
        files = sorted(root.glob("model*.safetensors"))
        return {name for f in files for name in safetensors_names(f)} if files else None
    except (OSError, ValueError, struct.error):
        return None


def _config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def head_prefix(folder: str | Path, default: str = "score") -> str:
    """The prefix the loader will use: the checkpoint's ``config.value_head_prefix`` wins (as in OpenRLHF)."""
    return _config(Path(folder).expanduser()).get("value_head_prefix") or default


def has_head(names: Iterable[str], prefix: str) -> bool:
    return any(n == f"{prefix}.weight" or n.startswith(f"{prefix}.") for n in names)


def head_problem(folder: str | Path, prefix: str, names: Iterable[str]) -> str:
    """Names the missing weight and what the checkpoint in ``folder`` looks like instead."""
    names = set(names)
    architectures = ", ".join(_config(Path(folder).expanduser()).get("architectures") or []) or "unknown"
    looks = f"its config says {architectures}"
    if "lm_head.weight" in names:
        looks += " and it has lm_head.weight: a causal LM such as a policy, not a trained reward model"
    heads = sorted(n for n in names if n.count(".") == 1 and n.endswith(".weight") and n != "lm_head.weight")
    other = f"; top-level weights it does have: {', '.join(heads)}" if heads else ""
    return (
        f"the checkpoint has no value head weights ({prefix}.weight), so the head would start random and "
        f"the rewards would be noise ({looks}{other})"
    )


def missing_value_head(folder: str | Path, default_prefix: str = "score") -> UntrainedValueHead | None:
    """The problem with ``folder`` as a reward model, None when it has a head or when its weight names cannot be
    read (no safetensors: the caller cannot tell before loading)."""
    names = weight_names(folder)
    if names is None:
        return None
    prefix = head_prefix(folder, default_prefix)
    return None if has_head(names, prefix) else UntrainedValueHead(folder, prefix, names)


def default_fix(prefix: str) -> str:
    return (
        "give a trained reward model (train one with algorithm=rm, or a sequence-classification checkpoint), or "
        f"name the head the checkpoint has if it is not '{prefix}'"
    )
