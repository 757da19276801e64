"""One optimizer step of TRL 1.16's own GRPOTrainer on a fixed batch, for the parity tests
(tests/algo/test_trl_parity.py).

TRL is installed by the dev extra (``pip install -e .[dev]``, ``scripts/install.sh --dev``): unlike OpenRLHF and
veRL it imports cleanly on a laptop, so its trainer is run as it is, not read from a wheel. What the step goes
through is TRL's, from ``GRPOTrainer.__init__`` on a local tiny model folder (with its reference model when
``beta > 0``):

- ``_prepare_inputs``: ``_generate_and_score_completions`` (the rewards of the reward function, TRL's group
  mean/std advantages per ``scale_rewards``, the old and reference log-probs), the shuffle, and the split into
  ``steps_per_generation`` micro-batches. Generation is the one part replaced, through TRL's public
  ``rollout_func`` hook: it hands back fixed token ids, so both sides train on the same completions.
- ``training_step`` (transformers' ``Trainer.training_step`` around ``GRPOTrainer.compute_loss``/``_compute_loss``):
  the loss of each micro-batch, scaled for gradient accumulation as TRL scales it, and its backward.

The step is the *second* pass over a generation (``num_iterations=2``): between the generation and the loss the
weights are moved by seeded noise (standing in for the first pass's update), so the ratios are not 1 and the clip
and the KL term work. Only the optimizer's update is left out, so the gradients can be compared.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

VERSION = "1.16.0"
HOW_TO_GET = (
    f"TRL {VERSION} is not installed: pip install trl=={VERSION} (the dev extra: pip install -e .[dev], or "
    "scripts/install.sh --dev)"
)
#: The generation batch: PROMPTS prompts x N completions, completions up to MAX_COMPLETION tokens (right-padded),
#: prompts of different lengths (left-padded).
PROMPTS, N, MAX_COMPLETION = 3, 4, 8
PROMPT_LENGTHS = (3, 5, 4)


def trl_available() -> str | None:
    """None when TRL 1.16 can be imported here, else why not."""
    try:
        import trl
    except ImportError:
        return HOW_TO_GET
    if not trl.__version__.startswith("1.16."):
        return (
            f"TRL {trl.__version__} is installed; these tests pin TRL {VERSION}'s numerics (pip install trl=={VERSION})"
        )
    return None


@dataclass
class Batch:
    """The rollout both sides train on: token ids per completion (the N of a prompt contiguous) and its reward."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    rewards: list[float]


def make_batch(seed: int, vocab: tuple[int, int], equal_group: bool = True) -> Batch:
    """Seeded random prompts and completions of random lengths (one completion of every length 1..MAX_COMPLETION
    is not promised, but one is full-width), rewards N(0, 1); with ``equal_group`` the last prompt's completions all
    score the same (a zero-std group)."""
    g = torch.Generator().manual_seed(seed)
    low, high = vocab
    prompts = [torch.randint(low, high, (n,), generator=g).tolist() for n in PROMPT_LENGTHS[:PROMPTS]]
    lengths = torch.randint(1, MAX_COMPLETION + 1, (PROMPTS * N,), generator=g)
    lengths[int(torch.randint(0, PROMPTS * N, (1,), generator=g))] = MAX_COMPLETION
    completions = [torch.randint(low, high, (int(n),), generator=g).tolist() for n in lengths]
    rewards = torch.randn(PROMPTS * N, generator=g)
    if equal_group:
        rewards[-N:] = 0.5
    return Batch([p for p in prompts for _ in range(N)], completions, rewards.tolist())


@dataclass
class TRLStep:
    """What TRL's step computed."""

    loss: float  # the sum over the micro-batches of what training_step returned (the step's loss)
    grads: dict[str, torch.Tensor]  # parameter name -> gradient after the step's backward passes
    micro_batches: list[dict[str, Any]]  # the inputs _compute_loss received, in order
    initial_state: dict[str, torch.Tensor]  # the weights at generation (old and reference log-probs)
    trained_state: dict[str, torch.Tensor]  # the weights the step's loss was computed with
    extra: dict[str, Any] = field(default_factory=dict)


def run_trl_step(model_path: str, batch: Batch, args: dict[str, Any], out_dir: str, noise: float = 0.5) -> TRLStep:
    """One optimizer step's losses and gradients of TRL's GRPOTrainer under GRPOConfig(**args) on ``batch``."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    prompts = [f"prompt {i}" for i in range(PROMPTS)]
    token_ids = {p: batch.prompt_ids[i * N] for i, p in enumerate(prompts)}

    def rollout(batch_prompts: list, trainer: Any) -> dict[str, Any]:
        assert list(batch_prompts) == [p for p in prompts for _ in range(N)], "TRL's sampler reordered the prompts"
        return {
            "prompt_ids": [token_ids[p] for p in batch_prompts],
            "completion_ids": batch.completion_ids,
            "logprobs": None,
            "score": batch.rewards,  # an extra field: TRL passes it to the reward functions by name
        }

    def reward(completions: list, score: list, **kwargs: Any) -> list[float]:
        return list(score)

    config = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        report_to="none",
        bf16=False,
        num_generations=N,
        max_completion_length=MAX_COMPLETION,
        num_iterations=2,
        seed=0,
        **args,
    )
    saved = {k: os.environ.get(k) for k in ("CI", "HF_HUB_OFFLINE")}
    os.environ.update(CI="1", HF_HUB_OFFLINE="1")  # TRL's trainers send no usage telemetry under CI
    try:
        trainer = GRPOTrainer(
            model=model_path,
            reward_funcs=reward,
            args=config,
            train_dataset=Dataset.from_dict({"prompt": prompts}),
            processing_class=tokenizer,
            rollout_func=rollout,
        )
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    model = trainer.model
    model.train()
    generation_batch = [{"prompt": p} for p in prompts for _ in range(N)]
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}

    seen: list[dict[str, Any]] = []
    compute_loss = trainer._compute_loss

    def recording(model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        seen.append(inputs)
        return compute_loss(model, inputs)

    trainer._compute_loss = recording
    torch.manual_seed(0)  # TRL's shuffle of the generation batch
    trainer._prepare_inputs(generation_batch)  # step 0: generate (the rollout above), score, buffer the micro-batches
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the first pass's update, stood in for by noise
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std().clamp(min=1e-3))
    trained = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # The second pass over the buffered generation (num_iterations=2), as Trainer's loop sets it up.
    ga = config.gradient_accumulation_steps
    trainer.current_gradient_accumulation_steps = ga
    trainer._step = config.steps_per_generation
    model.zero_grad()
    loss = 0.0
    for _ in range(ga):
        loss += float(trainer.training_step(model, generation_batch, None))
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    clipped = trainer._metrics["train"].get("clip_ratio/region_mean") or trainer._metrics["train"].get(
        "cispo_clip_ratio"
    )
    return TRLStep(loss, grads, seen, initial, trained, {"config": config, "clipped": list(clipped or [])})
