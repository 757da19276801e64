"""``rlhf-recipes import-openrlhf``: an OpenRLHF command line, or a shell script that runs one, becomes a recipe
and a report on every flag.

    rlhf-recipes import-openrlhf train_grpo.sh --hardware h100 --check
    rlhf-recipes import-openrlhf -o grpo.yaml -- python3 -m openrlhf.cli.train_ppo_ray --pretrain ... --bf16

Then ``rlhf-run +recipe=grpo.yaml``. The conversion steps live in their own modules: reading the script
(rlhf.cli.importers.shell), the flags (.args, .flags), what they mean here (.mapping), the recipe (.recipe) and the
report (.report).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from rlhf.cli.importers import shell
from rlhf.cli.importers.openrlhf.args import Command, ImportProblem, find_entry, split_command
from rlhf.cli.importers.openrlhf.mapping import Mapping, map_command
from rlhf.cli.importers.openrlhf.recipe import Recipe, build_recipe, options, render_yaml
from rlhf.cli.importers.openrlhf.report import render


@dataclass
class Conversion:
    cmd: Command
    mapping: Mapping
    recipe: Recipe
    notes: list[str]  # about reading the input (launcher, unexpanded shell text)

    def yaml(self) -> str:
        c = self.recipe.choices
        purpose = (
            f"{c['algorithm']} on {self.mapping.model_path or c['model']}, {c['hardware']}: imported from an "
            f"OpenRLHF {self.cmd.entry} command"
        )
        header = [
            f"Written by `rlhf-recipes import-openrlhf` ({self.cmd.vocabulary()} flags); its report lists every flag.",
            "A comment names the OpenRLHF flag a value comes from; 'default' marks OpenRLHF's own default.",
        ]
        return render_yaml(self.recipe, purpose, header, self.sources())

    def sources(self) -> dict[str, str]:
        out: dict[str, list[str]] = {}
        for flag, outcome in zip(self.cmd.flags, self.mapping.outcomes, strict=True):
            for k in outcome.keys:
                out.setdefault(k, []).append(f"--{flag.name}")
        text = {k: " ".join(v) for k, v in out.items()}
        for k, src in self.mapping.carried.items():
            text.setdefault(k, f"default of {src}")
        return text

    def report(self, recipe_path: str) -> str:
        return render(self.cmd, self.mapping, self.recipe, recipe_path=recipe_path, extra_notes=self.notes)


def words_from_script(text: str, origin: str) -> tuple[list[str], list[str]]:
    """The words of the one OpenRLHF command in a script, and notes on what could not be expanded."""
    commands = [c for c in shell.parse_script(text) if find_entry(c.words)]
    if not commands:
        raise ImportProblem(f"{origin}: runs no OpenRLHF command (openrlhf.cli.train_ppo_ray, train_sft, ...)")
    if len(commands) > 1:
        where = ", ".join(f"line {c.line} ({find_entry(c.words)[1]})" for c in commands)
        raise ImportProblem(f"{origin}: runs {len(commands)} OpenRLHF commands ({where}); give one per file")
    c = commands[0]
    notes = [
        f"{origin} line {c.line}: {u!r} is a command substitution or an unset variable, left as written"
        for u in c.unexpanded
    ]
    notes += [f"{origin}: ${v} is used but never set in the script; it expanded to nothing" for v in c.unset]
    return c.words, notes


def convert(words: list[str], hardware: str | None = None, notes: list[str] | None = None) -> Conversion:
    """Words of an OpenRLHF command (launcher included) -> the mapping, the recipe and what to say about them."""
    cmd = split_command(words)
    hardware = hardware.lower() if hardware else None
    hw_type = hardware
    opts = options("hardware")
    if hardware in opts:
        hw_type = opts[hardware]["device_type"]
    mapping = map_command(cmd, hw_type or "h100")
    recipe = build_recipe(mapping, hardware)
    notes = list(notes or [])
    model_flag = "actor.model_name_or_path" if cmd.entry == "train_ppo_ray" else "model.model_name_or_path"
    for flag, outcome in zip(cmd.flags, mapping.outcomes, strict=True):
        if model_flag in flag.sets and not outcome.overridden_by:
            outcome.keys += [k for k in ("model.path",) if k in recipe.values]
            outcome.note = f"model: option {recipe.choices['model']}"
    if cmd.launcher:
        notes.append(
            f"launcher `{' '.join(cmd.launcher)}` is not part of the recipe: run `rlhf-run +recipe=FILE` (on a Ray "
            "cluster, inside `ray job submit -- ` with ray.address=auto)"
        )
    return Conversion(cmd, mapping, recipe, notes)


def read_input(given: list[str]) -> tuple[list[str], list[str], str]:
    """(words, notes, origin) from the verb's positional arguments: a script path or '-', or the command itself."""
    if find_entry(given) or len(given) > 1 or (given and given[0].startswith("--")):
        return given, [], "the command line"  # split_command names what is missing
    if not given:
        raise ImportProblem(
            "give a shell script (a file, or - for standard input) or the command after --, e.g. "
            "rlhf-recipes import-openrlhf -- python3 -m openrlhf.cli.train_ppo_ray --pretrain ..."
        )
    origin = given[0]
    if origin == "-":
        text = sys.stdin.read()
    else:
        path = Path(origin).expanduser()
        if not path.is_file():
            raise ImportProblem(f"{origin}: no such script file")
        text = path.read_text()
    words, notes = words_from_script(text, origin)
    return words, notes, origin


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", nargs="*", help="a shell script running OpenRLHF (or -), or the command after --")
    p.add_argument(
        "--hardware",
        help="what the command cannot say: a device type (h100, h200, a100_80g, cpu) or a conf/hardware option "
        "(8xh100, ...); default h100 with the command's GPU count",
    )
    p.add_argument("-o", "--output", help="recipe file to write (default: ALGORITHM_MODEL_openrlhf.yaml here)")
    p.add_argument("--report", help="also write the report to this file")
    p.add_argument("--force", action="store_true", help="overwrite the recipe file if it exists")
    p.add_argument("--check", action="store_true", help="compose, validate and plan the recipe; print the plan")


def run(args: argparse.Namespace) -> int:
    from rlhf.cli.common import EXIT_USER_ERROR, fail

    try:
        words, notes, _ = read_input(list(args.input))
        conv = convert(words, args.hardware, notes)
    except (ImportProblem, shell.ShellSyntaxError) as e:
        fail(str(e))
    c = conv.recipe.choices
    out = Path(args.output or f"{c['algorithm']}_{c['model']}_openrlhf.yaml")
    if out.exists() and not args.force:
        fail(f"{out} exists; choose another file with -o, or pass --force")
    out.write_text(conv.yaml())
    report = conv.report(str(out))
    print(report, end="")
    if args.report:
        Path(args.report).write_text(report)
    print(f"\nwrote {out}; run it with: rlhf-run +recipe={out}")
    if not args.check:
        return 0
    return EXIT_USER_ERROR if not check_recipe(out) else 0


def check_recipe(path: Path) -> bool:
    """Compose, validate and plan the written recipe, printing the plan (or every problem); True when valid."""
    from rlhf.cli.common import compose_or_fail
    from rlhf.cli.plan import render as render_plan
    from rlhf.launch.plan import plan
    from rlhf.spec import SpecInvalid, build, check

    spec = build(compose_or_fail([f"+recipe={path}"]))
    print()
    try:
        check(spec, context=str(path))
    except SpecInvalid as e:
        print(f"check: {e}")
        return False
    print(render_plan(plan(spec)))
    return True
