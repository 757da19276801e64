"""A byte-level tokenizer built with the ``tokenizers`` library, for locally made models (no hub needed).

Every byte is one token (ids 0..255, so any text round-trips), followed by a few special tokens: padding, begin and
end of text, and chat-role markers. The chat template uses the role markers; ``<|end|>`` closes a turn and is also
the eos token, so generation stops at the end of the assistant's turn (as Qwen's ``<|im_end|>`` does).
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS)

# Jinja, rendered by transformers' apply_chat_template. One turn: "<|role|>\n{content}<|end|>\n".
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def byte_level_tokenizer(chat_template: str | None = None) -> PreTrainedTokenizerFast:
    """256 byte tokens + :data:`SPECIAL_TOKENS` (262 ids); pad, bos and eos set; right padding by default."""
    # GPT-2's byte -> printable-unicode map: the ByteLevel pre-tokenizer emits these characters, so a vocabulary of
    # exactly the 256 of them (no merges) gives one token per byte.
    alphabet = _bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        additional_special_tokens=list(ROLE_TOKENS),
        chat_template=chat_template or CHAT_TEMPLATE,
        padding_side="right",
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> unicode character table (printable bytes map to themselves)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))
