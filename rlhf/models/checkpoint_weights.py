"""Hugging Face model folders from weights that are not one yet (``checkpoint.init_from``, rlhf.pipelines.init_from):

* a full state dict, as the training backend that saved a checkpoint consolidates it from any number of ranks
  (rlhf.backends.contract.training.TrainBackend.checkpoint_state_dict: the layout is the backend's own);
* LoRA adapters: merged into their base (a peft state dict from a checkpoint, or an adapter folder), so the folder
  loads with plain transformers.

The written folder has the base's config (the source run's model), its generation config and the tokenizer, and
weights in the new run's precision (an fp32 master cast to bf16 is the bf16 weight the source trained with).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rlhf.spec.schema import LoraSpec

CAUSAL_LM, VALUE = "causal_lm", "value"


def _empty_model(base: str, kind: str, value_head_prefix: str, trust_remote_code: bool):
    """The base's architecture on the meta device (no memory, no init): the state dict is assigned into it."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        if kind == CAUSAL_LM:
            return AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        from rlhf.models.value_head import value_model_class

        prefix = getattr(config, "value_head_prefix", None) or value_head_prefix
        config.value_head_prefix, config.num_labels = prefix, 1
        return value_model_class(AutoModel._model_mapping[type(config)], prefix)(config)


def write_hf_model(
    state_dict: dict[str, Any],
    out: str | Path,
    *,
    base: str,
    tokenizer: str,
    kind: str = CAUSAL_LM,
    value_head_prefix: str = "score",
    lora: LoraSpec | None = None,
    precision: str = "fp32",
    trust_remote_code: bool = False,
    origin: str = "",
) -> Path:
    """``state_dict`` (names of the model the source trained: plain, or peft's when ``lora`` is given) as a Hugging
    Face folder ``out`` with ``base``'s config and ``tokenizer``'s tokenizer; LoRA adapters merged. ``origin`` names
    the checkpoint in errors."""
    import torch

    from rlhf.models.loading import load_tokenizer, quiet_transformers, torch_dtype

    quiet_transformers()
    model = _empty_model(base, kind, value_head_prefix, trust_remote_code)
    if lora is not None and lora.rank > 0:
        from rlhf.models.lora import apply_lora

        prefix = getattr(model.config, "value_head_prefix", value_head_prefix)
        task = "CAUSAL_LM" if kind == CAUSAL_LM else None
        model = apply_lora(model, lora, task_type=task, modules_to_save=None if kind == CAUSAL_LM else [prefix])
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
    if missing or unexpected:
        raise ValueError(
            f"{origin or 'the checkpoint'}: its weights are not those of {base}'s architecture"
            f"{' with LoRA rank ' + str(lora.rank) if lora is not None and lora.rank else ''}: "
            f"{len(missing)} missing (e.g. {missing[:3]}), {len(unexpected)} unexpected (e.g. {unexpected[:3]})"
        )
    model.load_state_dict(state_dict, strict=True, assign=True)
    if lora is not None and lora.rank > 0:
        with torch.no_grad():
            model = model.merge_and_unload()
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    model = model.to(torch_dtype(precision))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    generation = Path(base) / "generation_config.json"
    if generation.is_file():
        shutil.copy(generation, out / generation.name)
    load_tokenizer(tokenizer, trust_remote_code=trust_remote_code).save_pretrained(out)
    return out


def merge_adapter(base: str, adapter: str | Path, out: str | Path, *, kind: str, precision: str = "fp32") -> Path:
    """An adapter folder merged into ``base`` (rlhf.models.merge_lora.merge_lora, the merge command's function)."""
    from rlhf.models.merge_lora import merge_lora

    return merge_lora(base, str(adapter), str(out), precision=precision, value_head=kind == VALUE)
