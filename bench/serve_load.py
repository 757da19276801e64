"""Load on the two HTTP servers: ``rlhf-serve-rm`` and the OpenAI-compatible agent server, side by side.

    .venv/bin/python bench/serve_load.py                          # 64 clients x 60 s on each server
    .venv/bin/python bench/serve_load.py --clients 8 --duration 5 --servers rm

Each server runs in its own process on 127.0.0.1 over the tiny model (made locally, as ``model=tiny``):

* ``rm``: ``python -m rlhf.cli.serve_rm`` over the tiny model saved as a reward model (its body plus a value head
  with seeded random weights, saved the way RM training saves one), ``POST /get_reward`` with one query each;
* ``openai``: :class:`rlhf.agents.OpenAIServer` over the hf rollout engine
(:class:`rlhf.backends.rollout.hf.engine.HFEngine`)
  on the tiny policy, ``POST /v1/chat/completions`` with one user message and ``max_tokens`` (default 16).

The servers are loaded one after the other (not at once: they would share the cores). ``--clients`` clients each
keep one HTTP/1.1 connection and send their next request as soon as the answer arrives (a closed loop), for
``--duration`` seconds; requests in flight at the end are awaited and counted. An error is a failed connection, a
timeout (``--timeout``), a status other than 200 or a body without the expected field. The table gives requests/s
(completed requests / time until the last one ended), latency p50/p99 and errors per server; the script exits 1 if
any request failed. Prompts are the ``builtin:arith`` rows.

Mixed load (unless ``--huge-clients 0``): the same small clients again for ``--duration``, while ``--huge-clients``
more clients send the largest requests the server takes, one after another: ``rm`` ``--huge-queries`` queries (the
server's ``--max-queries``, 1024), ``openai`` a prompt of ``--huge-prompt-tokens`` tokens. The table puts the small
requests' p95 under that load beside the unloaded one. For ``rm`` one request over the limit (``--over-limit-queries``
queries, the 450,000 of issue 21) shows how fast it is refused (413).

One large request (``rm``, unless ``--large-mb 0``): the small clients again, and one request of ``--large-mb`` MB
(10) of text in ``--large-queries`` queries (1: a single 10 MB query) sent a second after they start; the phase
lasts ``--duration`` or until the large request is answered, whichever is later. The table gives the small requests'
p50/p95/max unloaded, while the large request ran (sent after it and before its answer) and over the whole phase,
and the large request's time and status.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

SERVERS = ("rm", "openai")
TITLES = {"rm": "rlhf-serve-rm", "openai": "openai server (hf engine)"}
READY = " at http://"  # both servers print "... at http://127.0.0.1:PORT..." once listening


# -- the servers -----------------------------------------------------------------------------------------------------


def tiny_model_spec():
    from rlhf.spec.build import load_spec

    return load_spec(["+recipe=grpo_tiny_cpu"]).model


def save_tiny_reward_model(out: Path) -> Path:
    """The tiny policy's body plus a seeded random value head, saved (sequence-classification layout)."""
    import torch

    from rlhf.models.loading import resolve_model_path, tokenizer_for
    from rlhf.models.value_head import load_value_model

    spec = tiny_model_spec()
    base = resolve_model_path(spec)
    model = load_value_model(base, "reward", init_value_head=True)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model.score.weight.normal_(0.0, model.config.hidden_size**-0.5)
    model.save_pretrained(out)
    tokenizer_for(spec, base).save_pretrained(out)
    return out


def serve_openai(max_tokens: int) -> None:
    """Child mode: the OpenAI-compatible server over the hf engine on the tiny policy, until killed."""
    from rlhf.agents import OpenAIServer
    from rlhf.backends.contract.rollout import SamplingSpec
    from rlhf.backends.rollout.hf.engine import HFEngine
    from rlhf.models.loading import load_causal_lm, resolve_model_path, tokenizer_for

    spec = tiny_model_spec()
    path = resolve_model_path(spec)
    tokenizer = tokenizer_for(spec, path)
    engine = HFEngine(load_causal_lm(path), tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer)
    server = OpenAIServer(engine, tokenizer, sampling=SamplingSpec(max_new_tokens=max_tokens), model_name="tiny")
    print(f"openai server: serving tiny at {server.start()}", flush=True)
    threading.Event().wait()


