"""``logging.*``: the experiment trackers (each tracker's own keys in a sub-section) and the console."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhf.spec.keys import items, key


@dataclass(frozen=True)
class TensorBoardSpec:
    """The tensorboard tracker's own keys."""

    dir: str = key(
        "",
        "event files' root (each run in a sub-folder named after its run folder); empty: <run dir>/tensorboard, in "
        "a sweep <sweep folder>/tensorboard/<job>, so `tensorboard --logdir` on that root shows the jobs side by side",
    )


@dataclass(frozen=True)
class WandbSpec:
    """The wandb tracker's own keys (the project is logging.experiment, the group sweep.id)."""

    mode: str = key(
        "offline",
        "offline: run files under <run dir>/wandb, no account needed (`wandb sync` uploads them later) | online",
        choices=("offline", "online"),
    )
    entity: str = key("", "W&B team or user; empty: W&B's default for the logged-in account")


@dataclass(frozen=True)
class LoggingSpec:
    """Experiment trackers (rlhf/tracking/registry.py) and the console."""

    trackers: list[str] = key(
        factory=lambda: ["mlflow"],
        doc="trackers every run logs to, several at once: mlflow, tensorboard, wandb, console (one line per step); "
        "[]: only <run dir>/metrics.jsonl",
        items=items(nonempty=True),
    )
    mlflow: bool | None = key(
        None,
        "shorthand kept for command lines: false leaves mlflow out of logging.trackers, true adds it; null: "
        "as logging.trackers says",
    )
    tracking_uri: str = key("", "MLflow store; empty: sqlite:///mlflow.db in the directory rlhf-run was started from")
    experiment: str = key("rlhf", "MLflow experiment and W&B project", nonempty=True)
    run_name: str = key("", "the run's name in every tracker; empty: recipe name and time")
    log_every: int = key(1, "send train metrics to the trackers every N steps (eval metrics always)", ge=1)
    progress: bool = key(True, "progress bars on the console")
    verl_metrics: bool = key(
        False,
        "the RL actor also logs veRL 0.9.1's actor/pg_clipfrac, actor/pg_clipfrac_lower and actor/ppo_kl, under "
        "veRL's names with the definitions veRL's function for the policy loss gives them (they differ from loss to "
        "loss: rlhf.algo.verl_metrics), beside ours (train/ppo_clip_ratio, train/ppo_kl); and actor/entropy, the old "
        "policy's entropy at the sampling temperature over the rollout batch, aggregated as the policy loss, from the "
        "experience pass as veRL's (not where that pass is skipped: bypass mode, one optimizer step per rollout; "
        "train/entropy is the training forward's); import-verl sets it",
    )
    tensorboard: TensorBoardSpec = field(default_factory=TensorBoardSpec)
    wandb: WandbSpec = field(default_factory=WandbSpec)

    @property
    def active_trackers(self) -> tuple[str, ...]:
        """``trackers`` with the ``mlflow`` shorthand applied (in order, each once): what a run logs to."""
        names = [t for t in self.trackers if self.mlflow is not False or t != "mlflow"]
        if self.mlflow and "mlflow" not in names:
            names.insert(0, "mlflow")
        return tuple(dict.fromkeys(names))
