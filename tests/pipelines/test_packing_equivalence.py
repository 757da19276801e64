"""The same optimizer step, packed into token-budget micro-batches and unpacked in micro-batches of a fixed size,
gives the same gradient: every RL loss aggregation (and OpenRLHF's names for them), the critic, SFT, RM (pairs kept
together) and DPO (chosen and rejected kept together), on each training backend (DeepSpeed ZeRO-2 and FSDP2, one
gloo rank in this process).

The gradient is read where the optimizer would apply it (a pre-step hook on the engine's torch optimizer, clipping
off); the learning rate is 0, so every step starts from the same weights. The packed steps hold a different number
of micro-batches than the fixed-size ones, the engines' ``grad_accum``: the step takes whatever count it is given."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from rlhf.data import collate_preference, collate_sft
from rlhf.models.loading import load_causal_lm, resolve_model_path
from rlhf.models.value_head import load_value_model
from rlhf.pipelines.batching import count_plan, per_rank_micro_batches, token_budget_plan
from rlhf.pipelines.dpo import loss_kwargs, pair_loss_fn
from rlhf.pipelines.experience import ExperienceBatch, rank_micro_batches
from rlhf.pipelines.rl_losses import ActorLossSettings, actor_loss_fn, critic_loss_fn
from rlhf.pipelines.rm import rm_loss_fn
from rlhf.pipelines.sft import row_tokens, sft_loss_fn
from rlhf.pipelines.supervised import PAIR_KEY, pair_tokens
from rlhf.spec.build import load_spec
from rlhf.spec.registry import train_backend

N, MICRO = 8, 2  # samples per step; the fixed micro-batch size (4 micro-batches, the engines' grad_accum)
BUDGET = 64  # tokens per packed micro-batch (samples of 6 to 40 tokens: 5 to 7 micro-batches)
AGGREGATIONS = ["token_mean", "seq_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token-mean"]
AGGREGATIONS += ["seq-mean-token-mean"]


@pytest.fixture(scope="module", autouse=True)
def process_group():

    from rlhf.launch.ports import free_port

    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(free_port())
    with pytest.MonkeyPatch.context() as mp:  # the variables restored after the module
        for k, v in env.items():
            mp.setenv(k, v)
        # DeepSpeed caches a clone of the world group per process (deepspeed.utils.groups, private; no public reset):
        # after an earlier module's group was destroyed it would name a group torch no longer has.
        from rlhf.backends.train.deepspeed.deepspeed_import import import_deepspeed

        import_deepspeed()
        from deepspeed.utils import groups

        groups._WORLD_GROUP = None
        train_backend("deepspeed").init_distributed("cpu")  # gloo, adopted by DeepSpeed; FSDP2 meshes over it
        yield
        from rlhf.backends.shared.distributed import shutdown_distributed

        shutdown_distributed()  # through DeepSpeed, which drops the groups it cached over this one


class Engine:
    """A trained engine of one backend with lr 0, and the gradient of each step it takes."""

    def __init__(self, backend: str, kind: str) -> None:
        spec = load_spec(
            [
                f"trainer.backend={backend}",
                "trainer.precision=fp32",
                "trainer.optimizer=adamw",
                "trainer.max_norm=0",
                "trainer.lr_scheduler=constant",
                "trainer.warmup_ratio=0.0",
                f"trainer.global_batch={N}",
                f"trainer.micro_batch_per_device={MICRO}",
                "trainer.zero_stage=2",
            ]
        )
        path = resolve_model_path(spec.model)

        def load(precision: str):
            torch.manual_seed(0)
            if kind == "causal_lm":
                return load_causal_lm(path, precision=precision)
            return load_value_model(path, "critic", precision=precision, init_value_head=True)

        self.engine = train_backend(backend).build_trained(load, spec, lr=0.0, total_steps=100, grad_accum=N // MICRO)
        optimizer = self.engine.optimizer
        torch_optimizer = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed's ZeRO wrapper holds torch's
        torch_optimizer.register_step_pre_hook(self._record)
        self.grads: list[torch.Tensor] = []

    def _record(self, optimizer, args, kwargs) -> None:
        from torch.distributed.tensor import DTensor

        flat = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                    flat.append(g.detach().flatten().clone())
        self.grads.append(torch.cat(flat))

    def gradient(self, micro_batches, loss_fn, mask_key, norm_constant=None) -> torch.Tensor:
        self.engine.step(micro_batches, loss_fn, mask_key=mask_key, norm_constant=norm_constant)
        return self.grads.pop()


@pytest.fixture(scope="module", params=["deepspeed", "fsdp2"])
def engines(request):
    return {kind: Engine(request.param, kind) for kind in ("causal_lm", "value")}


def _lengths(seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(6, 41, (N,), generator=g).tolist()


def _experience(seed: int) -> ExperienceBatch:
    """N right-padded samples of spread lengths, a prompt of 3 tokens, the rest generated (action mask 1)."""
    g = torch.Generator().manual_seed(seed)
    lengths = _lengths(seed)
    width = max(lengths)
    seq = torch.randint(0, 256, (N, width), generator=g)
    attn = torch.zeros(N, width, dtype=torch.long)
    act = torch.zeros(N, width - 1)
    for i, n in enumerate(lengths):
        attn[i, :n] = 1
        act[i, 2 : n - 1] = 1
    noise = torch.randn(N, width - 1, generator=g) * act
    return ExperienceBatch(
        sequences=seq,
        attention_mask=attn,
        action_mask=act,
        rollout_logprobs=(noise - 5.0) * act,
        old_logprobs=(noise * 0.1 - 5.5) * act,
        ref_logprobs=(noise * 0.2 - 5.4) * act,
        advantages=torch.randn(N, width - 1, generator=g) * act,
        values=torch.randn(N, width - 1, generator=g) * act,
        returns=torch.randn(N, width - 1, generator=g) * act,
    )


def _rl_micro_batches(exp: ExperienceBatch, max_tokens: int) -> list[dict]:
    mbs = rank_micro_batches(exp, 1, MICRO, max_tokens)[0]
    return [{**m.tensors(), "kl_coef": torch.tensor([0.05])} for m in mbs]


def _settings(aggregation: str, packing: bool) -> ActorLossSettings:
    spec = load_spec(["algorithm=grpo", "algorithm.kl.placement=loss", "algorithm.kl.coef=0.05"])
    from dataclasses import replace

    return replace(ActorLossSettings.from_spec(spec), aggregation=aggregation, entropy_coef=0.01, packing=packing)


def _close(packed: torch.Tensor, unpacked: torch.Tensor) -> None:
    assert unpacked.abs().max() > 1e-4, "a gradient that vanishes proves nothing"
    torch.testing.assert_close(packed, unpacked, atol=1e-5, rtol=0)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_actor_step_packed_by_tokens_has_the_unpacked_gradient(engines, aggregation):
    exp = _experience(1)
    fixed, packed = _rl_micro_batches(exp, 0), _rl_micro_batches(exp, BUDGET)
    assert len(fixed) == N // MICRO and len(packed) != len(fixed), (len(fixed), len(packed))
    constant = 40.0 if aggregation == "seq_mean_token_sum_norm" else None
    engine = engines["causal_lm"]
    unpacked = engine.gradient(fixed, partial(actor_loss_fn, s=_settings(aggregation, False)), "action_mask", constant)
    got = engine.gradient(packed, partial(actor_loss_fn, s=_settings(aggregation, True)), "action_mask", constant)
    _close(got, unpacked)


def test_critic_step_packed_by_tokens_has_the_unpacked_gradient(engines):
    exp = _experience(2)
    engine = engines["value"]
    unpacked = engine.gradient(_rl_micro_batches(exp, 0), partial(critic_loss_fn, clip=0.2), "action_mask")
    packed = partial(critic_loss_fn, clip=0.2, packing=True)
    _close(engine.gradient(_rl_micro_batches(exp, BUDGET), packed, "action_mask"), unpacked)


def _sft_rows(seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n in _lengths(seed):
        ids = torch.randint(0, 256, (n,), generator=g).tolist()
        rows.append({"input_ids": ids, "loss_mask": [0] * 3 + [1] * (n - 3)})
    return rows


def test_sft_step_packed_by_tokens_has_the_unpacked_gradient(engines):
    rows = _sft_rows(3)
    collate = partial(collate_sft, pad_id=0)
    fixed = per_rank_micro_batches(rows, 1, MICRO, collate)[0]
    packed = per_rank_micro_batches(rows, 1, MICRO, collate, max_tokens=45, row_tokens=row_tokens)[0]
    assert len(packed) != len(fixed) and len({b["input_ids"].shape[0] for b in packed}) > 1
    engine = engines["causal_lm"]
    unpacked = engine.gradient(fixed, sft_loss_fn, "action_mask")
    _close(engine.gradient(packed, partial(sft_loss_fn, packing=True), "action_mask"), unpacked)


def _pair_rows(seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n, m in zip(_lengths(seed), _lengths(seed + 100), strict=True):
        prompt = torch.randint(0, 256, (3,), generator=g).tolist()
        chosen = prompt + torch.randint(0, 256, (n - 3,), generator=g).tolist()
        rejected = prompt + torch.randint(0, 256, (m - 3,), generator=g).tolist()
        rows.append(
            {
                "chosen_ids": chosen,
                "rejected_ids": rejected,
                "chosen_mask": [0] * 3 + [1] * (n - 3),
                "rejected_mask": [0] * 3 + [1] * (m - 3),
                "prompt_len": 3,
                "margin": float(torch.rand(1, generator=g)),
                "ref": (float(-torch.rand(1, generator=g)) * 50, float(-torch.rand(1, generator=g)) * 50),
            }
        )
    return rows


def _pair_batches(rows: list[dict], plan: list[list[int]]) -> list[dict]:
    """Collated pairs with the reference's sequence log-probs merged in, as Workers.attach_reference does."""
    out = []
    for mb in plan:
        batch = collate_preference([rows[i] for i in mb], pad_id=0)
        batch["ref_chosen"] = torch.tensor([rows[i]["ref"][0] for i in mb])
        batch["ref_rejected"] = torch.tensor([rows[i]["ref"][1] for i in mb])
        out.append(batch)
    return out


