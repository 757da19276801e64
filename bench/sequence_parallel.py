#!/usr/bin/env python
"""Activation memory and step time per rank of one long packed row, without and with sequence parallelism.

    .venv/bin/python bench/sequence_parallel.py                       # 8192 tokens: sp=1 (two ways) and sp=2
    .venv/bin/python bench/sequence_parallel.py --tokens 16384 --repeats 3 --runs 1:ulysses,2:ulysses

A random Llama (fp32; ``--hidden``/``--layers``/... set its size) runs forward and backward of a token-mean loss over
one packed row of ``--tokens`` tokens made of ``--samples`` samples of decreasing length, once per run of
``--runs`` (``sp:attention``):

  1:own       one process, the model's own packed sdpa (transformers' block mask over the whole
              row): what a packed forward runs without sequence parallelism
  1:ulysses   the same with ulysses_sdpa forced on a group of one (engines never do this): the chunked kernel
              without a split, to tell the kernel's share of a difference from the split's
  2:ulysses   the row split over 2 ranks (rlhf.models.sequence_parallel), 2 processes over gloo

Each rank is its own process with ``--threads`` threads (default 1: a rank stands for a device, so every run gets the
same compute per rank; with more ranks than cores, or a busy machine, step times stretch), so its memory is its own.
Per rank it prints:

  saved      bytes the autograd graph keeps for the backward (activations; weights excluded), measured with
             torch.autograd.graph.saved_tensors_hooks over the warm-up step
  peak RSS   growth of the process's peak resident memory over the steps, above its size after loading the model
             (activations, their gradients and every temporary: what a device would have to hold)
  step       median seconds of forward + backward over --repeats steps after the warm-up step
  model      rlhf.planning.memory.activation_bytes for a micro-batch of the rank's tokens (the memory model has no
             sequence-parallel term: at sp > 1 this is what it would say per rank if it had one)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

MODEL_ARGS = (
    "tokens",
    "samples",
    "repeats",
    "hidden",
    "intermediate",
    "layers",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _lengths(tokens: int, samples: int) -> list[int]:
    """Decreasing lengths: each sample half of what is left, the last one the rest."""
    out, left = [], tokens
    for _ in range(samples - 1):
        out.append(left // 2)
        left -= left // 2
    return [*out, left]


def _model(args):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "llama",
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        vocab_size=args.vocab,
        max_position_embeddings=args.tokens + 64,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32).train()


def _split(model, shard, group, attention: str):
    """``sequence_parallel``, or at sp=1 with ``attention="ulysses"`` the Ulysses path forced on a group of one."""
    from rlhf.models.sequence_parallel import sequence_parallel, ulysses_attention
    from rlhf.models.sequence_parallel.context import SPContext, activated
    from rlhf.models.sequence_parallel.layout import sample_layout

    if shard.size > 1 or attention == "own":
        return sequence_parallel(model, shard, group)
    stack = contextlib.ExitStack()
    stack.enter_context(ulysses_attention(model))
    stack.enter_context(activated(SPContext(group, 1, 0, sample_layout(shard.position_ids))))
    return stack


def worker(args) -> None:
    """One rank (RANK/WORLD_SIZE/MASTER_* in the environment when it joins a group); prints one JSON line."""
    import torch
    import torch.distributed as dist

    from rlhf.algo import log_probs_from_logits
    from rlhf.models.packing import pack
    from rlhf.models.sequence_parallel import dp_token_count, loss_share, shard_packed, sp_groups

    rank, group = 0, None
    if args.sp > 1 or args.attention == "ulysses":
        dist.init_process_group("gloo")
        groups = sp_groups(args.sp)
        rank, group = groups.sp_rank, groups.sp_group
    model = _model(args)
    lengths = _lengths(args.tokens, args.samples)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (len(lengths), max(lengths)), generator=g)
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    shard = shard_packed(pack(ids, mask, varlen=True), size=args.sp, rank=rank)  # the samples in one row
    params = {p.data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def keep(t):
        if t.data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def step(measure: bool) -> float:
        t0 = time.perf_counter()
        hooks = torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t) if measure else contextlib.nullcontext()
        with _split(model, shard, group, args.attention), hooks:
            logits = model(input_ids=shard.input_ids, position_ids=shard.local_position_ids, use_cache=False).logits
            lp = log_probs_from_logits(logits, shard.targets)
            loss_share(-(lp * shard.valid).sum(), dp_token_count(shard.tokens)).backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    base = _rss_bytes()
    step(measure=True)  # the warm-up, measuring what the graph saves
    times = [step(measure=False) for _ in range(args.repeats)]
    result = {
        "rank": rank,
        "tokens": int(shard.input_ids.numel()),
        "saved": sum(saved.values()),
        "peak_rss": _peak_rss_bytes() - base,
        "step": statistics.median(times),
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(result), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


def run(args, sp: int, attention: str) -> list[dict]:
    from rlhf.launch.ports import free_port

    env = {**os.environ, "WORLD_SIZE": str(sp), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["OMP_NUM_THREADS"] = str(args.threads)  # the same per rank in every run, as each rank has its own device
    model_args = [x for k in MODEL_ARGS for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]
    cmd = [sys.executable, __file__, "--worker", "--sp", str(sp), "--attention", attention, *model_args]
    procs = [subprocess.Popen(cmd, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True) for r in range(sp)]
    rows = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            raise SystemExit(f"sp={sp} {attention}: a rank failed (exit {p.returncode})")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return sorted(rows, key=lambda r: r["rank"])


def model_figure(args, tokens: int) -> float:
    """rlhf.planning.memory.activation_bytes for a micro-batch of ``tokens`` tokens of this model, fp32."""
    from rlhf.planning.memory import activation_bytes
    from rlhf.spec.build import load_spec

    spec = load_spec(
        [
            f"model.hidden_size={args.hidden}",
            f"model.num_layers={args.layers}",
            f"model.num_heads={args.heads}",
            f"model.num_kv_heads={args.kv_heads}",
            f"model.head_dim={args.head_dim}",
            f"model.intermediate_size={args.intermediate}",
            f"model.vocab_size={args.vocab}",
            f"model.max_position_embeddings={args.tokens + 64}",
            f"data.max_len={tokens}",
            "trainer.precision=fp32",
            "trainer.gradient_checkpointing=false",
        ]
    )
    return activation_bytes(spec, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192, help="tokens in the packed row")
    ap.add_argument("--samples", type=int, default=3, help="samples in the row (decreasing lengths)")
    ap.add_argument("--runs", default="1:own,1:ulysses,2:ulysses", help="sp:attention pairs (see the docstring)")
    ap.add_argument("--repeats", type=int, default=1, help="timed steps after the warm-up")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank (each rank stands for one device)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sp", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--attention", default="own", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    mib = 2**20
    print(
        f"one packed row of {args.tokens} tokens ({args.samples} samples: {_lengths(args.tokens, args.samples)}), "
        f"Llama fp32 hidden {args.hidden}, {args.layers} layers, {args.heads} heads / {args.kv_heads} kv, "
        f"vocab {args.vocab}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'sp':>3} {'attention':>9} {'rank':>4} {'tokens':>7} {'threads':>7} {'saved MiB':>10} {'peak RSS MiB':>13}"
        f" {'step s':>7} {'model MiB':>10}"
    )
    for pair in args.runs.split(","):
        sp, attention = int(pair.partition(":")[0]), pair.partition(":")[2] or "ulysses"
        figure = model_figure(args, args.tokens // sp) / mib
        for r in run(args, sp, attention):
            print(
                f"{sp:>3} {attention:>9} {r['rank']:>4} {r['tokens']:>7} {r['threads']:>7} {r['saved'] / mib:>10.1f} "
                f"{r['peak_rss'] / mib:>13.1f} {r['step']:>7.2f} {figure:>10.1f}"
            )


if __name__ == "__main__":
    main()
