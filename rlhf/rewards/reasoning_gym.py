"""``reward.verifier=reasoning_gym``: each sample scored by its own task's ``score_answer``.

The label (made by rlhf.data.reasoning_gym) names the task, its config and the item's index; the item is
regenerated from them (reasoning-gym items are deterministic given seed and index), so the scorer sees exactly
the entry it expects, metadata included. The answer given is the last ``<answer>...</answer>`` of the response
(reasoning-gym's own convention) or, without one, the whole response.

:func:`check_task` runs in a checker process (rlhf.rewards.checker_process) under reward.verifier_timeout_s.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from rlhf.rewards.result import RewardError

_KEYS = ("task", "config", "index")


def read_label(label: str) -> dict[str, Any]:
    """The label of a reasoning_gym: row, checked; :class:`RewardError` naming the fix when it is not one."""
    try:
        info = json.loads(label)
    except ValueError:
        info = None
    if not isinstance(info, dict) or any(k not in info for k in _KEYS):
        raise RewardError(
            f"reward.verifier=reasoning_gym got the label {label[:80]!r}, which is not a reasoning_gym: row's label; "
            "use reasoning_gym:TASK data with data.label_key=label (or another verifier for other data)"
        )
    return info


@lru_cache(maxsize=256)
def _task(task: str, config: str) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(task, **json.loads(config))


def entry_of(info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The task object and the regenerated item a label names."""
    task = _task(info["task"], json.dumps(info["config"], sort_keys=True))
    item = task[int(info["index"])]
    if "answer" in info and str(item["answer"]) != info["answer"]:
        raise RewardError(
            f"reasoning_gym {info['task']} item {info['index']}: the installed reasoning-gym generates the answer "
            f"{item['answer']!r} where the row says {info['answer']!r}; regenerate the data with this version"
        )
    return task, item


def extract_answer(response: str) -> str:
    from reasoning_gym.utils import extract_answer as tagged

    found = tagged(response)
    return response.strip() if found is None else found


def warm_up() -> None:
    """Import reasoning-gym and its task registry (run by the checker process before its first check)."""
    import reasoning_gym.utils  # noqa: F401


def check_task(response: str, label: str) -> float:
    """The task's score_answer (0..1) of ``response`` for the item ``label`` names."""
    task, item = entry_of(read_label(label))
    return float(task.score_answer(answer=extract_answer(response), entry=item))
