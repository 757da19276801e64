"""``import deepspeed`` without two costs our training never earns back (measured 2026-12-01 on the 2-core CI
machine):

* its autotuner imports mlflow whenever mlflow is installed: about 2.3 s of every training process's start-up;
* on CPU its communication backend JIT-compiles a shared-memory all-reduce op on first use, used only by
  ``inference_all_reduce``, which training never calls: 56 s on a fresh machine (then cached, 0.15 s);

and without its warning "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to
detect it." in a process that has no accelerator: there DeepSpeed's own switch ``DS_ACCELERATOR=cpu`` names what
its probe falls back to anyway (the workers of a CPU plan get it from rlhf.launch.cluster already).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from types import ModuleType

SHM_COMM_OP = "deepspeed_shm_comm"
# What DeepSpeed's accelerator probe looks for before CUDA (deepspeed/accelerator/real_accelerator.py): with any of
# them installed the probe may find a device, so it is left to probe.
_OTHER_ACCELERATOR_PACKAGES = (
    "intel_extension_for_pytorch",
    "torch_npu",
    "torch_sdaa",
    "torch_supa",
    "torch_xmlir",
    "habana_frameworks",
    "torch_mlu",
)


def _no_accelerator() -> bool:
    import torch

    if torch.cuda.device_count() > 0:
        return False
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return False
    return not any(importlib.util.find_spec(name) for name in _OTHER_ACCELERATOR_PACKAGES)


def _quiet_op_probe() -> None:
    # Reading deepspeed.ops.__compatible_ops__ probes every op, async_io's by compiling and linking a C program with
    # distutils, which logs each gcc command at INFO on the logger below: on the local executor that logger's
    # handler is the driver's console (Hydra's), so the probe would print two gcc lines in the middle of a run.
    logging.getLogger("compilers.C.base").setLevel(logging.WARNING)


def import_deepspeed() -> ModuleType:
    """The deepspeed module, imported (once per process) without its mlflow import and with the CPU shared-memory
    op marked unbuildable (the backend then reduces through the process group, as it does on platforms without
    it). MLflow is hidden for the import's duration: a thread of the same process importing MLflow meanwhile would
    be told it is not installed, so a process that also opens MLflow imports it first (rlhf.launch.local)."""
    _quiet_op_probe()
    loaded = sys.modules.get("deepspeed")
    if loaded is not None:  # imported already (transformers' own import of it, in the local executor's process)
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__[SHM_COMM_OP] = False  # in time: the op is built when comm starts
        return loaded
    if "DS_ACCELERATOR" not in os.environ and _no_accelerator():
        os.environ["DS_ACCELERATOR"] = "cpu"
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