def start_server(kind: str, workdir: Path, args: argparse.Namespace) -> tuple[subprocess.Popen, str, list[str]]:
    """Start one server process; returns it, its base URL and its output lines (collected in a thread)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
    if kind == "rm":
        model = save_tiny_reward_model(workdir / "rm")
        cmd = [sys.executable, "-m", "rlhf.cli.serve_rm", "--model", str(model), "--port", "0", "--device", "cpu"]
        cmd += ["--batch-size", str(args.clients), "--max-queries", str(max(args.huge_queries, args.large_queries, 1))]
        cmd += ["--max-queue", str(max(8192, args.huge_clients * args.huge_queries + args.clients))]
        cmd += ["--max-body-mb", f"{max(16.0, 1.1 * args.large_mb + 1):g}"]  # the large request's text and JSON
    else:
        cmd = [sys.executable, __file__, "--serve-openai", "--max-tokens", str(args.max_tokens)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    deadline = time.monotonic() + args.start_timeout
    while not any(READY in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"{TITLES[kind]} did not start:\n{''.join(lines[-40:])}")
        time.sleep(0.1)
    line = next(line for line in lines if READY in line)
    url = "http://" + line.split(READY, 1)[1].strip()
    parts = urlsplit(url)
    return proc, f"{parts.scheme}://{parts.netloc}", lines


# -- the clients -----------------------------------------------------------------------------------------------------


class HttpError(Exception):
    pass


class Connection:
    """One persistent HTTP/1.1 connection (asyncio streams): POST a JSON body, read a Content-Length answer."""

    def __init__(self, host: str, port: int, keep_alive: bool = True) -> None:
        self.host, self.port, self.keep_alive = host, port, keep_alive
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        close = "" if self.keep_alive else "Connection: close\r\n"
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{close}\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise HttpError("the server closed the connection")
        status = int(status_line.split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers:
            raise HttpError(f"HTTP {status} without Content-Length: {headers}")
        data = await self.reader.readexactly(int(headers["content-length"]))
        if not self.keep_alive or headers.get("connection", "").lower() == "close":
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    server_info: str = ""
    mixed: Load | None = None  # the small clients again, with huge requests among them
    huge: Load | None = None  # the huge requests of that phase
    over_limit: str = ""  # rm: how an over-limit request was answered
    sent: list[float] = field(default_factory=list)  # when each request of ``latencies`` was sent (monotonic)
    large: Large | None = None  # rm: one large request among the small clients


@dataclass
class Large:
    """One large request among small clients: the small ones' figures and the large one's."""

    small: Load
    megabytes: float
    queries: int
    status: int = 0  # 0: no answer (a failed connection or a timeout)
    seconds: float = float("nan")
    sent: float = 0.0
    error: str = ""

    def during(self) -> list[float]:
        """Latencies of the small requests sent while the large one was in flight."""
        end = self.sent + self.seconds if self.status else float("inf")
        return [lat for at, lat in zip(self.small.sent, self.small.latencies, strict=True) if self.sent <= at < end]


def request_for(kind: str, prompt: str, max_tokens: int) -> tuple[str, bytes, str]:
    """(path, body, the field a good answer has)."""
    if kind == "rm":
        return "/get_reward", json.dumps({"query": [prompt], "prompts": [prompt], "labels": [""]}).encode(), "rewards"
    body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    return "/v1/chat/completions", json.dumps(body).encode(), "choices"


def huge_request_for(kind: str, prompts: list[str], args: argparse.Namespace) -> tuple[str, bytes, str]:
    """The largest request the server takes: --huge-queries queries, or a --huge-prompt-tokens prompt."""
    if kind == "rm":
        queries = [prompts[i % len(prompts)] for i in range(args.huge_queries)]
        return "/get_reward", json.dumps({"query": queries}).encode(), "rewards"
    text = " ".join(prompts)
    text = (text * (args.huge_prompt_tokens // max(len(text), 1) + 1))[: args.huge_prompt_tokens]  # bytes = tokens
    return request_for(kind, text, args.max_tokens)


async def _closed_loop(
    base: str,
    n: int,
    stop_at: float,
    make: Callable[[int], tuple[str, bytes, str]],
    args: argparse.Namespace,
    also_until: Callable[[], bool] = lambda: True,
) -> Load:
    """``n`` clients, each sending ``make(k)`` (k = its next request number) until ``stop_at`` and ``also_until()``."""
    parts = urlsplit(base)
    load = Load()
    start = time.monotonic()

    async def client(i: int) -> None:
        conn = Connection(parts.hostname, parts.port, keep_alive=not args.fresh_connections)
        k = i
        while time.monotonic() < stop_at or not also_until():
            path, body, expect = make(k)
            k += n
            sent = time.monotonic()
            try:
                status, data = await asyncio.wait_for(conn.post(path, body), args.timeout)
                if status != 200 or expect not in json.loads(data):
                    raise HttpError(f"HTTP {status}: {data[:200]!r}")
            except (OSError, HttpError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                load.errors += 1
                if len(load.error_samples) < 5:
                    load.error_samples.append(f"{type(e).__name__}: {e}")
                await conn.close()
                continue
            load.latencies.append(time.monotonic() - sent)
            load.sent.append(sent)
        await conn.close()

    await asyncio.gather(*(client(i) for i in range(n)))
    load.seconds = time.monotonic() - start
    return load


async def drive(kind: str, base: str, prompts: list[str], args: argparse.Namespace) -> Load:
    def small(k: int) -> tuple[str, bytes, str]:
        return request_for(kind, prompts[k % len(prompts)], args.max_tokens)

    return await _closed_loop(base, args.clients, time.monotonic() + args.duration, small, args)


async def drive_mixed(kind: str, base: str, prompts: list[str], args: argparse.Namespace) -> tuple[Load, Load]:
    """(small requests, huge requests) with both kinds of clients at once for --duration."""
    huge = huge_request_for(kind, prompts, args)
    stop_at = time.monotonic() + args.duration

    def small(k: int) -> tuple[str, bytes, str]:
        return request_for(kind, prompts[k % len(prompts)], args.max_tokens)

    return tuple(
        await asyncio.gather(
            _closed_loop(base, args.clients, stop_at, small, args),
            _closed_loop(base, args.huge_clients, stop_at, lambda k: huge, args),
        )
    )


def large_body(prompts: list[str], megabytes: float, queries: int) -> bytes:
    """A request of ``megabytes`` MB of query text (``builtin:arith`` prompts over and over) in ``queries`` queries."""
    size = int(megabytes * 2**20)
    text = " ".join(prompts) + " "
    text = (text * (size // len(text) + 1))[:size]
    step = -(-size // queries)
    return json.dumps({"query": [text[i : i + step] for i in range(0, size, step)]}).encode()


async def drive_large(base: str, prompts: list[str], args: argparse.Namespace) -> Large:
    """The small clients for --duration, and one --large-mb request sent a second after they start."""
    body = large_body(prompts, args.large_mb, args.large_queries)
    large = Large(Load(), len(body) / 2**20, args.large_queries)
    answered = asyncio.Event()
    parts = urlsplit(base)

    async def send_large() -> None:
        await asyncio.sleep(1.0)  # the small clients are under way
        conn = Connection(parts.hostname, parts.port)
        large.sent = time.monotonic()
        try:
            status, data = await asyncio.wait_for(conn.post("/get_reward", body), args.timeout)
            large.seconds = time.monotonic() - large.sent
            large.status = status
            if status != 200:
                large.error = f"HTTP {status}: {data[:200]!r}"
        except (OSError, HttpError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            large.error = f"{type(e).__name__}: {e}"
        finally:
            answered.set()
            await conn.close()

    def small(k: int) -> tuple[str, bytes, str]:
        return request_for("rm", prompts[k % len(prompts)], args.max_tokens)

    stop_at = time.monotonic() + args.duration
    large.small, _ = await asyncio.gather(
        _closed_loop(base, args.clients, stop_at, small, args, also_until=answered.is_set), send_large()
    )
    return large


async def over_limit(base: str, n: int, args: argparse.Namespace) -> str:
    """How rlhf-serve-rm answers one request of ``n`` queries (over its --max-queries, or its body limit)."""
    parts = urlsplit(base)
    body = json.dumps({"query": [f"query {i}: 3+4=7" for i in range(n)]}).encode()
    conn = Connection(parts.hostname, parts.port)
    sent = time.monotonic()
    try:
        status, data = await asyncio.wait_for(conn.post("/get_reward", body), args.timeout)
    finally:
        await conn.close()
    took = time.monotonic() - sent
    reason = json.loads(data).get("error", "")[:90] if status != 200 else "accepted"
    return f"{n} queries ({len(body) / 2**20:.1f} MB): HTTP {status} in {1000 * took:.0f} ms ({reason}...)"


def warm_up(kind: str, base: str, prompts: list[str], args: argparse.Namespace) -> None:
    """A few sequential requests, so that first-call costs (lazy init, allocator growth) stay out of the figures."""
    quick = argparse.Namespace(**{**vars(args), "clients": 1, "duration": 0.0})

    async def run() -> None:
        conn = Connection(urlsplit(base).hostname, urlsplit(base).port)
        for p in prompts[:3]:
            path, body, _ = request_for(kind, p, quick.max_tokens)
            await asyncio.wait_for(conn.post(path, body), args.timeout)
        await conn.close()

    asyncio.run(run())


def health(base: str, kind: str) -> str:
    if kind != "rm":
        return ""
    import urllib.request

    with urllib.request.urlopen(f"{base}/health", timeout=10) as r:
        h = json.loads(r.read())
    return f"{h['queries']} queries in {h['batches']} forward batches"


# -- the table -------------------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def table(results: dict[str, Load], args: argparse.Namespace) -> str:
    kinds = list(results)
    width = max(len(TITLES[k]) for k in kinds) + 2

    def row(name: str, cells: list[str]) -> str:
        return f"{name:<26}" + "".join(f"{c:>{width}}" for c in cells)

    conns = "a new connection per request" if args.fresh_connections else "keep-alive connections"
    lines = [f"serve load: {args.clients} concurrent clients x {args.duration:g} s per server, 127.0.0.1, {conns}"]
    lines.append("")
    lines.append(row("", [TITLES[k] for k in kinds]))
    loads = [results[k] for k in kinds]
    lines.append(row("requests", [str(len(r.latencies)) for r in loads]))
    lines.append(row("requests/s", [f"{len(r.latencies) / r.seconds:.1f}" for r in loads]))
    lines.append(row("latency p50 (ms)", [f"{1000 * percentile(r.latencies, 50):.0f}" for r in loads]))
    lines.append(row("latency p99 (ms)", [f"{1000 * percentile(r.latencies, 99):.0f}" for r in loads]))
    lines.append(row("latency max (ms)", [f"{1000 * max(r.latencies, default=float('nan')):.0f}" for r in loads]))
    lines.append(row("errors", [str(r.errors) for r in loads]))
    if all(r.mixed is not None for r in loads):
        lines.append(row("small p95, unloaded (ms)", [f"{1000 * percentile(r.latencies, 95):.0f}" for r in loads]))
        lines.append(row("small p95, mixed (ms)", [f"{1000 * percentile(r.mixed.latencies, 95):.0f}" for r in loads]))
        lines.append(row("small requests, mixed", [str(len(r.mixed.latencies)) for r in loads]))
        lines.append(row("huge requests done", [str(len(r.huge.latencies)) for r in loads]))
        lines.append(row("huge latency p50 (ms)", [f"{1000 * percentile(r.huge.latencies, 50):.0f}" for r in loads]))
        lines.append(row("errors, mixed", [str(r.mixed.errors + r.huge.errors) for r in loads]))
    for k, r in results.items():
        if r.server_info:
            lines.append(f"{TITLES[k]}: {r.server_info}")
        if r.over_limit:
            lines.append(f"{TITLES[k]} over the limit: {r.over_limit}")
        for e in r.error_samples + (r.mixed.error_samples + r.huge.error_samples if r.mixed else []):
            lines.append(f"{TITLES[k]} error: {e}")
        if r.large is not None:
            lines += ["", *large_table(TITLES[k], r, args)]
    if "openai" in results:
        lines.append(f"openai requests: one user message, max_tokens={args.max_tokens}")
    if args.huge_clients:
        huge = f"rm {args.huge_queries} queries, openai a {args.huge_prompt_tokens}-token prompt"
        lines.append(f"mixed: {args.clients} small clients beside {args.huge_clients} clients of huge ones ({huge})")
    return "\n".join(lines)


def large_table(title: str, r: Load, args: argparse.Namespace) -> list[str]:
    """Small requests unloaded, while one large request ran and over that phase; the large request's answer."""
    large = r.large
    what = f"one {large.megabytes:.1f} MB request ({large.queries} {'query' if large.queries == 1 else 'queries'})"

    def row(name: str, values: list[float]) -> str:
        cells = [f"{1000 * percentile(values, q):.0f}" for q in (50, 95)] + [f"{1000 * max(values, default=0):.0f}"]
        return f"{name:<34}" + "".join(f"{c:>10}" for c in cells) + f"{len(values):>10}"

    answer = f"HTTP {large.status} in {1000 * large.seconds:.0f} ms" if large.status else "no answer"
    return [
        f"{title}: {args.clients} small clients, then the same with {what} among them",
        f"{'small requests':<34}" + "".join(f"{c:>10}" for c in ("p50 ms", "p95 ms", "max ms", "requests")),
        row("  unloaded", r.latencies),
        row("  while the large one ran", large.during()),
        row("  the whole phase", large.small.latencies),
        f"large request: {answer}" + (f" ({large.error})" if large.error else ""),
        f"errors: {large.small.errors} small" + "".join(f"; {e}" for e in large.small.error_samples),
    ]


