"""Whether two local model folders share a tokenizer, read from their tokenizer files (nothing is loaded).

On-policy distillation compares the student's and the teacher's log-probabilities of the same token ids, so both
must map ids to the same tokens and split text the same way. Read, in order of preference: ``tokenizer.json``
(the fast tokenizer: its model's vocabulary and merges, and the added tokens), else ``vocab.json`` (+ ``merges.txt``,
``added_tokens.json``), else a sentencepiece ``tokenizer.model`` (compared byte for byte). The models' own
``vocab_size`` may differ (embeddings padded to a multiple of 64 or 128, as in the Qwen2.5 family); the tokenizers
may not. Pure: the standard library only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TokenizerFiles:
    """What identifies a tokenizer: id -> token, a digest of its merge rules, or the sentencepiece model's digest."""

    source: str  # the file it was read from
    tokens: dict[int, str] | None = None
    merges: str = ""  # sha256 of the merge rules ("" when none)
    sentencepiece: str = ""  # sha256 of tokenizer.model


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _merges_digest(merges: list[object]) -> str:
    # tokenizers writes a merge as "a b" (older files, merges.txt) or ["a", "b"] (newer): the same rule either way.
    return _digest([m.split(" ", 1) if isinstance(m, str) else m for m in merges]) if merges else ""


def _vocab_ids(vocab: object) -> dict[int, str]:
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        return {int(i): str(t) for t, i in vocab.items()}
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
        return {i: str(entry[0] if isinstance(entry, list) else entry) for i, entry in enumerate(vocab)}
    return {}


def read_tokenizer_files(folder: str | Path) -> TokenizerFiles | None:
    """The tokenizer of a model folder, or None when it has no tokenizer file this module reads."""
    d = Path(folder).expanduser()
    tj = d / "tokenizer.json"
    if tj.is_file():
        data = json.loads(tj.read_text(encoding="utf-8"))
        model = data.get("model") or {}
        tokens = _vocab_ids(model.get("vocab"))
        for added in data.get("added_tokens") or []:
            tokens[int(added["id"])] = str(added["content"])
        merges = model.get("merges") or []
        return TokenizerFiles("tokenizer.json", tokens, _merges_digest(merges))
    vj = d / "vocab.json"
    if vj.is_file():
        tokens = _vocab_ids(json.loads(vj.read_text(encoding="utf-8")))
        at = d / "added_tokens.json"
        if at.is_file():
            tokens.update({int(i): str(t) for t, i in json.loads(at.read_text(encoding="utf-8")).items()})
        mt = d / "merges.txt"
        lines = mt.read_text(encoding="utf-8").splitlines() if mt.is_file() else []
        merges = [ln for ln in lines if ln and not ln.startswith("#")]  # "#version: ..." heads the file
        return TokenizerFiles("vocab.json", tokens, _merges_digest(merges))
    sp = d / "tokenizer.model"
    if sp.is_file():
        return TokenizerFiles("tokenizer.model", sentencepiece=hashlib.sha256(sp.read_bytes()).hexdigest())
    return None


def tokenizer_difference(a: str | Path, b: str | Path) -> str | None:
    """None when folders ``a`` and ``b`` hold the same tokenizer (or either has no readable tokenizer file, which
    is then checked at load), else the first difference, in words."""
    ta, tb = read_tokenizer_files(a), read_tokenizer_files(b)
    if ta is None or tb is None:
        return None
    if ta.sentencepiece or tb.sentencepiece:
        if ta.sentencepiece != tb.sentencepiece:
            return f"their tokenizer files differ ({ta.source} vs {tb.source})"
        return None
    assert ta.tokens is not None and tb.tokens is not None
    if ta.tokens != tb.tokens:
        if len(ta.tokens) != len(tb.tokens):
            head = f"{len(ta.tokens)} vs {len(tb.tokens)} tokens"
        else:
            head = f"both {len(ta.tokens)} tokens"
        ids = sorted(set(ta.tokens) | set(tb.tokens))
        first = next(i for i in ids if ta.tokens.get(i) != tb.tokens.get(i))
        return f"their vocabularies differ ({head}; id {first} is {ta.tokens.get(first)!r} vs {tb.tokens.get(first)!r})"
    if ta.merges != tb.merges:
        return "their vocabularies match but their merge rules differ (the same text would be split differently)"
    return None
