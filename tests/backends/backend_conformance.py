"""One rank of the training-backend conformance run (tests/backends/test_train_backends.py starts two of these with
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set, one process group per backend).

For each case (a backend plus trainer/LoRA settings) it builds a trained and a frozen engine through the backend's
``TrainBackend`` and drives them only through the ``TrainEngine`` / ``FrozenEngine`` protocols, asserting the
contract on the way (a non-finite step included); the per-step losses and gradient norms go to
``OUT/<case>.rank<r>.json`` so the parent can compare backends with each other.

    python backend_conformance.py OUT BACKEND CASE [CASE ...]      (a CASE: name=key=value,key=value)
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from rlhf.algo import sft_loss
from rlhf.backends.contract.training import FrozenEngine, TrainBackend, TrainEngine
from rlhf.models.forward import causal_lm_log_probs
from rlhf.models.loading import load_causal_lm, resolve_model_path
from rlhf.spec.build import load_spec
from rlhf.spec.registry import train_backend

MICRO, GRAD_ACCUM = 2, 2


def loss_fn(model, batch, norm):
    lp = causal_lm_log_probs(model, batch["input_ids"], batch["attention_mask"])
    loss = sft_loss(lp, batch["action_mask"], "token_mean", norm)
    return loss, {"loss": loss.detach()}


def nan_loss_fn(model, batch, norm):
    loss, metrics = loss_fn(model, batch, norm)
    return loss * float("nan"), metrics


def log_probs(model, batch):
    return causal_lm_log_probs(model, batch["input_ids"], batch["attention_mask"])


def batches(step: int, rank: int) -> list[dict[str, torch.Tensor]]:
    """This rank's micro-batches of ``step``: uneven token counts per micro-batch, so the step-window normaliser
    matters (the same on every backend)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    out = []
    for n in (5, 9):
        mask = torch.zeros(MICRO, 11)
        mask[:, -n:] = 1
        out.append(
            {
                "input_ids": torch.randint(0, 256, (MICRO, 12), generator=g),
                "attention_mask": torch.ones(MICRO, 12, dtype=torch.long),
                "action_mask": mask,
            }
        )
    return out


def token_mean_loss(engine, mbs) -> float:
    """The step's token-mean loss over every rank, computed with forward_no_grad."""
    stats = torch.zeros(2, dtype=torch.float64)
    for b in mbs:
        lp = engine.forward_no_grad(log_probs, b)
        stats[0] += float(-(lp * b["action_mask"]).sum())
        stats[1] += float(b["action_mask"].sum())
    dist.all_reduce(stats)
    return float(stats[0] / stats[1])


def saved_checkpoint_reads_back(backend, engine, ckpt: Path, rank: int, lora: bool) -> None:
    """The backend's own answers about the folder its engine just saved (checkpoint.init_from's reading, in one
    process without a process group): whole, and the full weights under the module's names, whatever the ranks."""
    named = dict(engine.named_weights(keep=rank == 0))  # collective when sharded: every rank takes part
    dist.barrier()  # every rank's files are written
    if rank == 0:
        saved = backend.checkpoint_weights(ckpt)
        assert saved.problem == "" and saved.where.exists(), saved
        state = backend.checkpoint_state_dict(ckpt)
        assert set(state) == set(engine.module.state_dict()), "the module's own names (a peft model's for LoRA)"
        if not lora:  # LoRA: named_weights are merged, the state is not
            assert all(torch.equal(state[n].to(t.dtype), t) for n, t in named.items())


