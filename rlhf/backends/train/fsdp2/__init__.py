"""``trainer.backend=fsdp2``: torch's ``fully_shard`` (FSDP2) over a device mesh of the role's ranks, gloo on CPU
(torch's CPU device mesh) and nccl on GPUs.

    descriptor.py this backend as rlhf.backends.contract.training.TrainBackend (no torch import: the plan and
    validation use it)
    engine.py     FSDP2TrainEngine and FSDP2FrozenEngine: sharding, mixed precision, CPU offload, the optimizer step,
                  torch.distributed.checkpoint save/load, the Hugging Face export
    memory.py     the plan's memory model
    config.py     FSDP2Spec, its own keys ``trainer.fsdp2.*`` (its registry line names it; the schema adds it)
Its rules: the descriptor's ``problems``, asked by rlhf.spec.train_backend_rules. The weights reach the rollout engines
through rlhf.backends.shared.weights (each DTensor gathered with ``full_tensor`` one bucket at a time).
"""
