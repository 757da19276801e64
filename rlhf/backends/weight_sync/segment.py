"""The shared-memory route's buffer: a host segment on CPU, a CUDA IPC handle on GPUs.

CPU: a file in /dev/shm that the sender creates and every receiver on the node maps; the sender unlinks the name
once everyone has mapped it, so nothing is left behind even if a process dies later. GPU: the sender's bucket
buffer shared through torch's CUDA IPC reductions; receivers rebuild it on the device with the same UUID.
"""

from __future__ import annotations

import base64
import mmap
import os
import pickle
import tempfile
import uuid
import warnings
from typing import Any

import torch


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class HostSegment:
    """``nbytes`` of shared host memory as a 1-D uint8 tensor."""

    def __init__(self, path: str, nbytes: int, create: bool) -> None:
        self.path = path
        self.nbytes = nbytes
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, nbytes)
            self._mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.tensor = torch.frombuffer(self._mm, dtype=torch.uint8)

    @classmethod
    def create(cls, nbytes: int) -> HostSegment:
        path = os.path.join(_shm_dir(), f"rlhf-sync-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        return cls(path, nbytes, create=True)

    def describe(self) -> dict[str, Any]:
        return {"kind": "host", "path": self.path, "nbytes": self.nbytes}

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self.tensor = None  # type: ignore[assignment]
        try:
            self._mm.close()
        except BufferError:  # a view is still alive somewhere; the mapping goes with the process
            pass


def gpu_uuid(device: torch.device) -> str:
    return str(torch.cuda.get_device_properties(device).uuid)


def cuda_handle(buffer: torch.Tensor) -> dict[str, Any]:
    """What a receiver needs to map ``buffer`` (a CUDA uint8 tensor) through CUDA IPC."""
    from torch.multiprocessing.reductions import reduce_tensor

    rebuild, args = reduce_tensor(buffer)
    return {
        "kind": "cuda",
        "handle": base64.b64encode(pickle.dumps((rebuild, args))).decode(),
        "uuid": gpu_uuid(buffer.device),
        "nbytes": buffer.numel(),
    }


def open_cuda(shared: dict[str, Any]) -> torch.Tensor:
    """The sender's CUDA buffer in this process, on the local device whose UUID matches."""
    rebuild, args = pickle.loads(base64.b64decode(shared["handle"]))
    local = next(
        (i for i in range(torch.cuda.device_count()) if gpu_uuid(torch.device("cuda", i)) == shared["uuid"]), None
    )
    if local is None:
        raise RuntimeError(f"shared_memory route: no visible GPU has UUID {shared['uuid']} (the sender's device)")
    args = list(args)
    args[6] = local  # rebuild_cuda_tensor's device index: this process's index of the same physical GPU
    return rebuild(*args)
