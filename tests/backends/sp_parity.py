"""One rank of the sequence-parallel parity run (tests/backends/test_sequence_parallel_engines.py starts it on one
rank without sequence parallelism and on two ranks with ``trainer.sequence_parallel_size=2``, and on two
data-parallel ranks against four ranks of 2 x 2: the same global batch, every rank of an SP group given its DP
rank's micro-batches, as rlhf.launch.role_calls.RoleCalls.run_per_rank does). ``SP_PARITY_SP`` in the environment is
the SP size (default: the world size, one SP group).

For each case (a backend and its settings) it builds, through the backend's ``TrainBackend``, a trained policy, a
frozen reference and a frozen critic (value model), then runs what the pipelines run on them:

* SFT: two optimizer steps of rlhf.pipelines.sft.sft_loss_fn over packed rows of spread lengths (the second step's
  rows packed beforehand with their position ids, as ``data.packing`` makes them), and its eval forward;
* GRPO: old log-probs (the policy's forward without gradients), reference log-probs and critic values (the frozen
  engines), then two optimizer steps of rlhf.pipelines.rl_losses.actor_loss_fn (the grpo preset with the KL loss and
  an entropy bonus) over them.

The optimizer is made linear on purpose (AdamW with ``eps`` far above every gradient and ``lr = eps``: each step moves
a weight by its clipped gradient), so the weights after each step compare the gradients themselves; Adam's own
normalisation would turn rounding-level differences of near-zero gradients into whole steps of ``lr``.
``OUT/<case>.dp<D>.sp<S>.pt`` (rank 0) gets every number: step metrics (losses, KL, entropy, clip fraction, grad norm),
the forwards' outputs and the weights after each step.

    python sp_parity.py OUT MODEL_PATH CASE [CASE ...]      (a CASE: name=key=value,key=value)

:func:`compare` gives the largest difference of each kind between the two sides' files (the test and
scripts/gpu_sp_engine_check.py, which runs it on GPUs with ``SP_PARITY_ACCELERATOR=gpu``).
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from rlhf.models import head_scores
from rlhf.models.loading import load_causal_lm
from rlhf.models.value_head import load_value_model
from rlhf.pipelines.rl_losses import ActorLossSettings, actor_loss_fn, critic_values_fn, policy_logprobs_fn
from rlhf.pipelines.sft import sft_eval_fn, sft_loss_fn
from rlhf.spec.build import load_spec
from rlhf.spec.registry import train_backend

MICRO, GRAD_ACCUM = 2, 2
SFT_LENGTHS = [[5, 23], [40, 2], [17, 31], [9, 12]]  # per micro-batch, two steps of two
GRPO_LENGTHS = [[6, 29], [37, 3], [14, 21], [33, 8]]
PROMPT = 4


def _rows(lengths: list[int], seed: int, vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n], mask[i, :n] = torch.randint(0, vocab, (n,), generator=g), 1
    action = (mask[:, 1:] * mask[:, :-1]).float()
    action[:, : PROMPT - 1] = 0  # a prompt's predictions do not count
    return {"ids": ids, "mask": mask, "action": action}


def sft_batches(step: int, vocab: int, dp_rank: int = 0) -> list[dict[str, torch.Tensor]]:
    out = []
    for j in range(GRAD_ACCUM):
        lengths = [n + 3 * dp_rank for n in SFT_LENGTHS[step * GRAD_ACCUM + j]]  # each DP rank its own samples
        r = _rows(lengths, 100 * step + j + 1000 * dp_rank, vocab)
        mb = {"input_ids": r["ids"], "attention_mask": r["mask"], "action_mask": r["action"]}
        if step == 1:  # rows packed beforehand: two samples per row, positions restarting, pad at position 0
            mb = prepacked(mb)
        out.append(mb)
    return out


def prepacked(mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The micro-batch's samples back to back in one row, as rlhf.data's packing lays them out (position ids restart
    per sample; the row's pad has position 0)."""
    ids, pos, act = [], [], []
    for i in range(mb["input_ids"].shape[0]):
        n = int(mb["attention_mask"][i].sum())
        ids.append(mb["input_ids"][i, :n])
        pos.append(torch.arange(n))
        act.append(torch.cat([mb["action_mask"][i, : n - 1], torch.zeros(1)]))
    row = torch.cat(ids)[None]
    positions = torch.cat(pos)[None]
    action = torch.cat(act)[None, :-1]
    return {
        "input_ids": row,
        "attention_mask": torch.ones_like(row),
        "action_mask": action,
        "position_ids": positions,
    }


