"""``rlhf-serve-rm``: serve a reward model over the remote reward protocol (POST /get_reward).

    rlhf-serve-rm --model PATH [--host 127.0.0.1] [--port 5000 | 0] [--batch-size 32] [--max-len 2048] [--normalize]

A folder without trained value-head weights (a policy, say) is refused, naming the missing weights, unless
``--allow-untrained-head`` is given: its head would start random and score noise.

``--port 0`` picks a free port. Once listening it prints ``rlhf-serve-rm: serving PATH at http://HOST:PORT/get_reward``
(flushed), the URL to give ``reward.urls``. Bound to 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlhf-serve-rm", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="reward model folder (ours, or sequence classification)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=5000, help="port (0: a free one, printed once bound)")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per forward pass and per collected batch")
    p.add_argument("--max-len", type=int, default=2048, help="tokens per query (longer ones are cut, eos kept)")
    p.add_argument("--normalize", action="store_true", help="(r - mean) / std with the statistics of RM training")
    p.add_argument("--max-wait-ms", type=float, default=10.0, help="how long to collect concurrent requests")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when available)")
    p.add_argument("--value-head-prefix", default="score", help="name of the value head in the checkpoint")
    p.add_argument(
        "--allow-untrained-head",
        action="store_true",
        help="serve a model whose checkpoint has no value-head weights (random scores; for tests only)",
    )
    return p.parse_args(argv)


UNTRAINED_HEAD_FIX = (
    "serve a trained reward model (train one with: rlhf-run algorithm=rm ...), pass --value-head-prefix NAME if "
    "its head is stored under another name, or --allow-untrained-head to serve random scores anyway (tests only)"
)


def _refuse_untrained_head(exc: Exception) -> None:
    print(f"rlhf-serve-rm: error: {exc.with_fix(UNTRAINED_HEAD_FIX)}", file=sys.stderr)
    raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from rlhf.models.head_check import UntrainedValueHead, missing_value_head

    untrained = missing_value_head(args.model, args.value_head_prefix) if Path(args.model).is_dir() else None
    if untrained is not None and not args.allow_untrained_head:
        _refuse_untrained_head(untrained)  # before torch is imported: a second, not a model load
    import torch
    import uvicorn

    from rlhf.serve.reward_server import RewardModelScorer, build_app

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        scorer = RewardModelScorer.from_path(
            args.model,
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
        sys.exit(f"rlhf-serve-rm: cannot load a reward model from {args.model!r}: {exc}")
    if untrained is not None:
        print(f"rlhf-serve-rm: warning: {args.model} has no trained value head: its scores are random", flush=True)
    app = build_app(scorer, max_batch=args.batch_size, max_wait_s=args.max_wait_ms / 1000)
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
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


if __name__ == "__main__":
    main()
