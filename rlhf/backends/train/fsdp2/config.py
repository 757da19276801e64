"""``trainer.fsdp2.*``: the fsdp2 backend's own keys. Its registry line names this class
(rlhf.spec.registry, ``section=``), and the schema adds it to ``trainer`` as the sub-section ``fsdp2``.
Imports only rlhf.spec.keys: the schema imports it while it is being built."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec.keys import key


@dataclass(frozen=True)
class FSDP2Spec:
    """trainer.backend=fsdp2: torch's ``fully_shard`` over a device mesh of the role's ranks (each decoder layer, the
    untied input and output embeddings, then the root are units of their own). Precision comes from
    trainer.precision (bf16: bf16 compute over fp32 sharded master weights, gradients reduced in fp32)."""

    reshard_after_forward: bool = key(
        True,
        "free each unit's gathered parameters after its forward and gather again for the backward (ZeRO-3's memory); "
        "false keeps them until the backward (one gather less per unit, the full 16-bit weights resident)",
    )
    cpu_offload: bool = key(
        False,
        "CPUOffloadPolicy: sharded parameters, gradients and the optimizer step in host memory (each unit gathered "
        "to the device for its forward and backward)",
    )
