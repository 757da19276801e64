"""A reward model that scores texts: bounded tokenisation (a query costs at most ~``max_len`` tokens of work, however
long its text) and forward passes over rows of token ids, rows of similar length padded together.

Each query is the full text (prompt + response) as the policy's tokenizer decodes it. It is tokenised without added
special tokens, trailing pad tokens are dropped and eos is appended when missing (reward models are trained on
prompt + response + eos and score the last token); a query longer than ``max_len`` keeps its first ``max_len - 1``
tokens plus eos. The reward is the value at the last token, normalised with the model's stored mean/std when asked.
"""

from __future__ import annotations

from typing import Any

import torch

# Tokens tokenised beyond max_len when a text is cut first: BPE merges at the cut change only its last few tokens.
MARGIN_TOKENS = 64
# The first cut tried, in characters per token needed (BPE averages about 4); grown 4x while too few tokens come out.
CHARS_PER_TOKEN = 8


class RewardModelScorer:
    """Scores texts with a reward model: ``score(texts) -> list[float]``, or ``encode`` then ``score_rows``."""

    def __init__(
        self, model: Any, tokenizer: Any, *, max_len: int = 2048, batch_size: int = 32, name: str = ""
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the reward model's tokenizer has no eos token")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.batch_size = batch_size
        self.name = name
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        # the pad token's text, stripped off a long text's end before it is cut (a short one drops pad ids instead)
        self.pad_text = tokenizer.pad_token if self.pad_id != self.eos_id and tokenizer.pad_token else ""
        self.device = next(model.parameters()).device

    @classmethod
    def from_path(
        cls,
        path: str,
        *,
        normalize: bool = False,
        precision: str = "fp32",
        device: str = "cpu",
        value_head_prefix: str = "score",
        max_len: int = 2048,
        batch_size: int = 32,
        allow_untrained_head: bool = False,
    ) -> RewardModelScorer:
        from transformers import AutoTokenizer

        model = load_reward_model(
            path,
            normalize=normalize,
            precision=precision,
            value_head_prefix=value_head_prefix,
            allow_untrained_head=allow_untrained_head,
        )
        tokenizer = AutoTokenizer.from_pretrained(path)
        return cls(model.to(device), tokenizer, max_len=max_len, batch_size=batch_size, name=path)

    @property
    def first_cut(self) -> int:
        """Characters of a text tokenised at first: a text up to this long is tokenised whole."""
        return (self.max_len + MARGIN_TOKENS) * CHARS_PER_TOKEN

    def encode_cost(self, text: str) -> int:
        """Characters :meth:`encode` tokenises for ``text`` (usually; at most the whole text)."""
        return min(len(text), self.first_cut)

    def encode(self, text: str) -> list[int]:
        """The token ids scored for ``text``: at most ``max_len``, ending in eos.

        A text longer than :attr:`first_cut` characters is tokenised from its start only, as far as gives
        ``max_len + MARGIN_TOKENS`` tokens (the cut tried grows 4x until it does): a 10 MB query costs what a
        ``max_len`` one does, and its ids are those of tokenising it whole, then cutting."""
        cut = self.first_cut
        if len(text) > cut and self.pad_text:
            while text.endswith(self.pad_text):  # what dropping trailing pad ids does, before the end is cut away
                text = text[: -len(self.pad_text)]
        while len(text) > cut:
            ids = self._tokenize(text[:cut])
            if len(ids) >= self.max_len + MARGIN_TOKENS:
                return ids[: self.max_len - 1] + [self.eos_id]
            cut *= 4
        ids = self._tokenize(text)
        while ids and ids[-1] == self.pad_id and self.pad_id != self.eos_id:
            ids.pop()
        if not ids or ids[-1] != self.eos_id:
            ids.append(self.eos_id)
        if len(ids) > self.max_len:
            ids = ids[: self.max_len - 1] + [self.eos_id]
        return ids

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def _tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def score(self, texts: list[str]) -> list[float]:
        return self.score_rows(self.encode_many(texts))

    @torch.no_grad()
    def score_rows(self, rows: list[list[int]]) -> list[float]:
        """The rewards of ``rows`` (token ids from :meth:`encode`), in order. Rows are run shortest first, at most
        ``batch_size`` at a time, a new batch started where padding would double its size: a long row is not
        padded onto many short ones."""
        out = [0.0] * len(rows)
        for group in length_groups([len(r) for r in rows], self.batch_size):
            width = max(len(rows[i]) for i in group)
            ids = torch.full((len(group), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for k, i in enumerate(group):  # right padding: the last real token is at len(row) - 1
                ids[k, : len(rows[i])] = torch.tensor(rows[i])
                mask[k, : len(rows[i])] = 1
            scores = self.model.rewards(ids.to(self.device), mask.to(self.device)).float().cpu().tolist()
            for i, s in zip(group, scores, strict=True):
                out[i] = s
        return out


def length_groups(lengths: list[int], max_rows: int) -> list[list[int]]:
    """Indices of ``lengths`` in batches: shortest first, at most ``max_rows`` each, and each batch's padded size
    (rows x its longest) at most twice its real tokens."""
    groups: list[list[int]] = []
    group: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        n = lengths[i]
        if group and (len(group) >= max_rows or (len(group) + 1) * n > 2 * (real + n)):
            groups.append(group)
            group, real = [], 0
        group.append(i)
        real += n
    if group:
        groups.append(group)
    return groups


def load_reward_model(
    path: str, *, normalize: bool, precision: str, value_head_prefix: str, allow_untrained_head: bool = False
) -> Any:
    """The reward model with a ``rewards(input_ids, attention_mask) -> [B]`` method.

    Uses the platform's value-head loader (rlhf.models) when present: it reads our RM checkpoints (any
    ``value_head_prefix``, stored mean/std) as well as plain sequence-classification ones. Otherwise transformers'
    ``AutoModelForSequenceClassification`` with one label (reward = logit at the last non-pad token).

    A checkpoint without value-head weights (a policy, say) raises
    :class:`~rlhf.models.head_check.UntrainedValueHead` unless ``allow_untrained_head``: its scores would be noise.
    The safetensors header is read first, so the refusal comes before the weights are loaded.
    """
    if not allow_untrained_head:
        from rlhf.models.head_check import missing_value_head

        problem = missing_value_head(path, value_head_prefix)
        if problem is not None:
            raise problem
    try:
        from rlhf.models.forward import value_model_rewards
        from rlhf.models.value_head import load_value_model
    except ImportError:
        load_value_model = None
    if load_value_model is not None:
        model = load_value_model(
            path,
            "reward",
            precision=precision,
            value_head_prefix=value_head_prefix,
            normalize_reward=normalize,
            require_trained_head=not allow_untrained_head,
        )
        model.rewards = lambda ids, mask: value_model_rewards(model, ids, mask, normalized=True)
        return model
    from transformers import AutoModelForSequenceClassification

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=dtype)
    mean, std = float(getattr(model.config, "mean", 0.0)), float(getattr(model.config, "std", 1.0))

    def rewards(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # transformers pools at the last token that is not config.pad_token_id (right padding keeps that right).
        r = model(input_ids=ids, attention_mask=mask).logits[:, 0]
        return (r - mean) / std if normalize else r

    model.rewards = rewards
    return model
