"""Loading Hugging Face causal LMs and tokenizers by local path (or hub name where a network exists).

``resolve_model_path(spec.model)`` is the one place that turns a ModelSpec into a folder: ``model.path`` when given,
else the tiny factory's cache folder when ``make_local`` is set.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from rlhf.spec.schema import LoraSpec, ModelSpec

log = logging.getLogger(__name__)

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def quiet_transformers() -> None:
    """Hide transformers' per-load progress bars (one per model load and save, in every rank's log)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def resolve_model_path(spec: ModelSpec) -> str:
    """The local folder (or hub name) of the model: ``model.path`` when given (whatever ``make_local`` says), else
    the tiny model made for these dimensions when ``make_local`` is set."""
    if not spec.path:
        if spec.make_local:
            from rlhf.models.tiny import make_tiny_model

            return str(make_tiny_model(spec))
        raise ValueError(f"model.path is empty for model {spec.name!r} (set it, or model.make_local=true)")
    local = Path(spec.path).expanduser()
    return str(local) if local.exists() else spec.path


def torch_dtype(precision: str):
    """``trainer.precision`` (fp32 | bf16 | fp16) as a torch dtype."""
    import torch

    try:
        return getattr(torch, _DTYPES[precision])
    except KeyError:
        raise ValueError(f"trainer.precision={precision!r}: must be one of {', '.join(_DTYPES)}") from None


def attn_implementation(requested: str) -> str:
    """The attention kernel to use: flash_attention_2 only where flash-attn and a GPU exist, else sdpa."""
    if requested == "flash_attention_2":
        import torch

        if importlib.util.find_spec("flash_attn") is None or not torch.cuda.is_available():
            log.warning("model.attn_implementation=flash_attention_2 needs flash-attn and a GPU; using sdpa")
            return "sdpa"
    return requested


def load_tokenizer(
    path: str, *, chat_template: str | None = None, padding_side: str = "right", trust_remote_code: bool = False
):
    """AutoTokenizer with a pad token (eos when the tokenizer has none, as OpenRLHF's get_tokenizer) and the spec's
    chat template override. The vocabulary is never resized: rollout engines must see the same ids.

    A model folder made here (rlhf.models.tiny) holds this package's own byte-level tokenizer, a plain
    tokenizers-backed one: it is loaded with that class directly, because AutoTokenizer first loads the model's
    config to pick the class, which imports the model's configuration module and with it much of transformers'
    modeling code (about 1.5 s of the driver's start-up on a 2-core machine)."""
    from rlhf.models.tiny import TINY_MARKER

    if (Path(path) / TINY_MARKER).is_file():
        from transformers import PreTrainedTokenizerFast as TokenizerClass
    else:
        from transformers import AutoTokenizer as TokenizerClass

    tok = TokenizerClass.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if chat_template:
        tok.chat_template = chat_template
    tok.padding_side = padding_side
    return tok


def tokenizer_for(spec: ModelSpec, model_path: str | None = None, padding_side: str = "right"):
    """The tokenizer of ``spec`` (its tokenizer_path, else the model folder)."""
    path = spec.tokenizer_path or model_path or resolve_model_path(spec)
    return load_tokenizer(
        path, chat_template=spec.chat_template, padding_side=padding_side, trust_remote_code=spec.trust_remote_code
    )


def load_causal_lm(
    path: str,
    *,
    precision: str = "fp32",
    attn: str = "sdpa",
    trust_remote_code: bool = False,
    gradient_checkpointing: bool = False,
    lora: LoraSpec | None = None,
    device_map: Any = None,
):
    """A causal LM from ``path`` in ``precision``; LoRA adapters added when ``lora.rank > 0``."""
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    model = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=torch_dtype(precision),
        attn_implementation=attn_implementation(attn),
        trust_remote_code=trust_remote_code,
        device_map=device_map,
    )
    model.config.use_cache = False  # training: no KV cache (it also conflicts with gradient checkpointing)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if lora is not None and lora.rank > 0:
        from rlhf.models.lora import apply_lora

        model = apply_lora(model, lora, task_type="CAUSAL_LM")
    return model


def load_causal_lm_from_spec(
    spec: ModelSpec,
    *,
    precision: str = "fp32",
    gradient_checkpointing: bool = False,
    path: str | None = None,
    with_lora: bool = True,
):
    """:func:`load_causal_lm` with the settings of ``spec`` (``path`` overrides the spec's model folder)."""
    return load_causal_lm(
        path or resolve_model_path(spec),
        precision=precision,
        attn=spec.attn_implementation,
        trust_remote_code=spec.trust_remote_code,
        gradient_checkpointing=gradient_checkpointing,
        lora=spec.lora if with_lora else None,
    )


def enable_gradient_checkpointing(model) -> None:
    """Non-reentrant checkpointing: works with frozen inputs (LoRA) without enable_input_require_grads."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def is_local_model(path: str) -> bool:
    return os.path.isdir(os.path.expanduser(path))
