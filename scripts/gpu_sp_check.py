#!/usr/bin/env python
"""Sequence parallelism on a GPU (a step of scripts/gpu_check.sh; torch and transformers only, flash-attn if there).

1. kernels: the Ulysses attention of 2 ranks simulated by threads in this process on CUDA tensors
   (rlhf.models.sequence_parallel.simulate: the all-to-all replaced by an in-process exchange) against attention
   within each sample, forward and gradients: ``ulysses_sdpa``'s chunks in fp32 and bf16, and
   ``ulysses_flash_attention_2``'s ``flash_attn_varlen_func`` call in bf16 when flash-attn is installed;
2. two ranks: tests/models/sp_ranks.py in 2 processes (a tiny Llama, packed rows of uneven samples, GQA and MQA, an
   odd width, gradient checkpointing, a critic) against the one-process packed forward: log-probs, gradients summed
   over the group, values. With 2+ GPUs: nccl, one GPU per rank. With one GPU: NCCL refuses two ranks on one
   device, so both ranks use gloo over CUDA tensors (gloo stages them through the host): the kernels and the CUDA
   code path run, nccl's all-to-all is left to a machine with two GPUs (said in the output). sdpa in fp32, then
   flash-attention 2 in bf16 when installed.

Exit status 1 on any mismatch, with the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rlhf.models.sequence_parallel.attention import flash_kernel, sdpa_kernel  # noqa: E402
from rlhf.models.sequence_parallel.layout import sample_layout  # noqa: E402
from rlhf.models.sequence_parallel.simulate import reference_attention, simulated_attention  # noqa: E402

# Largest |difference| allowed against the reference, by dtype: fp32 kernels differ in summation order only;
# bf16 (8 bits of mantissa) is compared with a reference computed in fp32 from the same bf16 inputs.
ATOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
RANKS_ATOL = {
    "float32": {"logp": 1e-4, "grad": 1e-4, "values": 1e-4},
    "bfloat16": {"logp": 5e-2, "grad": 2e-2, "values": 5e-2},
}
failures: list[str] = []


def has_flash() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def kernel_check(name: str, kernel, dtype: torch.dtype) -> None:
    lengths = [1500, 7, 300, 1, 2000, 287]  # the last sample and 1 pad column continuing it: 4096 columns
    positions = torch.cat([torch.arange(n) for n in lengths[:-1]] + [torch.arange(lengths[-1] + 1)])[None].cuda()
    layout = sample_layout(positions)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(1, h, positions.shape[1], 64, generator=g, device="cuda", dtype=dtype).requires_grad_()
        for h in (8, 2, 2)
    )
    out = simulated_attention(q, k, v, layout, size=2, kernel=kernel)
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = reference_attention(*ref_inputs, layout)
    w = torch.randn(out.shape, generator=g, device="cuda")
    grads = torch.autograd.grad((out.float() * w).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref * w).sum(), ref_inputs)
    diffs = [float((out.detach().float() - ref.detach()).abs().max())] + [
        float((a.float() - b).abs().max()) / max(float(b.abs().max()), 1.0)
        for a, b in zip(grads, ref_grads, strict=True)
    ]
    ok = max(diffs) < ATOL[dtype]
    print(
        f"{'ok  ' if ok else 'FAIL'} kernel {name} {str(dtype)[6:]}: max |out diff| {diffs[0]:.2e}, "
        f"grads (relative) {max(diffs[1:]):.2e} (tolerance {ATOL[dtype]:.0e})"
    )
    if not ok:
        failures.append(f"kernel {name} {dtype}")


def two_ranks(dtype: str, attn: str) -> None:
    from rlhf.launch.ports import free_port
    from rlhf.models.loading import resolve_model_path

    sys.path.insert(0, str(REPO / "tests" / "models"))
    from sp_ranks import CASES, model_spec

    for kv in {c[0] for c in CASES.values()}:  # made here: save_pretrained writes nothing on a rank other than 0
        resolve_model_path(model_spec(kv))
    gpus = torch.cuda.device_count()
    backend = "nccl" if gpus >= 2 else "gloo"
    out = Path(tempfile.mkdtemp())
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "SP_BACKEND": backend,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),  # rlhf from here
    }
    cmd = [sys.executable, str(REPO / "tests" / "models" / "sp_ranks.py"), str(out), "cuda", dtype, attn]
    procs = [
        subprocess.Popen(
            cmd,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    try:
        logs = [p.communicate(timeout=240)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise
    where = f"{backend}, {'one GPU per rank' if gpus >= 2 else 'both ranks on the one GPU'}"
    if any(p.returncode for p in procs):
        print(f"FAIL two ranks {attn} {dtype} ({where}):\n{logs[0][-3000:]}\n{logs[1][-3000:]}")
        if gpus < 2:
            print("     (one GPU: both ranks ran gloo over CUDA tensors; if gloo refused them, run this on two GPUs)")
        failures.append(f"two ranks {attn} {dtype}: a rank failed")
        return
    tol = RANKS_ATOL[dtype]
    for r in range(2):
        for case, res in json.loads((out / f"rank{r}.json").read_text()).items():
            grad = res["grad"] / max(res["grad_scale"], 1.0)
            ok = res["logp"] < tol["logp"] and grad < tol["grad"] and res["restored"]
            # the control (samples allowed to see each other) must stand far above the split run's own error
            leak = res.get("control_logp", 1.0)
            ok = ok and res.get("values", 0.0) < tol["values"] and leak > max(1e-2, 3 * res["logp"])
            if r == 0 or not ok:
                extra = (
                    f", values {res['values']:.1e}, leaky control {res['control_logp']:.1e}" if "values" in res else ""
                )
                print(
                    f"{'ok  ' if ok else 'FAIL'} two ranks {attn} {dtype} ({where}) rank {r} {case}: "
                    f"logp {res['logp']:.1e}, grads (relative) {grad:.1e}{extra}"
                )
            if not ok:
                failures.append(f"two ranks {attn} {dtype} {case}")
    if gpus < 2:
        print("     (one GPU: nccl's all-to-all between two GPUs was not run; it needs a machine with two)")


def main() -> None:
    assert torch.cuda.is_available(), "torch sees no CUDA device"
    flash = has_flash()
    kernel_check("ulysses_sdpa", sdpa_kernel, torch.float32)
    kernel_check("ulysses_sdpa", sdpa_kernel, torch.bfloat16)
    if flash:
        kernel_check("ulysses_flash_attention_2", flash_kernel, torch.bfloat16)
    else:
        print("skip kernel ulysses_flash_attention_2: flash-attn is not installed")
    two_ranks("float32", "sdpa")
    if flash:
        two_ranks("bfloat16", "flash_attention_2")
    if failures:
        print(f"sequence parallelism: {len(failures)} check(s) failed: {failures}")
        sys.exit(1)


if __name__ == "__main__":
    main()
