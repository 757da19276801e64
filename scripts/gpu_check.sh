#!/usr/bin/env bash
# The first thing to run on a GPU machine (one GPU is enough; meant to take under 10 minutes on one H200), after
#   pip install -e ".[vllm]"        (or inside docker/Dockerfile.gpu's image)
# One line per check; the first failure stops it with exit status 1. What it checks, in order:
#   0. a two-step one-process GRPO on the local executor (launch.executor=local): FSDP2 and an hf engine beside the
#      policy in the driver's own process, bf16, a weight sync between them every step. It needs torch,
#      transformers and rlhf's pure-Python dependencies only (no Ray, vLLM or DeepSpeed), so it runs first: on an
#      image without those, `bash scripts/gpu_check.sh` passes it and then stops at step 1 naming what is missing
#  0b. sequence parallelism (scripts/gpu_sp_check.py; torch + transformers, flash-attn when installed): the Ulysses
#      kernels on CUDA tensors (ulysses_sdpa fp32/bf16, ulysses_flash_attention_2 bf16) against attention within each
#      sample, then two ranks against the one-process packed forward (nccl with 2+ GPUs; with one GPU both ranks on
#      it over gloo, as NCCL refuses two ranks on one device)
#  0c. the training side of sequence parallelism (scripts/gpu_sp_engine_check.py; torch + transformers): the chunked
#      log-prob head against the whole logits (fp32, bf16) and their peak CUDA memory at 16k tokens x 152k vocabulary;
#      with 2+ GPUs the FSDP2 engine with trainer.sequence_parallel_size=2 on two ranks against one rank without it
#   1. versions: torch + CUDA + GPU, vllm within the supported range, deepspeed, ray, transformers
#   2. the vLLM APIs the engine calls, by signature (LLM.sleep/wake_up/collective_rpc, reload_weights, the
#      SamplingParams and engine arguments it passes, the Ray executor's VLLM_RAY_* variables)
#   3. the weight-sync transport with torch alone (scripts/gpu_transport_check.py): CUDA IPC, also with the
#      receiver's CUDA_VISIBLE_DEVICES given as the device's UUID (as Ray can), and the broadcast route
#   4. a real VLLMEngine on a tiny tied Qwen2 model with sleep mode and CUDA graphs at 0.3 memory utilisation:
#      generate, sleep, wake, sync new weights, the probe telling new weights from stale (scripts/gpu_engine_check.py)
#   5. a two-step GRPO run, colocated (hybrid engine), DeepSpeed ZeRO-3 with FusedAdam, the probe after every sync
# Usage: bash scripts/gpu_check.sh        (PYTHON=... to pick the interpreter)
# Written against the public APIs of vllm 0.32/0.33 and torch 2.14; it has not run yet (no GPU was available when
# it was written): expect to fix small things the first time.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
start=$SECONDS
step() {  # step NAME TIMEOUT_S CMD...: one line, stop at the first failure
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS log
  log=$(mktemp)
  if timeout "$limit" "$@" >"$log" 2>&1; then
    echo "ok   $name ($((SECONDS - t0)) s)"
    sed 's/^/       /' "$log"
  else
    echo "FAIL $name ($((SECONDS - t0)) s; log: $log)"
    tail -30 "$log" | sed 's/^/       /'
    exit 1
  fi
}

local_out=$(mktemp -d)
step "one-process GRPO: local executor, FSDP2, hf engine (bf16)" 300 "$PY" -m rlhf.cli.run +recipe=grpo_tiny_cpu \
  hardware=1xh100 trainer=default trainer.backend=fsdp2 trainer.precision=bf16 trainer.optimizer=adamw rollout=hf \
  launch.executor=local model.architecture=qwen2 trainer.max_steps=2 eval.steps=0 logging=console \
  logging.progress=false hydra.run.dir="$local_out"
"$PY" - "$local_out/metrics.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "train/policy_loss" in r]
assert [r["step"] for r in steps] == [1, 2], f"steps logged: {[r['step'] for r in steps]}"
for r in steps:
    assert r["train/logprobs_diff"] < 1e-2, r["train/logprobs_diff"]  # the engine sampled with the trained weights
    print(f"       step {r['step']}: policy loss {r['train/policy_loss']:.4f}, sync {r['train/timing/broadcast']:.3f} s, "
          f"trainer/engine log-prob diff {r['train/logprobs_diff']:.2e}")
