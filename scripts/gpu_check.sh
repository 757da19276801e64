#!/usr/bin/env bash
# GPU checks of the weight sync, in two parts, each under 5 minutes on one GPU.
#   (a) transport: torch alone (a bare GPU machine, no vllm/deepspeed/ray): CUDA IPC and the broadcast route between
#       two processes, bucket by bucket, checksums and digests verified, GB/s next to the device's copy bandwidth.
#   (b) end to end, on a machine with the vllm extra (pip install -e ".[vllm]"): a tiny GRPO job on the GPU with
#       each route, printing the sync time and the log-prob probe of every sync.
# Usage: bash scripts/gpu_check.sh [a|b|all]   (default: a, then b when vllm, deepspeed and ray import)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
part=${1:-all}
status=0
if [[ "$part" == a || "$part" == all ]]; then
  echo "== (a) weight-sync transport on the GPU (torch only)"
  timeout 300 "$PY" scripts/gpu_transport_check.py || status=1
fi
if [[ "$part" == b || "$part" == all ]]; then
  if ! "$PY" -c "import vllm, deepspeed, ray" 2>/dev/null; then
    echo "== (b) skipped: vllm, deepspeed and ray are not all installed here (pip install -e '.[vllm]')"
  else
    echo "== (b) tiny GRPO on the GPU with each weight-sync route"
    # One GPU: NCCL refuses two ranks on one device, so the broadcast route uses gloo with CUDA tensors there.
    backend=""; [[ $("$PY" -c "import torch; print(torch.cuda.device_count())") -lt 2 ]] && backend="rollout.weight_sync_backend=gloo"
    for route in shared_memory broadcast object_store; do
      out=$(mktemp -d)
      timeout 240 "$PY" -m rlhf.cli.run +recipe=grpo_tiny_cpu hardware=1xh200 trainer=default trainer.optimizer=adamw \
        rollout=vllm rollout.weight_sync=$route $backend rollout.verify_sync_every=1 trainer.max_steps=3 \
        logging.mlflow=false logging.progress=false hydra.run.dir="$out" >"$out/log" 2>&1 || { echo "FAIL $route (log: $out/log)"; tail -20 "$out/log"; status=1; continue; }
      "$PY" - "$out/metrics.jsonl" "$route" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    if "train/timing/broadcast" in r:
        print(f"  {sys.argv[2]:<14} step {r['step']}: sync {r['train/timing/broadcast']:.3f} s, probe max "
              f"{r.get('rollout/sync_logprob_diff_max', float('nan')):.2e} mean {r.get('rollout/sync_logprob_diff_mean', float('nan')):.2e}")
PYEOF
    done
  fi
fi
exit $status
