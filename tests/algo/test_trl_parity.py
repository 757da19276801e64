"""One GRPO optimizer step of TRL 1.16's own GRPOTrainer against ours, on the same tiny model and the same batch,
under the recipe ``rlhf-recipes import-trl`` writes for the TRL command: the mapping is part of what is tested.

Each case is a ``trl grpo`` command. TRL runs it (tests/algo/trl_reference.py: GRPOTrainer's reward ->
advantage code, its old and reference log-probs, its shuffle and micro-batches, ``training_step``'s loss and
backward); the same flags go through the converter, the recipe it writes is composed into our spec, and our loop's
functions compute the same step from it: the advantages (``compute_advantages_and_returns`` as rlhf.pipelines.rl
calls it), the old and reference log-probs (``policy_logprobs_fn``), the actor loss of each micro-batch
(``actor_loss_fn`` with ``ActorLossSettings.from_spec``) over the step's normaliser, divided by the micro-batch
count and backpropagated as our engines do. Compared: the advantages, the old log-probs, the step's loss (to 1e-5)
and every parameter's gradient.

Where the converter reports ``->``/``==`` for ``loss_type``, ``scale_rewards``, ``importance_sampling_level``, ``beta``
and ``use_bias_correction_kl``, the step must be TRL's; where it reports ``~>`` (bnpo over several micro-batches,
sapo, vespo, scale_rewards=batch, the KL term under TRL's default use_bias_correction_kl), the test pins that the
difference is really there, so a marker cannot go stale either way. A sequence-level ratio under any loss_type is
gspo aggregated as that loss_type says (``algorithm.policy_loss.seq_ratio_aggregation=configured``).

Without TRL (the dev extra) these tests are skipped, saying how to install it.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl_reference import MAX_COMPLETION, Batch, TRLStep, make_batch, run_trl_step, trl_available

from rlhf.algo import compute_advantages_and_returns, step_loss_normalizer
from rlhf.importers.report import DIFFERS
from rlhf.importers.trl.verb import convert
from rlhf.pipelines.rl_losses import ActorLossSettings, actor_loss_fn, policy_logprobs_fn
from rlhf.spec.build import load_spec

if trl_available() is not None:
    pytest.skip(trl_available(), allow_module_level=True)

#: Six completions per micro-batch, two micro-batches per optimizer step (= steps_per_generation): one generation
#: of 3 prompts x 4 completions per step.
BASE = {"per_device_train_batch_size": 6, "gradient_accumulation_steps": 2}
ONE_MICRO_BATCH = {"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1}
ATOL = 1e-5

#: TRL 1.16 multiplies each token's KL by the ratio pi/pi_old by default; the plain k3 term is ours (a KL case below
#: pins the difference).
KL = {"beta": 0.04, "use_bias_correction_kl": False}
# (TRL's GRPOConfig fields beyond BASE): cases the converter maps with -> or ==.
EQUAL = {
    "dapo": {},  # TRL's defaults: loss_type dapo, scale_rewards group, beta 0
    "dapo-clip-higher-kl": {"loss_type": "dapo", "epsilon_high": 0.28, **KL},
    "grpo-kl": {"loss_type": "grpo", **KL},
    "grpo-scale-group": {"loss_type": "grpo", "scale_rewards": "group"},
    "dr_grpo-kl-scale-none": {"loss_type": "dr_grpo", "scale_rewards": "none", **KL},
    "bnpo-one-micro-batch-kl": {"loss_type": "bnpo", **KL, **ONE_MICRO_BATCH},
    "cispo": {"loss_type": "cispo", "epsilon_high": 1.1},
    "cispo-kl": {"loss_type": "cispo", "epsilon_high": 1.5, **KL},
    "luspo": {"loss_type": "luspo"},
    "scale-none": {"loss_type": "dapo", "scale_rewards": "none"},
    "gspo-kl": {"loss_type": "grpo", "importance_sampling_level": "sequence", **KL},
    "luspo-sequence": {"loss_type": "luspo", "importance_sampling_level": "sequence"},
    "dapo-sequence-kl": {"loss_type": "dapo", "importance_sampling_level": "sequence", **KL},
}
# Cases the converter marks ~>: the TRL field whose row says so.
DIFFERENT = {
    "bnpo-two-micro-batches": ({"loss_type": "bnpo"}, "loss_type"),
    "sapo": ({"loss_type": "sapo"}, "loss_type"),
    "vespo": ({"loss_type": "vespo"}, "loss_type"),
    "scale-batch": ({"loss_type": "dapo", "scale_rewards": "batch"}, "scale_rewards"),
    "kl-bias-corrected": ({"loss_type": "dapo", "beta": 0.04}, "beta"),  # TRL's default use_bias_correction_kl
}
ROW_FIELDS = ("loss_type", "scale_rewards", "importance_sampling_level", "beta", "use_bias_correction_kl")


@pytest.fixture(scope="module", autouse=True)
def isolated():
    """One thread (the model is tiny: one is faster than two, and much faster on a loaded machine, where OpenMP
    spins); afterwards the thread count back and accelerate's process-wide state, which TRL's trainers set, reset
    for the modules that run next in this process."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    from accelerate.state import AcceleratorState, PartialState

    AcceleratorState._reset_state(True)
    PartialState._reset_state()


