#!/usr/bin/env python
"""The plan's activation memory against the measured peak of one forward + backward, at long lengths, without and
with sequence parallelism: the check behind rlhf/planning/memory.py's activation term (docs/how-to/long-context.md
shows the table).

    .venv/bin/python bench/activation_memory.py                          # 2k, 8k, 16k tokens x sp 1, 2 (~10 min)
    .venv/bin/python bench/activation_memory.py --tokens 2048 --sp 1 --parts   # one point, the saved bytes by kind

Each point is fresh processes (one per rank; sp=2: two gloo ranks through rlhf.models.sequence_parallel, as the
engines drive it): a random Llama (``--hidden`` ... set its size; wide enough, and with a vocabulary large enough,
for the activations and logits to dominate the weights) runs one forward and backward of a token-mean loss over one
packed row of ``--tokens`` tokens made of ``--samples`` samples of decreasing lengths (each half of what is left),
the log-probs of the next tokens and the entropy as the trainers compute them (rlhf.models.head_scores.token_scores:
the output head scores chunk by chunk, in the backward too; where that module is absent, the whole logits through
rlhf.algo.log_probs_from_logits). Per rank:

  measured   the growth of the process's peak resident memory over the step (ru_maxrss) above its resident size just
             before it, with the model loaded, its gradients allocated (so their memory is not counted: the plan
             counts them as grads) and the inputs built; glibc's malloc is told to map every block above 64 KiB
             (MALLOC_MMAP_THRESHOLD_), so a freed tensor leaves the resident set as it would leave a device's
             allocator, and the peak is what a device would have to hold at once
  estimate   rlhf.planning.memory.activation_bytes for the same model, precision, micro-batch (one row of
             --tokens) and trainer.sequence_parallel_size: the plan's activation column
  ratio      estimate / measured (the plan is meant to be within 25% of the measured peak: 0.75-1.25)
  saved      (--parts) the bytes the autograd graph keeps for the backward (torch.autograd.graph
             .saved_tensors_hooks), by dtype and width per token of the rank (h, I, a*d, a mask's row ...), beside the
             formula's terms

Each rank runs one thread (a rank stands for a device). The step is measured once: memory does not vary between
repeats the way time does. Nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

MODEL_ARGS = (
    "architecture",
    "samples",
    "hidden",
    "intermediate",
    "layers",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "dtype",
)
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "2"}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def lengths(tokens: int, samples: int) -> list[int]:
    """Decreasing lengths: each sample half of what is left, the last one the rest."""
    out, left = [], tokens
    for _ in range(samples - 1):
        out.append(left // 2)
        left -= left // 2
    return [*out, left]


def _model(args, tokens: int):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        args.architecture,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        vocab_size=args.vocab,
        max_position_embeddings=tokens + 64,
    )
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype).train()


def scores(model, input_ids, targets, position_ids):
    """(log-probs of ``targets``, entropy) ``[R, L]`` as the trainers compute them (see the module docstring)."""
    try:
        from rlhf.models.head_scores import token_scores
    except ImportError:  # before the chunked head: the whole logits
        from rlhf.algo import entropy_from_logits, log_probs_from_logits

        logits = model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits
        return log_probs_from_logits(logits, targets), entropy_from_logits(logits)
    return token_scores(model, input_ids, targets, entropy=True, position_ids=position_ids)


def worker(args) -> None:
    """One rank (RANK/WORLD_SIZE/MASTER_* in the environment when sp > 1); prints one JSON line."""
    import torch
    import torch.distributed as dist

    from rlhf.models.packing import pack
    from rlhf.models.sequence_parallel import dp_token_count, loss_share, sequence_parallel, shard_packed, sp_groups

    torch.set_num_threads(1)
    rank, group = 0, None
    if args.sp > 1:
        dist.init_process_group("gloo")
        groups = sp_groups(args.sp)
        rank, group = groups.sp_rank, groups.sp_group
    model = _model(args, args.tokens)
    for p in model.parameters():  # allocated before the baseline: the plan counts gradients as grads, not here
        p.grad = torch.zeros_like(p)
    sizes = lengths(args.tokens, args.samples)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (len(sizes), max(sizes)), generator=g)
    mask = (torch.arange(max(sizes))[None] < torch.tensor(sizes)[:, None]).long()
    shard = shard_packed(pack(ids, mask, varlen=True), size=args.sp, rank=rank)  # the samples in one row
    params = {p.data_ptr() for p in model.parameters()}
    local = int(shard.input_ids.numel())
    saved: dict[int, tuple[int, str]] = {}

    def keep(t):
        ptr = t.untyped_storage().data_ptr()
        if t.data_ptr() not in params and ptr not in saved:
            nbytes = t.untyped_storage().nbytes()
            # by what it holds per token of this rank: h (hidden), I (MLP), V (logits), T (a mask row), ...
            width = nbytes / t.element_size() / max(local, 1)
            saved[ptr] = (nbytes, f"{str(t.dtype).removeprefix('torch.')} x{width:g}/token {tuple(t.shape)}")
        return t

    hooks = torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t)
    before_peak = _peak_rss_bytes()
    base = _rss_bytes()
    with sequence_parallel(model, shard, group):
        with hooks:
            lp, entropy = scores(model, shard.input_ids, shard.targets, shard.local_position_ids)
            loss = loss_share(
                -(lp * shard.valid).sum() - 1e-3 * (entropy * shard.valid).sum(), dp_token_count(shard.tokens)
            )
        loss.backward()
    peak = _peak_rss_bytes()
    by_op: dict[str, int] = collections.Counter()
    for nbytes, op in saved.values():
        by_op[op] += nbytes
    print(
        json.dumps(
            {
                "rank": rank,
                "tokens": int(shard.input_ids.numel()),
                "measured": peak - base,
                "valid": peak > before_peak,  # the step set the process's high-water mark (not the model's load)
                "saved": sum(n for n, _ in saved.values()),
                "saved_by_kind": dict(by_op.most_common()),
            }
        ),
        flush=True,
    )
    if dist.is_initialized():
        dist.destroy_process_group()


def run_point(args, tokens: int, sp: int) -> list[dict]:
    from rlhf.launch.ports import free_port

    env = {**os.environ, **MALLOC_ENV, "OMP_NUM_THREADS": "1", "WORLD_SIZE": str(sp)}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    model_args = [x for k in MODEL_ARGS for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]
    cmd = [sys.executable, __file__, "--worker", "--sp", str(sp), "--tokens", str(tokens), *model_args]
    procs = [subprocess.Popen(cmd, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True) for r in range(sp)]
    rows = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            raise SystemExit(f"tokens={tokens} sp={sp}: a rank failed (exit {p.returncode})")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return sorted(rows, key=lambda r: r["rank"])


def spec_for(args, tokens: int, sp: int):
    """The spec the plan would see for this point: the bench's model, one row of ``tokens``, ``sp`` ranks."""
    from rlhf.spec.build import load_spec

    return load_spec(
        [
            f"model.architecture={args.architecture}",
            f"model.hidden_size={args.hidden}",
            f"model.num_layers={args.layers}",
            f"model.num_heads={args.heads}",
            f"model.num_kv_heads={args.kv_heads}",
            f"model.head_dim={args.head_dim}",
            f"model.intermediate_size={args.intermediate}",
            f"model.vocab_size={args.vocab}",
            f"model.max_position_embeddings={tokens + 64}",
            f"data.max_len={tokens}",
            f"trainer.precision={args.dtype}",
            "trainer.gradient_checkpointing=false",
            "trainer.micro_batch_per_device=1",
            f"trainer.sequence_parallel_size={sp}",
        ]
    )


