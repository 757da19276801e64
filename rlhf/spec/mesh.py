"""How a model role's ranks are laid out: data x sequence (with room for tensor and pipeline), as its training
backend declares it (rlhf.backends.contract.training.TrainBackend.mesh).

Every count the spec derives from ranks reads the mesh, never the rank count itself: gradient accumulation and the
samples each rank trains on come from the data-parallel size, the memory a rank holds of a sequence from the
sequence size. Here, in spec/, because the derived values (rlhf.spec.derive), validation and the plan use it without
importing a backend; a backend reaches it through the contract, which re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mesh:
    """One role's ranks as dimensions whose product is the rank count. ``data``: ranks that take different samples
    (gradients averaged over them); ``sequence``: ranks that split each sample's tokens between them (Ulysses:
    every rank of a sequence group gets the same micro-batches); ``tensor`` and ``pipeline``: room for backends
    that split the weights' matrices or layers (DeepSpeed AutoTP, Megatron), 1 for every backend today."""

    data: int = 1
    sequence: int = 1
    tensor: int = 1
    pipeline: int = 1

    @property
    def ranks(self) -> int:
        return self.data * self.sequence * self.tensor * self.pipeline

    def describe(self) -> str:
        """``"dp 4"``, ``"dp 2 x sp 2"``: the dimensions above 1 (data always shown)."""
        parts = [f"dp {self.data}"]
        parts += [f"{n} {v}" for n, v in (("sp", self.sequence), ("tp", self.tensor), ("pp", self.pipeline)) if v > 1]
        return " x ".join(parts)


def data_parallel(ranks: int) -> Mesh:
    """Every rank data-parallel (a backend that splits nothing else)."""
    return Mesh(data=max(ranks, 1))


def data_by_sequence(ranks: int, sequence: int) -> Mesh:
    """``sequence`` ranks per sample, the rest data-parallel; a count that does not divide keeps its ranks
    data-parallel (validation names the key; derive still returns numbers)."""
    ranks, sequence = max(ranks, 1), max(sequence, 1)
    if sequence == 1 or ranks % sequence:
        return data_parallel(ranks)
    return Mesh(data=ranks // sequence, sequence=sequence)
