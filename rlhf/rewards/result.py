"""What every reward source returns, and the checks that turn a user's return value into it.

Protocol (OpenRLHF ``reward_func`` and remote reward): per sample a ``reward`` (what training optimises), a
``score`` (what is reported and filtered on, e.g. 0/1 correctness for pass@k and dynamic filtering; defaults to
the reward) and ``extra_logs`` (name -> one number per sample, logged as metrics).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf.errors import UserError


class RewardError(UserError):
    """A reward source that failed; the message names the file or URL and the problem. ``traceback_text``: the full
    traceback of the user's code when it raised (text, so that it pickles across a Ray actor's boundary with the
    error), which :meth:`keep_traceback` writes into the run folder."""

    def __init__(self, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.headline = message  # the message before the lifecycle appended its resume hint
        self.traceback_text = traceback_text

    def keep_traceback(self, run_dir: Path) -> str:
        """The one-line message, naming the file in ``run_dir`` that now holds the traceback (when there is one)."""
        from rlhf.rewards.failure import TRACEBACK_FILE

        message = str(self)
        if not self.traceback_text:
            return message
        path = Path(run_dir) / TRACEBACK_FILE
        try:
            path.write_text(self.traceback_text)
            kept = f"the full traceback is in {path}"
        except OSError as e:  # a full disk: the message itself still goes out
            kept = f"the full traceback could not be written to {path} ({e.strerror or e})"
        if message.startswith(self.headline):  # before the resume hint, which stays last
            return f"{self.headline}; {kept}{message[len(self.headline) :]}"
        return f"{message}; {kept}"


@dataclass
class RewardResult:
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rewards)

    @classmethod
    def concat(cls, parts: Sequence[RewardResult]) -> RewardResult:
        """Results of consecutive sample ranges joined in order; a log key missing from a part reads as NaN."""
        keys = list(dict.fromkeys(k for p in parts for k in p.extra_logs))
        return cls(
            rewards=[r for p in parts for r in p.rewards],
            scores=[s for p in parts for s in p.scores],
            extra_logs={k: [v for p in parts for v in p.extra_logs.get(k, [math.nan] * len(p))] for k in keys},
        )


def _as_list(value: Any) -> list[Any] | None:
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().reshape(-1).tolist()
    elif hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy array or scalar
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _floats(value: Any, n: int, what: str, origin: str, allow_scalar: bool = False) -> list[float]:
    if allow_scalar and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()  # a 0-d tensor, e.g. OpenRLHF's math_reward_func.py logs rewards.mean()
    items = _as_list(value)
    if items is None:
        if allow_scalar and isinstance(value, (int, float)) and not isinstance(value, bool):
            return [float(value)] * n
        raise RewardError(f"{origin}: {what} is {type(value).__name__}; expected a list or tensor of {n} numbers")
    if len(items) != n:
        raise RewardError(f"{origin}: {what} has {len(items)} values for {n} samples; return one per sample")
    out = []
    for i, x in enumerate(items):
        if not isinstance(x, (int, float)):  # bools count as 0/1 (a comparison tensor is a fine score)
            raise RewardError(f"{origin}: {what}[{i}] is {type(x).__name__} {x!r}; expected a number")
        out.append(float(x))
    return out


def coerce_result(value: Any, n: int, origin: str) -> RewardResult:
    """Check and convert a reward function's or endpoint's return value for ``n`` samples.

    Accepts ``{"rewards": ..., "scores": ... (optional), "extra_logs": {...} (optional)}`` or just the rewards,
    each a list, tuple, tensor or array of ``n`` numbers (extra-log values may also be one scalar for all).
    NaN or infinite rewards are refused: they would silently poison the advantages.
    """
    if isinstance(value, dict):
        if "rewards" not in value:
            raise RewardError(f"{origin}: returned a dict with keys {sorted(value)} but no 'rewards'")
        rewards = _floats(value["rewards"], n, "rewards", origin)
        scores = rewards if value.get("scores") is None else _floats(value["scores"], n, "scores", origin)
        logs = value.get("extra_logs") or {}
        if not isinstance(logs, dict):
            raise RewardError(f"{origin}: extra_logs is {type(logs).__name__}; expected a dict of name -> values")
        extra = {str(k): _floats(v, n, f"extra_logs[{k!r}]", origin, allow_scalar=True) for k, v in logs.items()}
    else:
        rewards = _floats(value, n, "the return value", origin)
        scores, extra = rewards, {}
    bad = [i for i, r in enumerate(rewards) if not math.isfinite(r)]
    if bad:
        raise RewardError(f"{origin}: reward of sample {bad[0]} is {rewards[bad[0]]} ({len(bad)} non-finite in all)")
    return RewardResult(list(rewards), list(scores), extra)