def grpo_rollout(vocab: int, dp_rank: int = 0) -> list[dict[str, torch.Tensor]]:
    """Four micro-batches (two steps) of sampled sequences with advantages (this DP rank's share)."""
    g = torch.Generator().manual_seed(7 + dp_rank)
    out = []
    for j, lengths in enumerate(GRPO_LENGTHS):
        r = _rows([n + 5 * dp_rank for n in lengths], 500 + j + 1000 * dp_rank, vocab)
        adv = torch.randn(len(lengths), 1, generator=g) * r["action"]
        out.append(
            {
                "sequences": r["ids"],
                "attention_mask": r["mask"],
                "action_mask": r["action"],
                "advantages": adv,
                "kl_coef": torch.tensor([0.05]),
            }
        )
    return out


def weights(engine, rank: int) -> dict[str, torch.Tensor]:
    return {n: t.detach().cpu().clone() for n, t in engine.named_weights(keep=rank == 0)}  # collective when sharded


# The forwards' layout, not a number of the step: one row split over the ranks against sdpa rows in one process.
LAYOUT_KEYS = {"tokens_computed"}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1.0)


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor], relative: bool = False) -> float:
    diffs = [
        (x - y).abs().max() / (y.abs().max().clamp(min=1.0) if relative else 1.0) for x, y in zip(a, b, strict=True)
    ]
    return float(max(diffs))


def compare(one: dict, two: dict) -> dict[str, float]:
    """The largest difference of each kind between the unsplit run (``one``) and the split one (``two``)."""
    assert one["whole_logits"] == two["whole_logits"] == [], (one["whole_logits"], two["whole_logits"])
    worst: dict[str, float] = {}
    for task in ("sft", "grpo"):
        assert len(one[task]) == len(two[task]) == 2
        for m1, m2 in zip(one[task], two[task], strict=True):
            assert set(m1) == set(m2), (task, sorted(m1), sorted(m2))
            for k in set(m1) - LAYOUT_KEYS:
                worst[f"{task}/{k}"] = max(worst.get(f"{task}/{k}", 0.0), _rel(m2[k], m1[k]))
    for k in ("old_logprobs", "ref_logprobs", "values"):
        worst[k] = _max_diff(two[k], one[k])
    worst["sft_eval_nll"] = _max_diff(two["sft_eval_nll"], one["sft_eval_nll"], relative=True)  # sums over tokens
    w1, w2 = one["weights"], two["weights"]
    assert len(w1) == len(w2) == 5 and set(w1[0]) == set(w2[0])
    worst["weights"] = max(float((a[n] - b[n]).abs().max()) for a, b in zip(w2, w1, strict=True) for n in a)
    # the steps moved the weights by far more than the tolerance: the comparison is not of unmoved weights
    worst["moved"] = max(float((w1[-1][n] - w1[0][n]).abs().max()) for n in w1[0])
    return worst


