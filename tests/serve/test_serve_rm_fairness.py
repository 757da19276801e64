"""``rlhf-serve-rm`` under a large request: a small request is not held up by it.

- a query is tokenised only as far as ``--max-len`` needs, and the ids are those of tokenising it whole then cutting
  (a 10 MB query costs what a ``max_len`` one does);
- each forward pass takes a bounded slice of every pending request (the fewest tokens left first, each an equal
  share of ``--max-batch-tokens``), so a small request sent while a large one is scored is answered first.

"While" is made by the test, not by a clock: the forward passes that carry the large request's queries wait on a
gate the test opens one pass at a time, so the order of answers is fixed whatever the machine's speed.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading

import pytest
import torch
from ceilings import ceiling, wait_until
from serve_helpers import byte_tokenizer, health, post, serving

from rlhf.serve.limits import ServeLimits
from rlhf.serve.reward_server import RewardModelScorer, build_app
from rlhf.serve.scheduler import Job, commit, plan_pass

TEN_MB = ("3+4=7, 12*7=84 and so on. " * 420_000)[: 10 * 2**20]


def bpe_tokenizer():
    """A byte-level BPE with merges (learned here from a few lines): tokens of several characters, as real ones."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|pad|>", "<|end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = ["the quick brown fox jumps over the lazy dog", "3+4=7 and 12*7=84", "xxxxxxxx yyyy", "aaaa bbbb"] * 50
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")


