"""The weight-sync process group: the policy's rank 0 and every rollout engine worker, on a rendezvous of its own.

Why not DeepSpeed's or vLLM's groups: they already exist with other members and cannot be joined. Why torch's own
``ProcessGroupGloo`` / ``ProcessGroupNCCL`` classes over a ``TCPStore`` rather than vLLM's stateless group: they are
public ``torch.distributed`` classes, present in both venvs (the trainer's and vLLM's share one torch version), the
CPU and GPU paths differ only in the backend name, and nothing here needs vLLM (the hf engine joins the same way).

Two groups share one store: ``control`` (gloo, always: small CPU tensors for headers and barriers) with every
member, and ``data`` with the sender and the receivers taking the broadcast route (``nccl`` on GPUs, ``gloo`` on
CPU; on CPU with every receiver broadcasting it is the control group itself). Sockets: the store listens on a
socket the sender bound to its own node address (loopback on a local cluster), never on a wildcard.
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class GroupConfig:
    """How one member joins (plain data, sent by the driver to every member)."""

    host: str  # the sender's address (its node ip; 127.0.0.1 on a local cluster)
    port: int
    world: int  # 1 + receivers
    rank: int  # 0: the sender
    data_backend: str = "gloo"  # gloo | nccl
    data_ranks: tuple[int, ...] = ()  # control ranks in the data group (the sender and broadcast receivers)
    timeout_s: float = 600.0
    shared: dict[str, Any] = field(default_factory=dict)  # filled in by the sender's hello (shared-memory route)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["data_ranks"] = list(self.data_ranks)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroupConfig:
        d = dict(d)
        d["data_ranks"] = tuple(d.get("data_ranks", ()))
        return cls(**d)


NODE_IP_ENV = "RLHF_NODE_IP"  # set by the local executor (rlhf.launch.local): every member is in this process


def member_location() -> dict[str, Any]:
    """Where this process runs, for choosing its weight-sync route: node address and Ray node id, GPU UUID, pid."""
    import os

    loc: dict[str, Any] = {"node_ip": "127.0.0.1", "node_id": None, "pid": os.getpid(), "gpu_uuid": None}
    if os.environ.get(NODE_IP_ENV):  # the local executor's one process: its members meet on loopback
        loc["node_ip"] = os.environ[NODE_IP_ENV]
    else:
        loc["node_ip"], loc["node_id"] = _ray_node()
    if torch.cuda.is_available():
        loc["gpu_uuid"] = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    return loc


def _ray_node() -> tuple[str, str | None]:
    """Ray's address of this node and its node id (None outside a connected process), or the host's address where
    this process has no Ray."""
    try:
        import ray

        node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        return ray.util.get_node_ip_address(), node_id
    except Exception:  # noqa: BLE001 - a worker process of vLLM's own (mp executor) has no Ray: the node's address
        return socket.gethostbyname(socket.gethostname()), None


def listen_socket(host: str) -> socket.socket:
    """A listening TCP socket on ``host`` and a free port, for the sender's store (bound here, so the port is ours
    and the address is exactly ``host``)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen(128)
    return s


class SyncGroup:
    """Joins (rank 0: hosts) the store and creates the control and data groups. Blocks until every member joins
    or ``timeout_s`` passes."""

    def __init__(self, cfg: GroupConfig, listen: socket.socket | None = None) -> None:
        self.cfg = cfg
        timeout = datetime.timedelta(seconds=cfg.timeout_s)
        if cfg.rank == 0:
            if listen is None:
                raise ValueError("the sender (rank 0) hosts the store: pass the socket from listen_socket()")
            # The store takes over the already-bound socket: it listens on exactly that address.
            self.store = dist.TCPStore(
                cfg.host,
                cfg.port,
                cfg.world,
                is_master=True,
                timeout=timeout,
                wait_for_workers=False,
                master_listen_fd=listen.detach(),
            )
        else:
            self.store = dist.TCPStore(cfg.host, cfg.port, cfg.world, is_master=False, timeout=timeout)
        self.control = dist.ProcessGroupGloo(dist.PrefixStore("control", self.store), cfg.rank, cfg.world, timeout)
        self.data: Any = None
        self.data_rank: int | None = None
        if cfg.rank in cfg.data_ranks and len(cfg.data_ranks) > 1:
            self.data_rank = cfg.data_ranks.index(cfg.rank)
            size = len(cfg.data_ranks)
            if cfg.data_backend == "gloo" and size == cfg.world:
                self.data = self.control
            elif cfg.data_backend == "gloo":
                self.data = dist.ProcessGroupGloo(dist.PrefixStore("data", self.store), self.data_rank, size, timeout)
            elif cfg.data_backend == "nccl":
                opts = dist.ProcessGroupNCCL.Options()
                opts._timeout = timeout  # the constructor has no timeout argument of its own
                self.data = dist.ProcessGroupNCCL(dist.PrefixStore("data", self.store), self.data_rank, size, opts)
            else:
                raise ValueError(f"weight-sync backend {cfg.data_backend!r}: use gloo or nccl")

    # -- control messages ---------------------------------------------------------------------------------------
    def send_bytes(self, raw: torch.Tensor) -> None:
        """Rank 0: a byte string to every member (length first)."""
        size = torch.tensor([raw.numel()], dtype=torch.int64)
        self.control.broadcast([size]).wait()
        if raw.numel():
            self.control.broadcast([raw]).wait()

    def recv_bytes(self) -> torch.Tensor:
        size = torch.zeros(1, dtype=torch.int64)
        self.control.broadcast([size]).wait()
        raw = torch.empty(int(size.item()), dtype=torch.uint8)
        if raw.numel():
            self.control.broadcast([raw]).wait()
        return raw

    def barrier(self) -> None:
        self.control.barrier().wait()

    def broadcast_data(self, payload: torch.Tensor) -> None:
        if self.data is None:
            raise RuntimeError("this member is not in the weight-sync data group")
        self.data.broadcast([payload]).wait()

    def abort(self) -> None:
        """Tear the groups down after a failure, so members still waiting on this one fail at once instead of
        waiting for their timeout."""
        for pg in {id(g): g for g in (self.data, self.control) if g is not None}.values():
            try:
                pg.abort()
            except Exception:  # noqa: BLE001 - best effort: the peer may already be gone
                pass
        self.data = None

    def close(self) -> None:
        for pg in {id(g): g for g in (self.data, self.control) if g is not None}.values():
            try:
                pg.shutdown()
            except Exception:  # noqa: BLE001 - a peer may be gone already; nothing left to release cleanly
                pass
        self.data = None
