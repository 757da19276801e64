"""Weight sync from the trainer to the rollout engines without the driver: a process group of its own
(``broadcast``: gloo on CPU, nccl on GPUs) and, for engines beside the sender, a shared buffer (``shared_memory``:
a host segment on CPU, CUDA IPC on GPUs); buckets checked tensor by tensor on arrival. See DESIGN.md, "Weight sync".

Modules: driver (the driver's side: routes, versions, reports, probes), group (the process group), sender,
receiver, segment (the shared-memory buffer), wire (the format and checksums), lora (adapter-only syncs), memory (peak
RSS over a sync). Nothing is imported here: the rollout descriptors, which the plan reads without torch, import
lora.py."""
