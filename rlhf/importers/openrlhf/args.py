"""An OpenRLHF command's words -> the entry point, the launcher in front of it, and every flag with its values.

Nothing is dropped: a word that is neither a known flag nor one of its values becomes a :class:`Flag` with
``canonical=None``, which the report lists as unrecognised.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from rlhf.importers.common import ImportProblem
from rlhf.importers.openrlhf import flags as vocab

_ENTRY = re.compile(r"(?:^|[./])openrlhf[./]cli[./](\w+?)(?:\.py)?$")


@dataclass
class Flag:
    """One flag as written (or a stray word), and what it sets in OpenRLHF's own terms."""

    text: str  # as written: "--pretrain OpenRLHF/Llama-3-8b-sft-mixture"
    name: str  # without the dashes; "" for a stray word
    raw: list[str]  # its values as written
    sets: dict[str, Any] = field(default_factory=dict)  # canonical dotted flag -> typed value
    problem: str = ""  # why it is not understood (unknown flag, wrong number of values, bad value)
    dropped_upstream: bool = False  # removed from OpenRLHF itself before the rename
    # Pieces of its values this reading cannot know (${SAVE_PATH} set outside the script, $(...), $@): the flag is
    # then a placeholder; ``sets`` holds OpenRLHF's default for each canonical name, so the mapping can go on.
    unknown: tuple[str, ...] = ()

    @property
    def style(self) -> str:
        return "dotted" if "." in self.name else "flat"


@dataclass
class Command:
    entry: str  # train_ppo_ray | train_sft | train_rm | train_dpo
    launcher: list[str]  # the words before the entry point (ray job submit ..., deepspeed --module, ...)
    flags: list[Flag]

    def vocabulary(self) -> str:
        styles = {f.style for f in self.flags if f.name and f.sets and not f.problem and _styled(f.name)}
        return "mixed" if len(styles) > 1 else styles.pop() if styles else "flat"


def _styled(name: str) -> bool:
    # Names without a dot that are identical in both vocabularies (local_rank, use_ms) say nothing.
    return "." in name or name not in ("local_rank", "use_ms")


def find_entry(words: list[str]) -> tuple[int, str] | None:
    """Index and name of the word naming an ``openrlhf.cli`` module, or None."""
    for i, w in enumerate(words):
        m = _ENTRY.search(w)
        if m:
            return i, m.group(1)
    return None


def split_command(words: list[str], unknown: dict[int, tuple[str, ...]] | None = None) -> Command:
    """Find the entry point in ``words`` and read the flags after it; ``unknown``: word index -> the pieces of that
    word the shell reading could not know (rlhf.importers.shell.Command.unknown)."""
    found = find_entry(words)
    if found is None:
        raise ImportProblem(
            "no OpenRLHF entry point in the command: expected e.g. 'python3 -m openrlhf.cli.train_ppo_ray ...' or "
            "'deepspeed --module openrlhf.cli.train_sft ...'"
        )
    i, entry = found
    if entry not in vocab.ENTRY_POINTS:
        why = vocab.OTHER_ENTRY_POINTS.get(entry, "not an OpenRLHF trainer this command knows")
        raise ImportProblem(f"openrlhf.cli.{entry}: {why}; import-openrlhf converts {', '.join(vocab.ENTRY_POINTS)}")
    after = {k - i - 1: v for k, v in (unknown or {}).items() if k > i}
    return Command(entry, words[:i], read_flags(entry, words[i + 1 :], after))


def read_flags(entry: str, words: list[str], unknown: dict[int, tuple[str, ...]] | None = None) -> list[Flag]:
    unknown = unknown or {}
    flags: list[Flag] = []
    i = 0
    while i < len(words):
        w = words[i]
        if not (w.startswith("--") and len(w) > 2) or (i in unknown and not w.startswith("--")):
            flag = Flag(w, "", [w], problem="a word with no flag before it", unknown=unknown.get(i, ()))
            flags.append(flag)
            i += 1
            continue
        name, eq, inline = w[2:].partition("=")
        n = vocab.arity(entry, name)
        j = i + 1
        if eq:
            raw = [inline]
        else:
            stop = j
            while stop < len(words) and not words[stop].startswith("--"):
                stop += 1
            take = stop - j if n is None or n == vocab.MANY else min(n, stop - j)
            raw = words[j : j + take]
            j += take
        pieces = tuple(dict.fromkeys(s for k in range(i, j if not eq else i + 1) for s in unknown.get(k, ())))
        if "???" in raw:  # Hydra's own "value to give": never a value to write
            pieces += ("???",)
        flags.append(_typed(entry, Flag(" ".join([w, *map(_shown, raw)]), name, raw, unknown=pieces)))
        i = j
    return flags


def _shown(value: str) -> str:
    """A value as a shell would need it written (one line, quoted where it has blanks)."""
    if value and not any(c in value for c in " \t\n'\"$\\"):
        return value
    if "\n" in value or "\t" in value or "'" in value:
        return "$'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t") + "'"
    return f"'{value}'"


def _convert(value: str, typ: type, flag: str) -> Any:
    try:
        if typ is int:
            try:
                return int(value)
            except ValueError:
                as_float = float(value)  # OpenRLHF's own defaults are written like 1e8
                if not as_float.is_integer():
                    raise
                return int(as_float)
        if typ is float:
            number = float(value)
            if not math.isfinite(number):
                raise ValueError(value)  # argparse takes inf and nan; no setting here means anything with them
            return number
    except ValueError:
        raise ValueError(f"{flag} takes a{'n' if typ is int else ''} {typ.__name__}, got {value!r}") from None
    return value


def stand_in(d: vocab.FlagDef, raw: list[str]) -> Any:
    """What an unresolved flag value stands for while mapping: the text as written for a path or name OpenRLHF has
    no default for (``${WORK_DIR}/reward.py`` still says it is a reward file), else OpenRLHF's default (a number
    or a choice as written would mean nothing)."""
    if d.type is str and d.default is None and raw:
        return list(raw) if d.arity == vocab.MANY else raw[0]
    return d.default


def _typed(entry: str, flag: Flag) -> Flag:
    if flag.name in vocab.DROPPED_FLAT:
        flag.dropped_upstream = True
        return flag
    alias = vocab.resolve(entry, flag.name)
    if not alias:
        flag.problem = f"not a {entry} flag (in neither the dotted nor the flat vocabulary)"
        return flag
    for canonical, fixed in alias:
        d = vocab.definition(entry, canonical)
        if fixed is not None:
            if flag.raw:
                flag.problem = f"--{flag.name} takes no value"
                return flag
            flag.sets[canonical] = fixed
            continue
        want = {vocab.BOOL: 0, vocab.ONE: 1, vocab.TWO: 2}.get(d.arity)
        if flag.unknown and d.arity != vocab.BOOL:
            flag.sets[canonical] = stand_in(d, flag.raw)
            continue
        if want is not None and len(flag.raw) != want:
            flag.problem = f"--{flag.name} takes {want} value(s), got {len(flag.raw)}"
            return flag
        if d.arity == vocab.MANY and not flag.raw:
            flag.problem = f"--{flag.name} needs at least one value"
            return flag
        try:
            if d.arity == vocab.BOOL:
                value: Any = True
            elif d.arity == vocab.ONE:
                value = _convert(flag.raw[0], d.type, f"--{flag.name}")
            else:
                value = [_convert(v, d.type, f"--{flag.name}") for v in flag.raw]
        except ValueError as e:
            flag.problem = str(e)
            flag.sets.clear()
            return flag
        flag.sets[canonical] = value
    return flag
