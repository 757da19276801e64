"""FSDP2's checkpoint layout, read back for ``checkpoint.init_from`` (rlhf.backends.contract.training.TrainBackend:
``checkpoint_weights``, ``checkpoint_state_dict``). No torch at import: the preflight reads file names only.

A trained role's folder of a step checkpoint holds (rlhf.backends.train.fsdp2.engine, ``save``)::

    fsdp2/.metadata          torch.distributed.checkpoint's index: every key's global shape and where its shards are
    fsdp2/__R_0.distcp       rank R's shards of {"model": ..., "optim": ...} (the optimizer's only once it stepped)
    engine_state.pt          schedule, step count, client state (rank 0)
    rng_rank<R>.pt           each rank's RNG state

The model is read back whole with torch's public API, in this process and without a process group
(``torch.distributed.checkpoint.load(..., no_dist=True)`` into full-size tensors of the shapes the index gives, as
``torch.distributed.checkpoint.format_utils.dcp_to_torch_save`` does, the optimizer's keys left unread): the same
weights whatever number of ranks saved them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf.backends.contract.training import SavedWeights

DCP_DIR = "fsdp2"  # rlhf.backends.train.fsdp2.engine.CKPT_DIR: the torch.distributed.checkpoint folder
METADATA = ".metadata"
MODEL = "model"  # the key of the model's state dict in what the engine saves (beside "optim")


def checkpoint_weights(folder: Path) -> SavedWeights:
    """Where the torch.distributed.checkpoint files in the role folder ``folder`` are, and what is missing of them
    (the index, or every shard file)."""
    dcp = Path(folder) / DCP_DIR
    if not (dcp / METADATA).is_file():
        return SavedWeights(
            dcp,
            f"{folder} holds no FSDP2 model state ({DCP_DIR}/{METADATA}, the torch.distributed.checkpoint index "
            "trainer.backend=fsdp2 writes): the checkpoint is incomplete",
        )
    if next(dcp.glob("*.distcp"), None) is None:
        return SavedWeights(
            dcp, f"{dcp} has its index but no shard file (*.distcp) of any rank: the checkpoint is incomplete"
        )
    return SavedWeights(dcp)


def checkpoint_state_dict(folder: Path) -> dict[str, Any]:
    """The full state dict (the module's own names, CPU tensors) of the role folder ``folder``."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    found = checkpoint_weights(folder)
    if found.problem:
        raise FileNotFoundError(found.problem)
    reader = dcp.FileSystemReader(str(found.where))
    prefix = MODEL + "."
    state = {
        key.removeprefix(prefix): torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in reader.read_metadata().state_dict_metadata.items()
        if key.startswith(prefix) and isinstance(meta, TensorStorageMetadata)
    }
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message=".*load in a single process", category=UserWarning)
        dcp.load({MODEL: state}, storage_reader=reader, no_dist=True)
    return state
