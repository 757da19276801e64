"""Adapter-only weight sync (``rollout.weight_sync_lora=adapter``): what the rollout backends give their engines,
and, for vLLM, the adapter folder its LoRA loader reads.

The trainer sends its peft model's LoRA parameters under their own names
(``base_model.model.<module>.lora_A.default.weight``, rlhf.backends.shared.weights.lora_adapter_weights). The hf engine
wraps its base with the same LoraConfig, so those names are its own parameters. vLLM loads adapters through its
public LoRA API (``enable_lora``, ``LoRARequest``) from a folder in peft's saved format (names without the adapter
name, an adapter_config.json), which :func:`write_adapter_folder` writes from the received tensors.

The standard library at import, never rlhf.spec (torch and safetensors inside the writer): the backends' modules,
which the plan reads, import this, and the writer runs in the vLLM venv, which has no omegaconf.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from rlhf.spec.schema import ExperimentSpec

ADAPTER_NAME = "default"  # peft's adapter name, the one rlhf.models.lora.apply_lora creates


def adapter_sync(spec: ExperimentSpec) -> bool:
    """Whether syncs carry the LoRA adapters alone (rollout.weight_sync_lora=adapter with LoRA on)."""
    return spec.model.lora.rank > 0 and spec.rollout.weight_sync_lora == "adapter"


def lora_settings(spec: ExperimentSpec) -> dict[str, Any]:
    """model.lora as plain data (it crosses into the engine's process and venv)."""
    lora = spec.model.lora
    return {
        "rank": lora.rank,
        "alpha": lora.alpha,
        "dropout": lora.dropout,
        "target_modules": list(lora.target_modules),
    }


_ADAPTER_SEGMENT = re.compile(rf"\.(lora_[A-Za-z_]+)\.{ADAPTER_NAME}(?=\.|$)")


def saved_name(param_name: str) -> str:
    """peft's saved name of an adapter parameter: the adapter name dropped (``...lora_A.default.weight`` ->
    ``...lora_A.weight``), as ``get_peft_model_state_dict`` writes it."""
    return _ADAPTER_SEGMENT.sub(r".\1", param_name)


def write_adapter_folder(named: Iterable[tuple[str, Tensor]], folder: str | os.PathLike, alpha: int) -> int:
    """The received adapter tensors as a peft adapter folder (adapter_model.safetensors, adapter_config.json) that
    vLLM's LoRA loader reads; written beside and renamed into place, so a reader never sees half a file. Returns the
    bytes of tensors written."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    targets: set[str] = set()
    rank = 0
    for name, t in named:
        key = saved_name(name)
        tensors[key] = t.detach().to("cpu").contiguous().clone()
        module = key.split(".lora_")[0].removeprefix("base_model.model.")
        targets.add(module)
        if ".lora_A." in key:
            rank = int(t.shape[0])
    if not tensors:
        raise ValueError("adapter-only weight sync: no LoRA tensors arrived")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted(targets),
    }
    tmp = out / "adapter_model.safetensors.tmp"
    save_file(tensors, str(tmp))
    os.replace(tmp, out / "adapter_model.safetensors")
    (out / "adapter_config.json.tmp").write_text(json.dumps(config))
    os.replace(out / "adapter_config.json.tmp", out / "adapter_config.json")
    return sum(t.numel() * t.element_size() for t in tensors.values())
