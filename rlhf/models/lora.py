"""LoRA through peft: wrap a model with adapters (merging them into the base: rlhf.models.merge_lora)."""

from __future__ import annotations

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
