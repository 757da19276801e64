"""Probing the reward endpoints (``reward.urls``) before the cluster starts, so that a dead one costs a second, not a
start-up and a minute of retries.

Each URL gets a TCP connection with a short timeout (:data:`CONNECT_TIMEOUT_S`), then one request of the remote
reward protocol with nothing to score, ``POST {"query": [], "prompts": [], "labels": []}`` (the server does no work),
and the first answer is awaited for :data:`ANSWER_TIMEOUT_S`. All URLs are probed at once.

* refused, unresolvable, no connection within the timeout, or not HTTP: an error naming the URL;
* HTTP 404 or 405: an error (the server is up, but the path or method is wrong);
* any other status, even 4xx/5xx for the empty batch: the endpoint is alive;
* connected but no answer within :data:`ANSWER_TIMEOUT_S`, or an answer slower than :data:`SLOW_ANSWER_S`: a
  warning, and the run starts (a busy server may still answer real requests within ``reward.timeout_s``).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass

CONNECT_TIMEOUT_S = 1.0
ANSWER_TIMEOUT_S = 3.0
SLOW_ANSWER_S = 1.0
EMPTY_BATCH = json.dumps({"query": [], "prompts": [], "labels": []}).encode()
DOWN_FIX = "start the server, or fix reward.urls"
URL_FIX = "give a URL such as http://127.0.0.1:5000/get_reward"


@dataclass(frozen=True)
class Probe:
    url: str
    problem: str = ""  # set: the endpoint is unusable
    warning: str = ""  # set: usable, but slow or silent
    seconds: float = 0.0  # until the first answer (or the failure)
    fix: str = DOWN_FIX

    @property
    def ok(self) -> bool:
        return not self.problem


def _connect(host: str, port: int, https: bool, timeout_s: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if https:
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    return sock


def probe_url(
    url: str, connect_timeout_s: float = CONNECT_TIMEOUT_S, answer_timeout_s: float = ANSWER_TIMEOUT_S
) -> Probe:
    """One URL: connect, send the empty batch, read the status line (see the module docstring)."""
    start = time.monotonic()

    def took() -> float:
        return time.monotonic() - start

    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return Probe(url, problem="the port is not a number", fix=URL_FIX)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Probe(url, problem="not an http:// or https:// URL with a host", fix=URL_FIX)
    host, https = parts.hostname, parts.scheme == "https"
    port = port or (443 if https else 80)
    where = f"{host}:{port}"
    try:
        sock = _connect(host, port, https, connect_timeout_s)
    except socket.gaierror as e:
        return Probe(url, problem=f"host {host!r} does not resolve ({e.strerror})", seconds=took())
    except ConnectionRefusedError:
        return Probe(url, problem=f"connection refused: nothing listens on {where}", seconds=took())
    except TimeoutError:
        return Probe(url, problem=f"no connection to {where} within {connect_timeout_s:g} s", seconds=took())
    except ssl.SSLError as e:
        return Probe(url, problem=f"TLS failed with {where}: {e.reason or e}", seconds=took())
    except OSError as e:
        return Probe(url, problem=f"cannot connect to {where}: {e.strerror or e}", seconds=took())
    conn = http.client.HTTPSConnection(host, port) if https else http.client.HTTPConnection(host, port)
    conn.sock = sock
    sock.settimeout(answer_timeout_s)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", path, EMPTY_BATCH, {"Content-Type": "application/json"})
        status = conn.getresponse().status
    except TimeoutError:
        return Probe(
            url,
            warning=f"connected, but no answer within {answer_timeout_s:g} s to an empty request (busy or slow?); "
            "starting anyway: each real request may take up to reward.timeout_s",
            seconds=took(),
        )
    except (http.client.HTTPException, OSError) as e:
        reason = type(e).__name__ + (f": {e}" if str(e) else "")
        return Probe(url, problem=f"something listens on {where} but did not answer HTTP ({reason})", seconds=took())
    finally:
        conn.close()
    if status in (404, 405):
        return Probe(
            url,
            problem=f"answered HTTP {status} to POST {path}: the server is up, but not at this path or method",
            seconds=took(),
            fix="check the path in reward.urls (rlhf-serve-rm serves /get_reward)",
        )
    if took() > SLOW_ANSWER_S:
        return Probe(url, warning=f"the first answer took {took():.1f} s (slow server?)", seconds=took())
    return Probe(url, seconds=took())


def probe_urls(
    urls: list[str], connect_timeout_s: float = CONNECT_TIMEOUT_S, answer_timeout_s: float = ANSWER_TIMEOUT_S
) -> list[Probe]:
    """Every URL at once; a probe still running after both timeouts (a hung name lookup) is reported too."""
    results: dict[int, Probe] = {}

    def run(i: int, url: str) -> None:
        results[i] = probe_url(url, connect_timeout_s, answer_timeout_s)

    threads = [threading.Thread(target=run, args=(i, u), daemon=True) for i, u in enumerate(urls)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + connect_timeout_s + answer_timeout_s + 1.0
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    limit = connect_timeout_s + answer_timeout_s + 1.0
    return [
        results.get(i) or Probe(u, problem=f"no result within {limit:g} s", seconds=limit) for i, u in enumerate(urls)
    ]
