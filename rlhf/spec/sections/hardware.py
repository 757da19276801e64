"""``hardware.*``: what the cluster has, and the figures the cost model reads."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec import names
from rlhf.spec.keys import key


@dataclass(frozen=True)
class HardwareSpec:
    """conf/hardware/*.yaml: what the cluster has. On CPU a 'device' is one worker slot of a few cores."""

    name: str = key("cpu", "hardware option name (informational)", nonempty=True)
    accelerator: str = key("cpu", "device kind", choices=names.ACCELERATORS)
    device_type: str = key("cpu", "h100 | h200 | a100_80g | cpu (informational)", nonempty=True)
    nodes: int = key(1, "nodes of the cluster", ge=1)
    devices_per_node: int = key(1, "devices (GPUs, or CPU worker slots) per node", ge=1)
    # Upper bounds far above any machine: a value past them is a typo, and it would overflow the plan's arithmetic.
    device_memory_gb: float = key(16.0, "memory per device (GPU memory, or the RAM share of a CPU slot)", gt=0, le=1e6)
    cpus_per_node: int = key(2, "CPU cores per node", ge=1)
    host_memory_gb: float = key(24.0, "host memory per node", gt=0, le=1e6)
    bf16: bool = key(False, "native bf16 (on CPU bf16 works but is slower than fp32)")
    # Device facts for the cost model of ``rlhf-plan --auto`` (rlhf.planning.cost): peak rates from the vendor's
    # datasheet on GPUs, measured on CPU (bench/cost_probe.py); the model's own efficiency constants turn them into
    # achieved rates. On CPU hardware a "device" is a slot of the node's cores, and these are the whole node's
    # figures: each of the devices_per_node slots gets its share. The defaults are conf/hardware/cpu.yaml's.
    device_tflops: float = key(
        0.46,
        "dense 16-bit (bf16/fp16) TFLOP/s per device without sparsity (datasheet; CPU: measured bf16 matmul)",
        gt=0,
    )
    device_tflops_fp32: float = key(
        0.19,
        "dense fp32 TFLOP/s per device, what fp32 training runs at (GPUs: the FP32 rate, since torch leaves TF32 "
        "off for matmuls by default; CPU: measured fp32 matmul)",
        gt=0,
    )
    memory_bandwidth_gbs: float = key(
        13.0, "device memory bandwidth, GB/s (datasheet HBM figure; CPU: measured, bytes read plus written)", gt=0
    )
    link_bandwidth_gbs: float = key(
        3.3,
        "device-to-device bandwidth within a node, GB/s per device and direction (NVLink; CPU: a measured gloo "
        "broadcast over loopback)",
        gt=0,
    )
    network_bandwidth_gbs: float = key(
        1.25, "bandwidth between nodes, GB/s per node and direction (the node's NICs together)", gt=0
    )
    host_link_gbs: float = key(
        13.0,
        "host-to-device bandwidth, GB/s per device and direction, what offloaded states cross (PCIe; CPU: the host "
        "is the device, a measured memcpy)",
        gt=0,
    )
