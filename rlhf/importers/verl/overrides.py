"""A veRL command's words -> the entry point, the launcher before it, and every Hydra override after it.

Values are read with Hydra's own override parser (the grammar veRL's command line goes through), so
``data.train_files="['a.parquet', 'b.parquet']"`` is a list and ``trainer.logger=console`` a string. Nothing is
dropped: a word that is not an override (``$@``, a stray word) or a value Hydra would refuse is an
:class:`Override` with its problem, which the report lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlhf.importers.common import ImportProblem
from rlhf.importers.verl import vocab

_MODULE = re.compile(r"^verl[./]trainer[./](\w+?)(?:\.py)?$")
# Hydra's own flags before the overrides: which config file the run starts from.
CONFIG_FLAGS = {"--config-path", "--config-name", "-cp", "-cn", "--config-dir", "-cd"}


@dataclass
class Override:
    """One word after the entry point, as written, and what it sets in veRL's terms."""

    text: str  # as written: "actor_rollout_ref.rollout.n=5"
    key: str  # veRL key, renames applied ("" for a stray word or a Hydra flag)
    value: Any = None  # as Hydra reads it: str, int, float, bool, None, list, dict
    written_key: str = ""  # the key as written (before the renames of older veRL versions)
    prefix: str = ""  # "", "+", "++" (add / force-add) or "~" (delete)
    problem: str = ""  # why it is not understood
    unknown: tuple[str, ...] = ()  # pieces of its value not known here (${SAVE_PATH}, $(...), $@)
    flag: str = ""  # a Hydra flag (--config-name), with its value in ``value``


@dataclass
class Command:
    entry: str  # main_ppo | fsdp_sft_trainer | sft_trainer
    module: str  # as written: verl.trainer.main_ppo
    launcher: list[str]  # the words before the entry point (python3 -m, torchrun --nproc_per_node=8 -m, ...)
    overrides: list[Override] = field(default_factory=list)

    @property
    def family(self) -> str:
        return vocab.FAMILY[self.entry]


def _module_of(word: str) -> str | None:
    m = _MODULE.search(word.strip())
    return f"verl.trainer.{m.group(1)}" if m else None


def find_entry(words: list[str]) -> tuple[int, str] | None:
    """Index and module name of the word naming a ``verl.trainer`` module (``-m verl.trainer.main_ppo`` or a path
    ``verl/trainer/main_ppo.py``), or None."""
    for i, w in enumerate(words):
        name = _module_of(w)
        if name:
            return i, name
    return None


def split_command(words: list[str], unknown: dict[int, tuple[str, ...]] | None = None) -> Command:
    found = find_entry(words)
    if found is None:
        raise ImportProblem(
            "no veRL entry point in the command: expected e.g. 'python3 -m verl.trainer.main_ppo ...' or "
            "'torchrun ... -m verl.trainer.fsdp_sft_trainer ...'"
        )
    i, module = found
    if module not in vocab.ENTRY_POINTS:
        why = vocab.OTHER_ENTRY_POINTS.get(module, "not a veRL trainer this command knows")
        raise ImportProblem(f"{module}: {why}; import-verl converts {', '.join(vocab.ENTRY_POINTS)}")
    after = {k - i - 1: v for k, v in (unknown or {}).items() if k > i}
    return Command(vocab.ENTRY_POINTS[module], module, words[:i], read_overrides(words[i + 1 :], after))


def read_overrides(words: list[str], unknown: dict[int, tuple[str, ...]] | None = None) -> list[Override]:
    unknown = unknown or {}
    out: list[Override] = []
    i = 0
    while i < len(words):
        w = words[i]
        pieces = unknown.get(i, ())
        name, eq, inline = w.partition("=")
        if name in CONFIG_FLAGS:
            value, step = (inline, 1) if eq else ((words[i + 1], 2) if i + 1 < len(words) else ("", 1))
            more = pieces + (unknown.get(i + 1, ()) if not eq and step == 2 else ())
            text = w if eq or step == 1 else f"{w} {value}"
            out.append(Override(text, "", value, flag=name, unknown=more))
            i += step
            continue
        out.append(read_one(w, pieces))
        i += 1
    return out


def read_one(word: str, unknown: tuple[str, ...] = ()) -> Override:
    """One Hydra override as veRL would read it (or a stray word, with its problem)."""
    head, eq, raw = word.partition("=")
    prefix = "~" if head.startswith("~") else "++" if head.startswith("++") else "+" if head.startswith("+") else ""
    written = head[len(prefix) :]
    if not eq and prefix != "~" or not re.fullmatch(r"[A-Za-z_][\w\-]*(\.[\w\-]+)*", written):
        problem = "not a Hydra override (key=value)"
        return Override(word, "", None, written, prefix, problem if not unknown else "", unknown)
    key = vocab.ALIASES.get(written, written)
    if unknown or "???" in raw:
        # Left as written: Hydra's grammar would refuse $(...) anyway, and the value is not known here.
        return Override(word, key, raw, written, prefix, "", unknown or ("???",))
    if prefix == "~":
        return Override(word, key, None, written, prefix, "a deletion (~key): the key keeps veRL's default here")
    try:
        value = _hydra_value(f"{written}={raw}")
    except ValueError as e:
        return Override(word, key, raw, written, prefix, f"not a value Hydra reads: {e}")
    return Override(word, key, value, written, prefix)


def _hydra_value(override: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    # Hydra's grammar refuses a leading ~ in an unquoted value; the shell reading writes $HOME as ~ (rlhf expands
    # it where the recipe runs), so it is hidden from the parser and put back.
    home = "__rlhf_home__"
    text = re.sub(r"(?<=[=\s,\[(])~(?=/)", home, override)
    try:
        parsed = OverridesParser.create().parse_overrides([text])[0]
    except HydraException as e:
        raise ValueError(str(e).splitlines()[0][:160]) from None
    except Exception as e:  # noqa: BLE001 - Hydra's parser raises its ANTLR errors too; each is one bad value
        raise ValueError(f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}") from None
    if parsed.is_sweep_override():
        raise ValueError("a sweep (a,b) needs -m; a value with commas must be quoted, as veRL needs it too")
    return _put_home(parsed.value(), home)


def _put_home(value: Any, home: str) -> Any:
    if isinstance(value, str):
        return value.replace(home, "~")
    if isinstance(value, list):
        return [_put_home(v, home) for v in value]
    if isinstance(value, dict):
        return {k: _put_home(v, home) for k, v in value.items()}
    return value
