"""Values an imported script does not say: a ``${SAVE_PATH}`` set outside it, a ``$(...)``, the script's own
arguments ``$@``. They never stop a conversion and are never guessed silently: each becomes a placeholder in the
recipe and a ``??`` line in the report ("set from ${SAVE_PATH}, unknown here"), and ``--check`` names them.

Where the value changes what is trained (a model, a dataset, a batch size, a learning rate), the recipe writes
Hydra's ``???``: ``rlhf-run`` then stops naming the key until the command line gives it. Where a default here
serves (where to write checkpoints, how to log and evaluate), the recipe keeps ours and shows the script's value as
a commented line to copy in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UNKNOWN = "??"
# Where to write, how to log and evaluate: the defaults here serve, so a value the script took from elsewhere is
# left as a comment. Every other key (eval datasets too: an evaluating run needs them) changes the run itself and
# is required (???).
_OPTIONAL = ("checkpoint.", "logging.", "eval.", "ray.", "seed")


def required(key: str) -> bool:
    """True when the recipe must not run without the user's value for ``key``."""
    return not key.startswith(_OPTIONAL)


def describe(sources: tuple[str, ...]) -> str:
    """'set from ${SAVE_PATH}, unknown here', for the report and the recipe's comments."""
    if not sources:
        return "unknown here"
    if all(s in ("$@", "$*") or s.startswith("${") and s[2:-1].isdigit() for s in sources):
        return f"the script's own arguments ({', '.join(sources)}), unknown here"
    if sources == ("???",):
        return "written as ??? (a value to give), unknown here"
    return f"set from {', '.join(sources)}, unknown here"


@dataclass(frozen=True)
class Placeholder:
    """One key of the recipe whose value the script did not say."""

    key: str
    written: str  # the flag(s) or override(s) as written: "--ckpt.output_dir ${SAVE_PATH}"
    sources: tuple[str, ...]  # the unknown pieces: ("${SAVE_PATH}",)
    stand_in: Any  # what validation and the plan use in its place (the other framework's default, or the text)
    default_here: Any = None  # optional keys: the value the recipe keeps
    why: str = ""  # instead of "set from ...": why the value cannot be carried over (a nested column, another API)

    @property
    def required(self) -> bool:
        return required(self.key)

    def comment(self) -> str:
        return f"{self.written}: {self.why or describe(self.sources)}"

    def need(self) -> str:
        """One line for --check: what to give and where it came from."""
        if self.required:
            return f"{self.key} (required; {self.comment()}): give {self.key}=VALUE"
        return f"{self.key} (optional; {self.comment()}): {self.key}={self.default_here!r} is used unless you give it"
