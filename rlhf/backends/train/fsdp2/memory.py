"""FSDP2's memory per device, a pure function (no torch), shown by ``rlhf-plan trainer.backend=fsdp2``.

P parameters (T of them trained; LoRA: the adapters), N ranks of the role, L the parameters of the largest unit
gathered at once (a decoder layer, or an embedding: rlhf.backends.train.fsdp2.engine wraps each untied embedding as a
unit).

Trained roles keep fp32 shards whatever the compute precision (with trainer.precision=bf16 they are the master
weights; the MixedPrecisionPolicy casts each gathered unit to bf16 and reduces gradients in fp32):
    weights    4P/N shards + 2 gathered units in the compute dtype (c = 2 bytes for bf16, 4 for fp32: the unit in use
               and the one prefetched); reshard_after_forward=false keeps every gathered unit from the forward to the
               backward instead: + cP in place of the 2 units
    grads      4T/N fp32 shards + one unit's unsharded gradient in flight (c bytes) and its fp32 reduce copy (bf16 only)
    optimizer  Adam's two fp32 moments, 8T/N
    cpu_offload: the shards (weights, gradients, Adam) live in host memory; the device keeps the gathered units and
               the gradient in flight.
Frozen roles: their shards in the training precision (p = 2 bytes bf16, 4 fp32) pP/N + 2 gathered units; offloaded:
    the shards in host memory, the units on the device.
Loading: every rank reads the whole model into host memory in the training precision before sharding it (a moment,
as DeepSpeed ZeRO-0/1/2 does; ZeRO-3 partitions while loading).
Activations are the plan's own formula (rlhf.planning.memory.activation_bytes): they do not depend on the backend.
"""

from __future__ import annotations

from rlhf.backends.contract.training import ModelStates


def _bytes(precision: str) -> int:
    return 2 if precision in ("bf16", "fp16") else 4


def trained_states(
    params: int,
    largest_layer: int,
    dp: int,
    precision: str,
    *,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
    trainable: int | None = None,
) -> ModelStates:
    """Model states of an FSDP2-trained role per device (see the module docstring)."""
    trainable = params if trainable is None else trainable
    c = _bytes(precision)
    shards = 4 * params / dp
    gathered = c * params if not reshard_after_forward else 2 * c * largest_layer
    grad_shards = 4 * trainable / dp
    in_flight = largest_layer * (c + (4 if c != 4 else 0))
    adam = 8 * trainable / dp
    if cpu_offload:
        return ModelStates(weights=gathered, grads=in_flight, optimizer=0.0, host=shards + grad_shards + adam)
    return ModelStates(weights=shards + gathered, grads=grad_shards + in_flight, optimizer=adam)


def frozen_states(params: int, largest_layer: int, dp: int, precision: str, offload: bool) -> ModelStates:
    p = _bytes(precision)
    shards, gathered = p * params / dp, 2 * p * largest_layer
    if offload:
        return ModelStates(weights=gathered, host=shards)
    return ModelStates(weights=shards + gathered)
