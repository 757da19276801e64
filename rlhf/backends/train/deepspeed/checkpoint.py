"""DeepSpeed's checkpoint layout, read back for ``checkpoint.init_from`` (rlhf.backends.contract.training.TrainBackend:
``checkpoint_weights``, ``checkpoint_state_dict``). No torch at import: the preflight reads file names only.

A trained role's folder of a step checkpoint holds what ``engine.save_checkpoint`` wrote under its tag (``ds``,
rlhf.backends.train.deepspeed.engine), and one RNG file per rank beside it::

    ds/mp_rank_00_model_states.pt                    ZeRO 0-2: the whole module (ZeRO 1-2: the 16-bit copy)
    ds/zero_pp_rank_R_mp_rank_00_model_states.pt     ZeRO-3: one per rank R (the module's shapes, no weights)
    ds/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt   ZeRO 1-3 (and bf16): rank R's fp32 master partition

ZeRO 1-3 are consolidated with DeepSpeed's own ``zero_to_fp32`` (the fp32 master weights, gathered from every rank's
partition, whatever the rank count); ZeRO-0 is read from its model-states file, which holds the whole module.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlhf.backends.contract.training import SavedWeights

MODEL_STATES = "mp_rank_00_model_states.pt"
_ZERO3_MODEL = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_00_model_states\.pt$")
_OPTIM = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt$")


def _ranks(folder: Path, pattern: re.Pattern[str]) -> set[int]:
    return {int(m.group(1)) for p in folder.iterdir() if (m := pattern.match(p.name))}


def _tag(folder: Path) -> Path | None:
    """The tag folder DeepSpeed wrote into (the first holding model states; ours is ``ds``)."""
    tags = sorted(p for p in folder.iterdir() if p.is_dir() and next(p.glob("*model_states.pt"), None) is not None)
    return tags[0] if tags else None


def _missing(ds: Path) -> list[str]:
    """Files of ``ds`` that the others show were written and are not there: every rank's optimizer partition (ranks
    0..N-1, N the highest seen) and, under ZeRO-3, every rank's model states."""
    optim, zero3 = _ranks(ds, _OPTIM), _ranks(ds, _ZERO3_MODEL)
    ranks = set(range(max(optim | zero3) + 1)) if optim or zero3 else set()
    bf16 = "bf16_" if next(ds.glob("bf16_*optim_states.pt"), None) is not None else ""
    out = [f"{bf16}zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in sorted(ranks - optim)]
    if zero3:
        out += [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in sorted(ranks - zero3)]
    elif optim and not (ds / MODEL_STATES).is_file():
        out.append(MODEL_STATES)
    return out


def checkpoint_weights(folder: Path) -> SavedWeights:
    """Where DeepSpeed's files in the role folder ``folder`` are, and what is missing of them."""
    folder = Path(folder)
    ds = _tag(folder) if folder.is_dir() else None
    if ds is None:
        return SavedWeights(
            folder,
            f"{folder} holds no DeepSpeed model states (<tag>/*model_states.pt, which trainer.backend=deepspeed "
            "writes): the checkpoint is incomplete",
        )
    missing = _missing(ds)
    if missing:
        return SavedWeights(
            ds, f"{ds} lacks DeepSpeed files its other files name ({', '.join(missing)}): the checkpoint is incomplete"
        )
    return SavedWeights(ds)


def checkpoint_state_dict(folder: Path) -> dict[str, Any]:
    """The full state dict (the module's own names, CPU tensors) of the role folder ``folder``."""
    import torch

    found = checkpoint_weights(folder)
    if found.problem:
        raise FileNotFoundError(found.problem)
    ds = found.where
    if (ds / MODEL_STATES).is_file():
        states = torch.load(ds / MODEL_STATES, map_location="cpu", weights_only=False, mmap=True)
        if int((states.get("ds_config") or {}).get("zero_optimization", {}).get("stage", 0)) == 0:
            return {k: v.clone() for k, v in states["module"].items()}  # no ZeRO: the module is whole here
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(ds.parent), tag=ds.name)
