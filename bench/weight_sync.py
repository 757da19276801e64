#!/usr/bin/env python
"""Seconds per weight sync against model size, for every route and both engines, next to two physical floors.

    .venv/bin/python bench/weight_sync.py                          # 25M, 125M, 500M; hf and vllm engines
    .venv/bin/python bench/weight_sync.py --sizes 25M,125M --engines hf --repeats 5

For each model size (random Llama models made locally by rlhf's tiny-model factory, fp32) and each engine backend,
one policy rank (DeepSpeed, ZeRO-0: the sync path without gathers; ZeRO-3 gathers are measured by the tests) and
one rollout engine share a CPU bundle, as in the quickstart. Every route syncs the same weights ``--repeats`` times
after one warm-up sync; the median is reported with the bytes moved, the sender's, the engine's and the driver's
peak resident-memory growth during the sync.

Floors, measured in the same run on the same bytes:
  memcpy   one copy of the model's bytes into an already-touched buffer (torch copy_ with all the cores, and with
           one thread, as each side of a sync runs): the least any route that moves the bytes once can cost
  gloo     a bare torch.distributed gloo broadcast of the model's bytes, in the same bucket size, between two plain
           processes on 127.0.0.1: the least the broadcast route can cost
Targets (issue 10): at 500M, shared_memory within 3x of memcpy, broadcast within 2x of gloo, the driver flat.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

SIZES = {  # name -> model overrides (vocab 512, the tiny tokenizer's)
    "25M": ["model=small"],
    "125M": [
        "model=small",
        "model.hidden_size=768",
        "model.num_layers=18",
        "model.num_heads=12",
        "model.num_kv_heads=12",
        "model.intermediate_size=2048",
    ],
    "500M": [
        "model=small",
        "model.hidden_size=1280",
        "model.num_layers=24",
        "model.num_heads=20",
        "model.num_kv_heads=20",
        "model.intermediate_size=4096",
    ],
}
ROUTES = ("shared_memory", "broadcast", "object_store")


def _floor_memcpy(nbytes: int, threads: int, repeats: int) -> float:
    import torch

    torch.set_num_threads(threads)
    src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src).fill_(0)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def _gloo_peer(rank: int, port: int, nbytes: int, bucket: int, repeats: int, out: Any) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=datetime.timedelta(seconds=120))
    pg = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=120))
    buf = torch.empty(nbytes, dtype=torch.uint8).fill_(rank)
    times = []
    for _ in range(repeats + 1):
        pg.barrier().wait()
        t0 = time.perf_counter()
        for off in range(0, nbytes, bucket):
            pg.broadcast([buf[off : off + bucket]]).wait()
        pg.barrier().wait()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(statistics.median(times[1:]))


def _floor_gloo(nbytes: int, bucket: int, repeats: int) -> float:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_gloo_peer, args=(r, port, nbytes, bucket, repeats, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    seconds = out.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return seconds


def _measure(size: str, backend: str, routes: list[str], repeats: int, threads: int, bucket_mb: float) -> dict:
    from dataclasses import replace

    from rlhf.backends.weight_sync.driver import WeightSync
    from rlhf.backends.weight_sync.memory import PeakRSS
    from rlhf.launch.realize import realize
    from rlhf.models.loading import resolve_model_path
    from rlhf.pipelines.rollout_engines import RolloutEngines
    from rlhf.planning.plan import plan
    from rlhf.spec.build import load_spec
    from rlhf.workers import TrainerWorker

    spec = load_spec(
        [
            "+recipe=grpo_tiny_cpu",
            *SIZES[size],
            f"rollout={backend}",
            "algorithm.kl.coef=0",
            "trainer.zero_stage=0",
            f"hardware.cpus_per_node={threads}",
            "data.max_len=64",
            "rollout.max_new_tokens=8",
            f"rollout.weight_sync_bucket_mb={bucket_mb}",
            "rollout.vllm.cpu_kv_cache_gb=1",
            "logging.mlflow=false",
        ]
    )
    p = plan(spec)
    realized = realize(spec, p)
    rows = {}
    try:
        engines = RolloutEngines(spec, realized, resolve_model_path(spec.model), None)
        policy = realized.create_group("policy", TrainerWorker, spec, "policy")
        policy.run_all("init_trained", kind="causal_lm", total_steps=1)
        for route in routes:
            ws = WeightSync(
                replace(spec, rollout=replace(spec.rollout, weight_sync=route)), policy, engines, measure_memory=True
            )
            ws.sync()  # warm-up: first-touch allocations, lazy imports
            secs, driver, sender, engine, nbytes = [], [], [], [], 0
            for _ in range(repeats):
                with PeakRSS() as m:
                    r = ws.sync()
                secs.append(r.seconds)
                driver.append(m.delta_mb)
                if r.sender is not None:
                    nbytes = r.sender["bytes"]
                    sender.append(r.sender.get("peak_rss_delta_mb") or 0.0)
                    engine.append(max(rep.get("peak_rss_delta_mb") or 0.0 for reps in r.receivers for rep in reps))
            ws.close()
            rows[route] = {
                "seconds": statistics.median(secs),
                "bytes": nbytes,
                "driver_mb": max(driver),
                "sender_mb": max(sender) if sender else None,
                "engine_mb": max(engine) if engine else None,
            }
            print(f"  {size:>5} {backend:<5} {route:<14} {rows[route]['seconds']:8.3f} s", flush=True)
    finally:
        realized.shutdown()
    return {"params": p.params, "routes": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="25M,125M,500M")
    ap.add_argument("--engines", default="hf,vllm")
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--bucket-mb", type=float, default=512.0)
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()
    import ray

    from rlhf.launch.cluster import start_or_attach
    from rlhf.spec.schema import RaySpec

    start_or_attach(RaySpec(num_cpus=max(args.threads, 2)))
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "sizes": {}}
    bucket = int(args.bucket_mb * 2**20)
    for size in args.sizes.split(","):
        entry: dict[str, Any] = {"engines": {}}
        for backend in args.engines.split(","):
            print(f"measuring {size} with the {backend} engine ...", flush=True)
            entry["engines"][backend] = _measure(
                size, backend, args.routes.split(","), args.repeats, args.threads, args.bucket_mb
            )
        nbytes = next(r["bytes"] for e in entry["engines"].values() for r in e["routes"].values() if r["bytes"])
        entry["bytes"] = nbytes
        entry["memcpy_s"] = _floor_memcpy(nbytes, args.threads, args.repeats)
        entry["memcpy1_s"] = _floor_memcpy(nbytes, 1, args.repeats)  # one thread, as each side of a sync runs
        entry["gloo_s"] = _floor_gloo(nbytes, bucket, args.repeats)
        results["sizes"][size] = entry
    ray.shutdown()
    _print(results)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


def _print(results: dict[str, Any]) -> None:
    print(f"\nweight sync, seconds per sync (median), measured {results['when']}")
    head = (
        f"{'model':>6} {'GB':>6} {'engine':<6} {'route':<14} {'s/sync':>8} {'GB/s':>6} {'x memcpy':>9} "
        f"{'x gloo':>7} {'vs object_store':>16} {'driver MB':>10} {'sender MB':>10} {'engine MB':>10}"
    )
    print(head)
    for size, e in results["sizes"].items():
        gb = e["bytes"] / 1e9
        print(f"{size:>6} {gb:6.2f} {'floor':<6} {'memcpy':<14} {e['memcpy_s']:8.3f} {gb / e['memcpy_s']:6.2f}")
        if "memcpy1_s" in e:
            one = e["memcpy1_s"]
            print(f"{size:>6} {gb:6.2f} {'floor':<6} {'memcpy 1 thr':<14} {one:8.3f} {gb / one:6.2f}")
        print(f"{size:>6} {gb:6.2f} {'floor':<6} {'bare gloo':<14} {e['gloo_s']:8.3f} {gb / e['gloo_s']:6.2f}")
        for backend, b in e["engines"].items():
            base = b["routes"].get("object_store", {}).get("seconds")
            for route, r in b["routes"].items():
                s = r["seconds"]
                speedup = f"{base / s:15.1f}x" if base and route != "object_store" else f"{'':>16}"
                fmt = lambda v: f"{v:10.1f}" if v is not None else f"{'-':>10}"  # noqa: E731
                print(
                    f"{size:>6} {gb:6.2f} {backend:<6} {route:<14} {s:8.3f} {gb / s:6.2f} {s / e['memcpy_s']:9.1f} "
                    f"{s / e['gloo_s']:7.1f} {speedup} {fmt(r['driver_mb'])} {fmt(r['sender_mb'])} "
                    f"{fmt(r['engine_mb'])}"
                )


if __name__ == "__main__":
    main()
