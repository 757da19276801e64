"""``rlhf-serve-rm``'s limits over real HTTP on 127.0.0.1: small requests and /health stay answered while a request
of the largest size runs (and a full queue meanwhile answers 503 with Retry-After); a body or a query count over the
limit gets 413 naming it; a request past its timeout 504, its queries dropped; a bad --port or --model: our message.

"While" is read from the server, not from a clock: a small request answered while /health still counts the large
request's queries as held was served between the large one's forward passes."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest
from ceilings import ceiling, wait_until
from serve_helpers import health, post, post_status, serving

MAX_QUERIES = 4000
BIG = [f"q{i} " + "x" * 100 for i in range(MAX_QUERIES)]  # ~10 s of scoring at 8 per forward pass (busy machine)
LIMITS = ["--batch-size", "8", "--max-queries", str(MAX_QUERIES), "--max-queue", str(MAX_QUERIES + 100)]


@pytest.fixture(scope="module")
def server(reward_model_dir):
    # the maximum-size request runs for seconds, minutes on a crowded machine: no 504 for it here
    timeout = ["--request-timeout-s", f"{ceiling(900):g}"]
    with serving(reward_model_dir[0], *LIMITS, "--max-body-mb", "1", *timeout) as url:
        post(url, {"query": ["warm up"]})
        yield url


def _start_big(url: str) -> tuple[threading.Thread, dict]:
    """The largest request the server takes, in a thread; returns once the server holds it."""
    result: dict = {}
    thread = threading.Thread(
        target=lambda: result.update(out=post(url, {"query": BIG}, timeout=ceiling(900))), daemon=True
    )
    thread.start()
    wait_until(lambda: health(url)["queued"] >= MAX_QUERIES, "the large request admitted", 60, alive=thread.is_alive)
    return thread, result


def test_small_requests_are_answered_while_a_maximum_size_request_runs_and_a_full_queue_gets_503(server):
    thread, result = _start_big(server)
    # the queue holds the large request: 200 more queries would exceed it (4000 + 200 > 4100), 1 more does not
    status, body, headers = post_status(server, {"query": ["q"] * 200})
    assert thread.is_alive(), "the large request ended before the second one arrived: nothing was queued"
    assert status == 503 and "--max-queue" in body["error"] and f"queue of {MAX_QUERIES + 100}" in body["error"]
    assert int(headers["retry-after"]) >= 1
    for i in range(5):
        out = post(server, {"query": ["a small one"]})
        assert len(out["rewards"]) == 1
        state = health(server)
        assert state["status"] == "ok"
        # the large request's queries are still held: this small one did not wait for the whole large one
        assert state["queued"] >= MAX_QUERIES, f"small request {i} was answered only after the large one"
    thread.join(ceiling(900))
    # scored a forward pass at a time among the small ones, the large request's scores are still its own
    rewards = result["out"]["rewards"]
    assert len(rewards) == MAX_QUERIES
    alone = post(server, {"query": [BIG[0], BIG[1234], BIG[-1]]})["rewards"]
    assert [rewards[0], rewards[1234], rewards[-1]] == pytest.approx(alone, abs=1e-4)


def test_a_body_over_the_limit_gets_413_naming_it(server):
    status, body, _ = post_status(server, {"query": ["y" * 1000] * 1500})  # ~1.5 MB
    assert status == 413 and "at most 1.00 MB" in body["error"] and "--max-body-mb" in body["error"]
    # without Content-Length (chunked), counted while it streams
    parts = urlsplit(server)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=ceiling(60))
    chunks = (json.dumps({"query": ["z" * 1000] * 300}).encode() for _ in range(5))
    conn.request("POST", parts.path, body=chunks, headers={"Content-Type": "application/json"}, encode_chunked=True)
    answer = conn.getresponse()
    assert answer.status == 413 and "--max-body-mb" in json.loads(answer.read())["error"]
    conn.close()
    assert post(server, {"query": ["still serving"]})["rewards"]


def test_more_queries_than_the_limit_get_413_naming_it(server):
    status, body, _ = post_status(server, {"query": ["q"] * (MAX_QUERIES + 1)})
    assert status == 413 and f"{MAX_QUERIES + 1} queries" in body["error"]
    assert f"at most {MAX_QUERIES} per request (--max-queries)" in body["error"]


def test_a_request_past_its_timeout_gets_504_and_its_queries_are_dropped(reward_model_dir):
    huge = BIG * 5  # 20,000 queries: far more than 3 s of scoring on any machine we run on
    limits = ["--batch-size", "8", "--max-queries", str(len(huge)), "--max-queue", str(len(huge) + 100)]
    with serving(reward_model_dir[0], *limits, "--request-timeout-s", "3") as url:
        for _ in range(30):  # the first forward pass (lazy initialisation) may itself take seconds
            if post_status(url, {"query": ["warm up"]})[0] == 200:
                break
        status, body, _ = post_status(url, {"query": huge}, timeout=ceiling(300))
        assert status == 504 and "within 3 s (--request-timeout-s)" in body["error"], body
        assert health(url)["queued"] == 0
        post(url, {"query": ["after"]})  # any forward pass of the dropped request in flight is over now
        before = health(url)["queries"]
        post(url, {"query": ["again"]})
        assert health(url)["queries"] - before == 1  # nothing of the dropped request is scored any more


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--port", "99999"], "argument --port: 99999 is not a port: ports are 0-65535"),
        (["--port", "http"], "argument --port: 'http' is not a port number"),
        (["--max-queries", "0"], "argument --max-queries: 0 is below the least allowed, 1"),
        (["--max-queries", "100", "--max-queue", "10"], "--max-queue 10 is smaller than --max-queries 100"),
        (["--max-batch-tokens", "0"], "argument --max-batch-tokens: 0 is below the least allowed, 2"),
    ],
)
def test_bad_limits_and_ports_get_our_message(reward_model_dir, args, says):
    cmd = [sys.executable, "-m", "rlhf.cli.serve_rm", "--model", str(reward_model_dir[0]), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=ceiling(60))
    assert r.returncode == 2 and f"rlhf-serve-rm: error: {says}" in r.stderr and "Traceback" not in r.stderr


def test_a_missing_or_wrong_model_folder_gets_our_message(tmp_path):
    (tmp_path / "run").mkdir()
    for model, says in [
        (tmp_path / "no_such_rm", "no such model folder"),
        (tmp_path / "run", "no config.json in that folder"),
    ]:
        cmd = [sys.executable, "-m", "rlhf.cli.serve_rm", "--model", str(model), "--port", "0"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=ceiling(60))
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip() == f"rlhf-serve-rm: error: --model {model}: {says}" + (
            ": give a folder written by save_pretrained (e.g. a run's model/)" if "config" in says else ""
        )
