"""Experiment tracking: MLflow (one run per job, metrics per step, the resolved config and plan as artifacts), a
local metrics.jsonl that resume can rewind, and a console progress bar with a short end summary."""

from rlhf.tracking.mlflow_logger import MlflowRun, default_tracking_uri, flatten
from rlhf.tracking.progress import Progress, summary_lines
from rlhf.tracking.tracker import Tracker

__all__ = ["MlflowRun", "Progress", "Tracker", "default_tracking_uri", "flatten", "summary_lines"]