@pytest.fixture(scope="module")
def tiny() -> tuple[str, Any]:
    """A tiny Llama folder with its byte-level tokenizer, made here (rlhf.models.tiny), and the tokenizer."""
    from rlhf.models.tiny import make_tiny_model

    path = str(make_tiny_model(load_spec(["model=tiny"]).model))
    return path, AutoTokenizer.from_pretrained(path)


def _flags(args: dict[str, Any]) -> list[str]:
    out = []
    for k, v in args.items():
        out += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
    return out


def _convert(args: dict[str, Any], tmp_path) -> tuple[Any, Any]:
    """The conversion of ``trl grpo`` with these fields and the spec its recipe composes to."""
    fixed = {"num_generations": 4, "max_completion_length": MAX_COMPLETION, "num_iterations": 2, "bf16": False}
    conv = convert(["trl", "grpo", *_flags({**fixed, **args})], hardware="cpu")
    recipe = tmp_path / "imported.yaml"
    recipe.write_text(conv.yaml())
    return conv, load_spec([f"+recipe={recipe}"])


def _rows(conv) -> dict[str, Any]:
    """TRL field -> its report line."""
    return {s.key: line for s, line in zip(conv.cmd.settings, conv.rows(), strict=False)}


def _rollout_tensors(batch: Batch, pad_id: int) -> dict[str, torch.Tensor]:
    """The generation batch as our rows hold it: prompt left-padded, response right-padded, one row per completion;
    ``action_mask[t]`` marks the response tokens of ``sequences[t + 1]``."""
    width_p = max(len(p) for p in batch.prompt_ids)
    width_c = max(len(c) for c in batch.completion_ids)
    rows, attn, action = [], [], []
    for p, c in zip(batch.prompt_ids, batch.completion_ids, strict=True):
        left, right = width_p - len(p), width_c - len(c)
        rows.append([pad_id] * left + p + c + [pad_id] * right)
        attn.append([0] * left + [1] * (len(p) + len(c)) + [0] * right)
        action.append([0] * (width_p - 1) + [1] * len(c) + [0] * right)
    return {
        "sequences": torch.tensor(rows),
        "attention_mask": torch.tensor(attn),
        "action_mask": torch.tensor(action, dtype=torch.float32),
        "prompt_width": torch.tensor(width_p),
    }


def _row_index(batch: Batch, prompt_ids: torch.Tensor, prompt_mask, completion_ids, completion_mask) -> list[int]:
    """Which completion of ``batch`` each row of a TRL micro-batch is (TRL shuffles the generation batch)."""
    keys = {
        (tuple(p), tuple(c)): i for i, (p, c) in enumerate(zip(batch.prompt_ids, batch.completion_ids, strict=True))
    }
    assert len(keys) == len(batch.prompt_ids), "two completions are equal: the rows cannot be told apart"
    out = []
    for p, pm, c, cm in zip(prompt_ids, prompt_mask, completion_ids, completion_mask, strict=True):
        out.append(keys[(tuple(p[pm.bool()].tolist()), tuple(c[cm.bool()].tolist()))])
    return out


