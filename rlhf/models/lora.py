"""LoRA through peft: wrap a model with adapters, save adapters only, merge them into the base model."""

from __future__ import annotations

from pathlib import Path

from rlhf.spec.schema import LoraSpec


def apply_lora(model, lora: LoraSpec, task_type: str | None = "CAUSAL_LM", modules_to_save: list[str] | None = None):
    """``model`` wrapped as a peft model with trainable adapters (the base weights frozen); ``modules_to_save`` stay
    fully trainable and are saved with the adapters (a value head)."""
    from peft import LoraConfig, get_peft_model

    targets = list(lora.target_modules)
    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        # peft spells "every linear layer but the output head" as the string "all-linear", not a list.
        target_modules="all-linear" if targets == ["all-linear"] else targets,
        task_type=task_type,
        bias="none",
        modules_to_save=modules_to_save,
    )
    return get_peft_model(model, config)


def is_peft_model(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


def merge_lora(base: str, adapter: str, out: str, *, precision: str = "fp32", value_head: bool = False) -> Path:
    """Merge the adapters saved in ``adapter`` into the model at ``base``; write a plain HF model (with the adapter
    folder's tokenizer, else the base's) to ``out``."""
    import torch
    from peft import PeftModel

    from rlhf.atomic_save import atomic_dir, tensors_bytes
    from rlhf.models.loading import load_tokenizer, quiet_transformers, torch_dtype

    quiet_transformers()
    dtype = torch_dtype(precision)
    if value_head:
        from rlhf.models.value_head import load_value_model

        model = load_value_model(base, "reward", precision=precision)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    with torch.no_grad():
        merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    out_path = Path(out)
    tok_src = adapter if (Path(adapter) / "tokenizer_config.json").is_file() else base
    need = tensors_bytes(merged.state_dict())
    with atomic_dir(out_path, need_bytes=need, what="the merged model") as tmp:  # complete or absent
        merged.save_pretrained(tmp)
        load_tokenizer(tok_src).save_pretrained(tmp)
    return out_path
