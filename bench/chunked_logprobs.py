#!/usr/bin/env python
"""Memory of one training forward + backward of a long packed row: log-probs and entropy from the whole logits (what
rlhf.models.forward computed before) against the chunked output head (rlhf.models.head_scores, what it computes now).

    .venv/bin/python bench/chunked_logprobs.py                      # 8192 tokens, vocabulary 32768
    .venv/bin/python bench/chunked_logprobs.py --tokens 16384 --vocab 151936 --hidden 256

Each way runs in a process of its own (a random Llama, fp32, ``--threads`` threads) over one row of ``--tokens``
tokens in 4 samples, loss = -mean(log-prob) - 0.01 mean(entropy), and prints:

  saved      bytes the autograd graph keeps for the backward (torch.autograd.graph.saved_tensors_hooks)
  peak RSS   growth of the process's peak resident memory over the forward and backward, above its size after a
             warm-up step on a short row (activations, logits, their gradients and every temporary)
  logits     the size of one fp32 [tokens, vocab] tensor, for scale
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MiB = 2**20


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def worker(args) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlhf.algo.logprobs import entropy_from_logits, log_probs_from_logits
    from rlhf.models.forward import causal_lm_log_probs
    from rlhf.models.packing import pack_for

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=args.tokens,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).float().train()

    def batch(tokens: int):
        lengths = [tokens // 2, tokens // 4, tokens // 8, tokens - tokens // 2 - tokens // 4 - tokens // 8]
        ids = torch.randint(0, args.vocab, (len(lengths), max(lengths)))
        mask = torch.zeros_like(ids)
        for i, n in enumerate(lengths):
            mask[i, :n] = 1
        return ids, mask

    def step(ids, mask, measure: bool) -> tuple[int, float]:
        saved = [0]

        def keep(t):
            if measure and not isinstance(t, torch.nn.Parameter):
                saved[0] += t.numel() * t.element_size()
            return t

        t0 = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            if args.way == "chunked":
                lp, ent = causal_lm_log_probs(model, ids, mask, return_entropy=True, packing=True)
            else:
                packed = pack_for(model, ids, mask)  # the layout causal_lm_log_probs packs into
                logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
                logits = logits[:, :-1]
                lp = packed.unpack_shifted(log_probs_from_logits(logits, packed.input_ids[:, 1:]))
                ent = packed.unpack_shifted(entropy_from_logits(logits))
                del logits
        action = (mask[:, 1:] * mask[:, :-1]).float()
        loss = -(lp * action).sum() / action.sum() - 0.01 * (ent * action).sum() / action.sum()
        loss.backward()
        model.zero_grad(set_to_none=True)
        return saved[0], time.perf_counter() - t0

    step(*batch(256), measure=False)  # warm-up: the optimizer-free model's own allocations settle
    base = _peak_rss()
    saved, seconds = step(*batch(args.tokens), measure=True)
    return {
        "way": args.way,
        "tokens": args.tokens,
        "vocab": args.vocab,
        "saved_mib": saved / MiB,
        "peak_rss_growth_mib": (_peak_rss() - base) / MiB,
        "seconds": seconds,
        "logits_mib": args.tokens * args.vocab * 4 / MiB,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--way", choices=["whole", "chunked"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.way:
        print(json.dumps(worker(args)))
        return
    rows = []
    for way in ("whole", "chunked"):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--way", way]
        out = subprocess.run(
            cmd, capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "2"}
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    head = ("way", "tokens", "vocab", "saved MiB", "peak RSS MiB", "seconds", "logits MiB")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (8, 7, 7, 10, 13, 8, 11), strict=True)))
    for r in rows:
        print(
            f"{r['way']:>8} {r['tokens']:>7} {r['vocab']:>7} {r['saved_mib']:>10.0f} {r['peak_rss_growth_mib']:>13.0f} "
            f"{r['seconds']:>8.2f} {r['logits_mib']:>11.0f}"
        )


if __name__ == "__main__":
    main()
