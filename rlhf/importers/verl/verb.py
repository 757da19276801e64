"""``rlhf-recipes import-verl``: a veRL command line (``python3 -m verl.trainer.main_ppo`` with its Hydra overrides,
or ``verl.trainer.fsdp_sft_trainer`` / ``sft_trainer``), or a shell script running one, becomes a recipe and a
report on every override, with the contract of import-openrlhf (rlhf.importers.common):

    rlhf-recipes import-verl run_qwen2-7b_math.sh --hardware h100 --check
    rlhf-recipes import-verl -o grpo.yaml -- python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo ...

Reading the overrides: .overrides (Hydra's own parser); veRL's defaults and the keys with no equivalent: .vocab;
what they mean here: .mapping; the recipe: rlhf.importers.recipe.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rlhf.importers import common
from rlhf.importers import report as rep
from rlhf.importers.outcomes import Outcome
from rlhf.importers.placeholders import Placeholder, describe
from rlhf.importers.recipe import Recipe, build_recipe, render_yaml
from rlhf.importers.verl.mapping import COMING, Mapping, map_command
from rlhf.importers.verl.overrides import Command, Override, find_entry, split_command

WHAT = "veRL"
HINT = "verl.trainer.main_ppo, fsdp_sft_trainer, sft_trainer"
EXAMPLE = "rlhf-recipes import-verl -- python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo ..."


def override_line(o: Override, out: Outcome, recipe: Recipe, differs: dict[str, str] | None = None) -> rep.Line:
    """The report's line for one override: what it became, and ``~>`` where our math differs from veRL's."""
    if o.unknown:
        parts = [describe(o.unknown)]
        if not o.key:
            parts.append("any overrides it holds are not in the recipe: give them after -- to convert them as well")
        elif out.overridden_by:
            parts.append(f"set again by the later {out.overridden_by}")
        elif out.none:
            parts.append(f"no equivalent anyway ({out.none})")
        else:
            parts += rep.placeholder_detail(out.keys, recipe)
            if not any(k in recipe.placeholders for k in out.keys):
                parts.append("veRL's default assumed" + (f"; {out.note}" if out.note else ""))
        return rep.Line(o.text, rep.UNKNOWN, "; ".join(parts))
    if o.problem:
        return rep.Line(o.text, rep.UNRECOGNISED, f"unrecognised: {o.problem}")
    if out.problem:
        return rep.Line(o.text, rep.UNRECOGNISED, f"unrecognised: {out.problem}")
    if out.overridden_by:
        return rep.Line(o.text, rep.OVERRIDDEN, f"set again by the later {out.overridden_by}")
    if out.none:
        if out.none.startswith(COMING):
            return rep.Line(o.text, rep.NONE, out.none)
        return rep.Line(o.text, rep.NONE, f"no equivalent ({out.none})")
    marker, detail = rep.written_detail(out.keys, out.note, recipe, "veRL's default; nothing to carry over")
    how = (differs or {}).get(o.key)
    if how:
        return rep.Line(o.text, rep.DIFFERS, f"{detail}; differs: {how}")
    return rep.Line(o.text, marker, detail)


@dataclass
class Conversion:
    cmd: Command
    mapping: Mapping
    recipe: Recipe
    notes: list[str]

    def rows(self) -> list[rep.Line]:
        return [
            override_line(o, out, self.recipe, self.mapping.differs)
            for o, out in zip(self.cmd.overrides, self.mapping.outcomes, strict=True)
        ]

    def yaml(self) -> str:
        c = self.recipe.choices
        model = self.mapping.model_path or c["model"]
        purpose = f"{c['algorithm']} on {model}, {c['hardware']}: imported from veRL {self.cmd.module}"
        header = [
            "Written by `rlhf-recipes import-verl`; its report lists every override.",
            "A comment names the veRL key a value comes from; 'default' marks veRL's own default.",
        ]
        if self.recipe.placeholders:
            header.append("??? : a value the script does not say (or says in another form); give it as key=VALUE.")
        return render_yaml(self.recipe, purpose, header, self.sources())

    def sources(self) -> dict[str, str]:
        named = [
            (o.written_key or o.key, out) for o, out in zip(self.cmd.overrides, self.mapping.outcomes, strict=True)
        ]
        return common.value_sources(named, self.mapping.carried)

    def report(self, recipe_path: str) -> str:
        rows = self.rows()
        title = f"veRL {self.cmd.module}: {len(rows)} override(s) -> {recipe_path}"
        notes = self.recipe.notes + self.mapping.notes + self.notes
        coming = [r for r in rows if r.marker == rep.NONE and r.detail.startswith("coming")]
        if coming:
            notes.append(
                f"{len(coming)} override(s) map to keys another change is adding (coming): the recipe validates "
                "without them today; import again once they exist"
            )
        return rep.render(
            title, rows, self.recipe, what="overrides", source="veRL", carried=self.mapping.carried, notes=notes
        )

    def default_name(self) -> str:
        c = self.recipe.choices
        return f"{c['algorithm']}_{c['model']}_verl.yaml"

    def placeholders(self) -> dict[str, Placeholder]:
        return self.recipe.placeholders


def convert(
    words: list[str],
    hardware: str | None = None,
    notes: list[str] | None = None,
    unknown: dict[int, tuple[str, ...]] | None = None,
) -> Conversion:
    cmd = split_command(words, unknown)
    hardware, hw_type = common.hardware_type(hardware)
    mapping = map_command(cmd, hw_type)
    recipe = build_recipe(mapping, hardware, mapping.family, mapping.rollout_backend)
    notes = list(notes or [])
    model = [
        out
        for o, out in zip(cmd.overrides, mapping.outcomes, strict=True)
        if o.key == mapping.model_key and not out.overridden_by and not o.unknown
    ]
    common.model_and_launcher(model[0] if model else None, recipe, cmd.launcher, notes)
    return Conversion(cmd, mapping, recipe, notes)


def convert_words(w: common.Words, hardware: str | None = None) -> Conversion:
    return convert(w.words, hardware, w.notes, w.unknown)


def words_from_script(text: str, origin: str) -> common.Words:
    return common.one_command(text, origin, find_entry, WHAT, HINT)


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_arguments(p, "veRL")


def conversion(args: argparse.Namespace) -> common.Conversion:
    """The conversion ``rlhf-recipes import-verl`` writes and checks (rlhf.cli.import_recipe)."""
    return convert_words(common.read_input(list(args.input), find_entry, WHAT, EXAMPLE, HINT), args.hardware)