def _pair_plans(rows: list[dict]) -> tuple[list[list[int]], list[list[int]]]:
    fixed = count_plan(len(rows), 1, MICRO)[0]
    packed = token_budget_plan([pair_tokens(r) for r in rows], 1, 90)[0]  # a pair holds up to 80 tokens
    assert len(packed) != len(fixed) and len({len(mb) for mb in packed}) > 1, packed  # micro-batches of unequal size
    return fixed, packed


def test_rm_step_packed_by_tokens_keeps_pairs_together_and_has_the_unpacked_gradient(engines):
    rows = _pair_rows(4)
    fixed, packed = _pair_plans(rows)
    engine = engines["value"]
    # The unpacked step as it always was: the loss a plain mean per micro-batch, no step-window normaliser.
    unpacked = engine.gradient(_pair_batches(rows, fixed), partial(rm_loss_fn, loss="sigmoid", use_margin=True), None)
    fn = partial(rm_loss_fn, loss="sigmoid", use_margin=True, packing=True)
    _close(engine.gradient(_pair_batches(rows, packed), fn, PAIR_KEY), unpacked)


def test_dpo_step_packed_by_tokens_keeps_chosen_and_rejected_together_and_has_the_unpacked_gradient(engines):
    from rlhf.spec.schema import PreferenceSpec

    rows = _pair_rows(5)
    fixed, packed = _pair_plans(rows)
    opts = {"loss": "dpo", "kwargs": loss_kwargs(PreferenceSpec()), "nll_coef": 0.1}
    engine = engines["causal_lm"]
    unpacked = engine.gradient(_pair_batches(rows, fixed), partial(pair_loss_fn, **opts), None)
    fn = partial(pair_loss_fn, **opts, packing=True)
    _close(engine.gradient(_pair_batches(rows, packed), fn, PAIR_KEY), unpacked)
