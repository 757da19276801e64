"""``rlhf-serve-rm`` in a subprocess with a tiny sequence-classification model, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

QUERIES = ["hello", "a much longer query about 3+4=7", "x", "tiny reward models", "12*7=84 is right"]


def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|pad|>", "<|end|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    path = tmp_path_factory.mktemp("rm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model.eval(), tokenizer


@pytest.fixture(scope="module")
def server(reward_model_dir):
    path = reward_model_dir[0]
    cmd = [sys.executable, "-m", "rlhf.cli.serve_rm", "--model", str(path), "--port", "0", "--batch-size", "8"]
    proc = subprocess.Popen(cmd + ["--max-wait-ms", "300"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not any("serving" in line for line in lines):
            assert proc.poll() is None, f"rlhf-serve-rm exited: {''.join(lines)}"
            assert time.monotonic() < deadline, f"rlhf-serve-rm did not start: {''.join(lines)}"
            time.sleep(0.1)
        url = next(line for line in lines if "serving" in line).split(" at ")[1].strip()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def health(url: str) -> dict:
    with urllib.request.urlopen(url.replace("/get_reward", "/health"), timeout=60) as r:
        return json.loads(r.read())


def test_binds_loopback_and_scores_a_batch_with_the_reference_shape(server, reward_model_dir):
    assert server.startswith("http://127.0.0.1:") and server.endswith("/get_reward")
    out = post(server, {"query": QUERIES, "prompts": [""] * 5, "labels": [""] * 5})
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert len(out["rewards"]) == 5 and out["scores"] == out["rewards"] and out["extra_logs"] == {}
    # reward = the model's output at the last token of query + eos (computed here without the server)
    _, model, tokenizer = reward_model_dir
    ids = tokenizer(QUERIES[1], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids])).logits[0, 0].item()
    assert out["rewards"][1] == pytest.approx(expected, abs=1e-4)


def test_batched_and_concurrent_scores_equal_one_by_one(server):
    together = post(server, {"query": QUERIES})["rewards"]
    alone = [post(server, {"query": [q]})["rewards"][0] for q in QUERIES]
    assert together == pytest.approx(alone, abs=1e-4)
    before = health(server)["batches"]
    with ThreadPoolExecutor(len(QUERIES)) as pool:
        concurrent = list(pool.map(lambda q: post(server, {"query": [q]})["rewards"][0], QUERIES))
    assert concurrent == pytest.approx(alone, abs=1e-4)
    assert health(server)["batches"] - before < len(QUERIES)  # concurrent requests shared forward passes


def test_malformed_requests_get_400_with_the_reason(server):
    for body, reason in [
        ({"queries": ["x"]}, "'query' must be a list of strings"),
        ({"query": ["x"], "labels": []}, "'labels' must be a list"),
    ]:
        with pytest.raises(urllib.error.HTTPError) as err:
            post(server, body)
        assert err.value.code == 400 and reason in err.value.read().decode()
