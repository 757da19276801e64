"""``rlhf-serve-rm``: serve a reward model over the remote reward protocol (POST /get_reward).

    rlhf-serve-rm --model PATH [--host 127.0.0.1] [--port 5000 | 0] [--batch-size 32] [--max-len 2048] [--normalize]
                  [--max-batch-tokens 8192] [--max-body-mb 16] [--max-queries 1024] [--max-queue 8192]
                  [--request-timeout-s 120] [--max-connections 256]

A folder without trained value-head weights (a policy, say) is refused, naming the missing weights, unless
``--allow-untrained-head`` is given: its head would start random and score noise.

``--port 0`` picks a free port. Once listening it prints ``rlhf-serve-rm: serving PATH at http://HOST:PORT/get_reward``
(flushed), the URL to give ``reward.urls``. Bound to 127.0.0.1 unless ``--host`` says otherwise.

Limits (see rlhf.serve.reward_server): 413 for a body over ``--max-body-mb`` or more than ``--max-queries`` queries
in one request; 503 with ``Retry-After`` when ``--max-queue`` queries are held already; 504 for a request not
answered within ``--request-timeout-s``; beyond ``--max-connections`` open connections uvicorn answers 503. The
trainer's client retries 503 and 504 (reward.retries).

Fairness: a forward pass holds at most ``--batch-size`` queries and ``--max-batch-tokens`` tokens, each pending
request at most an equal share of them, the requests with the fewest tokens left first; queries of similar length
are scored together and answered as soon as scored; a query is tokenised only as far as ``--max-len`` needs, off the
forward thread. So a small request waits for the forward call in progress and its own, never for a large one (a
10 MB query, or many long ones) to finish; ``/health`` is answered at any time.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from rlhf.serve.limits import ServeLimits  # no torch: bad arguments are answered in a second
from rlhf.serve.scheduler import DEFAULT_MAX_BATCH_TOKENS

PROG = "rlhf-serve-rm"
DEFAULTS = ServeLimits()


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535; 0: a free one)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: ports are 0-65535 (0: a free one, printed once bound)")
    return port


def _at_least(low: float, kind: type = int):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            kind_name = "number" if kind is float else "whole number"
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind_name}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below the least allowed, {low:g}")
        return value

    return parse


def _positive(text: str) -> float:
    value = _at_least(0.0, float)(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be more than 0")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="reward model folder (ours, or sequence classification)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=5000, help="port, 0-65535 (0: a free one, printed once bound)")
    p.add_argument("--batch-size", type=_at_least(1), default=32, help="sequences per forward pass")
    p.add_argument("--max-len", type=_at_least(2), default=2048, help="tokens per query (longer ones cut, eos kept)")
    p.add_argument(
        "--max-batch-tokens",
        type=_at_least(2),
        default=DEFAULT_MAX_BATCH_TOKENS,
        help="tokens per forward pass: bounds how long a small request waits beside a large one (%(default)s)",
    )
    p.add_argument("--normalize", action="store_true", help="(r - mean) / std with the statistics of RM training")
    p.add_argument("--max-wait-ms", type=_at_least(0.0, float), default=10.0, help="how long to collect requests")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when available)")
    p.add_argument("--value-head-prefix", default="score", help="name of the value head in the checkpoint")
    p.add_argument(
        "--allow-untrained-head",
        action="store_true",
        help="serve a model whose checkpoint has no value-head weights (random scores; for tests only)",
    )
    limits = p.add_argument_group("limits")
    limits.add_argument(
        "--max-body-mb",
        type=_positive,
        default=DEFAULTS.max_body_bytes / 2**20,
        help="largest request body, MB (%(default)g)",
    )
    limits.add_argument(
        "--max-queries", type=_at_least(1), default=DEFAULTS.max_queries, help="queries per request (%(default)s)"
    )
    limits.add_argument(
        "--max-queue",
        type=_at_least(1),
        default=DEFAULTS.max_queue,
        help="queries held at once, then 503 (%(default)s)",
    )
    limits.add_argument(
        "--request-timeout-s",
        type=_positive,
        default=DEFAULTS.request_timeout_s,
        help="seconds per request, then 504 (%(default)g)",
    )
    limits.add_argument(
        "--max-connections", type=_at_least(1), default=256, help="open connections, then 503 (%(default)s)"
    )
    args = p.parse_args(argv)
    args.limits = ServeLimits(
        max_body_bytes=int(args.max_body_mb * 2**20),
        max_queries=args.max_queries,
        max_queue=args.max_queue,
        request_timeout_s=args.request_timeout_s,
    )
    for problem in args.limits.problems():
        p.error(problem)
    if args.max_len > args.max_batch_tokens:
        p.error(
            f"--max-len {args.max_len} is more than --max-batch-tokens {args.max_batch_tokens}: a query of the "
            f"largest size would not fit one forward pass; raise --max-batch-tokens to {args.max_len} or more, or "
            "lower --max-len"
        )
    return args


UNTRAINED_HEAD_FIX = (
    "serve a trained reward model (train one with: rlhf-run algorithm=rm ...), pass --value-head-prefix NAME if "
    "its head is stored under another name, or --allow-untrained-head to serve random scores anyway (tests only)"
)


def _refuse_untrained_head(exc: Exception) -> None:
    print(f"rlhf-serve-rm: error: {exc.with_fix(UNTRAINED_HEAD_FIX)}", file=sys.stderr)
    raise SystemExit(2) from None


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from rlhf.models.head_check import UntrainedValueHead, missing_value_head
    from rlhf.spec.validate import model_folder_problem

    problem = model_folder_problem(args.model)
    if problem:
        _error(f"--model {args.model}: {problem}")  # before torch is imported, and in our words
    local = Path(args.model).expanduser()
    untrained = missing_value_head(str(local), args.value_head_prefix) if local.is_dir() else None
    if untrained is not None and not args.allow_untrained_head:
        _refuse_untrained_head(untrained)  # before torch is imported: a second, not a model load
    import torch
    import uvicorn

    from rlhf.serve.reward_server import RewardModelScorer, build_app

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        scorer = RewardModelScorer.from_path(
            str(local) if local.is_dir() else args.model,
            normalize=args.normalize,
            precision=args.precision,
            device=device,
            value_head_prefix=args.value_head_prefix,
            max_len=args.max_len,
            batch_size=args.batch_size,
            allow_untrained_head=args.allow_untrained_head,
        )
    except UntrainedValueHead as exc:  # a checkpoint whose names the header check could not read (.bin)
        _refuse_untrained_head(exc)
    except OSError as exc:
        where = "the folder" if local.is_dir() else "a hub name (no such folder here)"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{PROG}: error: --model {args.model}: cannot load a reward model from {where}: {first}", file=sys.stderr)
        raise SystemExit(1) from None
    if untrained is not None:
        print(f"rlhf-serve-rm: warning: {args.model} has no trained value head: its scores are random", flush=True)
    app = build_app(
        scorer,
        max_batch=args.batch_size,
        max_wait_s=args.max_wait_ms / 1000,
        limits=args.limits,
        max_batch_tokens=args.max_batch_tokens,
    )
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
        sock.listen(2048)  # connections made from now on wait in the backlog until uvicorn accepts them
    except OSError as exc:
        sys.exit(f"rlhf-serve-rm: cannot bind {args.host}:{args.port}: {exc}")
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"rlhf-serve-rm: serving {args.model} at http://{shown}:{port}/get_reward", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, limit_concurrency=args.max_connections)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
