"""Experiment tracking: the trackers of ``logging.trackers`` (mlflow, tensorboard, wandb, console; one registry,
rlhf/tracking/registry.py, and one contract, rlhf/tracking/protocol.py), a local metrics.jsonl that resume can
rewind, and a console progress bar with a short end summary."""

from rlhf.tracking.progress import Progress, summary_lines
from rlhf.tracking.protocol import RunInfo, Tracker, TrackerUnavailable
from rlhf.tracking.tracker import Tracking, flatten, read_metrics

__all__ = [
    "Progress",
    "RunInfo",
    "Tracker",
    "TrackerUnavailable",
    "Tracking",
    "flatten",
    "read_metrics",
    "summary_lines",
]
