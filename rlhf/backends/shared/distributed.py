"""What every training backend does with torch.distributed: form the role group's process group on our own
rendezvous store, leave it, name this rank's device, average metrics over the ranks and save/restore RNG state.

Backend-neutral (no DeepSpeed import): DeepSpeed adopts the group formed here (rlhf.backends.train.deepspeed.engine),
FSDP2 builds its device mesh over it (rlhf.backends.train.fsdp2.engine).
"""

from __future__ import annotations

import datetime
import os
import random
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def _rendezvous_store(timeout: datetime.timedelta) -> Any:
    """The group's TCPStore, hosted by rank 0 on a socket bound to MASTER_ADDR itself: torch's env:// rendezvous
    would listen on every interface (the store's server binds the wildcard address), and we keep each socket on the
    address it serves (loopback on a local cluster, the node's own address on a real one)."""
    import socket

    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if rank != 0:
        return dist.TCPStore(host, port, world, is_master=False, timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return dist.TCPStore(
        host, port, world, is_master=True, timeout=timeout, wait_for_workers=False, master_listen_fd=sock.detach()
    )


def init_process_group(backend: str, accelerator: str = "cpu", timeout_s: float = 600.0) -> datetime.timedelta:
    """Join the process group described by RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (set by the role group)
    with ``backend`` ("gloo", "nccl", or a per-device spec such as "cuda:nccl,cpu:gloo"); on GPUs this rank's device
    is LOCAL_RANK first. Returns the timeout, for a backend that configures its own layer with it."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if dist.is_initialized():
        return timeout
    if accelerator == "gpu":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % max(torch.cuda.device_count(), 1))
    dist.init_process_group(
        backend,
        store=_rendezvous_store(timeout),
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        timeout=timeout,
    )
    return timeout


def shutdown_distributed() -> None:
    """Leave the process group; without it rank 0 aborts at exit (machine.md). Where DeepSpeed adopted the group,
    through DeepSpeed's own ``deepspeed.comm.destroy_process_group``, which also drops the groups DeepSpeed cached
    over it: a later group in the same process (a test session, a restarted engine) would otherwise be handed a
    destroyed one ("Group ... is not registered")."""
    _SEQUENCE_GROUPS.clear()  # made over the group being left
    if not dist.is_initialized():
        return
    ds_comm = sys.modules.get("deepspeed.comm")
    if ds_comm is not None and ds_comm.is_initialized():
        ds_comm.destroy_process_group()
    else:
        dist.destroy_process_group()


_SEQUENCE_GROUPS: dict[int, Any] = {}  # sequence-parallel size -> rlhf.models.sequence_parallel.SPGroups


def sequence_groups(sp: int) -> Any:
    """This rank's sequence-parallel and data-parallel groups for an SP size of ``sp`` over the whole role group
    (contiguous SP groups: rlhf.models.sequence_parallel.sp_groups), made once per process group and size, so the
    trained and frozen engines of one process share them; None for ``sp == 1`` (nothing is made). Collective the
    first time: every rank builds its engines in the same order, so every rank asks here in the same order."""
    if sp <= 1:
        return None
    if sp not in _SEQUENCE_GROUPS:
        from rlhf.models.sequence_parallel import sp_groups

        _SEQUENCE_GROUPS[sp] = sp_groups(sp)
    return _SEQUENCE_GROUPS[sp]


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def accelerator_device(accelerator: str) -> torch.device:
    """This rank's device: the current CUDA device on GPU hardware (set from LOCAL_RANK), else the CPU."""
    if accelerator == "gpu" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, Tensor) else v for k, v in batch.items()}


def mean_over_ranks(metrics: dict[str, float], device: torch.device | None = None) -> dict[str, float]:
    """Each metric averaged over the data-parallel ranks (keys sorted so every rank packs the same order). The
    tensor goes through ``device`` when the group's backend is nccl alone."""
    if not dist.is_initialized() or dist.get_world_size() == 1 or not metrics:
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    if dist.get_backend() == "nccl" and device is not None:
        t = t.to(device)
    dist.all_reduce(t)
    t = t.cpu() / dist.get_world_size()
    return dict(zip(keys, t.tolist(), strict=True))


def rng_state() -> dict[str, Any]:
    """Python, numpy, torch (and CUDA) generator states of this process, for an exact resume."""
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_file(folder: Any, rank_: int) -> Any:
    """Where rank ``rank_`` keeps its RNG state inside a checkpoint folder (same name for every backend)."""
    from pathlib import Path

    return Path(folder) / f"rng_rank{rank_}.pt"


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