def _our_step(spec, batch: Batch, trl: TRLStep, model_path: str, pad_id: int) -> dict[str, Any]:
    """Our advantages, old log-probs, the step's loss and gradients, on TRL's micro-batches."""
    a = spec.algorithm
    t = _rollout_tensors(batch, pad_id)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.load_state_dict(trl.initial_state)
    model.train()
    temperature = spec.rollout.temperature or 1.0
    with torch.no_grad():  # the experience pass: the weights at generation are the policy's and the reference's
        old = policy_logprobs_fn(model, t, temperature=temperature) * t["action_mask"]
    ref = old if a.kl.coef > 0 else None
    # As rlhf.pipelines.rl.make_experience calls it (the KL is a loss term in every GRPO recipe: no KL reward).
    assert a.kl.placement == "loss" or a.kl.coef == 0
    advantages = compute_advantages_and_returns(
        torch.tensor(batch.rewards),
        t["action_mask"],
        estimator=a.advantage.estimator,
        kl=None,
        kl_coef=a.kl.coef,
        gamma=a.advantage.gamma,
        lambd=a.advantage.lambd,
        n_samples_per_prompt=spec.rollout.samples_per_prompt,
        reward_clip_range=None if spec.reward.clip_range is None else tuple(spec.reward.clip_range),
        no_std_norm=a.advantage.no_std_norm,
        kl_before_baseline=a.kl.before_baseline,
        std_eps=a.advantage.std_eps,
    ).advantages
    model.load_state_dict(trl.trained_state)
    micro_batches, indices = [], []
    for inputs in trl.micro_batches:
        idx = _row_index(
            batch, inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], inputs["completion_mask"]
        )
        indices.append(idx)
        mb = {k: t[k][idx] for k in ("sequences", "attention_mask", "action_mask")}
        mb.update(advantages=advantages[idx], old_logprobs=old[idx], kl_coef=torch.tensor([a.kl.coef]))
        if ref is not None:
            mb["ref_logprobs"] = ref[idx]
        micro_batches.append(mb)
    # rlhf.pipelines.rl_roles._train and rlhf.backends.shared.step_window.step_inputs, then the engine's loss / n,
    # backward.
    pl = a.policy_loss
    constant = (
        float(pl.aggregation_norm or spec.rollout.max_new_tokens)
        if pl.aggregation == "seq_mean_token_sum_norm"
        else None
    )
    norm = step_loss_normalizer(
        [mb["action_mask"] for mb in micro_batches], grad_accum_steps=len(micro_batches), constant=constant
    )
    settings = ActorLossSettings.from_spec(spec)
    model.zero_grad()
    loss = 0.0
    for mb in micro_batches:
        value, _ = actor_loss_fn(model, mb, norm, s=settings)
        scaled = value / len(micro_batches)
        scaled.backward()
        loss += float(scaled)
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    return {"loss": loss, "grads": grads, "advantages": advantages, "old": old, "indices": indices, "t": t}


def _compare(trl: TRLStep, ours: dict[str, Any]) -> dict[str, float]:
    """Max abs differences: advantages, old log-probs (TRL's, where it kept them), loss, gradients."""
    width_p = int(ours["t"]["prompt_width"])
    adv = old = 0.0
    for inputs, idx in zip(trl.micro_batches, ours["indices"], strict=True):
        mask = inputs["completion_mask"].float()
        ours_adv = ours["advantages"][idx][:, width_p - 1 :]
        theirs_adv = inputs["advantages"].unsqueeze(1).expand_as(mask)
        adv = max(adv, float(((ours_adv - theirs_adv) * mask).abs().max()))
        if "old_per_token_logps" in inputs:
            ours_old = ours["old"][idx][:, width_p - 1 :]
            old = max(old, float(((ours_old - inputs["old_per_token_logps"]) * mask).abs().max()))
    grad = max(float((ours["grads"][k] - g).abs().max()) for k, g in trl.grads.items())
    scale = max(float(g.abs().max()) for g in trl.grads.values())
    assert set(ours["grads"]) == set(trl.grads)
    return {
        "advantages": adv,
        "old_logprobs": old,
        "loss": abs(ours["loss"] - trl.loss),
        "grad": grad,
        "grad_scale": scale,
    }


def _run(args: dict[str, Any], tiny, tmp_path, seed: int = 0):
    path, tokenizer = tiny
    conv, spec = _convert({**BASE, **args}, tmp_path)
    batch = make_batch(seed, (3, len(tokenizer) - 8))
    trl = run_trl_step(path, batch, {**BASE, **args}, str(tmp_path / "trl"))
    ours = _our_step(spec, batch, trl, path, tokenizer.pad_token_id)
    return conv, trl, ours, _compare(trl, ours)


@pytest.mark.parametrize("case", list(EQUAL))
def test_one_step_is_trls(case, tiny, tmp_path):
    args = EQUAL[case]
    conv, trl, ours, diff = _run(args, tiny, tmp_path)
    rows = _rows(conv)
    for k in ROW_FIELDS:
        if k in args:
            assert rows[k].marker != DIFFERS, rows[k].detail
    assert max(trl.extra["clipped"]) > 0.02, "the step must exercise the clip (TRL's logged clip ratio)"
    assert diff["advantages"] < ATOL, diff
    assert diff["old_logprobs"] < ATOL, diff
    assert diff["loss"] < ATOL, (diff, ours["loss"], trl.loss)
    assert diff["grad"] < ATOL * max(diff["grad_scale"], 1.0), diff


@pytest.mark.parametrize("case", list(DIFFERENT))
def test_a_step_the_report_says_differs_does_differ(case, tiny, tmp_path):
    args, field = DIFFERENT[case]
    conv, trl, ours, diff = _run(args, tiny, tmp_path)
    row = _rows(conv)[field]
    assert row.marker == DIFFERS and "differs:" in row.detail, row.detail
    assert diff["old_logprobs"] < ATOL, diff  # the same rows and weights: only the math differs
    assert max(diff["loss"], diff["advantages"], diff["grad"]) > 10 * ATOL, diff
