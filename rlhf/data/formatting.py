"""Turning row values into text and token segments: chat template or ``data.input_template``.

Prompts for RL follow OpenRLHF ``PromptDataset``: with ``data.apply_chat_template`` a string becomes one user
message and the template is rendered with ``add_generation_prompt=True``; otherwise ``input_template.format(x)``
(or the string itself). A prompt given as a message list is rendered with the template either way: a chat has no
other text (TRL's rule: the data's format decides, a string prompt is used as it is). Training sequences (SFT,
preference) are rendered as *segments*, each marked trainable or not, and tokenised segment by segment, so that loss
masks and prompt lengths line up exactly with the tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rlhf.data.errors import BadRow, DataError
from rlhf.data.fields import Messages, TextOrMessages

Segment = tuple[str, bool]  # (text, trainable)


def to_messages(value: TextOrMessages, role: str) -> Messages:
    """A string becomes a single message with ``role``; a message list is returned as is."""
    return [{"role": role, "content": value}] if isinstance(value, str) else list(value)


@dataclass(frozen=True)
class Formatter:
    """Renders prompts and conversations for one tokenizer and the data settings.

    ``chat_template`` overrides the tokenizer's (``model.chat_template``); ``key`` names the column in errors.
    """

    tokenizer: Any
    apply_chat_template: bool = True
    input_template: str | None = None
    chat_template: str | None = None
    # Renders of recent conversations: a preference pair renders its prompt twice, and templating is the
    # slowest step of building a dataset.
    _renders: dict[tuple[str, bool], str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.apply_chat_template and not (self.chat_template or getattr(self.tokenizer, "chat_template", None)):
            raise DataError(
                "data.apply_chat_template=true but the tokenizer has no chat template; set model.chat_template, "
                "or data.apply_chat_template=false (optionally with data.input_template)"
            )
        if self.input_template is not None and "{}" not in self.input_template:
            raise DataError(f"data.input_template={self.input_template!r} must contain {{}} where the input goes")

    @property
    def eos_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            raise DataError("the tokenizer has no eos token; give it one (eos_token) before building datasets")
        return int(eos)

    def encode(self, text: str) -> list[int]:
        # Special tokens come from the template text itself, never added by the tokenizer (OpenRLHF: same).
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def chat(self, msgs: Messages, add_generation_prompt: bool) -> str:
        key = (json.dumps(msgs, sort_keys=True), add_generation_prompt)
        if key not in self._renders:
            if len(self._renders) >= 64:
                self._renders.clear()
            kwargs = {"chat_template": self.chat_template} if self.chat_template else {}
            self._renders[key] = self.tokenizer.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
            )
        return self._renders[key]

    def prompt(self, value: TextOrMessages, key: str) -> str:
        """The prompt text a policy continues from."""
        if self.apply_chat_template:
            return self.chat(to_messages(value, "user"), add_generation_prompt=True)
        if not isinstance(value, str):  # a chat: rendered by the template, as TRL renders a conversational prompt
            if not (self.chat_template or getattr(self.tokenizer, "chat_template", None)):
                raise BadRow(
                    key,
                    "is a list of chat messages and the tokenizer has no chat template",
                    "set model.chat_template",
                    skippable=False,  # the same on every chat row: a setting, not the row
                )
            return self.chat(list(value), add_generation_prompt=True)
        return self.input_template.format(value) if self.input_template else value

    def pair_segments(self, prompt: TextOrMessages | None, response: TextOrMessages, key: str) -> list[Segment]:
        """Segments of ``prompt`` followed by ``response``; only the response (its assistant turns) is trainable."""
        if self.apply_chat_template:
            head = to_messages(prompt, "user") if prompt is not None else []
            tail = to_messages(response, "assistant")
            trainable = [False] * len(head) + [m["role"] == "assistant" for m in tail]
            return self.conversation_segments(head + tail, trainable, key)
        if not isinstance(response, str) or (prompt is not None and not isinstance(prompt, str)):
            raise BadRow(key, "holds chat messages", "set data.apply_chat_template=true for chat data")
        head_text = self.prompt(prompt, key) if prompt is not None else ""
        return [(head_text, False), (response, True)]

    def conversation_segments(self, msgs: Messages, trainable: list[bool], key: str) -> list[Segment]:
        """Split the rendered conversation at each trainable message: the text from the end of the generation
        prompt before it to the end of the message is trainable (OpenRLHF multi-turn ranges)."""
        full = self.chat(msgs, add_generation_prompt=False)
        segments: list[Segment] = []
        pos = 0
        for i, train in enumerate(trainable):
            if not train:
                continue
            prefix = self.chat(msgs[:i], add_generation_prompt=True) if i else self._empty_generation_prefix()
            upto = self.chat(msgs[: i + 1], add_generation_prompt=False)
            start, end = len(prefix), len(upto)
            if not (pos <= start <= end and full.startswith(prefix) and full.startswith(upto)):
                raise BadRow(
                    key,
                    "the chat template renders this conversation differently from its prefixes, so its turns cannot "
                    "be masked",
                    "use a prefix-stable template (model.chat_template)",
                )
            segments += [(full[pos:start], False), (full[start:end], True)]
            pos = end
        if full[pos:].strip():
            segments.append((full[pos:], False))
        return [s for s in segments if s[0]]

    def _empty_generation_prefix(self) -> str:
        try:
            return self.chat([], add_generation_prompt=True)
        except Exception:  # templates that index messages[0] cannot render an empty conversation
            return ""

    def tokenize_segments(self, segments: list[Segment]) -> tuple[list[int], list[int], int]:
        """Token ids, a token-aligned loss mask (1: the token is a training target) and the prompt length (tokens
        before the first trainable segment). Trailing newlines of the last segment are dropped and eos appended
        when missing (OpenRLHF SFT: ``rstrip("\\n")`` + eos). ``mask[0]`` is 0: nothing predicts the first token."""
        texts = [seg.rstrip("\n") if j == len(segments) - 1 else seg for j, (seg, _) in enumerate(segments)]
        # One batched call: the per-call overhead of a transformers tokenizer dwarfs the tokenising itself.
        encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        ids: list[int] = []
        mask: list[int] = []
        prompt_len = None
        for (_, train), toks in zip(segments, encoded, strict=True):
            if train and prompt_len is None:
                prompt_len = len(ids)
            ids += toks
            mask += [int(train)] * len(toks)
        if not ids or ids[-1] != self.eos_id:
            ids.append(self.eos_id)
            mask.append(int(segments[-1][1]) if segments else 1)
        mask[0] = 0
        return ids, mask, len(ids) if prompt_len is None else prompt_len
