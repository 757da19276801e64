"""The loss-scale rule of sequence parallelism, as pure helpers.

Every rank of a sequence-parallel (SP) group holds the same micro-batch and computes the outputs of its own columns
only. Its loss is its columns' share of the micro-batch's loss: the sum over its own valid columns divided by the
token count of the *whole* micro-batch (:func:`loss_share`). The count is taken on the whole rows before slicing
(``SequenceShard.tokens``: every SP rank has the same) and summed over the data-parallel (DP) ranks only
(:func:`dp_token_count`): the SP ranks of a group hold one micro-batch between them and must not count it ``sp``
times. The shares of a group sum to the unsplit loss, so the unsplit loss's gradient is the **sum** over the SP
group of the ranks' gradients, and the step's gradient is that sum **averaged** over the DP ranks.

Engines average gradients over ranks; :func:`loss_scale` is the factor that makes their average the one above.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.distributed as dist
from torch import Tensor

Reduction = Literal["world", "dp"]


def loss_share(local_sum: Tensor, tokens: Tensor | float) -> Tensor:
    """This SP rank's share of a token-mean loss: ``Σ_{its valid columns} loss_t / tokens``, ``tokens`` counted on
    the whole micro-batch (and summed over DP ranks: :func:`dp_token_count`). The SP ranks' shares sum to the unsplit
    ``Σ_t loss_t / tokens``. Sequence-level weights (seq-mean-token-mean and the like) are computed on the whole rows
    and sliced with ``SequenceShard.take``; the same rule then holds with those weights in the sum."""
    return local_sum / tokens


def dp_token_count(tokens: int | float, dp_group=None, device: torch.device | str = "cpu") -> Tensor:
    """The micro-batch's whole-row token count summed over the DP ranks of ``dp_group`` (None: this rank alone).
    Never over the SP group: its ranks hold the same rows."""
    count = torch.tensor(float(tokens), device=device)
    if dp_group is not None and dist.get_world_size(dp_group) > 1:
        dist.all_reduce(count, group=dp_group)
    return count


def loss_scale(sp: int, averaged_over: Reduction) -> int:
    """The factor to multiply each rank's :func:`loss_share` by before ``backward`` so that the engine's gradient
    reduction yields the sum over the SP group averaged over the DP group.

    ``averaged_over``: what the engine divides the summed gradients by.

    * ``"world"``: every rank counts as data-parallel (DeepSpeed without an ``mpu``; FSDP2 ``fully_shard`` over the
      whole world, whose default divide factor is the world size ``dp * sp``). The all-reduce sums over all
      ``dp * sp`` ranks and divides by ``dp * sp``, so the SP sum comes out divided by ``sp``: multiply by ``sp``.
      (DeepSpeed also needs ``train_batch_size`` counted per rank then: ``train_batch * sp``.)
    * ``"dp"``: the engine divides by the DP size only (DeepSpeed given an ``mpu`` with
      ``get_sequence_parallel_group``/``..._world_size``/``..._rank`` and the ``get_sequence_data_parallel_*``
      trio, whose ZeRO divides by ``world / sp``; FSDP2 after ``model.set_gradient_divide_factor(dp)``): ``1``.
    """
    if sp < 1:
        raise ValueError(f"sequence-parallel size {sp}")
    if averaged_over == "world":
        return sp
    if averaged_over == "dp":
        return 1
    raise ValueError(f"averaged_over={averaged_over!r}: 'world' or 'dp'")
