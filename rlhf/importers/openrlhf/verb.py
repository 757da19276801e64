"""``rlhf-recipes import-openrlhf``: an OpenRLHF command line, or a shell script that runs one, becomes a recipe
and a report on every flag.

    rlhf-recipes import-openrlhf train_grpo.sh --hardware h100 --check
    rlhf-recipes import-openrlhf -o grpo.yaml -- python3 -m openrlhf.cli.train_ppo_ray --pretrain ... --bf16

Then ``rlhf-run +recipe=grpo.yaml``. The conversion steps live in their own modules: reading the script
(rlhf.importers.shell), the flags (.args, .flags), what they mean here (.mapping), the recipe (.recipe) and the
report (.report); what every import verb does alike is in rlhf.importers.common.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rlhf.importers import common
from rlhf.importers.openrlhf.args import Command, find_entry, split_command
from rlhf.importers.openrlhf.mapping import Mapping, map_command
from rlhf.importers.openrlhf.report import render
from rlhf.importers.placeholders import Placeholder
from rlhf.importers.recipe import Recipe, build_recipe, render_yaml

WHAT = "OpenRLHF"
HINT = "openrlhf.cli.train_ppo_ray, train_sft, train_rm, train_dpo"
EXAMPLE = "rlhf-recipes import-openrlhf -- python3 -m openrlhf.cli.train_ppo_ray --pretrain ..."


@dataclass
class Conversion:
    cmd: Command
    mapping: Mapping
    recipe: Recipe
    notes: list[str]  # about reading the input (launcher, variables set outside the script)

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
        if self.recipe.placeholders:
            header.append("??? : the script took this value from outside (a variable, $(...)); give it as key=VALUE.")
        return render_yaml(self.recipe, purpose, header, self.sources())

    def sources(self) -> dict[str, str]:
        named = [(f"--{f.name}", o) for f, o in zip(self.cmd.flags, self.mapping.outcomes, strict=True)]
        return common.value_sources(named, self.mapping.carried)

    def report(self, recipe_path: str) -> str:
        return render(self.cmd, self.mapping, self.recipe, recipe_path=recipe_path, extra_notes=self.notes)

    def default_name(self) -> str:
        c = self.recipe.choices
        return f"{c['algorithm']}_{c['model']}_openrlhf.yaml"

    def placeholders(self) -> dict[str, Placeholder]:
        return self.recipe.placeholders


def words_from_script(text: str, origin: str) -> common.Words:
    """The words of the one OpenRLHF command in a script, what is unknown about them, and notes."""
    return common.one_command(text, origin, find_entry, WHAT, HINT)


def convert(
    words: list[str],
    hardware: str | None = None,
    notes: list[str] | None = None,
    unknown: dict[int, tuple[str, ...]] | None = None,
) -> Conversion:
    """Words of an OpenRLHF command (launcher included) -> the mapping, the recipe and what to say about them."""
    cmd = split_command(words, unknown)
    hardware, hw_type = common.hardware_type(hardware)
    mapping = map_command(cmd, hw_type)
    recipe = build_recipe(mapping, hardware, mapping.family)
    notes = list(notes or [])
    model_flag = "actor.model_name_or_path" if cmd.entry == "train_ppo_ray" else "model.model_name_or_path"
    model = [
        o for f, o in zip(cmd.flags, mapping.outcomes, strict=True) if model_flag in f.sets and not o.overridden_by
    ]
    common.model_and_launcher(model[0] if model else None, recipe, cmd.launcher, notes)
    return Conversion(cmd, mapping, recipe, notes)


def convert_words(w: common.Words, hardware: str | None = None) -> Conversion:
    return convert(w.words, hardware, w.notes, w.unknown)


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_arguments(p, "OpenRLHF")


def conversion(args: argparse.Namespace) -> common.Conversion:
    """The conversion ``rlhf-recipes import-openrlhf`` writes and checks (rlhf.cli.import_recipe)."""
    return convert_words(common.read_input(list(args.input), find_entry, WHAT, EXAMPLE, HINT), args.hardware)
