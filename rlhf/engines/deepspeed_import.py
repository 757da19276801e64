"""``import deepspeed`` without two costs our training never earns back (measured 2026-12-01 on the 2-core CI
machine):

* its autotuner imports mlflow whenever mlflow is installed: about 2.3 s of every training process's start-up;
* on CPU its communication backend JIT-compiles a shared-memory all-reduce op on first use, used only by
  ``inference_all_reduce``, which training never calls: 56 s on a fresh machine (then cached, 0.15 s).
"""

from __future__ import annotations

import sys
from types import ModuleType

SHM_COMM_OP = "deepspeed_shm_comm"


def import_deepspeed() -> ModuleType:
    """The deepspeed module, imported (once per process) without its mlflow import and with the CPU shared-memory
    op marked unbuildable (the backend then reduces through the process group, as it does on platforms without
    it)."""
    loaded = sys.modules.get("deepspeed")
    if loaded is not None:
        return loaded
    hide = "mlflow" not in sys.modules
    if hide:
        sys.modules["mlflow"] = None  # type: ignore[assignment]  # Python's documented "import raises ImportError"
    try:
        import deepspeed
        import deepspeed.ops
    finally:
        if hide and sys.modules.get("mlflow", 0) is None:
            del sys.modules["mlflow"]  # anything later may import the real one
    # A private table, written on purpose: DeepSpeed (0.19.8) has no public switch for this op. TorchBackend's
    # __init__ calls deepspeed.comm.torch.build_shm_op(), which JIT-builds the op whenever this table (probed once
    # per process and cached in the module, so the edit holds) says it is compatible; no config key or environment
    # variable reaches it (DS_BUILD_SHM_COMM only selects ops to pre-build at pip install time). False here is what
    # the probe says on platforms without it, so the backend takes its process-group path.
    deepspeed.ops.__compatible_ops__[SHM_COMM_OP] = False
    return deepspeed