def run_case(name: str, overrides: list[str], path: str, out: Path, accelerator: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    sp = int(os.environ.get("SP_PARITY_SP", world))
    dp, dp_rank = world // sp, rank // sp  # contiguous SP groups (rlhf.models.sequence_parallel.sp_groups)
    settings = {
        "algorithm": "grpo",
        "hardware.accelerator": accelerator,
        "hardware.devices_per_node": str(world),
        "trainer.precision": "fp32",
        "trainer.lr": "1000.0",
        "trainer.eps": "1000.0",
        "trainer.weight_decay": "0.0",
        "trainer.lr_scheduler": "constant",
        "trainer.warmup_ratio": "0.0",
        "trainer.max_norm": "1.0",
        "trainer.global_batch": str(MICRO * GRAD_ACCUM * dp),
        "trainer.micro_batch_per_device": str(MICRO),
        "trainer.sequence_parallel_size": str(sp),
        "algorithm.policy_loss.entropy_coef": "0.01",
    }
    settings.update(kv.split("=", 1) for kv in overrides)
    spec = load_spec([f"{k}={v}" for k, v in settings.items()])
    backend = train_backend(spec.trainer.backend)
    assert backend.mesh(spec, world).data == dp and backend.mesh(spec, world).sequence == sp
    vocab = spec.model.vocab_size
    gc = spec.trainer.gradient_checkpointing

    torch.manual_seed(spec.seed)
    engine = backend.build_trained(
        lambda p: load_causal_lm(path, precision=p, gradient_checkpointing=gc),
        spec,
        lr=spec.trainer.lr,
        total_steps=10,
        grad_accum=GRAD_ACCUM,
    )
    reference = backend.build_frozen(lambda p: load_causal_lm(path, precision=p), spec, offload=False)
    torch.manual_seed(0)  # the same value head on every rank and in both runs
    critic = backend.build_frozen(
        lambda p: load_value_model(path, "critic", precision=p, init_value_head=True), spec, offload=False
    )
    record: dict[str, object] = {"sft": [], "grpo": [], "weights": [weights(engine, rank)]}

    sft = partial(sft_loss_fn, packing=True)
    for step in range(2):
        mbs = sft_batches(step, vocab, dp_rank)
        record["sft"].append(engine.step(mbs, sft))
        record["weights"].append(weights(engine, rank))
    evals = [engine.forward_no_grad(partial(sft_eval_fn, packing=True), mb) for mb in sft_batches(0, vocab, dp_rank)]
    record["sft_eval_nll"] = [e["nll"].cpu() for e in evals]

    rollout = grpo_rollout(vocab, dp_rank)
    old = partial(policy_logprobs_fn, temperature=1.0, packing=True)
    for mb in rollout:
        mb["old_logprobs"] = engine.forward_no_grad(old, mb).cpu() * mb["action_mask"]  # results on the host
        mb["ref_logprobs"] = reference.forward(old, mb).cpu() * mb["action_mask"]
        mb["rollout_logprobs"] = mb["old_logprobs"] + 0.01 * mb["action_mask"]
        mb["values"] = critic.forward(partial(critic_values_fn, packing=True), mb).cpu()
    record["old_logprobs"] = [mb["old_logprobs"] for mb in rollout]
    record["ref_logprobs"] = [mb["ref_logprobs"] for mb in rollout]
    record["values"] = [mb["values"] * mb["attention_mask"][:, 1:] for mb in rollout]
    actor = partial(actor_loss_fn, s=ActorLossSettings.from_spec(spec))
    train_keys = ("sequences", "attention_mask", "action_mask", "advantages", "kl_coef")
    for step in range(2):
        mbs = []
        for mb in rollout[step * GRAD_ACCUM : (step + 1) * GRAD_ACCUM]:
            mbs.append({k: mb[k] for k in (*train_keys, "old_logprobs", "ref_logprobs", "rollout_logprobs")})
        record["grpo"].append(engine.step(mbs, actor))
        record["weights"].append(weights(engine, rank))
    # every forward went through the chunked head: none fell back to the whole logits (rlhf.models.head_scores)
    record["whole_logits"] = sorted(t.__name__ for t in head_scores._WHOLE_LOGITS)
    if rank == 0:
        torch.save(record, out / f"{name}.dp{dp}.sp{sp}.pt")
    dist.barrier()


def main() -> None:
    out, path, cases = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    backend = train_backend(
        dict(kv.split("=", 1) for kv in cases[0].partition("=")[2].split(",") if kv)["trainer.backend"]
    )
    accelerator = os.environ.get("SP_PARITY_ACCELERATOR", "cpu")  # gpu: scripts/gpu_sp_engine_check.py
    backend.init_distributed(accelerator, timeout_s=300)
    try:
        for case in cases:
            name, _, rest = case.partition("=")
            run_case(name, [kv for kv in rest.split(",") if kv], path, out, accelerator)
    finally:
        backend.leave()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as backend_conformance.py: no native teardown after the results are written