def whole_then_cut(tokenizer, text: str, max_len: int) -> list[int]:
    """The ids as the server made them before: the whole text tokenised, trailing pads dropped, eos, then cut."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    while ids and ids[-1] == tokenizer.pad_token_id:
        ids.pop()
    if not ids or ids[-1] != tokenizer.eos_token_id:
        ids.append(tokenizer.eos_token_id)
    return ids if len(ids) <= max_len else ids[: max_len - 1] + [tokenizer.eos_token_id]


def texts_around_the_cut(cut: int) -> list[str]:
    rng = random.Random(0)
    words = ["the", "quick", "brown", "fox", "3+4=7", "xxxxxxxx", "é", "漢字", "🙂", "\n", "  ", "<|end|>"]
    prose = " ".join(rng.choice(words) for _ in range(4 * cut))
    return [
        "",
        "hi",
        "hi<|pad|><|pad|>",
        "a b " + "<|pad|>" * cut,  # a short text, then more pad than the first cut: only "a b " is scored
        prose[: cut - 1],
        prose[:cut],
        prose[: cut + 1],
        prose,
        prose + "<|pad|>" * 3,
        "x" * (3 * cut),  # one word: BPE merges run across the cut
        "🙂漢" * cut,  # several tokens per character
        " " * (2 * cut),
        "xy" * (cut // 2 - 10),  # too few tokens in the first cut: it grows
    ]


class Spy:
    """A tokenizer that records how many characters each call was given."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.seen = tokenizer, []

    def __call__(self, text, **kwargs):
        self.seen.append(len(text))
        return self.tokenizer(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


@pytest.mark.parametrize("make_tokenizer", [bpe_tokenizer, byte_tokenizer], ids=["bpe", "bytes"])
@pytest.mark.parametrize("max_len", [16, 300])
def test_a_long_text_is_tokenised_from_its_start_only_with_the_ids_of_the_whole(make_tokenizer, max_len):
    tokenizer = make_tokenizer()
    scorer = RewardModelScorer(torch.nn.Linear(1, 1), tokenizer, max_len=max_len)
    for text in texts_around_the_cut(scorer.first_cut):
        assert scorer.encode(text) == whole_then_cut(tokenizer, text, max_len), text[:80]
    spy = Spy(tokenizer)
    bounded = RewardModelScorer(torch.nn.Linear(1, 1), spy, max_len=max_len)
    ids = bounded.encode(TEN_MB)
    assert len(ids) == max_len and ids[-1] == tokenizer.eos_token_id
    assert sum(spy.seen) <= 5 * bounded.first_cut < len(TEN_MB) // 100, spy.seen  # not the 10 MB


def slices(parts) -> dict[int, tuple[int, int]]:
    return {j.seq: (start, end) for j, start, end in parts}


def job(seq: int, lengths: list[int]) -> Job:
    j = Job(len(lengths), seq, guess=max(lengths))
    j.add([[0] * n for n in lengths])
    return j


def test_each_pass_takes_a_bounded_slice_of_each_request_the_small_first():
    large = job(1, [2048] * 10)
    assert slices(plan_pass([large], 64, 8192)) == {1: (0, 4)}  # alone: the whole budget
    commit(plan_pass([large], 64, 8192))
    small = [job(2 + i, [30]) for i in range(3)]
    parts = plan_pass([large, *small], 64, 8192)
    # each small one whole, and the large one only its share (8192 / 4 requests: one query of 2048)
    assert slices(parts) == {1: (4, 5), 2: (0, 1), 3: (0, 1), 4: (0, 1)}
    rows = commit(parts)
    assert sum(map(len, rows)) <= 8192 and len(rows) == 4
    assert not large.missed and not any(s.missed for s in small)


def test_a_request_left_out_of_a_pass_goes_first_in_the_next():
    large = job(1, [100] * 5)
    small = [job(2 + i, [10]) for i in range(4)]
    parts = plan_pass([large, *small], 4, 8192)  # four queries a pass: the small ones fill it
    assert slices(parts) == {2: (0, 1), 3: (0, 1), 4: (0, 1), 5: (0, 1)} and large.missed
    commit(parts)
    more = [job(6 + i, [10]) for i in range(4)]
    assert slices(plan_pass([large, *more], 4, 8192)) == {1: (0, 1), 6: (0, 1), 7: (0, 1), 8: (0, 1)}
    assert not large.missed and more[-1].missed


def test_the_first_query_of_a_pass_is_taken_even_over_the_budget_and_none_after_it():
    assert slices(plan_pass([job(1, [500, 10])], 8, 100)) == {1: (0, 1)}


class GatedScorer(RewardModelScorer):
    """The real tiny reward model; a forward pass with a query of ``max_len`` tokens (the large request's) waits
    for a permit from the test."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.permits = threading.Semaphore(0)
        self.gated = threading.Event()  # such a pass is waiting
        self.passes: list[list[int]] = []  # the lengths of every pass's queries

    def score_rows(self, rows):
        self.passes.append(sorted(len(r) for r in rows))
        if any(len(r) == self.max_len for r in rows):
            self.gated.set()
            assert self.permits.acquire(timeout=ceiling(120)), "the test gave no permit"
            self.gated.clear()
        return super().score_rows(rows)


@pytest.fixture
def gated_server(reward_model_dir):
    """build_app over the gated scorer, served by uvicorn on 127.0.0.1 in a thread; yields (url, scorer)."""
    import uvicorn

    path, model, tokenizer = reward_model_dir
    model.rewards = lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits[:, 0]
    # a pass holds one large query (64 tokens) and a small one, never two large ones
    scorer = GatedScorer(model, tokenizer, max_len=64, name=str(path))
    app = build_app(scorer, max_batch=8, max_wait_s=0.0, max_batch_tokens=100, limits=ServeLimits(16 * 2**20))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "uvicorn's start", 60, alive=thread.is_alive)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/get_reward", scorer
    finally:
        scorer.permits.release(1000)
        server.should_exit = True
        thread.join(ceiling(60))
        sock.close()


def _post_in_thread(url: str, body: dict) -> tuple[threading.Thread, dict]:
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(answer=post(url, body, timeout=300)), daemon=True)
    thread.start()
    return thread, out


def test_a_small_request_sent_while_a_10_mb_one_is_scored_is_answered_first(gated_server):
    url, scorer = gated_server
    large_queries = [TEN_MB, "y" * 5000, "z" * 5000]  # three queries cut to 64 tokens: three passes at least
    large, large_out = _post_in_thread(url, {"query": large_queries})
    wait_until(scorer.gated.is_set, "the large request's first pass", 120, alive=large.is_alive)
    small, small_out = _post_in_thread(url, {"query": ["a small one"]})
    wait_until(lambda: health(url)["queued"] == 4, "the small request admitted", 60, alive=small.is_alive)
    scorer.permits.release(2)  # the pass in progress, and the small request's own
    small.join(ceiling(120))
    assert len(small_out["answer"]["rewards"]) == 1
    assert large.is_alive() and "answer" not in large_out, "the large request finished before the small one"
    assert health(url)["queued"] == 3  # its queries are still held: the small one did not wait for them
    # the small request shared the second pass with one large query; a pass never held two large ones
    assert [1, 64] in [[1 if n < 64 else n for n in p] for p in scorer.passes]
    assert all(p.count(64) <= 1 for p in scorer.passes)
    scorer.permits.release(1000)
    large.join(ceiling(300))
    rewards = large_out["answer"]["rewards"]
    alone = [scorer.score([q])[0] for q in large_queries]  # one at a time, no gate held (permits left)
    assert rewards == pytest.approx(alone, abs=1e-4)


def test_a_10_mb_query_is_answered_with_the_score_of_its_first_max_len_tokens(reward_model_dir):
    path, model, tokenizer = reward_model_dir
    with serving(path, "--max-len", "256") as url:
        got = post(url, json.dumps({"query": [TEN_MB, "a small one"]}).encode(), timeout=300)["rewards"]
        assert health(url)["tokens"] == 256 + len(tokenizer("a small one")["input_ids"]) + 1
    ids = tokenizer(TEN_MB[:1000], add_special_tokens=False)["input_ids"][:255] + [tokenizer.eos_token_id]
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids])).logits[0, 0].item()
    assert got[0] == pytest.approx(expected, abs=1e-4)


def test_max_len_over_max_batch_tokens_is_refused_naming_both_flags_and_the_fix(reward_model_dir):
    import subprocess

    cmd = [sys.executable, "-m", "rlhf.cli.serve_rm", "--model", str(reward_model_dir[0]), "--max-len", "9000"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=ceiling(60))
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert last == (
        "rlhf-serve-rm: error: --max-len 9000 is more than --max-batch-tokens 8192: a query of the largest size "
        "would not fit one forward pass; raise --max-batch-tokens to 9000 or more, or lower --max-len"
    )


def test_health_tells_the_batching_budget(reward_model_dir):
    with serving(reward_model_dir[0], "--max-batch-tokens", "4096", "--max-len", "1024") as url:
        assert len(post(url, {"query": ["hi"]})["rewards"]) == 1
        assert health(url)["max_batch_tokens"] == 4096
