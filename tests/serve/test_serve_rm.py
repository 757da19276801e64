"""``rlhf-serve-rm`` in a subprocess with a tiny sequence-classification model, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import urllib.error
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from serve_helpers import health, post, serving

QUERIES = ["hello", "a much longer query about 3+4=7", "x", "tiny reward models", "12*7=84 is right"]


@pytest.fixture(scope="module")
def server(reward_model_dir):
    with serving(reward_model_dir[0], "--batch-size", "8", "--max-wait-ms", "300") as url:
        yield url


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