def run_case(backend_name: str, case: str, overrides: list[str], out: Path) -> None:
    rank = dist.get_rank()
    settings = {
        "trainer.backend": backend_name,
        "hardware.devices_per_node": "2",
        "trainer.precision": "fp32",
        "trainer.lr": "1e-3",
        "trainer.lr_scheduler": "constant",
        "trainer.warmup_ratio": "0.0",
        "trainer.max_norm": "1.0",
        "trainer.global_batch": str(MICRO * GRAD_ACCUM * dist.get_world_size()),
        "trainer.micro_batch_per_device": str(MICRO),
    }
    settings.update(kv.split("=", 1) for kv in overrides)  # the case's own settings win
    spec = load_spec([f"{k}={v}" for k, v in settings.items()])
    backend = train_backend(backend_name)
    assert isinstance(backend, TrainBackend) and backend.name == backend_name
    path = resolve_model_path(spec.model)
    lora = spec.model.lora
    gc = spec.trainer.gradient_checkpointing

    def load_trained(precision: str):
        return load_causal_lm(path, precision=precision, gradient_checkpointing=gc, lora=lora)

    plain = dict(load_causal_lm(path).named_parameters())  # before any backend context (ZeRO-3 partitions loads)
    n_full = sum(p.numel() for p in plain.values())
    torch.manual_seed(spec.seed)
    engine = backend.build_trained(load_trained, spec, lr=1e-3, total_steps=10, grad_accum=GRAD_ACCUM)
    frozen = backend.build_frozen(lambda p: load_causal_lm(path, precision=p), spec, offload=True)
    assert isinstance(engine, TrainEngine), type(engine)
    assert isinstance(frozen, FrozenEngine), type(frozen)
    assert engine.gathers_on_every_rank == backend.gathers_on_every_rank(spec)
    assert engine.grad_accum == GRAD_ACCUM

    # Before any step the trained and the frozen model are the same model (LoRA's B starts at zero).
    tol = 1e-5 if spec.trainer.precision == "fp32" else 1e-2  # bf16: the order of its roundings differs
    probe = batches(0, rank)[0]
    assert torch.allclose(engine.forward_no_grad(log_probs, probe), frozen.forward(log_probs, probe), atol=tol)

    trainable = engine.trainable_params()
    assert (trainable < n_full / 10) if lora.rank else (trainable == n_full), (trainable, n_full)

    record: dict[str, list[float]] = {"loss": [], "grad_norm": [], "resumed_loss": [], "resumed_grad_norm": []}
    first = batches(1, rank)
    expected = token_mean_loss(engine, first)
    m = engine.step(first, loss_fn)
    # The reported loss is one token mean over the whole step (all micro-batches, all ranks).
    assert math.isclose(m["loss"], expected, rel_tol=tol), (m["loss"], expected)
    assert m["grad_norm"] > 0 and math.isclose(m["lr"], 1e-3)
    record["loss"].append(m["loss"])
    record["grad_norm"].append(m["grad_norm"])

    ckpt = out / f"{case}.ckpt"
    engine.save(str(ckpt), {"step": 1})
    saved_checkpoint_reads_back(backend, engine, ckpt, rank, lora.rank > 0)
    for s in (2, 3):
        m = engine.step(batches(s, rank), loss_fn)
        record["loss"].append(m["loss"])
        record["grad_norm"].append(m["grad_norm"])
    assert engine.global_step == 3
    client = engine.load(str(ckpt))
    assert client.get("step") == 1 and engine.global_step == 1, client
    for s in (2, 3):
        m = engine.step(batches(s, rank), loss_fn)
        record["resumed_loss"].append(m["loss"])
        record["resumed_grad_norm"].append(m["grad_norm"])
    # load() continues bit-exactly
    assert record["resumed_loss"] == record["loss"][1:], record
    assert record["resumed_grad_norm"] == record["grad_norm"][1:], record

    # Weights for the rollout engines: buckets (one gathered at a time) hold exactly named_weights.
    named = dict(engine.named_weights(keep=rank == 0))
    bucket_bytes = 64 * 1024
    buckets = list(engine.weight_buckets(bucket_bytes, keep=rank == 0))
    largest = engine.largest_weight_bytes()
    if rank == 0:
        flat = [(n, t) for b in buckets for n, t in b]
        assert [n for n, _ in flat] == list(named), "buckets must hold named_weights, in order"
        assert all(torch.equal(t, named[n]) for n, t in flat)
        assert all(sum(t.numel() * t.element_size() for _, t in b) <= bucket_bytes + largest for b in buckets)
        assert largest == max(t.numel() * t.element_size() for t in named.values())
        assert set(named) == set(plain), "plain HF names, LoRA merged"
    else:
        assert named == {} and all(b is None for b in buckets)

    # The Hugging Face export is what a rollout engine would load: the same weights.
    hf = out / f"{case}.hf"
    engine.save_hf(str(hf))
    if rank == 0:
        if lora.rank:
            from rlhf.models.merge_lora import merge_lora

            merge_lora(path, str(hf), str(out / f"{case}.merged"))
            hf = out / f"{case}.merged"
        from safetensors.torch import load_file

        reloaded = load_file(str(hf / "model.safetensors"))
        assert all(torch.allclose(reloaded[n], t, atol=1e-6) for n, t in named.items())

    engine.set_peak_lr(5e-4)
    engine.offload_states()
    engine.reload_states()
    m = engine.step(batches(4, rank), loss_fn)
    assert math.isclose(m["lr"], 5e-4), m["lr"]

    # Token-budget micro-batches: a step of another count than grad_accum (the same on both ranks) is still one token
    # mean over the step; ranks given different counts both raise instead of hanging in the collectives.
    uneven = batches(6, rank) + batches(7, rank)[:1]
    expected = token_mean_loss(engine, uneven)
    m = engine.step(uneven, loss_fn)
    assert math.isclose(m["loss"], expected, rel_tol=tol), (m["loss"], expected)
    try:
        engine.step(batches(8, rank)[: rank + 1], loss_fn)
    except ValueError as e:
        assert "different numbers of micro-batches" in str(e), e
    else:
        raise AssertionError("ranks with different micro-batch counts must raise")

    # A step whose gradient is not finite changes nothing (trainer.on_nonfinite: the run decides what follows).
    before = dict(engine.named_weights(keep=rank == 0))
    m = engine.step(batches(5, rank), nan_loss_fn)
    assert not math.isfinite(m["grad_norm"]), m
    after = dict(engine.named_weights(keep=rank == 0))
    assert all(torch.equal(before[n], after[n]) for n in before)
    (out / f"{case}.rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()


def main() -> None:
    out, backend_name, cases = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    backend = train_backend(backend_name)
    backend.init_distributed("cpu", timeout_s=300)
    try:
        for case in cases:
            name, _, rest = case.partition("=")
            run_case(backend_name, name, [kv for kv in rest.split(",") if kv], out)
    finally:
        from rlhf.backends.shared.distributed import shutdown_distributed

        shutdown_distributed()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
    # Every assertion passed and the group is left: skip the interpreter's teardown of native libraries, where a
    # DeepSpeed rank once aborted (SIGABRT, "terminate called without an active exception": a native thread still
    # joinable at exit) on a loaded machine after writing its results. A failure above still exits 1.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
