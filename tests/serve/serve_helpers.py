"""``rlhf-serve-rm`` started in a subprocess on 127.0.0.1 for the serve tests, and their HTTP calls."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ceilings import ceiling, wait_until


def tiny_llama_config(tokenizer, layers: int = 2):
    """A 64-wide Llama with one label (a reward model) over ``tokenizer``."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|pad|>", "<|end|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")


@contextmanager
def serving(model: Path, *args: str, start_timeout: float = 120) -> Iterator[str]:
    """``rlhf-serve-rm --model MODEL --port 0 ARGS`` until the block ends; yields its /get_reward URL."""
    cmd = [sys.executable, "-m", "rlhf.cli.serve_rm", "--model", str(model), "--port", "0", "--device", "cpu", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    try:
        started = lambda: any("serving" in line for line in lines)  # noqa: E731
        try:
            wait_until(started, "rlhf-serve-rm's start", start_timeout, alive=lambda: proc.poll() is None)
        except AssertionError as e:
            raise AssertionError(f"{e}: {''.join(lines)[-2000:]}") from None
        yield next(line for line in lines if "serving" in line).split(" at ")[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=ceiling(30))


def post(url: str, body: dict | bytes, timeout: float = 120) -> dict:
    timeout = ceiling(timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def post_status(url: str, body: dict | bytes, timeout: float = 120) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) whether the answer is 200 or an error."""
    try:
        return 200, post(url, body, timeout), {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), {k.lower(): v for k, v in e.headers.items()}


def health(url: str) -> dict:
    with urllib.request.urlopen(url.replace("/get_reward", "/health"), timeout=ceiling(60)) as r:
        return json.loads(r.read())
