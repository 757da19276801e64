#!/usr/bin/env python
"""Part of scripts/gpu_check.sh: the weight-sync transport on a GPU with torch alone (no vllm, deepspeed, ray).

Two processes, a sender and a receiver, run rlhf.backends.weight_sync exactly as the policy's rank 0 and an engine
worker do: CUDA IPC (the shared_memory route) on one GPU, and the broadcast route over nccl between two GPUs (NCCL
refuses two ranks on one device; with one GPU the broadcast route is shown over gloo with CUDA tensors instead).
Buckets of random bf16 weights (a Llama-8B-like layer mix), checksums verified by the receiver on every tensor, the
digest compared, GB/s printed next to the device's own copy bandwidth. Exit status 1 on any mismatch or failure.
``--visible-as-uuid`` starts the receiver with CUDA_VISIBLE_DEVICES naming the GPU by its UUID (GPU-...), as Ray and
some schedulers do, so the IPC handle must be opened on the receiver's device found by UUID, not by index.
Written against torch 2.14's public CUDA IPC (torch.multiprocessing.reductions); never run yet (no GPU here).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rlhf.backends.weight_sync import GroupConfig, WeightReceiver, WeightSender, listen_socket  # noqa: E402


def weights(total_mb: int, device: str, seed: int) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator(device=device).manual_seed(seed)
    out, size, i = [], 0, 0
    shapes = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (4096,)]
    while size < total_mb * 2**20:
        shape = shapes[i % len(shapes)]
        t = torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(torch.bfloat16)
        out.append((f"layers.{i // len(shapes)}.w{i % len(shapes)}", t))
        size += t.numel() * 2
        i += 1
    return out


def buckets(ws, bucket_bytes):
    cur, size = [], 0
    for name, t in ws:
        n = t.numel() * t.element_size()
        if cur and size + n > bucket_bytes:
            yield cur
            cur, size = [], 0
        cur.append((name, t))
        size += n
    if cur:
        yield cur


def receiver_main(cfg: dict, route: str, device: str, total_mb: int, repeats: int, out, visible: str = "") -> None:
    try:
        if visible:
            import os

            os.environ["CUDA_VISIBLE_DEVICES"] = visible  # before CUDA starts in this process
            device = "cuda:0"
        torch.cuda.set_device(torch.device(device))
        r = WeightReceiver(GroupConfig.from_dict(cfg), device=torch.device(device), route=route, stable=False)
        expect = dict(weights(total_mb, device, seed=0))
        for v in range(1, repeats + 1):
            bad = 0
            for name, t in r.pull(v):
                bad += int(not torch.equal(t, expect[name]))
            torch.cuda.synchronize()
            if bad:
                raise RuntimeError(f"{bad} tensors differ from the sender's")
        out.put(("ok", r.report.to_dict()))
        r.close()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run(
    route: str,
    backend: str,
    send_dev: str,
    recv_dev: str,
    total_mb: int,
    bucket_mb: int,
    repeats: int,
    visible: str = "",
) -> bool:
    listen = listen_socket("127.0.0.1")
    port = listen.getsockname()[1]
    data_ranks = (0, 1) if route == "broadcast" else (0,)
    cfg0 = GroupConfig("127.0.0.1", port, 2, 0, backend, data_ranks, 120.0)
    cfg1 = GroupConfig("127.0.0.1", port, 2, 1, backend, data_ranks, 120.0)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=receiver_main, args=(cfg1.to_dict(), route, recv_dev, total_mb, repeats, out, visible))
    p.start()
    torch.cuda.set_device(torch.device(send_dev))
    ws = weights(total_mb, send_dev, seed=0)
    nbytes = sum(t.numel() * 2 for _, t in ws)
    sender = WeightSender(
        cfg0,
        listen,
        device=torch.device(send_dev),
        capacity=bucket_mb * 2**20,
        shared="cuda" if route == "shared_memory" else None,
    )
    times, report = [], None
    for v in range(1, repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        report = sender.push(buckets(ws, bucket_mb * 2**20), v)
        times.append(time.perf_counter() - t0)
    status, payload = out.get(timeout=600)
    p.join(timeout=60)
    sender.close()
    best = min(times)
    label = f"{route} ({backend}, {send_dev} -> {recv_dev}{', visible as ' + visible if visible else ''})"
    if status != "ok":
        print(f"FAIL {label}: {payload}")
        return False
    same = payload["digest"] == report.digest and payload["first_mismatch"] is None
    print(
        f"{'ok  ' if same else 'FAIL'} {label}: {nbytes / 1e9:.2f} GB in {best:.3f} s = "
        f"{nbytes / best / 1e9:.1f} GB/s, "
        f"{report.buckets} buckets, {report.tensors} tensors, digests {'equal' if same else 'DIFFER'}"
    )
    return same


def copy_bandwidth(device: str, mb: int) -> float:
    a = torch.empty(mb * 2**20, dtype=torch.uint8, device=device).fill_(1)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    return 10 * a.numel() / (time.perf_counter() - t0) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--total-mb", type=int, default=4096, help="bytes of weights per sync")
    ap.add_argument("--bucket-mb", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--visible-as-uuid", action="store_true", help="the receiver sees its GPU by UUID only")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU")
        return 1
    n = torch.cuda.device_count()
    print(f"torch {torch.__version__}, {n} GPU(s): {torch.cuda.get_device_name(0)}")
    print(f"device copy bandwidth (cuda:0, read + write counted once): {copy_bandwidth('cuda:0', 1024):.0f} GB/s")
    ok = run("shared_memory", "nccl", "cuda:0", "cuda:0", args.total_mb, args.bucket_mb, args.repeats)
    if args.visible_as_uuid:
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        ok &= run("shared_memory", "nccl", "cuda:0", "cuda:0", args.total_mb, args.bucket_mb, args.repeats, uuid)
    if n >= 2:
        ok &= run("broadcast", "nccl", "cuda:0", "cuda:1", args.total_mb, args.bucket_mb, args.repeats)
    else:
        print(
            "one GPU: NCCL refuses two ranks on one device, so the nccl broadcast needs a second GPU; "
            "showing the broadcast route over gloo with CUDA tensors instead"
        )
        ok &= run("broadcast", "gloo", "cuda:0", "cuda:0", min(args.total_mb, 1024), args.bucket_mb, args.repeats)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
