"""The DeepSpeed train/eval engines in one process (world size 1, gloo): ZeRO-2 and ZeRO-3 steps, the step-window
normaliser, checkpoint save/load continuing bit-exactly, gathered weights and the HF export, LoRA, eval engine.
Multi-rank runs are covered end to end by tests/pipelines."""

from __future__ import annotations

import os

import pytest
import torch

from rlhf.algo import sft_loss
from rlhf.backends.shared.optim import build_scheduler
from rlhf.backends.train.deepspeed.ds_config import eval_ds_config, train_ds_config
from rlhf.backends.train.deepspeed.engine import DeepSpeedEvalEngine, DeepSpeedTrainEngine, init_distributed
from rlhf.models.forward import causal_lm_log_probs
from rlhf.models.loading import load_causal_lm, resolve_model_path, tokenizer_for
from rlhf.spec.schema import LoraSpec, ModelSpec, TrainerSpec

SPEC = ModelSpec(make_local=True)


@pytest.fixture(scope="module", autouse=True)
def process_group():
    from rlhf.backends.shared.distributed import shutdown_distributed
    from rlhf.launch.ports import free_port

    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    init_distributed("cpu")
    yield
    # as a run leaves it: DeepSpeed drops the groups it cached, or a later run in this process is handed a dead one
    shutdown_distributed()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _trainer(stage: int, **kw) -> TrainerSpec:
    return TrainerSpec(
        zero_stage=stage,
        precision="fp32",
        lr=1e-3,
        global_batch=4,
        micro_batch_per_device=2,
        lr_scheduler="constant",
        warmup_ratio=0.0,
        **kw,
    )


def _engine(stage: int, lora: int = 0, **trainer: object) -> DeepSpeedTrainEngine:
    t = _trainer(stage, **trainer)
    cfg = train_ds_config(t, micro_batch=2, grad_accum=2, dp_size=1)
    keep = None
    if stage == 3:
        from transformers.integrations import HfDeepSpeedConfig

        keep = HfDeepSpeedConfig(cfg)  # noqa: F841 - models built while it lives are partitioned at load
    model = load_causal_lm(
        resolve_model_path(SPEC), lora=LoraSpec(rank=lora), gradient_checkpointing=t.gradient_checkpointing
    )
    engine = DeepSpeedTrainEngine(model, cfg, trainer=t, lr=t.lr, total_steps=10)
    del keep
    return engine


def _batches(seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in (5, 9):  # uneven token counts per micro-batch: the step-window normaliser matters
        mask = torch.zeros(2, 11)
        mask[:, -n:] = 1
        out.append(
            {
                "input_ids": torch.randint(0, 256, (2, 12), generator=g),
                "attention_mask": torch.ones(2, 12, dtype=torch.long),
                "action_mask": mask,
            }
        )
    return out


def loss_fn(model, batch, norm):
    loss = sft_loss(
        causal_lm_log_probs(model, batch["input_ids"], batch["attention_mask"]),
        batch["action_mask"],
        "token_mean",
        norm,
    )
    return loss, {"loss": loss.detach()}


def _token_mean_loss(engine, batches) -> float:
    nll = tokens = 0.0
    for b in batches:
        lp = engine.forward_no_grad(lambda m, x: causal_lm_log_probs(m, x["input_ids"], x["attention_mask"]), b)
        nll += float(-(lp * b["action_mask"]).sum())
        tokens += float(b["action_mask"].sum())
    return nll / tokens


@pytest.mark.parametrize("stage", [2, 3])
def test_step_reports_the_step_token_mean_and_resumes_exactly(stage, tmp_path):
    engine = _engine(stage)
    batches = _batches()
    expected = _token_mean_loss(engine, batches)
    first = engine.step(batches, loss_fn)
    # The reported loss is one token mean over the whole step, not a mean of micro-batch means.
    assert first["loss"] == pytest.approx(expected, rel=1e-5)
    assert first["grad_norm"] > 0 and first["lr"] == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="at least one micro-batch"):
        engine.step([], loss_fn)

    engine.save(tmp_path / "ckpt", {"step": 1})
    after_save = [engine.step(_batches(s), loss_fn)["loss"] for s in (1, 2)]
    client = engine.load(tmp_path / "ckpt")
    assert client["step"] == 1 and engine.global_step == 1
    again = [engine.step(_batches(s), loss_fn)["loss"] for s in (1, 2)]
    assert again == after_save  # bit-exact: weights, Adam moments and schedule restored

    names = dict(engine.named_weights())
    assert names["model.embed_tokens.weight"].shape == (SPEC.vocab_size, SPEC.hidden_size)  # gathered under ZeRO-3
    engine.save_hf(tmp_path / "hf", tokenizer_for(SPEC))
    sd = {k: v for k, v in names.items()}
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "hf" / "model.safetensors")
    for k, v in sd.items():
        torch.testing.assert_close(saved[k], v, msg=k)


def test_lora_engine_trains_adapters_and_exports_merged_weights(tmp_path):
    engine = _engine(2, lora=4)
    before = dict(engine.named_weights())
    for s in range(3):
        engine.step(_batches(s), loss_fn)
    after = dict(engine.named_weights())
    assert set(before) == set(after) and not any("lora" in k for k in after)  # plain HF names, adapters merged
    changed = [k for k in after if not torch.equal(before[k], after[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)  # only adapted linears move
    engine.save_hf(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "adapter" / "model.safetensors").exists()


def test_eval_engine_is_frozen_and_matches_the_model():
    model = load_causal_lm(resolve_model_path(SPEC))
    b = _batches()[0]
    expected = causal_lm_log_probs(model, b["input_ids"], b["attention_mask"]).detach()
    engine = DeepSpeedEvalEngine(model, eval_ds_config(zero_stage=2, precision="fp32"))
    assert engine.zero_stage == 0 and not any(p.requires_grad for p in engine.module.parameters())
    got = engine.forward(lambda m, x: causal_lm_log_probs(m, x["input_ids"], x["attention_mask"]), b)
    torch.testing.assert_close(got, expected)


def test_cosine_schedule_warms_up_and_ends_at_min_lr():
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, TrainerSpec(lr_scheduler="cosine_with_min_lr", warmup_ratio=0.1, min_lr_ratio=0.1), 20)
    lrs = []
    for _ in range(20):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs[0] == 0.0 and lrs[2] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1, abs=0.02)


def test_optimizer_offload_and_gradient_checkpointing_train_the_same():
    plain = _engine(2)
    tuned = _engine(2, offload_optimizer=True, gradient_checkpointing=True)
    assert tuned.ds_config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    for s in range(2):
        a, b = plain.step(_batches(s), loss_fn), tuned.step(_batches(s), loss_fn)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    w_plain, w_tuned = dict(plain.named_weights()), dict(tuned.named_weights())
    for k, v in w_plain.items():
        torch.testing.assert_close(w_tuned[k], v, atol=1e-5, rtol=1e-4)
