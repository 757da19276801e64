"""veRL's devices (``trainer.nnodes`` x ``n_gpus_per_node``, or the launcher's for SFT) and its hybrid engine's one
resource pool -> the recipe's hardware and roles, and ``rollout.num_engines``."""

from __future__ import annotations

from rlhf.importers.common import launcher_devices
from rlhf.importers.verl.mapper import VerlMapper
from rlhf.spec import names


def map_hardware(m: VerlMapper) -> tuple[int, int]:
    l_nodes, l_gpus = launcher_devices(m.cmd.launcher)
    nodes = m.eff("trainer.nnodes", int)
    per_node = m.eff("trainer.n_gpus_per_node", int)
    for k in ("trainer.nnodes", "trainer.n_gpus_per_node"):
        m.handled.add(k)
    if not m.rl and (l_nodes or l_gpus):  # torchrun decides the SFT world
        nodes, per_node = l_nodes or nodes, l_gpus or per_node
        for k in ("trainer.nnodes", "trainer.n_gpus_per_node"):
            if m.given(k):
                m.explain(k, "the launcher's --nnodes / --nproc_per_node decide the devices")
    nodes = nodes if isinstance(nodes, int) and nodes >= 1 else 1
    unknown = (not m.rl and any("$" in w for w in m.cmd.launcher)) or "trainer.n_gpus_per_node" in m.unknown_k
    if unknown or not (isinstance(per_node, int) and per_node >= 1):
        per_node = _devices_the_batch_allows(m, nodes)
        m.notes.append(
            f"devices: the command's device count is unknown here; {nodes} node(s) x {per_node} assumed (the most, "
            "up to 8, that the batch splits over evenly); pass --hardware to choose"
        )
    for k in ("trainer.nnodes", "trainer.n_gpus_per_node"):
        if m.given(k) and not m.outcome(k).note:
            m.explain(k, f"hardware: {nodes} node(s) x {per_node} devices")
    return nodes, per_node


def _devices_the_batch_allows(m: VerlMapper, nodes: int) -> int:
    """Devices per node when the command does not say: the most (up to 8) over which the global batch splits into
    whole micro-batches on every data-parallel rank."""
    batch, micro = m.values.get("trainer.global_batch"), m.values.get("trainer.micro_batch_per_device")
    if not (isinstance(batch, int) and isinstance(micro, int) and batch > 0 and micro > 0):
        return 8
    return next((n for n in range(8, 0, -1) if batch % (micro * n * nodes) == 0), 1)


def map_placement(m: VerlMapper, total: int) -> list[tuple[list[str], int]]:
    """veRL's hybrid engine: every role in one resource pool, the engines on all of it (TP devices each)."""
    present = ["policy", "rollout"]
    if m.values.get("algorithm.kl.coef", 0.0) > 0:
        present.insert(1, "reference")
    if m.values.get("algorithm.advantage.estimator") in names.CRITIC_ESTIMATORS:
        present.insert(-1, "critic")
    if m.reward_model:
        present.insert(-1, "reward")
    tp = m.values.get("rollout.tensor_parallel_size") or 1
    tp = tp if isinstance(tp, int) and tp >= 1 else 1
    m.put("rollout.num_engines", max(total // tp, 1))
    m.notes.append(
        f"rollout.num_engines={max(total // tp, 1)}: veRL runs an engine on every {tp} device(s) of its pool "
        f"({total} devices)"
    )
    if m.eff("reward_model.enable_resource_pool", bool):
        m.notes.append("reward_model.enable_resource_pool: the reward model shares the pool here (colocated)")
    m.handled.add("reward_model.enable_resource_pool")
    return [(present, total)]
