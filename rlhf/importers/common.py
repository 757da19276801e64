"""What every ``import-*`` verb does alike: read a script (or the command after ``--``), write the recipe and the
report, and ``--check`` the recipe (compose, validate and plan, with the script's unknown values named as needs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlhf.errors import UserError
from rlhf.importers import shell
from rlhf.importers.conf_options import options
from rlhf.importers.placeholders import Placeholder


class ImportProblem(UserError):
    """The input is not a training command that can be converted (the message says why)."""


@dataclass
class Words:
    """The words of the one training command of the input, and what is unknown about them."""

    words: list[str]
    unknown: dict[int, tuple[str, ...]] = field(default_factory=dict)  # word index -> pieces not known here
    notes: list[str] = field(default_factory=list)
    origin: str = "the command line"


def one_command(text: str, origin: str, is_entry: Callable[[list[str]], Any], what: str, hint: str = "") -> Words:
    """The one command of ``text`` that ``is_entry`` recognises (e.g. runs openrlhf.cli.train_ppo_ray)."""
    commands = _commands(text, is_entry)
    if not commands:
        raise ImportProblem(f"{origin}: runs no {what} command{f' ({hint})' if hint else ''}")
    if len(commands) > 1:
        where = ", ".join(f"line {c.line}" for c in commands)
        raise ImportProblem(f"{origin}: runs {len(commands)} {what} commands ({where}); give one per file")
    c = commands[0]
    notes = []
    if c.unset:
        names = ", ".join(f"${v}" for v in c.unset)
        notes.append(
            f"{origin}: {names} {'is' if len(c.unset) == 1 else 'are'} used but never set in the script (set "
            "outside it): what depends on them is a placeholder in the recipe (?? lines)"
        )
    return Words(c.words, dict(c.unknown), notes, origin)


_SHELLS = ("bash", "sh", "/bin/bash", "/bin/sh", "/usr/bin/env bash")


def _commands(text: str, is_entry: Callable[[list[str]], Any], depth: int = 0) -> list[shell.Command]:
    """The commands of ``text`` that ``is_entry`` recognises, looking inside ``bash -c "..."`` too (SLURM scripts
    run the training command that way through srun)."""
    found = []
    for c in shell.parse_script(text):
        if is_entry(c.words):
            found.append(c)
            continue
        for i, w in enumerate(c.words[:-1]):
            if w in _SHELLS and c.words[i + 1] == "-c" and i + 2 < len(c.words) and depth < 3:
                try:
                    inner = _commands(c.words[i + 2], is_entry, depth + 1)
                except shell.ShellSyntaxError:
                    inner = []
                for cmd in inner:
                    cmd.line = c.line  # where the outer command starts: the inner text has its own numbering
                found.extend(inner)
                break
    return found


def read_input(
    given: list[str], is_entry: Callable[[list[str]], Any], what: str, example: str, hint: str = ""
) -> Words:
    """The verb's positional arguments: a script path or '-', or the command itself (after --)."""
    if is_entry(given) or len(given) > 1 or (given and given[0].startswith("-") and given[0] != "-"):
        return Words(list(given))  # the command's own reader names what is missing
    if not given:
        raise ImportProblem(
            f"give a shell script (a file, or - for standard input) or the command after --, e.g. {example}"
        )
    origin = given[0]
    if origin == "-":
        text = sys.stdin.read()
    else:
        path = Path(origin).expanduser()
        if not path.is_file():
            raise ImportProblem(f"{origin}: no such script file")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ImportProblem(f"{origin}: cannot be read as a text script ({e})") from None
    return one_command(text, origin, is_entry, what, hint)


class Conversion(Protocol):
    """What a verb's conversion hands back: the recipe text, its report, its placeholders, a default file name."""

    def yaml(self) -> str: ...
    def report(self, recipe_path: str) -> str: ...
    def default_name(self) -> str: ...
    def placeholders(self) -> dict[str, Placeholder]: ...


def hardware_type(hardware: str | None) -> tuple[str | None, str]:
    """(``--hardware`` lower-cased, the device type it names): an option's device type, or the type itself (h100
    when not given)."""
    hardware = hardware.lower() if hardware else None
    opts = options("hardware")
    return hardware, (opts[hardware]["device_type"] if hardware in opts else hardware) or "h100"


def model_and_launcher(outcome: Any, recipe: Any, launcher: list[str], notes: list[str]) -> None:
    """What the report says of the model flag (the option chosen) and of the launcher (not part of the recipe)."""
    if outcome is not None:
        outcome.keys += [k for k in ("model.path",) if k in recipe.values]
        outcome.note = f"model: option {recipe.choices['model']}"
    if launcher:
        notes.append(
            f"launcher `{' '.join(launcher)}` is not part of the recipe: run `rlhf-run +recipe=FILE` (on a Ray "
            "cluster, inside `ray job submit -- ` with ray.address=auto)"
        )


def value_sources(named: list[tuple[str, Any]], carried: dict[str, str]) -> dict[str, str]:
    """Our key -> the comment naming where its value came from: the inputs (name, outcome) that set it, else the
    other framework's default it carries."""
    out: dict[str, list[str]] = {}
    for name, outcome in named:
        for k in outcome.keys:
            out.setdefault(k, []).append(name)
    text = {k: " ".join(v) for k, v in out.items()}
    for k, src in carried.items():
        text.setdefault(k, f"default of {src}")
    return text


def add_arguments(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("input", nargs="*", help=f"a shell script running {what} (or -), or the command after --")
    p.add_argument(
        "--hardware",
        help="what the command cannot say: a device type (h100, h200, a100_80g, cpu) or a conf/hardware option "
        "(8xh100, ...); default h100 with the command's GPU count",
    )
    p.add_argument("-o", "--output", help="recipe file to write (default: ALGORITHM_MODEL_<framework>.yaml here)")
    p.add_argument("--report", help="also write the report to this file")
    p.add_argument("--force", action="store_true", help="overwrite the recipe file if it exists")
    p.add_argument(
        "--check",
        action="store_true",
        help="compose, validate and plan the recipe; print the plan and every value the script left unknown",
    )


def launcher_devices(launcher: list[str]) -> tuple[int | None, int | None]:
    """(nodes, GPUs per node) a deepspeed/torchrun launcher names, None where it does not say."""
    nodes = per_node = None
    keys = {
        "--num_gpus": "g",
        "--num-gpus": "g",
        "--nproc_per_node": "g",
        "--nproc-per-node": "g",
        "--num_nodes": "n",
        "--num-nodes": "n",
        "--nnodes": "n",
    }
    for i, w in enumerate(launcher):
        name, eq, inline = w.partition("=")
        if name in keys:
            value = inline if eq else (launcher[i + 1] if i + 1 < len(launcher) else "")
            if value.isdigit():
                if keys[name] == "g":
                    per_node = int(value)
                else:
                    nodes = int(value)
    return nodes, per_node
