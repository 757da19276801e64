"""What a run does besides its steps: ``eval.*``, ``checkpoint.*``, ``sft_warmup.*``, ``agent.*``."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec import names
from rlhf.spec.keys import key


@dataclass(frozen=True)
class EvalSpec:
    """Evaluation during training (RL: pass@k per datasource; SFT/RM/DPO: eval loss and accuracy)."""

    steps: int = key(0, "evaluate every N steps; 0 never (SFT/RM/DPO: once per epoch)", ge=0)
    temperature: float = key(0.6, "RL eval sampling temperature", ge=0)
    samples_per_prompt: int = key(4, "RL eval samples per prompt (the k of pass@k)", ge=1)
    max_prompts: int | None = key(None, "evaluate at most this many prompts (null: all)", ge=1)
    best_metric: str = key(
        "auto", "auto: first eval_*_pass1 | none | a metric name; best_model/ keeps its best", nonempty=True
    )


@dataclass(frozen=True)
class CheckpointSpec:
    """Checkpoints, resume and the final model.

    ``resume`` continues a run (its weights, optimizer, scheduler, step, data position and MLflow run);
    ``init_from`` starts a NEW run from another run's weights (rlhf.pipelines.init_from): the policy, or the SFT/RM/DPO
    model, loads them; an RL run's critic loads the source's critic when the source has one and the algorithm uses a
    critic (else critic.model_path, else reward.model_path, else these weights with a fresh value head, as
    OpenRLHF's critic starts from the reward model); the reference model of an RL or DPO run is the init_from weights
    (as OpenRLHF's reference is the SFT model) unless reference.model_path is set; an RM started from a reward model
    keeps its trained value head. A LoRA source's adapters are
    merged into its base (the new run trains fresh adapters on the merged weights when model.lora.rank > 0). The
    optimizer and schedule are new, the run starts at step 0, the data order is the new run's seed's, and the
    tracker gets a new run with init_from.* params naming the resolved source and its step. The source must fit
    model.* (architecture, sizes, vocabulary): model.* still names the model family (the plan's dimensions, the chat
    template); the tokenizer is model.tokenizer_path, else the one saved with the starting weights.
    """

    dir: str = key("checkpoints", "checkpoint folder, relative to the run directory", nonempty=True)
    save_steps: int | None = key(
        None, "save every N steps; null: about 10 checkpoints per run; 0: only at the end and on interrupt", ge=0
    )
    every_minutes: float | None = key(
        30.0, "also save when this many minutes passed since the last checkpoint (null: off)", gt=0
    )
    max_keep: int = key(3, "checkpoints kept (the oldest are deleted)", ge=1)
    verify: str = key(
        "checksum",
        "what a resume checks against each checkpoint's manifest.json (written last by every save) before anything "
        "starts: checksum (every file's size and SHA-256, about 1.5 GB/s per core) | size (sizes only, for "
        "checkpoints too large to read back); a damaged checkpoint is named and the newest intact one resumed",
        choices=("checksum", "size"),
    )
    resume: str = key(
        "auto", "auto: resume from dir when a checkpoint is there | never | a checkpoint path", nonempty=True
    )
    init_from: str = key(
        "",
        "start a new run (fresh optimizer, step 0, new data order and tracker run) from these weights: a run folder "
        "(its last complete checkpoint, else its final model/), a checkpoint folder (.../checkpoints/stepN) or a "
        "Hugging Face model folder (LoRA adapters merged); an RL or DPO run's reference is then these weights, as "
        "OpenRLHF's is the SFT model; empty: from model.*",
    )
    output_dir: str = key("model", "final Hugging Face model, relative to the run directory", nonempty=True)
    save_hf_every_checkpoint: bool = key(False, "SFT/RM/DPO: also write a Hugging Face folder in every checkpoint")


@dataclass(frozen=True)
class SFTWarmupSpec:
    """RL only: supervised steps on the policy before RL starts, in the same run (OpenRLHF's SFT-then-RL workflow
    in one command: one cluster, one set of actors, one MLflow run with sft/* and train/* metrics)."""

    steps: int = key(
        0,
        "SFT optimizer steps (trainer.global_batch samples each) before the first RL step, on top of "
        "trainer.max_steps (which counts RL steps); 0: none",
        ge=0,
    )
    train_files: list[str] = key(factory=list, doc="SFT pairs (same forms as data.train_files)")
    input_key: str = key("input", "column of the prompt", nonempty=True)
    output_key: str = key("output", "column of the response", nonempty=True)
    lr: float | None = key(None, "peak learning rate of the warm-up steps (null: trainer.lr)", gt=0)
    eval_steps: int = key(
        0, "eval (pass@k with the rollout engines) every this many warm-up steps; 0: only at its last step", ge=0
    )


@dataclass(frozen=True)
class AgentSpec:
    """Agents and environments (OpenRLHF's agent protocols)."""

    path: str = key("", "python file with an AgentInstance class (multi_turn) or run_agent function (openai)")
    executor: str = key("single_turn", "how episodes run", choices=names.AGENT_EXECUTORS)
    max_turns: int = key(8, "an episode not done after this many turns is an error naming the file and sample", ge=1)
    step_timeout_s: float = key(300.0, "seconds for one reset()/step() call", gt=0)
    call_timeout_s: float = key(300.0, "openai: seconds for one chat completion", gt=0)
    run_timeout_s: float = key(900.0, "openai: seconds for one run_agent() call", gt=0)
