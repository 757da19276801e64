"""Measure the CPU constants of the cost model (rlhf/planning/cost.py, ``CPU``) and the CPU hardware facts
(conf/hardware/cpu.yaml) on this machine, each from a microbenchmark of its own, so that the end-to-end calibration
(bench/calibrate_cost.py) checks the model on runs it was not fitted to.

    .venv/bin/python bench/cost_probe.py              # about 3 minutes on a quiet 2-core machine
    .venv/bin/python bench/cost_probe.py --skip-pipeline

What it measures (one thread per process unless said: a CPU slot of hardware=cpu with devices_per_node=2 has one
core; the node's figures are the one-thread ones times the cores):
    matmul            best fp32 and bf16 GEMM rate (512..1024 squared)       -> device_tflops(_fp32) of the node
    copy              tensor copy of 256 MB, bytes read + written per second  -> memory_bandwidth_gbs, host_link_gbs
    train step        forward + backward of model=small (fp32, sdpa), large micro-batch: achieved / peak -> train_eff;
                      of model=tiny at micro-batch 1 (its FLOPs are nothing): the fixed cost           -> micro_batch_s
    forward           the same without gradients, log-softmax over the logits as the log-prob pass does
                                                                              -> forward_eff, forward_s
    decode            transformers generate with a KV cache: model=tiny batch 1 (fixed cost per step) -> decode_step_s;
                      model=small batch 64 (compute-bound)                    -> decode_flop_eff (prefill_eff alike)
    gloo              a small all-reduce's latency and a 64 MB broadcast between two processes on loopback
                                                                              -> collective_s, link_bandwidth_gbs
    ray call          round trips of a Ray actor call with a small argument   -> call_s
    sharded           the training engine's fixed cost per gathered module: model=tiny at micro-batch 1 x 8 tokens
                      trained and run forward (no grad) on one rank through the project's own engines
                      (rlhf.spec.registry: DeepSpeed ZeRO-2, ZeRO-3, FSDP2), so no collective moves a byte: the
                      time ZeRO-3 (FSDP2) adds over ZeRO-2, per gathered module (rlhf.planning.cost.gathered_units),
                      in a training micro-batch (the marginal cost of one more in a step of 8), in a no-grad
                      forward, in the optimizer step and in the weight sync's read of the weights
                                                                              -> CPU.zero3_module, CPU.fsdp2_unit
    pipeline          a minimal RL step (grpo_tiny_cpu, 2 prompts x 2 samples x 1 token): what a step costs with
                      nothing to compute                                      -> step_s
Every figure is the best of several repeats (the machine is shared: the best is the least disturbed); the load
average is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def best(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def model_of(name: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlhf.spec.build import load_spec

    m = load_spec([f"model={name}", "+recipe=grpo_tiny_cpu"]).model
    cfg = LlamaConfig(
        hidden_size=m.hidden_size, num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_kv_heads, head_dim=m.head_dim, intermediate_size=m.intermediate_size,
        vocab_size=m.vocab_size, max_position_embeddings=m.max_position_embeddings, attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval(), m


def gathered_units_of(model: str, engine: str) -> int:
    """The cost model's count of separately gathered modules (rlhf.planning.cost.gathered_units) for ``engine``."""
    from rlhf.planning.cost import gathered_units
    from rlhf.spec.build import load_spec

    return gathered_units(load_spec([f"model={model}", "+recipe=grpo_tiny_cpu", *SHARDED_ENGINES[engine]]))


