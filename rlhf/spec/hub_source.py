"""Hugging Face hub datasets as data sources, in one form: ``org/name[:config][@split]``.

    openai/gsm8k:main               config "main", the split from data.train_split / data.eval_split
    openai/gsm8k:main@test          ... and the split "test" for this source only
    OpenRLHF/prompt-collection-v0.1 a dataset with a single (default) config

``config`` is what ``datasets.load_dataset(path, name=...)`` calls the configuration (GSM8K has "main" and
"socratic" and no default); ``split`` may use datasets' slicing (``train[:1000]``). Pure string handling: validation
and the loader read sources the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SOURCE = re.compile(r"^(?P<path>[A-Za-z0-9][\w.-]*/[\w.-]+)(?::(?P<config>[\w.-]+))?(?:@(?P<split>[\w.\[\]:%+-]+))?$")
FORM = "org/name[:config][@split]"


@dataclass(frozen=True)
class HubSource:
    path: str  # org/name
    config: str | None = None
    split: str | None = None

    def __str__(self) -> str:
        return self.path + (f":{self.config}" if self.config else "") + (f"@{self.split}" if self.split else "")


def parse_hub_source(source: str) -> HubSource | None:
    """The parts of ``org/name[:config][@split]``, or None when ``source`` is not of that form."""
    m = _SOURCE.match(source)
    if m is None:
        return None
    return HubSource(m["path"], m["config"] or None, m["split"] or None)
