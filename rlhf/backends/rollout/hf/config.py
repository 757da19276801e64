"""``rollout.hf.*``: the hf backend's own keys. Its registry line names this class
(rlhf.spec.registry, ``section=``), and the schema adds it to ``rollout`` as the sub-section ``hf``.
Imports only rlhf.spec.keys: the schema imports it while it is being built."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec.keys import key


@dataclass(frozen=True)
class HFRolloutSpec:
    """rollout.backend=hf: transformers ``generate`` with a KV cache."""

    in_policy: bool = key(
        False,
        "generate in the policy's own ranks with the weights it trains (no engine processes, no weight sync: "
        "TRL's GRPOTrainer without vLLM; veRL's hybrid worker); needs the rollout on the policy's devices, one engine "
        "per policy rank, whole weights on every rank (trainer.backend=deepspeed, trainer.zero_stage <= 2) and "
        "rollout.async_mode=false",
    )
