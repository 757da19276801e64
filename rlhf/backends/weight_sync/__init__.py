"""Weight sync from the trainer to the rollout engines without the driver: a process group of its own
(``broadcast``: gloo on CPU, nccl on GPUs) and, for engines beside the sender, a shared buffer (``shared_memory``:
a host segment on CPU, CUDA IPC on GPUs); buckets checked tensor by tensor on arrival. See DESIGN.md, "Weight sync"."""

from rlhf.backends.weight_sync.group import GroupConfig, SyncGroup, listen_socket, member_location
from rlhf.backends.weight_sync.receiver import WeightReceiver
from rlhf.backends.weight_sync.sender import WeightSender
from rlhf.backends.weight_sync.wire import ChecksumMismatch, SyncReport, checksum

__all__ = [
    "ChecksumMismatch",
    "GroupConfig",
    "SyncGroup",
    "SyncReport",
    "WeightReceiver",
    "WeightSender",
    "checksum",
    "listen_socket",
    "member_location",
]
