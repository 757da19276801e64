#!/usr/bin/env python
"""Part of scripts/gpu_check.sh: a real VLLMEngine on one GPU, on a tiny Qwen2-shaped model with tied embeddings,
with sleep mode and CUDA graphs at 0.3 memory utilisation, through what a colocated run does to it:

    generate          sample a batch; log-probs finite, as many as tokens
    sleep 1 / wake    the memory comes back to the device; the same seed samples the same tokens (weights kept)
    sync new weights  perturbed weights in place through the worker extension (reload_weights), then the probe:
                      teacher-forced log-probs match the new model's (transformers, same weights) and moved away
                      from the old ones by more than the probe's tolerance
    sleep 2 / sync    level 2 drops the weights; the weights alone are woken, the sync overwrites them, the KV cache
                      is woken after; the probe still matches the new weights

One line per check ("ok   name  seconds" or "FAIL name: why"); exit status 1 at the first failure. Not run in CI:
it needs a GPU and the `vllm` extra. Written against vllm 0.32/0.33 and torch 2.14 (never run yet: no GPU).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOLERANCE = 0.05  # rollout.verify_sync_tolerance's default
PROMPTS = [[1, 74, 71, 78, 78, 81], [1, 5, 6, 9], [1, 40, 41, 42, 43, 44, 45, 46], [1, 7]]


def line(ok: bool, name: str, detail: str, t0: float) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name:<34} {time.perf_counter() - t0:6.1f} s  {detail}", flush=True)
    if not ok:
        sys.exit(1)


def tiny_tied_qwen2(folder: Path) -> str:
    from dataclasses import replace

    from rlhf.models.tiny import make_tiny_model
    from rlhf.spec.schema import ModelSpec

    spec = replace(
        ModelSpec(),
        name="gpu-check-qwen2",
        make_local=True,
        architecture="qwen2",
        hidden_size=256,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=512,
        tie_word_embeddings=True,
    )
    import os

    os.environ["RLHF_CACHE"] = str(folder)
    return str(make_tiny_model(spec))


def hf_logprobs(model, seqs) -> list[float]:
    import torch

    out = []
    with torch.no_grad():
        for prompt, output in seqs:
            ids = torch.tensor([prompt + output], device="cuda")
            logits = model(input_ids=ids).logits.float()[0, len(prompt) - 1 : -1]
            lp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :].unsqueeze(-1)).squeeze(-1)
            out += lp.tolist()
    return out


def mean_abs(a, b) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / max(len(a), 1)


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from rlhf.backends.contract.rollout import SamplingSpec
    from rlhf.backends.rollout.vllm.engine import VLLMEngine
    from rlhf.backends.weight_sync.wire import pack_weights

    tmp = Path(tempfile.mkdtemp(prefix="rlhf-gpu-check-"))
    path = tiny_tied_qwen2(tmp)
    t0 = time.perf_counter()
    engine = VLLMEngine(
        path,
        gpu_memory_utilization=0.3,
        enable_sleep=True,
        enforce_eager=False,  # CUDA graphs on, as a run has them
        dtype="bfloat16",
        max_model_len=256,
        seed=0,
    )
    line(engine.sleep_supported and not engine.on_cpu, "engine start (sleep mode, CUDA graphs)", path, t0)

    sampling = SamplingSpec(max_new_tokens=16, temperature=1.0, n=2, seed=7)
    t0 = time.perf_counter()
    first = engine.generate(PROMPTS, sampling)
    finite = all(len(r.logprobs) == len(r.output_ids) and all(x == x and x < 1e-6 for x in r.logprobs) for r in first)
    line(len(first) == 8 and finite, "generate", f"{sum(len(r.output_ids) for r in first)} tokens", t0)

    t0 = time.perf_counter()
    before = torch.cuda.mem_get_info()[0]
    engine.sleep(1)
    asleep = torch.cuda.mem_get_info()[0]
    engine.wake()
    again = engine.generate(PROMPTS, sampling)
    same = [r.output_ids for r in again] == [r.output_ids for r in first]
    line(asleep > before and same, "sleep level 1 / wake", f"freed {(asleep - before) / 2**20:.0f} MiB", t0)

    seqs = [(r.prompt_ids, r.output_ids) for r in first if r.output_ids]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    t0 = time.perf_counter()
    old_engine = [x for s in engine.score(seqs) for x in s]
    old_hf = hf_logprobs(model, seqs)
    diff0 = mean_abs(old_engine, old_hf)
    line(diff0 < TOLERANCE, "probe before any sync", f"diff {diff0:.2e}", t0)

    t0 = time.perf_counter()
    with torch.no_grad():
        g = torch.Generator(device="cuda").manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g, device="cuda", dtype=torch.float32).to(p.dtype) * 0.02)
    new = [(n, t.detach()) for n, t in model.state_dict().items()]
    engine.load_packed(pack_weights(new, version=1)[0])  # the object-store route's wire format
    new_engine = [x for s in engine.score(seqs) for x in s]
    new_hf = hf_logprobs(model, seqs)
    diff, moved = mean_abs(new_engine, new_hf), mean_abs(new_engine, old_engine)
    line(diff < TOLERANCE < moved, "sync new weights, probe new vs stale", f"diff {diff:.2e}, moved {moved:.2e}", t0)

    t0 = time.perf_counter()
    engine.sleep(2)
    engine.wake(["weights"])
    engine.load_packed(pack_weights(new, version=2)[0])  # level 2 dropped the weights: the sync overwrites them all
    engine.wake(["kv_cache"])
    after = [x for s in engine.score(seqs) for x in s]
    diff2 = mean_abs(after, new_hf)
    line(diff2 < TOLERANCE, "sleep level 2, wake weights, sync", f"diff {diff2:.2e}", t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
