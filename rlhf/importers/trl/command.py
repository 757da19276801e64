"""A TRL input -> its trainer, launcher and settings, in the order TRL reads them.

Three forms: ``trl grpo --config x.yaml --beta 0.04``; ``accelerate launch --config_file zero3.yaml grpo.py
--beta 0.04`` (TRL's example scripts take the CLI's flags); a TRL YAML file alone. As in TRL (TrlParser), the YAML
file's keys are defaults the flags override, so each is one :class:`Setting` and a later one overrides an earlier.
Values from the command line are strings until read as TRL's argument parser reads them (numbers, booleans).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlhf.importers.common import ImportProblem
from rlhf.importers.trl import vocab

TRAINERS = tuple(vocab.FAMILY)
# accelerate launch's options that take no value (the others take one).
_ACCELERATE_SWITCHES = {
    "--multi_gpu",
    "--use_deepspeed",
    "--use_fsdp",
    "--cpu",
    "--debug",
    "-m",
    "--module",
    "--no_python",
    "--quiet",
    "-q",
}


@dataclass
class Setting:
    """One TRL field as written, in a config file or on the command line."""

    text: str  # as written: "--beta 0.04" or "beta: 0.04 (x.yaml)"
    key: str  # TRL's field name
    value: Any
    origin: str  # "yaml" | "cli" | "accelerate"
    unknown: tuple[str, ...] = ()  # pieces not known here (${VAR})


@dataclass
class Command:
    trainer: str
    entry: str  # as written: "trl grpo", "accelerate launch grpo.py", "x.yaml"
    launcher: list[str] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    config_file: str = ""  # the TRL YAML file (--config)
    accelerate_file: str = ""  # the accelerate config file (--config_file, --accelerate_config)
    accelerate: dict[str, Any] = field(default_factory=dict)  # its values, when the file is here
    problems: list[str] = field(default_factory=list)  # words that are not flags


def find_entry(words: list[str]) -> tuple[int, str] | None:
    """(index of the trainer word, trainer) of a ``trl TRAINER`` or ``accelerate launch ... SCRIPT.py`` command."""
    for i, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        if base == "trl" and i + 1 < len(words) and words[i + 1] in TRAINERS:
            return i + 1, words[i + 1]
        if base in vocab.SCRIPTS and any(
            x.rsplit("/", 1)[-1] in ("accelerate", "python", "python3") for x in words[:i]
        ):
            return i, vocab.SCRIPTS[base]
    return None


def parse_value(raw: str) -> Any:
    """A flag's value as TRL's parser reads it: bools, None, ints, floats, else the text."""
    low = raw.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if raw == "None":  # lower-case "none" is a value of TRL's (scale_rewards, report_to)
        return None
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def read_flags(words: list[str], unknown: dict[int, tuple[str, ...]] | None = None) -> tuple[list[Setting], list[str]]:
    """``--key value``, ``--key=value``, a bare ``--switch`` (True, as TRL's parser reads a boolean) and a list
    ``--reward_funcs a b`` -> settings; any other word is a problem."""
    unknown = unknown or {}
    out: list[Setting] = []
    problems: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("--") or len(w) < 3:
            problems.append(w)
            i += 1
            continue
        name, eq, inline = w[2:].partition("=")
        name = name.replace("-", "_")
        if eq:
            out.append(Setting(w, name, parse_value(inline), "cli", unknown.get(i, ())))
            i += 1
            continue
        values, pieces = [], unknown.get(i, ())
        j = i + 1
        while j < len(words) and not words[j].startswith("--"):
            values.append(words[j])
            pieces += unknown.get(j, ())
            j += 1
        text = " ".join(words[i:j])
        if not values:
            out.append(Setting(text, name, True, "cli"))
        elif len(values) == 1:
            out.append(Setting(text, name, parse_value(values[0]), "cli", pieces))
        else:
            out.append(Setting(text, name, [parse_value(v) for v in values], "cli", pieces))
        i = j
    return out, problems


def read_yaml(path: str) -> dict[str, Any]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ImportProblem(f"{path}: no such config file; give the TRL YAML file's path as the command names it")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ImportProblem(f"{path}: not a YAML file TRL could read ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ImportProblem(f"{path}: a TRL config file is a mapping of field: value; this one is not")
    return data


def yaml_settings(path: str) -> list[Setting]:
    name = Path(path).name
    out = []
    for k, v in read_yaml(path).items():
        out.append(Setting(f"{k}: {_short(v)} ({name})", str(k), v, "yaml"))
    return out


def _short(v: Any) -> str:
    return yaml.safe_dump(v, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def _split_accelerate(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """accelerate launch's own options (before the script) -> {option: value}."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-"):
            i += 1
            continue
        name, eq, inline = w.partition("=")
        if eq:
            opts[name] = inline
            i += 1
        elif name in _ACCELERATE_SWITCHES or i + 1 >= len(words):
            opts[name] = "true"
            i += 1
        else:
            opts[name] = words[i + 1]
            i += 2
    return opts, []


def read_accelerate_file(path: str) -> dict[str, Any] | None:
    """The accelerate config file's values, or None when it is not here."""
    p = Path(path).expanduser()
    if not p.is_file():
        return None
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def split_command(words: list[str], unknown: dict[int, tuple[str, ...]] | None = None) -> Command:
    found = find_entry(words)
    if found is None:
        raise ImportProblem(
            "no TRL command in the line: expected `trl grpo|rloo|dpo|sft|reward|kto --config x.yaml [--flags]` or "
            "`accelerate launch [--config_file f.yaml] grpo.py [--flags]`, or give a TRL YAML file with --trainer"
        )
    i, trainer = found
    unknown = unknown or {}
    after = {k - i - 1: v for k, v in unknown.items() if k > i}
    flags, problems = read_flags(words[i + 1 :], after)
    before = words[:i]
    if before and before[-1].rsplit("/", 1)[-1] == "trl":
        entry, launcher = f"trl {trainer}", before[:-1]
    else:
        entry, launcher = f"accelerate launch {words[i]}", before
    cmd = Command(trainer, entry, launcher, problems=problems)
    settings: list[Setting] = []
    launch_at = next((j for j, w in enumerate(launcher) if w == "launch"), None)
    if launch_at is not None:
        opts, _ = _split_accelerate(launcher[launch_at + 1 :])
        for name, value in opts.items():
            key = name.lstrip("-").replace("-", "_")
            settings.append(Setting(f"{name} {value}", key, parse_value(value), "accelerate"))
    config = [s for s in flags if s.key == "config"]
    if config:
        cmd.config_file = str(config[-1].value)
        settings += yaml_settings(cmd.config_file)
    settings += [s for s in flags if s.key != "config"]
    cmd.settings = settings
    for s in settings:
        if s.key in ("config_file", "accelerate_config"):
            cmd.accelerate_file = str(s.value)
    if cmd.accelerate_file:
        cmd.accelerate = read_accelerate_file(cmd.accelerate_file) or {}
    return cmd


def yaml_command(path: str, trainer: str | None) -> Command:
    """A TRL YAML file alone: the trainer given, or told by the fields only GRPO's config has."""
    settings = yaml_settings(path)
    keys = {s.key for s in settings}
    if trainer is None:
        if (
            keys & {"reward_funcs", "loss_type", "scale_rewards", "importance_sampling_level"}
            and "num_generations" in keys
        ):
            trainer = "grpo"
        else:
            raise ImportProblem(
                f"{path}: a TRL config file does not say which trainer reads it; give it: --trainer "
                f"{'|'.join(TRAINERS)}"
            )
    if trainer not in TRAINERS:
        raise ImportProblem(f"--trainer {trainer}: not a TRL trainer this importer knows ({', '.join(TRAINERS)})")
    cmd = Command(trainer, Path(path).name, [], settings, config_file=path)
    for s in settings:
        if s.key in ("config_file", "accelerate_config"):
            cmd.accelerate_file = str(s.value)
    if cmd.accelerate_file:
        cmd.accelerate = read_accelerate_file(cmd.accelerate_file) or {}
    return cmd


def is_yaml_path(given: list[str]) -> bool:
    return len(given) == 1 and bool(re.search(r"\.ya?ml$", given[0]))