PYEOF
[ $? -eq 0 ] || { echo "FAIL one-process GRPO metrics (run folder: $local_out)"; exit 1; }

step "sequence parallelism: Ulysses kernels and two ranks" 420 "$PY" scripts/gpu_sp_check.py

step "sequence parallelism: chunked log-probs, FSDP2 engine" 420 "$PY" scripts/gpu_sp_engine_check.py

step "versions" 120 "$PY" - <<'PYEOF'
import importlib.metadata as md
import torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
from rlhf.backends.rollout.vllm.version import check_vllm_version, VLLM_SUPPORTED
print(f"vllm {check_vllm_version()} (supported: vllm{','.join(VLLM_SUPPORTED)})")
for dist in ("deepspeed", "ray", "transformers"):
    print(f"{dist} {md.version(dist)}")
PYEOF

step "vLLM signatures the engine uses" 300 "$PY" - <<'PYEOF'
import inspect
import vllm
from vllm import LLM, SamplingParams
from vllm.engine.arg_utils import EngineArgs
import vllm.envs as envs

def params(fn):
    return set(inspect.signature(fn).parameters)

assert "level" in params(LLM.sleep), "LLM.sleep(level)"
assert "tags" in params(LLM.wake_up), "LLM.wake_up(tags)"
assert {"method", "args", "kwargs"} <= params(LLM.collective_rpc), "LLM.collective_rpc(method, args, kwargs)"
assert "reset_prefix_cache" in dir(LLM)
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
assert {"weights_iterator", "weights_path", "is_checkpoint_format"} <= params(GPUModelRunner.reload_weights), \
    "GPUModelRunner.reload_weights(weights_iterator, weights_path, is_checkpoint_format)"
fields = set(getattr(SamplingParams, "__struct_fields__", ())) or params(SamplingParams)
for f in ("logprobs", "prompt_logprobs", "flat_logprobs", "extra_args", "seed", "detokenize", "min_tokens"):
    assert f in fields, f"SamplingParams.{f}"
engine_fields = {f.name for f in __import__("dataclasses").fields(EngineArgs)}
for f in ("logprobs_mode", "logits_processors", "worker_extension_cls", "enable_sleep_mode",
          "distributed_executor_backend", "kv_cache_memory_bytes"):
    assert f in engine_fields, f"EngineArgs.{f}"
for var in ("VLLM_RAY_BUNDLE_INDICES", "VLLM_RAY_PER_WORKER_GPUS", "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"):
    assert hasattr(envs, var), var
from vllm.v1.executor.ray_utils import get_bundles_for_indices  # the rule rlhf.backends.rollout.vllm.placement follows
print(f"vllm {vllm.__version__}: every API the engine calls is there")
PYEOF

step "weight-sync transport (CUDA IPC incl. UUID, broadcast)" 300 "$PY" scripts/gpu_transport_check.py \
  --total-mb 2048 --visible-as-uuid

step "VLLMEngine: tied Qwen2, sleep mode, CUDA graphs" 300 "$PY" scripts/gpu_engine_check.py

out=$(mktemp -d)
mem=$("$PY" -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory / 2**30))")
step "two-step GRPO: hybrid engine, ZeRO-3, FusedAdam" 480 "$PY" -m rlhf.cli.run +recipe=grpo_tiny_cpu \
  hardware=1xh200 hardware.device_memory_gb="$mem" trainer=default trainer.zero_stage=3 trainer.optimizer=fused_adam \
  rollout=vllm rollout.vllm.gpu_memory_utilization=0.3 model.architecture=qwen2 model.tie_word_embeddings=true \
  rollout.verify_sync_every=1 trainer.max_steps=2 eval.steps=0 logging.mlflow=false logging.progress=false \
  hydra.run.dir="$out"
"$PY" - "$out/metrics.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "train/timing/broadcast" in r]
assert len(steps) == 2, f"{len(steps)} steps logged"
for r in steps:
    print(f"       step {r['step']}: sync {r['train/timing/broadcast']:.2f} s, probe diff "
          f"{r.get('rollout/sync_logprob_diff_mean', float('nan')):.2e}, moved {r.get('rollout/sync_logprob_moved', float('nan')):.2e}")
PYEOF
[ $? -eq 0 ] || { echo "FAIL two-step GRPO metrics (run folder: $out)"; exit 1; }
echo "gpu_check: every check passed in $((SECONDS - start)) s"
