"""Finding 3 of issue 17: the weight-sync route is chosen per tensor-parallel worker from the worker's own device
(with TP > 1 the engine actor holds no GPU), and no NCCL communicator gets two members on one GPU."""

from __future__ import annotations

import pytest

from rlhf.backends.weight_sync.driver import choose_routes
from rlhf.errors import UserError


def _gpu(uuid: str, node: str = "10.0.0.1") -> dict:
    return {"node_ip": node, "gpu_uuid": uuid, "pid": 1}


SENDER = _gpu("GPU-0")


def test_a_tp_worker_on_the_senders_gpu_reads_shared_memory_and_the_others_broadcast():
    engines = [[_gpu("GPU-0"), _gpu("GPU-1")], [_gpu("GPU-2"), _gpu("GPU-3")]]
    routes = choose_routes("auto", SENDER, engines, "gpu")
    assert routes == [["shared_memory", "broadcast"], ["broadcast", "broadcast"]]
    from rlhf.backends.weight_sync.driver import sync_ranks

    first, data, world = sync_ranks(routes)
    assert first == [1, 3] and data == [0, 2, 3, 4] and world == 5  # the NCCL group: sender + broadcast workers


def test_a_broadcast_to_a_worker_on_the_senders_gpu_is_refused_naming_both():
    engines = [[_gpu("GPU-0"), _gpu("GPU-1")]]
    with pytest.raises(UserError, match=r"rollout engine 0 worker 0 and policy rank 0 .*same GPU"):
        choose_routes("broadcast", SENDER, engines, "gpu")
    # with gloo carrying the data there is no NCCL communicator to refuse it
    assert choose_routes("broadcast", SENDER, engines, "gpu", "gloo") == [["broadcast", "broadcast"]]


def test_shared_memory_requested_for_a_worker_on_another_gpu_names_the_worker():
    with pytest.raises(UserError, match="rollout engine 0 worker 1 is not on the policy rank 0's GPU"):
        choose_routes("shared_memory", SENDER, [[_gpu("GPU-0"), _gpu("GPU-1")]], "gpu")


def test_on_cpu_the_node_decides():
    cpu = {"node_ip": "127.0.0.1", "node_id": "a", "gpu_uuid": None}
    other = {"node_ip": "127.0.0.1", "node_id": "b", "gpu_uuid": None}  # a simulated second node on this host
    assert choose_routes("auto", cpu, [[dict(cpu)], [other]], "cpu") == [["shared_memory"], ["broadcast"]]
