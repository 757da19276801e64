"""The remote reward client against real HTTP servers on 127.0.0.1: batching, round-robin, retries, failures."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ceilings import ceiling

from rlhf.rewards import RemoteReward, RewardError

# (request JSON, request number) -> (status, body) or (status, body, extra headers)
Behaviour = Callable[[dict, int], tuple]


def rewards_by_length(request: dict, _: int) -> tuple[int, bytes]:
    """The protocol's reply: one reward per query (its length) and a score and log per query."""
    lengths = [float(len(q)) for q in request["query"]]
    body = {"rewards": lengths, "scores": [x > 2 for x in lengths], "extra_logs": {"n": [len(lengths)] * len(lengths)}}
    return 200, json.dumps(body).encode()


class Server:
    def __init__(self, behaviour: Behaviour) -> None:
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(request)
                status, body, *headers = behaviour(request, len(server.requests))
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/get_reward"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], Server]]:
    servers: list[Server] = []

    def start(behaviour: Behaviour) -> Server:
        servers.append(Server(behaviour))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def samples(n: int) -> tuple[list[str], list[str], list[str], list[str]]:
    queries = ["x" * (i + 1) for i in range(n)]
    return queries, [f"p{i}" for i in range(n)], [f"r{i}" for i in range(n)], [str(i) for i in range(n)]


def client(urls: list[str], **kw) -> RemoteReward:
    kw.setdefault("backoff_s", 0.01)
    return RemoteReward(urls, **kw)


def test_batched_requests_follow_the_protocol_and_keep_sample_order(serve):
    srv = serve(rewards_by_length)
    res = client([srv.url], request_batch=3).score(*samples(7))
    assert res.rewards == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert res.scores == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert res.extra_logs["n"] == [3.0] * 6 + [1.0]
    assert sorted(len(r["query"]) for r in srv.requests) == [1, 3, 3]
    assert all(set(r) == {"query", "prompts", "labels"} for r in srv.requests)
    first = next(r for r in srv.requests if r["query"][0] == "x")
    assert first["prompts"] == ["p0", "p1", "p2"] and first["labels"] == ["0", "1", "2"]


def test_requests_are_spread_round_robin_over_urls(serve):
    a, b = serve(rewards_by_length), serve(rewards_by_length)
    res = client([a.url, b.url], request_batch=2).score(*samples(8))
    assert res.rewards == [float(i) for i in range(1, 9)]
    assert len(a.requests) == len(b.requests) == 2


def test_a_server_failing_twice_then_answering_is_retried(serve):
    def flaky(request: dict, k: int) -> tuple[int, bytes]:
        return (503, b"busy") if k <= 2 else rewards_by_length(request, k)

    srv = serve(flaky)
    res = client([srv.url], retries=2).score(*samples(2))
    assert res.rewards == [1.0, 2.0] and len(srv.requests) == 3


def test_retries_run_out_with_the_url_named(serve):
    srv = serve(lambda r, k: (503, b"busy"))
    with pytest.raises(RewardError, match=rf"{srv.url} failed 2 times, last: HTTP 503") as e:
        client([srv.url], retries=1).score(*samples(2))
    assert "reward.retries=1" in str(e.value)


def test_malformed_body_is_an_error_at_once(serve):
    srv = serve(lambda r, k: (200, b"<html>oops</html>"))
    with pytest.raises(RewardError, match=rf"{srv.url} returned a body that is not JSON: '<html>"):
        client([srv.url], retries=3).score(*samples(2))
    assert len(srv.requests) == 1  # no retry: the same body would come back


def test_wrong_number_of_rewards_is_named(serve):
    srv = serve(lambda r, k: (200, json.dumps({"rewards": [1.0]}).encode()))
    with pytest.raises(RewardError, match=rf"reward endpoint {srv.url}: rewards has 1 values for 2 samples"):
        client([srv.url]).score(*samples(2))


def test_client_errors_are_not_retried(serve):
    srv = serve(lambda r, k: (400, b"missing field labels"))
    with pytest.raises(RewardError, match="HTTP 400: missing field labels"):
        client([srv.url], retries=3).score(*samples(1))
    assert len(srv.requests) == 1


def test_an_endpoint_that_is_down_fails_fast_and_names_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}/get_reward"
    # a refused connection is not waited out: with a request timeout far above any machine's connect time, the
    # three attempts end by the refusal itself (a client waiting for its timeout would hit the test's ceiling)
    with pytest.raises(RewardError, match=rf"{url} failed 3 times.*Connection ?Refused"):
        client([url], retries=2, timeout_s=ceiling(600)).score(*samples(2))


def test_a_hanging_endpoint_times_out_instead_of_hanging(serve):
    released = threading.Event()

    def hangs(request: dict, k: int) -> tuple[int, bytes]:
        released.wait(ceiling(300))  # answers only after the test: the client can only leave by its timeout
        return rewards_by_length(request, k)

    srv = serve(hangs)
    try:
        with pytest.raises(RewardError, match=rf"{srv.url} failed 1 times.*timed out"):
            client([srv.url], retries=0, timeout_s=0.2).score(*samples(1))
    finally:
        released.set()


def test_no_samples_sends_nothing(serve):
    srv = serve(rewards_by_length)
    assert len(client([srv.url]).score([], [], [], [])) == 0 and srv.requests == []


def test_a_full_server_s_retry_after_is_waited_before_the_next_attempt(serve, monkeypatch):
    # rlhf-serve-rm answers 503 with Retry-After when its queue is full: retrying sooner only fills it again
    import rlhf.rewards.remote as remote

    def busy_once(request: dict, n: int) -> tuple:
        if n == 1:
            return 503, b'{"error": "queue full"}', {"Retry-After": "1"}
        return rewards_by_length(request, n)

    waits: list[float] = []  # the client's clock, injected: what it waits is recorded, not spent
    monkeypatch.setattr(remote.time, "sleep", waits.append)
    server = serve(busy_once)
    client = RemoteReward([server.url], retries=2, backoff_s=0.01)
    result = client.score(*samples(3))
    assert result.rewards == [1.0, 2.0, 3.0] and len(server.requests) == 2
    assert waits == [1.0], f"waited {waits} before the retry; the server asked for 1 s"
