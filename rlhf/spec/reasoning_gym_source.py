"""The ``reasoning_gym:TASK?size=N&seed=S&OPTION=VALUE`` data source: its parsing and its checks.

    reasoning_gym:basic_arithmetic?size=2000&seed=1
    reasoning_gym:basic_arithmetic?size=200&seed=90000&min_terms=2&max_terms=2     # task options pass through

``size`` (default 1000) rows, generated with ``seed`` (default 0); every other option goes to the task's config
class (a number, true/false, or text). The ``reasoning-gym`` package (the ``reasoning`` extra) is imported only
when such a source is named. Item i of most tasks is drawn with ``Random(seed + i)``, so two sources of one task
overlap unless their ``[seed, seed + size)`` ranges are disjoint; :func:`overlap` finds that for validation.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

PREFIX = "reasoning_gym:"
DEFAULT_SIZE = 1000
DEFAULT_SEED = 0
INSTALL_HINT = 'pip install "rlhf[reasoning]" (or pip install reasoning-gym)'


class SourceError(ValueError):
    """A reasoning_gym: source that cannot be used; the message says why and the fix (callers name the source)."""


@dataclass(frozen=True)
class Source:
    task: str
    size: int = DEFAULT_SIZE
    seed: int = DEFAULT_SEED
    options: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        """The keyword arguments of the task's config class."""
        return {**self.options, "size": self.size, "seed": self.seed}


def is_source(text: str) -> bool:
    return text.startswith(PREFIX)


def _value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_source(text: str) -> Source:
    """``reasoning_gym:TASK?k=v&...`` -> :class:`Source` (no import of reasoning-gym)."""
    if not is_source(text):
        raise SourceError(f"not a {PREFIX}TASK source")
    task, _, query = text[len(PREFIX) :].partition("?")
    if not task:
        raise SourceError(f"name a task, e.g. {PREFIX}basic_arithmetic?size=1000&seed=1")
    options: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        k, eq, v = part.partition("=")
        if not k or not eq:
            raise SourceError(f"{part!r} is not OPTION=VALUE (join options with &)")
        options[unquote(k)] = _value(unquote(v))  # unquote, not unquote_plus: "+" is an operator here
    size, seed = options.pop("size", DEFAULT_SIZE), options.pop("seed", DEFAULT_SEED)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise SourceError(f"size={size!r} must be a whole number >= 1")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise SourceError(f"seed={seed!r} must be a whole number >= 0")
    return Source(task, size, seed, options)


def known_tasks() -> list[str]:
    """Every task name the installed reasoning-gym registers; :class:`SourceError` when it is not installed."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise SourceError(f"reasoning_gym: sources need the reasoning-gym package: {INSTALL_HINT}") from None
    return sorted(DATASETS)


def check_source(text: str) -> Source:
    """Parse and check a source against the installed reasoning-gym (task known, options accepted by its
    config); raises :class:`SourceError` naming the problem and the fix."""
    src = parse_source(text)
    tasks = known_tasks()
    if src.task not in tasks:
        close = difflib.get_close_matches(src.task, tasks, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise SourceError(f"unknown reasoning-gym task {src.task!r}; {hint}known tasks: {', '.join(tasks)}")
    from dataclasses import fields

    from reasoning_gym.factory import DATASETS

    config_cls = DATASETS[src.task][1]
    accepted = [f.name for f in fields(config_cls)]
    unknown = sorted(set(src.options) - set(accepted))
    if unknown:
        raise SourceError(f"{src.task} has no option {', '.join(unknown)}; its options: {', '.join(accepted)}")
    try:
        config = config_cls(**src.config())
        if hasattr(config, "validate"):
            config.validate()
    except Exception as e:  # the task's own check of its options (an AssertionError, mostly)
        raise SourceError(f"{src.task} refuses these options: {type(e).__name__}: {e}") from None
    return src


def overlap(a: Source, b: Source) -> bool:
    """Whether two sources of one task (with the same options) generate some of the same items."""
    if a.task != b.task or a.options != b.options:
        return False
    return a.seed < b.seed + b.size and b.seed < a.seed + a.size


_HYDRA_UNSAFE = re.compile(r"[&=;#!~^\s]")  # characters Hydra's override grammar refuses outside quotes


def quote_sources(overrides: Sequence[str]) -> list[str]:
    """Quote the reasoning_gym: sources inside command-line overrides, so that the documented form
    ``data.train_files=[reasoning_gym:basic_arithmetic?size=2000&seed=1,...]`` gets past Hydra's grammar (which
    refuses ``&`` and ``=`` in unquoted values). Everything else is left as it is."""
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and PREFIX in value:
            bracketed = value.startswith("[") and value.endswith("]")
            items = value[1:-1].split(",") if bracketed else [value]
            quoted = [_quote(item) for item in items]
            value = f"[{','.join(quoted)}]" if bracketed else quoted[0]
            o = f"{key}={value}"
        out.append(o)
    return out


def _quote(item: str) -> str:
    text = item.strip()
    if is_source(text) and _HYDRA_UNSAFE.search(text) and '"' not in text and "'" not in text:
        return f'"{text}"'
    return item
