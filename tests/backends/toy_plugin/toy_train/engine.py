"""The toy's trained engine: DeepSpeed's, saving in the toy's own checkpoint layout (toy_train/checkpoint.py).
Imported by the descriptor's build_trained only (it imports torch)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlhf.backends.shared.weights import full_state_dict
from toy_train.checkpoint import ENGINE, WEIGHTS


class ToyTrainEngine:
    """rlhf.backends.contract.training.TrainEngine: every call DeepSpeed's engine's, but for :meth:`save` and
    :meth:`load`, which put its files one folder down and the whole model beside them."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # the rest of the contract: DeepSpeed's engine's own
        return getattr(self._inner, name)

    def save(self, path: str | os.PathLike, client_state: dict[str, Any] | None = None) -> None:
        path = Path(path)
        self._inner.save(str(path / ENGINE), client_state)
        rank0 = not dist.is_initialized() or dist.get_rank() == 0
        module = self._inner.module
        state = dict(full_state_dict(module, self._inner.zero_stage == 3, keep=rank0))  # collective under ZeRO-3
        if rank0:
            named = {id(p): n for n, p in module.named_parameters()}
            for name, p in module.state_dict(keep_vars=True).items():  # a tied weight under each of its names
                if name not in state and id(p) in named:
                    state[name] = state[named[id(p)]]
            torch.save(state, path / WEIGHTS)
        if dist.is_initialized():
            dist.barrier()

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        return self._inner.load(str(Path(path) / ENGINE))
