"""Validation of sequence parallelism (``trainer.sequence_parallel_size``), and how messages show a role's mesh.

A size N > 1 splits each packed row of the policy's, reference's, critic's, reward model's and teacher's forwards
over N ranks (rlhf.models.sequence_parallel: Ulysses, queries, keys and values traded between columns and heads by
an all-to-all). What it needs, each checked here with the key and the fix:

* a training backend whose engines split sequences (its descriptor's ``splits_sequences``);
* every model role's ranks a multiple of N (its mesh is data x sequence: ranks / N data-parallel groups of N);
* the attention heads divisible by N, and the key/value heads dividing N or divisible by it (each rank gets whole
  heads after the all-to-all; fewer kv heads than ranks are repeated), as veRL and DeepSpeed's Ulysses require;
* trainer.packing (each rank takes its columns of the packed rows; OpenRLHF's ring attention and veRL's Ulysses
  require packing too);
* separate rollout engines: generation in the policy's ranks (``rollout.<backend>.in_policy``) runs the model's
  own attention on whole sequences;
* more than one process: the local executor hosts one rank per role.

Models the core refuses (layers that are not full attention: sliding-window, linear attention) cannot be told from
the spec: model.architecture's families (llama, qwen2, qwen3) are full attention in every shipped size, and a
loaded model's ``layer_types`` are checked by the engine before its first forward
(rlhf.models.sequence_parallel.model_errors). The head counts of a critic, reward model or teacher loaded from
another folder are checked there too; the spec has the policy's (model.num_heads, model.num_kv_heads).

Pure: no torch.
"""

from __future__ import annotations

from typing import Any

from rlhf.spec import registry
from rlhf.spec.derive import MODEL_ROLES, Derived
from rlhf.spec.rollout_backend_rules import generates_in_policy
from rlhf.spec.schema import ExperimentSpec

Problem = tuple[str, Any, str]
KEY = "trainer.sequence_parallel_size"


def splitting_backends() -> list[str]:
    """The registered training backends whose engines split sequences (``splits_sequences``), alphabetically."""
    out = []
    for name in sorted(registry.TRAIN_BACKENDS):
        try:
            backend = registry.train_backend(name)
        except (ImportError, ValueError):  # a plug-in line that does not load: the key's own check names it
            continue
        if getattr(backend, "splits_sequences", False):
            out.append(name)
    return out


def data_parallel_text(spec: ExperimentSpec, d: Derived, role: str) -> str:
    """A role's data-parallel size as messages show it: ``8`` with every rank data-parallel, else the mesh that
    makes it, ``policy devices (8) / trainer.sequence_parallel_size (2) = 4``."""
    mesh = d.mesh.get(role)
    dp = d.data_parallel(role)
    if mesh is None or mesh.sequence == 1:
        return str(dp)
    return f"{role} devices ({mesh.ranks}) / {KEY} ({mesh.sequence}) = {dp}"


def allowed_sizes(num_heads: int, num_kv_heads: int) -> list[int]:
    """The sequence sizes heads of these counts split over: dividing the heads, and dividing the kv heads or
    divisible by them."""
    return [
        n for n in range(1, num_heads + 1) if num_heads % n == 0 and (num_kv_heads % n == 0 or n % num_kv_heads == 0)
    ]


def head_problems(num_heads: int, num_kv_heads: int, sp: int) -> list[str]:
    """What keeps heads of these counts from splitting over ``sp`` ranks (rlhf.models.sequence_parallel's
    ``head_errors``, without importing torch)."""
    out = []
    allowed = f"sizes this model allows: {', '.join(map(str, allowed_sizes(num_heads, num_kv_heads)))}"
    if num_heads % sp:
        out.append(
            f"model.num_heads ({num_heads}) must be divisible by it (each rank takes num_heads / N heads after the "
            f"all-to-all); {allowed}"
        )
    if num_kv_heads % sp and sp % num_kv_heads:
        out.append(
            f"model.num_kv_heads ({num_kv_heads}) must divide it or be divisible by it (fewer kv heads than ranks are "
            f"repeated, so each rank holds whole ones); {allowed}"
        )
    return out


def _nearest_multiples(n: int, sp: int) -> str:
    low, high = n // sp * sp, (n // sp + 1) * sp
    return f"{low} or {high}" if low else str(high)


def problems(spec: ExperimentSpec, d: Derived) -> list[Problem]:
    """(key, value, fix) for each thing ``trainer.sequence_parallel_size`` > 1 cannot run with (none at 1)."""
    sp = spec.trainer.sequence_parallel_size
    if sp <= 1:
        return []
    out: list[Problem] = []
    name = spec.trainer.backend
    if name in registry.TRAIN_BACKENDS and not getattr(registry.train_backend(name), "splits_sequences", False):
        can = splitting_backends()
        out.append(
            (
                KEY,
                sp,
                f"training backend {name} does not split sequences over ranks: use "
                + (" or ".join(f"trainer.backend={b}" for b in can) if can else "a backend that does")
                + f", or {KEY}=1",
            )
        )
    for group in d.groups:  # colocated roles share their devices: one message per group
        held = [r for r in group if r in MODEL_ROLES]
        n = d.devices.get(held[0], 1) if held else 0
        if held and n % sp:
            who = " and ".join([", ".join(held[:-1]), held[-1]] if len(held) > 1 else held)
            divisors = [k for k in range(1, n + 1) if n % k == 0]
            out.append(
                (
                    KEY,
                    sp,
                    f"the {who} {'have' if len(held) > 1 else 'has'} {n} device(s), not a multiple of {sp} (ranks form "
                    f"groups of {sp}, each splitting one sample): give {'them' if len(held) > 1 else 'it'} "
                    f"{_nearest_multiples(n, sp)} devices (placement.devices.{held[0]}), or a sequence size dividing "
                    f"{n} ({', '.join(map(str, divisors))})",
                )
            )
    m = spec.model
    for fix in head_problems(m.num_heads, m.num_kv_heads, sp):
        out.append((KEY, sp, fix))
    if not spec.trainer.packing:
        out.append(
            (
                KEY,
                sp,
                "needs trainer.packing=true: each rank takes its columns of the packed rows (OpenRLHF's ring attention "
                "and veRL's Ulysses require packing too)",
            )
        )
    if "rollout" in d.roles and generates_in_policy(spec):
        key = f"rollout.{spec.rollout.backend}.in_policy"
        out.append(
            (
                KEY,
                sp,
                f"{key}=true generates in the policy's ranks with the model's own attention over whole sequences: give "
                f"the rollout engines of their own ({key}=false), or {KEY}=1",
            )
        )
    if spec.launch.executor == "local":
        out.append(
            (
                KEY,
                sp,
                f"splits each sample over {sp} ranks, one process each, and launch.executor=local runs one process: "
                "use launch.executor=ray (or auto)",
            )
        )
    return out
