"""Critic and reward models: a transformer body plus a linear value head, OpenRLHF's get_llm_for_sequence_regression.

The model class is made on the fly from the checkpoint's architecture: the body is ``AutoModel``'s class for the
config (``LlamaModel``, ...) stored under the architecture's ``base_model_prefix`` ("model"), and the head is
``nn.Linear(hidden, 1, bias=False)`` stored under ``value_head_prefix`` ("score" by default). With the default prefix
the saved weights have exactly the layout of ``AutoModelForSequenceClassification`` with ``num_labels=1``
(``model.*`` + ``score.weight``), and the class is named after it so that ``save_pretrained`` records an
architecture plain transformers loads. A causal LM checkpoint loads too (its ``lm_head`` is ignored and the head is
initialised): that is how a reward model or critic starts from an SFT model.

``config.mean`` / ``config.std`` (written by RM training) become the ``mean`` / ``std`` buffers used to normalise
rewards in eval mode when ``config.normalize_reward`` is set.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from functools import cache

import torch
from torch import Tensor, nn

MODEL_TYPES = ("reward", "critic")


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions counting only real tokens, so left-padded rows get the same positions as unpadded ones."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill_(attention_mask == 0, 1)


def last_token_index(attention_mask: Tensor) -> Tensor:
    """``[B, 1]`` index of each row's last non-pad token (works for left and right padding)."""
    width = attention_mask.size(1)
    return width - 1 - attention_mask.long().fliplr().argmax(dim=1, keepdim=True)


@cache
def value_model_class(base_cls: type, value_head_prefix: str) -> type:
    """A PreTrainedModel subclass with ``base_cls`` as body and a scalar head under ``value_head_prefix``."""
    pretrained_cls = base_cls.__base__  # e.g. LlamaPreTrainedModel: weight init, base_model_prefix, save/load

    class ValueModel(pretrained_cls):
        supports_gradient_checkpointing = True

        def __init__(self, config) -> None:
            super().__init__(config)
            setattr(self, self.base_model_prefix, base_cls(config))
            self.value_head_prefix = value_head_prefix
            setattr(self, value_head_prefix, nn.Linear(config.hidden_size, 1, bias=False))
            # Not saved as weights: they live in config.json (mean/std), where RL's reward normalisation reads them.
            self.register_buffer("mean", torch.zeros(1), persistent=False)
            self.register_buffer("std", torch.ones(1), persistent=False)
            self.post_init()
            self.load_normalization_from_config()

        def load_normalization_from_config(self) -> None:
            with torch.no_grad():
                self.mean.fill_(float(getattr(self.config, "mean", 0.0)))
                self.std.fill_(float(getattr(self.config, "std", 1.0)))

        def forward(
            self, input_ids: Tensor, attention_mask: Tensor | None = None, position_ids: Tensor | None = None, **kwargs
        ) -> Tensor:
            """Per-token values ``[B, T]`` (value of the state after token t). Packed rows (rlhf.models.packing)
            pass ``position_ids`` and no mask: the body finds the samples from the positions."""
            if position_ids is None:
                if attention_mask is None:
                    attention_mask = torch.ones_like(input_ids)
                position_ids = position_ids_from_mask(attention_mask)
            body = getattr(self, self.base_model_prefix)
            out = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
            head = getattr(self, self.value_head_prefix)
            return head(out.last_hidden_state).squeeze(-1)

    name = base_cls.__name__.removesuffix("Model") + "ForSequenceClassification"
    # Same weight layout as that class (when the prefix is "score"), so record it as the architecture.
    name = name if value_head_prefix == "score" else f"{name}_{value_head_prefix}"
    ValueModel.__name__ = ValueModel.__qualname__ = name
    return ValueModel


def load_value_model(
    path: str,
    model_type: str = "reward",
    *,
    precision: str = "fp32",
    attn: str = "sdpa",
    value_head_prefix: str = "score",
    init_value_head: bool = False,
    normalize_reward: bool = False,
    trust_remote_code: bool = False,
    gradient_checkpointing: bool = False,
    lora=None,
    require_trained_head: bool = False,
):
    """A reward or critic model from ``path`` (a causal LM, a sequence-classification model, or one we saved).

    ``config.value_head_prefix`` in the checkpoint overrides ``value_head_prefix`` (as in OpenRLHF). With
    ``init_value_head`` the head starts from ``N(0, 1/(hidden+1))`` (RM training; a critic from the policy).
    With ``require_trained_head`` a checkpoint without the head's weights raises
    :class:`~rlhf.models.head_check.UntrainedValueHead` instead of scoring with a random head.
    """
    from transformers import MODEL_MAPPING, AutoConfig

    from rlhf.models.loading import attn_implementation, enable_gradient_checkpointing, quiet_transformers, torch_dtype

    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type={model_type!r}: must be one of {', '.join(MODEL_TYPES)}")
    quiet_transformers()
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    value_head_prefix = getattr(config, "value_head_prefix", None) or value_head_prefix
    config.value_head_prefix = value_head_prefix
    config.normalize_reward = normalize_reward
    config.num_labels = 1
    base_cls = MODEL_MAPPING[type(config)]  # the base model class AutoModel would pick (its public mapping)
    cls = value_model_class(base_cls, value_head_prefix)
    # Starting a head from a causal LM is expected to report lm_head unused and the head missing: say it once, briefly.
    with _transformers_verbosity_error(init_value_head):
        loaded = cls.from_pretrained(
            path,
            config=config,
            dtype=torch_dtype(precision),
            attn_implementation=attn_implementation(attn),
            trust_remote_code=trust_remote_code,
            output_loading_info=require_trained_head,
        )
    model, info = loaded if require_trained_head else (loaded, {})
    if require_trained_head and f"{value_head_prefix}.weight" in info.get("missing_keys", ()):
        from rlhf.models.head_check import UntrainedValueHead, weight_names

        names = weight_names(path) or set(info.get("unexpected_keys", ()))
        raise UntrainedValueHead(path, value_head_prefix, names)
    # Non-persistent buffers are not restored by from_pretrained (the model is built on the meta device).
    model.load_normalization_from_config()
    model.config.use_cache = False
    if init_value_head:
        head = getattr(model, value_head_prefix)
        with _gathered_for_init(head.weight), torch.no_grad():
            head.weight.normal_(mean=0.0, std=1 / (config.hidden_size + 1))
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if lora is not None and lora.rank > 0:
        from rlhf.models.lora import apply_lora

        model = apply_lora(model, lora, task_type=None, modules_to_save=[value_head_prefix])
    return model


def _gathered_for_init(param):
    """Under ZeRO-3 (model built in zero.Init) a parameter is a shard: gather it, let rank 0 write, re-partition."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters([param], modifier_rank=0)


@contextmanager
def _transformers_verbosity_error(enabled: bool):
    from transformers.utils import logging as hf_logging

    if not enabled:
        yield
        return
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def sequence_rewards(values: Tensor, attention_mask: Tensor) -> Tensor:
    """``[B]`` reward: the value at each row's last non-pad token."""
    return values.gather(1, last_token_index(attention_mask)).squeeze(1)


def normalize(rewards: Tensor, model) -> Tensor:
    """``(r - mean) / std`` with the statistics stored in the model's config (identity when not asked for)."""
    if getattr(model.config, "normalize_reward", False):
        return (rewards - model.mean) / model.std
    return rewards
