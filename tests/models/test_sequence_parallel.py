"""Sequence parallelism (rlhf.models.sequence_parallel): splitting packed rows over ranks and putting the outputs
back is exact, the sample layout is the one packing and transformers use, the ranks' loss shares sum to the unsplit
loss, the Ulysses attention equals attention within each sample (ranks simulated by threads, one process), the
model keeps its own attention outside the context, and two gloo ranks reproduce the one-process packed forward's
log-probs, gradients and critic values (the Ray tier: several processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ceilings import ceiling
from sp_ranks import CASES, model_spec
from transformers.masking_utils import find_packed_sequence_indices

from rlhf.models.loading import load_causal_lm, resolve_model_path
from rlhf.models.packing import pack
from rlhf.models.sequence_parallel import (
    head_errors,
    loss_scale,
    loss_share,
    model_errors,
    pack_actions,
    sequence_parallel,
    shard_packed,
    ulysses_attention,
)
from rlhf.models.sequence_parallel.attention import ulysses_sdpa
from rlhf.models.sequence_parallel.context import SPContext, activated
from rlhf.models.sequence_parallel.layout import sample_ids, sample_layout
from rlhf.models.sequence_parallel.simulate import reference_attention, simulated_attention
from rlhf.spec.schema import ModelSpec

HERE = Path(__file__).parent
LENGTHS = [7, 30, 3, 12, 1, 18, 5]  # uneven; 76 tokens, odd sample lengths


def _padded(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), 9, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n], mask[i, :n] = torch.randint(0, 256, (n,), generator=g), 1
    return ids, mask


def _packed(varlen: bool, lengths: list[int] = LENGTHS):
    ids, mask = _padded(lengths)
    return ids, mask, pack(ids, mask, varlen=varlen)


@pytest.mark.parametrize("varlen", [True, False], ids=["one_row", "rows"])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_the_ranks_columns_put_back_together_are_the_rows_and_the_pad_continues_the_last_sample(varlen, size):
    _, _, packed = _packed(varlen)
    rows, width = packed.input_ids.shape
    shards = [shard_packed(packed, size=size, rank=r) for r in range(size)]
    pad = shards[0].pad
    assert (width + pad) % size == 0 and pad < size
    assert torch.equal(shards[0].join([s.input_ids for s in shards]), packed.input_ids)
    assert torch.equal(shards[0].join([s.local_position_ids for s in shards]), packed.position_ids)
    padded_positions = torch.cat([s.local_position_ids for s in shards], dim=1)
    assert torch.equal(padded_positions, shards[0].position_ids)
    tail = padded_positions[:, width - 1 :]  # the last column and the pad: one sample, positions counting on
    assert torch.equal(tail, tail[:, :1] + torch.arange(pad + 1))
    x = torch.randn(rows, width - 1, 3)  # an action-aligned tensor with a trailing dimension
    assert torch.equal(shards[0].join([s.take(x) for s in shards])[:, : width - 1], x)
    assert {s.input_ids.shape[1] for s in shards} == {(width + pad) // size}


@pytest.mark.parametrize("varlen", [True, False], ids=["one_row", "rows"])
def test_targets_are_the_next_token_taken_on_the_whole_row_before_slicing(varlen):
    _, _, packed = _packed(varlen)
    width = packed.input_ids.shape[1]
    shards = [shard_packed(packed, size=3, rank=r) for r in range(3)]
    targets = torch.cat([s.targets for s in shards], dim=1)
    valid = torch.cat([s.valid for s in shards], dim=1)
    assert torch.equal(targets[:, : width - 1], packed.input_ids[:, 1:])
    # a rank's last column predicts the next rank's first token: no rank needs its neighbour's columns
    assert torch.equal(shards[0].targets[:, -1], shards[1].input_ids[:, 0])
    assert not valid[:, width - 1 :].any(), "the pad and each row's last column predict nothing"
    real_predictions = sum(n - 1 for n in LENGTHS)
    assert int(valid.sum()) == shards[0].tokens == real_predictions


def test_pack_actions_is_the_inverse_of_unpack_shifted():
    ids, mask, packed = _packed(varlen=False)
    x = torch.randn(ids.shape[0], ids.shape[1] - 1)
    action_mask = mask[:, 1:] * mask[:, :-1]
    torch.testing.assert_close(packed.unpack_shifted(pack_actions(packed, x)), x * action_mask, atol=0, rtol=0)


@pytest.mark.parametrize("varlen", [True, False], ids=["one_row", "rows"])
def test_the_sample_layout_is_packings_samples_by_transformers_rule(varlen):
    _, _, packed = _packed(varlen)
    width = packed.input_ids.shape[1]
    layout = sample_layout(packed.position_ids)
    # packing's samples: each sample's packed columns; a row's tail belongs to the row's last sample
    starts = packed.dst_col[packed.position_ids[packed.dst_row, packed.dst_col] == 0]
    rows_of = packed.dst_row[packed.position_ids[packed.dst_row, packed.dst_col] == 0]
    expected = []
    for r in range(packed.input_ids.shape[0]):
        begins = sorted(int(c) for c in starts[rows_of == r])
        expected += [(r, b, e) for b, e in zip(begins, [*begins[1:], width], strict=True)]
    assert list(layout.spans) == expected
    transformers_ids = find_packed_sequence_indices(packed.position_ids)
    ours = sample_ids(packed.position_ids)
    assert torch.equal(ours, transformers_ids if transformers_ids is not None else torch.zeros_like(ours))


def test_sdpa_chunks_cover_every_column_and_merge_short_samples_only():
    positions = torch.cat([torch.arange(n) for n in (3, 4, 40, 2, 2, 9)])[None]
    layout = sample_layout(positions, chunk_tokens=8)
    assert [(c.start, c.end, c.mask is None) for c in layout.chunks] == [
        (0, 7, False),  # 3 + 4 merged, masked
        (7, 47, True),  # longer than a chunk: alone, plain causal
        (47, 51, False),
        (51, 60, True),  # 9 > 8 tokens: alone
    ]
    tril = [torch.ones(n, n, dtype=torch.bool).tril() for n in (3, 4)]
    assert torch.equal(layout.chunks[0].mask, torch.block_diag(*tril)), "causal within each sample, none across"
    assert layout.cu_seqlens.tolist() == [0, 3, 7, 47, 49, 51, 60] and layout.max_seqlen == 40


def test_the_ranks_loss_shares_sum_to_the_unsplit_token_mean():
    _, _, packed = _packed(varlen=True)
    width = packed.input_ids.shape[1]
    token_loss = torch.randn(1, width - 1, dtype=torch.float64)
    shards = [shard_packed(packed, size=4, rank=r) for r in range(4)]
    valid = torch.cat([s.valid for s in shards], dim=1)[:, : width - 1]
    unsplit = (token_loss * valid).sum() / valid.sum()
    shares = [loss_share((s.take(token_loss) * s.valid).sum(), s.tokens) for s in shards]
    torch.testing.assert_close(sum(shares), unsplit, atol=1e-15, rtol=0)
    assert loss_scale(4, "world") == 4 and loss_scale(4, "dp") == 1
    with pytest.raises(ValueError, match="'world' or 'dp'"):
        loss_scale(2, "sp")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("heads", "kv_heads", "size"),
    [(4, 2, 2), (4, 1, 2), (4, 4, 2), (4, 1, 4), (8, 2, 4), (6, 3, 3)],
    ids=["gqa", "mqa_repeated", "mha", "mqa_4_ranks", "gqa_4_ranks", "3_ranks"],
)
def test_ulysses_attention_equals_attention_within_each_sample(heads, kv_heads, size):
    lengths = [5, 1, 14, 3, 2, 7]  # 32 columns, +1 pad continuing the last sample for 3 ranks
    width = sum(lengths) + (-sum(lengths) % size)
    positions = torch.cat([torch.arange(n) for n in lengths[:-1]] + [torch.arange(width - sum(lengths[:-1]))])
    positions = torch.stack([positions, positions.roll(7)])  # two rows, their samples in other places
    layout = sample_layout(positions, chunk_tokens=8)  # masked chunks and plain ones
    g = torch.Generator().manual_seed(size)
    q, k, v = (
        torch.randn(2, h, width, 8, generator=g, dtype=torch.float64, requires_grad=True)
        for h in (heads, kv_heads, kv_heads)
    )
    out = simulated_attention(q, k, v, layout, size)
    ref = reference_attention(q, k, v, layout)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    weights = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref * weights).sum(), (q, k, v))
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


@pytest.fixture(scope="module")
def lm():
    return load_causal_lm(resolve_model_path(ModelSpec(make_local=True)), attn="sdpa")  # 2 heads, 2 kv heads


def test_outside_the_context_the_model_keeps_its_own_attention(lm):
    ids, mask, packed = _packed(varlen=True)
    with sequence_parallel(lm, shard_packed(packed, size=1, rank=0), group=None) as ctx:
        assert ctx is None and lm.config._attn_implementation == "sdpa", "sp=1 changes nothing"
    with pytest.raises(RuntimeError, match="outside rlhf.models.sequence_parallel.sequence_parallel"):
        with ulysses_attention(lm) as name:
            assert name == "ulysses_sdpa" and lm.config._attn_implementation == name
            lm(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False)
    assert lm.config._attn_implementation == "sdpa", "restored, also when the forward raised"
    # the model's own packed forward still runs, and still keeps samples apart
    lm(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False)


def test_the_attention_refuses_a_mask_and_sliding_windows(lm):
    layer = lm.model.layers[0].self_attn
    q = torch.zeros(1, 2, 4, 64)
    ctx = SPContext(group=None, size=2, rank=0, layout=sample_layout(torch.arange(8)[None]))
    with activated(ctx):
        with pytest.raises(ValueError, match="got an attention mask"):
            ulysses_sdpa(layer, q, q, q, torch.ones(1, 1, 4, 8, dtype=torch.bool))
        with pytest.raises(ValueError, match="sliding_window=4"):
            ulysses_sdpa(layer, q, q, q, None, sliding_window=4)


def test_models_that_cannot_split_are_refused_naming_heads_and_layer_types(lm):
    assert head_errors(4, 2, 2) == [] and head_errors(4, 1, 4) == [] and head_errors(8, 8, 4) == []
    assert "num_heads=6" in head_errors(6, 2, 4)[0]
    assert "num_kv_heads=3" in head_errors(6, 3, 2)[0]
    from transformers import Qwen2Config

    config = Qwen2Config(num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, max_window_layers=1)
    assert any("sliding_attention" in e for e in model_errors(config, 2))
    _, _, packed = _packed(varlen=True)
    with pytest.raises(ValueError, match="cannot split its rows over 4 ranks: num_heads=2"):
        with sequence_parallel(lm, shard_packed(packed, size=4, rank=0), group=None):
            pass
    assert lm.config._attn_implementation == "sdpa"


def _two_ranks(out: Path) -> list[dict]:
    from rlhf.launch.ports import free_port

    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["OMP_NUM_THREADS"] = "1"
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "sp_ranks.py"), str(out)],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=ceiling(300))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"rank {r} failed:\n{log[-4000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.ray  # two ranks: the tier of several processes (README, Set-up)
def test_two_gloo_ranks_reproduce_the_one_process_packed_forward_and_gradients(tmp_path):
    """tests/models/sp_ranks.py on two ranks, in float64: GQA (kv=2) and MQA (kv=1, repeated), one varlen row and
    several sdpa rows, an odd width that needs a pad column, gradient checkpointing, a critic's values."""
    for kv in {kv for kv, *_ in CASES.values()}:  # made here: on a rank, save_pretrained writes nothing but on rank 0
        resolve_model_path(model_spec(kv))
    ranks = _two_ranks(tmp_path)
    assert ranks[0].keys() == ranks[1].keys() == CASES.keys()
    for rank in ranks:
        for case, r in rank.items():
            assert r["logp"] < 1e-9, (case, r)  # float64: rounding is ~1e-16
            assert r["grad"] < 1e-9 * max(r["grad_scale"], 1), (case, r)
            assert r["restored"], (case, "the model's attention is its own again after the context")
    assert ranks[0]["mqa_kv1_one_row_odd_width"]["pad"] == 1 and ranks[0]["gqa_kv2_rows_odd_width"]["rows"] == 3
    extras = ranks[0]["gqa_kv2_one_row"]
    assert extras["values"] < 1e-9
    assert extras["control_logp"] > 1e-2, "the control (samples allowed to see each other) must differ"
