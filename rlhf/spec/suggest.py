"""Did-you-mean for a name a user mistyped: a config key, a config group's option, a recipe. Pure, no Hydra."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

# difflib's ratio: 0.6 keeps one-letter slips and swapped letters (zero_stag, grpoo, grpo_tiny_cpus) and leaves out
# names that only share a prefix with the typo
CUTOFF = 0.6


def nearest(word: str, names: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``names`` closest to ``word``, the closest first."""
    return difflib.get_close_matches(word, list(names), n=n, cutoff=CUTOFF)


def did_you_mean(candidates: Sequence[str]) -> str:
    """``"did you mean a?"``, ``"did you mean a or b?"``, ``"did you mean a, b or c?"``; "" for none."""
    if not candidates:
        return ""
    head = ", ".join(candidates[:-1])
    return f"did you mean {head + ' or ' if head else ''}{candidates[-1]}?"


_MISSING_OPTION = re.compile(r"Could not find '(?P<path>[^']+)'")
_OPTIONS_OF = re.compile(r"^Available options in '(?P<group>[^']+)':$")


def missing_option_hint(hydra_message: str) -> str:
    """For Hydra's "Could not find 'GROUP/OPTION'" (followed by "Available options in 'GROUP':" and one option per
    line), the override the user most likely meant (``algorithm=grpo``; ``+recipe=...`` for a recipe); "" when the
    message is another one or no option is close."""
    missing = _MISSING_OPTION.search(hydra_message)
    if missing is None or "/" not in missing["path"]:
        return ""
    group, option = missing["path"].rsplit("/", 1)
    options: list[str] = []
    lines = hydra_message.splitlines()
    for i, line in enumerate(lines):
        m = _OPTIONS_OF.match(line.strip())
        if m and m["group"] == group:
            for opt in lines[i + 1 :]:
                if not opt.startswith(("\t", " ")) or not opt.strip():
                    break
                options.append(opt.strip())
            break
    prefix = "+" if group == "recipe" else ""  # a recipe is added to the primary config, not chosen from a default
    key = group.replace("/", ".") if group.startswith("hydra/") else group
    return did_you_mean([f"{prefix}{key}={o}" for o in nearest(option, options)])