def large_figures(r: Load) -> dict:
    large = r.large
    during = large.during()
    return {
        "large_mb": large.megabytes,
        "large_queries": large.queries,
        "large_status": large.status,
        "large_ms": 1000 * large.seconds,
        "small_unloaded_p50_ms": 1000 * percentile(r.latencies, 50),
        "small_unloaded_p95_ms": 1000 * percentile(r.latencies, 95),
        "small_during_large": len(during),
        "small_during_large_p50_ms": 1000 * percentile(during, 50),
        "small_during_large_p95_ms": 1000 * percentile(during, 95),
        "small_during_large_max_ms": 1000 * max(during, default=float("nan")),
        "small_large_phase_p95_ms": 1000 * percentile(large.small.latencies, 95),
        "small_large_phase_errors": large.small.errors,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=64, help="concurrent clients per server")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load per server")
    ap.add_argument("--servers", default=",".join(SERVERS), help="comma list of: rm, openai")
    ap.add_argument("--max-tokens", type=int, default=16, help="openai: max_tokens per completion")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a request counts as an error")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each server (see bench/README.md)")
    ap.add_argument("--start-timeout", type=float, default=300.0, help="seconds for a server to start")
    ap.add_argument(
        "--fresh-connections",
        action="store_true",
        help="a new TCP connection per request (as the trainer's urllib reward client), not keep-alive",
    )
    ap.add_argument("--huge-clients", type=int, default=2, help="mixed load: clients of huge requests (0: none)")
    ap.add_argument("--huge-queries", type=int, default=1024, help="rm: queries per huge request (its --max-queries)")
    ap.add_argument("--huge-prompt-tokens", type=int, default=900, help="openai: prompt tokens of a huge request")
    ap.add_argument("--over-limit-queries", type=int, default=450_000, help="rm: one request this large (0: none)")
    ap.add_argument("--large-mb", type=float, default=10.0, help="rm: MB of one large request among them (0: none)")
    ap.add_argument("--large-queries", type=int, default=1, help="rm: queries the large request's text is cut into")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the figures to this file")
    ap.add_argument("--serve-openai", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_openai:
        serve_openai(args.max_tokens)
        return 0
    kinds = [k.strip() for k in args.servers.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in SERVERS]
    if unknown or not kinds:
        ap.error(f"--servers: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(SERVERS)}")
    from rlhf.data import builtin_path

    prompts = [json.loads(line)["input"] for line in builtin_path("arith").read_text().splitlines() if line.strip()]
    results: dict[str, Load] = {}
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        for kind in kinds:
            proc, base, _ = start_server(kind, Path(tmp), args)
            try:
                warm_up(kind, base, prompts, args)
                print(f"{TITLES[kind]}: {args.clients} clients for {args.duration:g} s at {base}", flush=True)
                results[kind] = asyncio.run(drive(kind, base, prompts, args))
                results[kind].server_info = health(base, kind)
                if args.huge_clients:
                    print(f"{TITLES[kind]}: the same with {args.huge_clients} clients of huge requests", flush=True)
                    results[kind].mixed, results[kind].huge = asyncio.run(drive_mixed(kind, base, prompts, args))
                if kind == "rm" and args.large_mb > 0:
                    print(f"{TITLES[kind]}: the same with one {args.large_mb:g} MB request among them", flush=True)
                    results[kind].large = asyncio.run(drive_large(base, prompts, args))
                if kind == "rm" and args.over_limit_queries:
                    results[kind].over_limit = asyncio.run(over_limit(base, args.over_limit_queries, args))
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    print(table(results, args))
    if args.json_out:
        figures = {
            k: {
                "requests": len(r.latencies),
                "requests_per_s": len(r.latencies) / r.seconds,
                "p50_ms": 1000 * percentile(r.latencies, 50),
                "p95_ms": 1000 * percentile(r.latencies, 95),
                "p99_ms": 1000 * percentile(r.latencies, 99),
                "errors": r.errors,
                **(
                    {
                        "mixed_requests": len(r.mixed.latencies),
                        "mixed_p95_ms": 1000 * percentile(r.mixed.latencies, 95),
                        "huge_requests": len(r.huge.latencies),
                        "huge_p50_ms": 1000 * percentile(r.huge.latencies, 50),
                        "mixed_errors": r.mixed.errors + r.huge.errors,
                    }
                    if r.mixed
                    else {}
                ),
                **({"over_limit": r.over_limit} if r.over_limit else {}),
                **(large_figures(r) if r.large else {}),
            }
            for k, r in results.items()
        }
        Path(args.json_out).write_text(json.dumps({"clients": args.clients, "duration_s": args.duration, **figures}))
    failed = any(
        r.errors
        or (r.mixed and r.mixed.errors + r.huge.errors)
        or (r.large and (r.large.status != 200 or r.large.small.errors))
        for r in results.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
