"""``rlhf-serve-rm``: serve a reward model over the remote reward protocol (POST /get_reward).

    rlhf-serve-rm --model PATH [--host 127.0.0.1] [--port 5000 | 0] [--batch-size 32] [--max-len 2048] [--normalize]

``--port 0`` picks a free port. Once listening it prints ``rlhf-serve-rm: serving PATH at http://HOST:PORT/get_reward``
(flushed), the URL to give ``reward.urls``. Bound to 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import socket
import sys


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
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
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
        )
    except OSError as exc:
        sys.exit(f"rlhf-serve-rm: cannot load a reward model from {args.model!r}: {exc}")
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