def estimate(args, tokens: int, sp: int) -> float:
    from rlhf.planning.memory import activation_bytes

    spec = spec_for(args, tokens, sp)
    return activation_bytes(spec, 1, samples_per_row=args.samples)


def parts(args, tokens: int, sp: int) -> dict[str, float]:
    from rlhf.planning.memory import activation_parts

    return activation_parts(spec_for(args, tokens, sp), 1, samples_per_row=args.samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="2048,8192,16384", help="tokens in the packed row, comma-separated")
    ap.add_argument("--sp", default="1,2", help="sequence-parallel sizes, comma-separated")
    ap.add_argument("--architecture", default="llama", choices=("llama", "qwen3"), help="transformers' model type")
    ap.add_argument("--samples", type=int, default=2, help="samples in the row (decreasing lengths)")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--parts", action="store_true", help="also print the saved bytes by kind and the formula's terms")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.sp, args.tokens = int(args.sp), int(args.tokens)
        worker(args)
        return
    mib = 2**20
    print(
        f"{args.architecture} {args.dtype}: hidden {args.hidden}, MLP {args.intermediate}, {args.layers} layers, "
        f"{args.heads} heads / {args.kv_heads} kv of {args.head_dim}, vocab {args.vocab}; one packed row of "
        f"{args.samples} samples (decreasing lengths); peak per rank of one forward + backward, MiB"
    )
    print(f"{'tokens':>7} {'sp':>3} {'rank':>4} {'measured':>9} {'estimate':>9} {'ratio':>6}")
    rows = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        for sp in (int(s) for s in args.sp.split(",")):
            est = estimate(args, tokens, sp)
            for r in run_point(args, tokens, sp):
                ratio = est / max(r["measured"], 1)
                flag = "" if r["valid"] else "  (the model's load set the high-water mark: not measured)"
                print(
                    f"{tokens:>7} {sp:>3} {r['rank']:>4} {r['measured'] / mib:>9.1f} {est / mib:>9.1f} {ratio:>6.2f}"
                    + flag
                )
                if args.parts:
                    print(f"{'':>16} saved {r['saved'] / mib:.1f} MiB by kind:")
                    for op, n in r["saved_by_kind"].items():
                        print(f"{'':>18} {op:<40} {n / mib:>9.1f}")
                    print(f"{'':>16} the formula's terms:")
                    for name, n in parts(args, tokens, sp).items():
                        print(f"{'':>18} {name:<40} {n / mib:>9.1f}")
                rows.append({"tokens": tokens, "sp": sp, **r, "estimate": est})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
