"""A reward function named as TRL's CLI names one: a file (``FILE.py``), a function in a file (``FILE.py:NAME``), a
dotted import path (``trl.rewards.accuracy_reward``), or one of TRL's CLI short names (``think_format_reward``).

Parsing only (no import), so validation and the static check before start-up read references the way the loader
(rlhf.rewards.loader) does.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The names a file is searched for when none is given: OpenRLHF's, then veRL's (custom_reward_function.name's
#: default). Which contract the function is read in still comes from its signature.
DEFAULT_NAMES = ("reward_func", "compute_score")

#: TRL's ``trl grpo --reward_funcs`` short names (trl/scripts/grpo.py): the import path of each, and the factory
#: arguments TRL's CLI fixes (get_soft_overlong_punishment: max_completion_len=1280, soft_punish_cache=256).
TRL_SHORT_NAMES: dict[str, tuple[str, dict[str, int] | None]] = {
    "accuracy_reward": ("trl.rewards.accuracy_reward", None),
    "reasoning_accuracy_reward": ("trl.rewards.reasoning_accuracy_reward", None),
    "think_format_reward": ("trl.rewards.think_format_reward", None),
    "get_soft_overlong_punishment": (
        "trl.rewards.get_soft_overlong_punishment",
        {"max_completion_len": 1280, "soft_punish_cache": 256},
    ),
}


@dataclass(frozen=True)
class RewardRef:
    """One parsed reference. ``file`` for a python file (``name`` None: search DEFAULT_NAMES), else ``module`` and
    ``name`` of an import path; ``factory_kwargs``: call the named object with these to get the function."""

    text: str
    file: str = ""
    module: str = ""
    name: str | None = None
    factory_kwargs: dict[str, int] | None = None

    @property
    def is_file(self) -> bool:
        return bool(self.file)


def parse_ref(text: str) -> RewardRef:
    """``text`` as a RewardRef; a ValueError says what form it should take."""
    t = str(text).strip()
    if not t:
        raise ValueError("an empty reward function reference")
    if t in TRL_SHORT_NAMES:
        path, kwargs = TRL_SHORT_NAMES[t]
        module, _, name = path.rpartition(".")
        return RewardRef(t, module=module, name=name, factory_kwargs=kwargs)
    file, sep, name = t.rpartition(":")
    if sep and file.endswith(".py"):  # FILE.py:NAME (a Windows drive letter has no .py before its colon)
        if not name.isidentifier():
            raise ValueError(f"{t!r}: {name!r} after the colon is not a function name")
        return RewardRef(t, file=file, name=name)
    if t.endswith(".py") or "/" in t or "\\" in t:
        return RewardRef(t, file=t)
    module, _, name = t.rpartition(".")
    if module and all(part.isidentifier() for part in t.split(".")):
        return RewardRef(t, module=module, name=name)
    raise ValueError(
        f"{t!r} is neither a python file (FILE.py, FILE.py:NAME) nor a dotted import path (package.module.function)"
    )
