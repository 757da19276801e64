"""``rlhf-recipes import-trl``: a TRL command line (``trl grpo --config x.yaml --beta 0.04``), an ``accelerate
launch ... grpo.py ...`` line, a shell script running one, or a TRL YAML file alone becomes a recipe and a report
on every setting, with the contract of the other importers (rlhf.importers.common):

    rlhf-recipes import-trl --hardware h100 --check -- trl grpo --config grpo.yaml
    rlhf-recipes import-trl grpo.yaml --trainer grpo

Reading the input: .command; TRL's defaults and the fields with no equivalent: .vocab; what they mean here:
.mapping; the recipe: rlhf.importers.recipe.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rlhf.importers import common
from rlhf.importers import report as rep
from rlhf.importers.outcomes import Outcome
from rlhf.importers.placeholders import Placeholder, describe
from rlhf.importers.recipe import Recipe, build_recipe, render_yaml
from rlhf.importers.trl.command import Command, Setting, find_entry, is_yaml_path, split_command, yaml_command
from rlhf.importers.trl.mapping import Mapping, map_command

WHAT = "TRL"
HINT = "trl grpo|rloo|dpo|sft|reward|kto, or accelerate launch ... grpo.py"
EXAMPLE = "rlhf-recipes import-trl -- trl grpo --config grpo.yaml"


def setting_line(s: Setting, out: Outcome, recipe: Recipe, differs: dict[str, str]) -> rep.Line:
    """The report's line for one setting: what it became, and ``~>`` where our math differs from TRL's."""
    if s.unknown:
        parts = [describe(s.unknown)]
        parts += rep.placeholder_detail(out.keys, recipe) or ["TRL's default assumed"]
        return rep.Line(s.text, rep.UNKNOWN, "; ".join(parts))
    if out.problem:
        return rep.Line(s.text, rep.UNRECOGNISED, f"unrecognised: {out.problem}")
    if out.overridden_by:
        return rep.Line(s.text, rep.OVERRIDDEN, f"set again by the later {out.overridden_by}")
    if out.none:
        return rep.Line(s.text, rep.NONE, f"no equivalent ({out.none})")
    marker, detail = rep.written_detail(out.keys, out.note, recipe, "TRL's default; nothing to carry over")
    how = differs.get(s.key)
    if how:
        return rep.Line(s.text, rep.DIFFERS, f"{detail}; differs: {how}")
    return rep.Line(s.text, marker, detail)


@dataclass
class Conversion:
    cmd: Command
    mapping: Mapping
    recipe: Recipe
    notes: list[str]

    def rows(self) -> list[rep.Line]:
        rows = [
            setting_line(s, out, self.recipe, self.mapping.differs)
            for s, out in zip(self.cmd.settings, self.mapping.outcomes, strict=True)
        ]
        rows += [rep.Line(w, rep.UNRECOGNISED, "unrecognised: not a --flag or its value") for w in self.cmd.problems]
        return rows

    def yaml(self) -> str:
        c = self.recipe.choices
        model = self.mapping.model_path or c["model"]
        purpose = f"{c['algorithm']} on {model}, {c['hardware']}: imported from TRL {self.cmd.entry}"
        header = [
            "Written by `rlhf-recipes import-trl`; its report lists every setting.",
            "A comment names the TRL field a value comes from; 'default' marks TRL 1.16's own default.",
        ]
        if self.recipe.placeholders:
            header.append("??? : a value the input does not say; give it as key=VALUE.")
        return render_yaml(self.recipe, purpose, header, self.sources())

    def sources(self) -> dict[str, str]:
        named = list(zip((s.key for s in self.cmd.settings), self.mapping.outcomes, strict=True))
        return common.value_sources(named, self.mapping.carried)

    def report(self, recipe_path: str) -> str:
        rows = self.rows()
        entry = self.cmd.entry if self.cmd.entry.startswith("trl ") else f"TRL {self.cmd.entry}"
        title = f"{entry}: {len(rows)} setting(s) -> {recipe_path}"
        notes = self.recipe.notes + self.mapping.notes + self.notes
        return rep.render(
            title, rows, self.recipe, what="settings", source="TRL", carried=self.mapping.carried, notes=notes
        )

    def default_name(self) -> str:
        c = self.recipe.choices
        return f"{c['algorithm']}_{c['model']}_trl.yaml"

    def placeholders(self) -> dict[str, Placeholder]:
        return self.recipe.placeholders


def _finish(cmd: Command, hardware: str | None, notes: list[str]) -> Conversion:
    hardware, _ = common.hardware_type(hardware)
    mapping = map_command(cmd, hardware)
    recipe = build_recipe(mapping, hardware, mapping.family, mapping.rollout_backend)
    model = [
        out
        for s, out in zip(cmd.settings, mapping.outcomes, strict=True)
        if s.key == "model_name_or_path" and not out.overridden_by and not s.unknown
    ]
    launcher = cmd.launcher if cmd.launcher else []
    common.model_and_launcher(model[0] if model else None, recipe, launcher, notes)
    return Conversion(cmd, mapping, recipe, notes)


def convert(
    words: list[str],
    hardware: str | None = None,
    notes: list[str] | None = None,
    unknown: dict[int, tuple[str, ...]] | None = None,
) -> Conversion:
    return _finish(split_command(words, unknown), hardware, list(notes or []))


def convert_yaml(path: str, trainer: str | None = None, hardware: str | None = None) -> Conversion:
    """A TRL YAML config file alone."""
    return _finish(yaml_command(path, trainer), hardware, [])


def convert_words(w: common.Words, hardware: str | None = None) -> Conversion:
    return convert(w.words, hardware, w.notes, w.unknown)


def words_from_script(text: str, origin: str) -> common.Words:
    return common.one_command(text, origin, find_entry, WHAT, HINT)


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_arguments(p, "TRL, a TRL YAML config file")
    p.add_argument(
        "--trainer",
        choices=("grpo", "rloo", "dpo", "sft", "reward", "kto"),
        help="the TRL trainer a YAML config file alone is for (told from its fields when they say)",
    )


def _convert(args: argparse.Namespace) -> Conversion:
    given = list(args.input)
    if is_yaml_path(given):
        return convert_yaml(given[0], args.trainer, args.hardware)
    return convert_words(common.read_input(given, find_entry, WHAT, EXAMPLE, HINT), args.hardware)


def conversion(args: argparse.Namespace) -> Conversion:
    """The conversion ``rlhf-recipes import-trl`` writes and checks (rlhf.cli.import_recipe)."""
    return _convert(args)
