"""Helpers for agent tests: a BPE tokenizer whose decode -> encode round trip changes token ids, a scripted
deterministic engine, and the trainer-side log-prob recomputation."""

from __future__ import annotations

from collections.abc import Callable

from rlhf.backends.contract.rollout import Rollout, SamplingSpec

END, USER, ASSISTANT, PAD = "<|end|>", "<|user|>", "<|assistant|>", "<|pad|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
MERGES = [("a", "b"), ("1", "2"), ("o", "k"), ("w", "r")]


def make_bpe_tokenizer():
    """Byte-level BPE over all 256 bytes plus a few merges ("ab", "12", "ok", "wr") and chat special tokens.

    Encoding "ab" gives the merged token, so the ids [a, b] decode to text that re-encodes differently: the case
    where decode-and-re-encode would corrupt a trajectory.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([PAD, END, USER, ASSISTANT])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=END,
        additional_special_tokens=[USER, ASSISTANT],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


class FakeEngine:
    """A deterministic RolloutEngine: ``reply(prompt_ids) -> token ids``; cut at max_new_tokens ("length"), else
    "stop". Log-prob of output token k is ``-(k + 1) / 100`` so tests can check alignment. Records every call."""

    def __init__(self, reply: Callable[[list[int]], list[int]]) -> None:
        self.reply = reply
        self.calls: list[tuple[list[list[int]], SamplingSpec]] = []

    def generate(self, prompts: list[list[int]], sampling: SamplingSpec) -> list[Rollout]:
        self.calls.append(([list(p) for p in prompts], sampling))
        out = []
        for p in prompts:
            for _ in range(sampling.n):
                full = list(self.reply(list(p)))
                ids = full[: sampling.max_new_tokens]
                reason = "stop" if len(ids) == len(full) else "length"
                out.append(Rollout(list(p), ids, [1] * len(ids), [-(k + 1) / 100 for k in range(len(ids))], reason))
        return out

    def load_weights(self, named_tensors) -> None:
        pass

    def sleep(self) -> None:
        pass

    def wake(self) -> None:
        pass


def recomputed_logprobs(model, prompt_ids: list[int], output_ids: list[int], temperature: float = 1.0) -> list[float]:
    """The model's log-prob of each output token given everything before it (what the trainer computes)."""
    import torch

    ids = torch.tensor([prompt_ids + output_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt_ids) :, None]).squeeze(-1).tolist()