def probe_kernels() -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    out = {}
    for dtype, key in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        rates = []
        for n in (512, 768, 1024):
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            reps = max(1, int(2e9 // (2 * n**3)))
            t = best(lambda a=a, b=b, reps=reps: [a @ b for _ in range(reps)])
            rates.append(reps * 2 * n**3 / t)
        out[f"matmul_{key}_gflops_1thread"] = max(rates) / 1e9
    x = torch.ones(64 * 2**20)
    y = torch.empty_like(x)
    y.copy_(x)
    for threads in (1, os.cpu_count() or 1):
        torch.set_num_threads(threads)
        t = best(lambda: y.copy_(x), 7)
        out[f"copy_gbs_{threads}thread"] = 2 * x.numel() * 4 / t / 1e9  # read + written
    torch.set_num_threads(1)
    return out


def probe_model() -> dict[str, float]:
    import torch

    from rlhf.planning.cost import forward_flops

    torch.set_num_threads(1)
    out = {}
    for name, micro, seq in (("tiny", 1, 8), ("small", 16, 64)):
        model, m = model_of(name)
        ids = torch.randint(0, m.vocab_size, (micro, seq))
        flops = forward_flops(m, micro * seq, seq)

        def train(model=model, ids=ids):
            model.zero_grad(set_to_none=True)
            loss = torch.log_softmax(model(ids).logits.float(), -1).mean()
            loss.backward()

        def forward(model=model, ids=ids):
            with torch.no_grad():
                torch.log_softmax(model(ids).logits.float(), -1)

        model.train()
        out[f"train_{name}_s"] = best(train, 5)
        out[f"train_{name}_flops"] = 3 * flops
        model.eval()
        out[f"forward_{name}_s"] = best(forward, 5)
        out[f"forward_{name}_flops"] = flops
        for batch, new in ((1, 16), (64, 16)) if name == "tiny" else ((64, 16),):
            prompt = torch.randint(0, m.vocab_size, (batch, 25))
            with torch.no_grad():
                pre = best(lambda model=model, prompt=prompt: model(prompt), 3)
                gen = best(lambda model=model, prompt=prompt, new=new: model.generate(
                    prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new,
                    do_sample=True, pad_token_id=0), 3)
            out[f"prefill_{name}_b{batch}_s"] = pre
            out[f"prefill_{name}_b{batch}_flops"] = forward_flops(m, batch * 25, 25)
            out[f"decode_{name}_b{batch}_step_s"] = max(gen - pre, 0.0) / new
            out[f"decode_{name}_b{batch}_step_flops"] = forward_flops(m, batch, 25 + new / 2)
    return out


def _gloo_worker(rank: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    small, big = torch.ones(256), torch.ones(16 * 2**20)
    for _ in range(5):
        dist.all_reduce(small)
    lat = []
    for _ in range(50):
        t0 = time.perf_counter()
        dist.all_reduce(small)
        lat.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(3):
        dist.broadcast(big, 0)
    bw = 3 * big.numel() * 4 / (time.perf_counter() - t0) / 1e9
    if rank == 0:
        Path(out).write_text(json.dumps({"gloo_allreduce_s_median": statistics.median(lat), "gloo_broadcast_gbs": bw}))
    dist.destroy_process_group()


def probe_gloo() -> dict[str, float]:
    """A collective's fixed cost and a broadcast's bandwidth between two processes over loopback (gloo)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/gloo.json"
        mp.spawn(_gloo_worker, args=(port, out), nprocs=2, join=True)
        return json.loads(Path(out).read_text())


SHARDED_ENGINES = {
    "zero2": ["trainer.backend=deepspeed", "trainer.zero_stage=2"],
    "zero3": ["trainer.backend=deepspeed", "trainer.zero_stage=3"],
    "fsdp2": ["trainer.backend=fsdp2"],
}
SHARDED_MICRO_BATCHES = 8  # micro-batches per timed optimizer step
SHARDED_ROUNDS = 25  # timed rounds of each call; the best counts (the machine is shared)


def _sharded_worker(engine: str, out: str) -> None:
    """One engine on one rank (a process of its own: ZeRO-3's model hooks are process-wide), best times over
    SHARDED_ROUNDS interleaved rounds: a training micro-batch (what an optimizer step of SHARDED_MICRO_BATCHES costs
    over one of a single micro-batch, per micro-batch added), the optimizer step (the rest of the single one), a
    no-grad forward, and the weight sync's read of the weights (gathered under ZeRO-3 and FSDP2)."""
    import torch

    from rlhf.spec.build import load_spec
    from rlhf.spec.registry import train_backend

    torch.set_num_threads(1)
    spec = load_spec(["+recipe=grpo_tiny_cpu", "trainer.micro_batch_per_device=1", *SHARDED_ENGINES[engine]])
    backend = train_backend(spec.trainer.backend)
    backend.init_distributed("cpu")
    model, m = model_of("tiny")
    eng = backend.build_trained(lambda _precision: model.train(), spec, lr=1e-5, total_steps=1000,
                                grad_accum=SHARDED_MICRO_BATCHES)
    ids = torch.randint(0, m.vocab_size, (1, 8))
    mbs = [{"input_ids": ids}] * SHARDED_MICRO_BATCHES

    def loss_fn(model, mb, _norm):
        return torch.log_softmax(model(mb["input_ids"]).logits.float(), -1).mean(), {}

    def forward(model, mb):
        return torch.log_softmax(model(mb["input_ids"]).logits.float(), -1)

    for _ in range(2):  # warm-up: the first steps allocate the optimizer states and buffers
        eng.step(mbs, loss_fn, mask_key=None)
        eng.forward_no_grad(forward, mbs[0])
    times: dict[str, list[float]] = {"many": [], "one": [], "forward": [], "sync": []}
    calls = {
        "many": lambda: eng.step(mbs, loss_fn, mask_key=None),
        "one": lambda: eng.step(mbs[:1], loss_fn, mask_key=None),
        "forward": lambda: eng.forward_no_grad(forward, mbs[0]),
        "sync": lambda: [bucket for bucket in eng.weight_buckets(1 << 26)],  # the weight sync's read of weights
    }
    for _ in range(SHARDED_ROUNDS):  # interleaved, so a burst of load hits every kind alike
        for kind, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[kind].append(time.perf_counter() - t0)
    many, one, fwd, sync = (min(times[k]) for k in ("many", "one", "forward", "sync"))
    per_mb = max(many - one, 0.0) / (SHARDED_MICRO_BATCHES - 1)  # a micro-batch's own cost, the step's apart
    Path(out).write_text(json.dumps({
        f"sharded_{engine}_train_mb_s": per_mb, f"sharded_{engine}_optimizer_step_s": max(one - per_mb, 0.0),
        f"sharded_{engine}_forward_s": fwd, f"sharded_{engine}_sync_read_s": sync,
    }))


def probe_sharded() -> dict[str, float]:
    """Each engine in a process of its own on one rank (gloo, world size 1), one after the other."""
    import socket

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in SHARDED_ENGINES:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "1",
                   "RANK": "0", "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1"}
            path = f"{tmp}/{engine}.json"
            subprocess.run([sys.executable, __file__, "--sharded-worker", engine, path], check=True, env=env,
                           cwd=tmp, timeout=900, capture_output=True, text=True)
            out.update(json.loads(Path(path).read_text()))
    return out


def sharded_module_costs(figures: dict[str, float], engine: str, units: int) -> dict[str, float]:
    """What ``engine`` adds over ZeRO-2 on one rank, per gathered module (``units`` of them): in a training
    micro-batch (forward + backward), in a no-grad forward, in an optimizer step, in the weight sync's read."""
    def extra(what: str) -> float:
        return max(figures[f"sharded_{engine}_{what}"] - figures[f"sharded_zero2_{what}"], 0.0) / units

    return {f"{engine}_module_{name}_s": extra(what)
            for name, what in (("train", "train_mb_s"), ("forward", "forward_s"), ("step", "optimizer_step_s"),
                                            ("sync", "sync_read_s"))}


def probe_ray() -> dict[str, float]:
    import ray

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        @ray.remote(num_cpus=0)
        class Echo:
            def call(self, x):
                return x

        a = Echo.remote()
        ray.get(a.call.remote(0))
        samples = []
        for _ in range(20):
            t0 = time.perf_counter()
            ray.get(a.call.remote(list(range(100))))
            samples.append(time.perf_counter() - t0)
        return {"ray_call_s_median": statistics.median(samples), "ray_call_s_best": min(samples)}
    finally:
        ray.shutdown()


def probe_pipeline(steps: int = 8) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(ROOT / ".venv/bin/rlhf-run"), "+recipe=grpo_tiny_cpu", "rollout.prompts_per_step=2",
            "rollout.samples_per_prompt=2", "rollout.max_new_tokens=1", "trainer.global_batch=4",
            "trainer.micro_batch_per_device=4", "rollout.micro_batch_per_device=4", f"trainer.max_steps={steps}",
            "eval.steps=0", "logging.trackers=[]", "logging.progress=false", "checkpoint.save_steps=0",
            f"hydra.run.dir={tmp}/run",
        ]
        subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp, timeout=900)
        rows = [json.loads(x) for x in (Path(tmp) / "run/metrics.jsonl").read_text().splitlines() if x.strip()]
        totals = [r["train/timing/step_total"] for r in rows if "train/timing/step_total" in r][2:]
    return {"pipeline_step_s_median": statistics.median(totals), "pipeline_step_s_best": min(totals)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-pipeline", action="store_true", help="skip the Ray and rlhf-run probes")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--only-sharded", action="store_true", help="run the sharded-engine probe alone")
    ap.add_argument("--sharded-worker", nargs=2, metavar=("ENGINE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sharded_worker:
        return _sharded_worker(*args.sharded_worker)
    load0 = os.getloadavg()
    figures = probe_sharded()
    if not args.only_sharded:
        figures.update({**probe_kernels(), **probe_gloo(), **probe_model()})
        if not args.skip_pipeline:
            figures.update(probe_ray())
            figures.update(probe_pipeline())
    load1 = os.getloadavg()
    cores = os.cpu_count() or 1
    derived = {
        **sharded_module_costs(figures, "zero3", gathered_units_of("tiny", "zero3")),
        **sharded_module_costs(figures, "fsdp2", gathered_units_of("tiny", "fsdp2")),
    }
    if not args.only_sharded:
        peak1 = figures["matmul_fp32_gflops_1thread"] * 1e9
        derived.update({
            "device_tflops_fp32 (node)": peak1 * cores / 1e12,
            "device_tflops (node, bf16)": figures["matmul_bf16_gflops_1thread"] * cores / 1e3,
            "memory_bandwidth_gbs (node)": figures[f"copy_gbs_{cores}thread"],
            "link_bandwidth_gbs": figures["gloo_broadcast_gbs"],
            "collective_s": figures["gloo_allreduce_s_median"],
            "train_eff": figures["train_small_flops"] / figures["train_small_s"] / peak1,
            "micro_batch_s": figures["train_tiny_s"],
            "forward_eff": figures["forward_small_flops"] / figures["forward_small_s"] / peak1,
            "forward_s": figures["forward_tiny_s"],
            "prefill_eff": figures["prefill_small_b64_flops"] / figures["prefill_small_b64_s"] / peak1,
            "decode_step_s": figures["decode_tiny_b1_step_s"],
            "decode_flop_eff": figures["decode_small_b64_step_flops"]
            / max(figures["decode_small_b64_step_s"] - figures["decode_tiny_b1_step_s"], 1e-9) / peak1,
        })
        if "ray_call_s_median" in figures:
            derived["call_s"] = figures["ray_call_s_median"]
            derived["step_s"] = figures["pipeline_step_s_median"]
    print(f"cost probe, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cores} core(s), load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after")
    for k, v in figures.items():
        print(f"  {k:<34} {v:.4g}")
    print("constants (rlhf/planning/cost.py CPU, conf/hardware/cpu.yaml):")
    for k, v in derived.items():
        print(f"  {k:<34} {v:.4g}")
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": figures, "derived": derived, "load": [load0, load1]}))


if __name__ == "__main__":
    sys.exit(main())
