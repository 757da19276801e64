"""``import deepspeed`` without two costs our training never earns back (measured 2026-12-01 on the 2-core CI
machine):

* its autotuner imports mlflow whenever mlflow is installed: about 2.3 s of every training process's start-up;
* on CPU its communication backend JIT-compiles a shared-memory all-reduce op on first use, used only by
  ``inference_all_reduce``, which training never calls: 56 s on a fresh machine (then cached, 0.15 s);
* its table of compatible ops, probed for every op on first read, which compiles and links a C program for
  async_io with the process's stderr (file descriptor 2) pointed at a temporary file: on the local executor that
  read runs on a thread beside the driver's console, whose lines printed meanwhile were lost (a run's
  ``checkpoint.init_from:`` line, among others); the table here probes an op when something asks for it;

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


class _OpsProbedOnRead(dict):
    """DeepSpeed's table of compatible ops (``deepspeed.ops.__compatible_ops__``, op name -> bool) probing an op
    the first time it is read (DeepSpeed's own ``probe_is_compatible``), instead of every op at the table's first
    read: training on CPU reads one entry (the shared-memory op's, set False below), and never async_io's, whose
    probe redirects the process's stderr while it compiles."""

    def __missing__(self, name: str) -> bool:
        from deepspeed.ops.op_builder.all_ops import ALL_OPS
        from deepspeed.ops.op_builder.builder import probe_is_compatible

        builder = ALL_OPS.get(name)
        value = bool(builder is not None and probe_is_compatible(builder))
        self[name] = value
        return value

    def get(self, name: str, default: object = None) -> object:  # DeepSpeed reads entries with .get too
        try:
            return self[name]
        except Exception:  # noqa: BLE001 - a probe that fails means "not compatible", as DeepSpeed's own
            return default


def _mark_ops(ops_module: ModuleType) -> None:
    """The shared-memory op unbuildable, and the other ops probed only when read (:class:`_OpsProbedOnRead`)."""
    table = ops_module.__dict__.get("__compatible_ops__")
    if table is None:  # not probed yet: DeepSpeed computes the table on the module attribute's first read
        table = _OpsProbedOnRead()
        ops_module.__compatible_ops__ = table
    table[SHM_COMM_OP] = False


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

        _mark_ops(deepspeed.ops)  # in time: the op is built when comm starts
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
    # __init__ calls deepspeed.comm.torch.build_shm_op(), which JIT-builds the op whenever this table (computed on the
    # module attribute's first read and cached in the module, so the edit holds) says it is compatible; no config
    # key or environment variable reaches it (DS_BUILD_SHM_COMM only selects ops to pre-build at pip install time).
    # False here is what the probe says on platforms without it, so the backend takes its process-group path.
    _mark_ops(deepspeed.ops)
    return deepspeed
