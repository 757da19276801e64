"""The import report, for every importer: one line per flag or override as written, with what it became.

Markers: ``->`` written to the recipe; ``~>`` written, but the math here differs from the source's in the way the line
says (veRL's report); ``==`` carried over but equal to the chosen options (nothing to write);
``--`` no equivalent (unsupported, GPU-only, superseded, not needed, removed upstream, or coming: a key this
version's schema does not have yet); ``~~`` set again later; ``??`` its value is unknown here (set outside the
script: a placeholder in the recipe); ``!!`` unrecognised (not a flag or key of the entry point, or a malformed
value).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.importers.placeholders import UNKNOWN
from rlhf.importers.recipe import Recipe, _scalar

WRITTEN, EQUAL, NONE, OVERRIDDEN, UNRECOGNISED = "->", "==", "--", "~~", "!!"
DIFFERS = "~>"
LABELS = (
    (WRITTEN, "written"),
    (DIFFERS, "written, math differs"),
    (EQUAL, "as here already"),
    (NONE, "without equivalent"),
    (OVERRIDDEN, "set twice"),
    (UNKNOWN, "unknown here"),
    (UNRECOGNISED, "unrecognised"),
)


@dataclass(frozen=True)
class Line:
    flag: str  # as written
    marker: str
    detail: str


def written_detail(keys: list[str], note: str, recipe: Recipe, nothing: str) -> tuple[str, str]:
    """(marker, detail) of an input that set ``keys``: written, or equal to the chosen options."""
    written = [k for k in keys if k in recipe.values]
    equal = [k for k in keys if k not in recipe.values]
    holders = recipe.placeholders
    parts = [
        f"{k}=??? (give it)" if k in holders and holders[k].required else f"{k}={_scalar(recipe.values[k])}"
        for k in written
    ]
    if equal:
        parts.append("as in the chosen options: " + ", ".join(f"{k}={_scalar(recipe.equal.get(k))}" for k in equal))
    if note:
        parts.append(note)
    if not parts:
        return EQUAL, nothing
    placed = note.startswith(("placement:", "model:", "hardware:"))
    return (WRITTEN if written or placed else EQUAL), "; ".join(parts)


def placeholder_detail(keys: list[str], recipe: Recipe) -> list[str]:
    """What became of the keys of an input whose value is unknown here."""
    parts = []
    for k in keys:
        h = recipe.placeholders.get(k)
        if h is not None and h.required:
            parts.append(f"{k}=??? in the recipe: give {k}=VALUE")
        elif h is not None:
            parts.append(f"{k}: the default here ({_scalar(h.default_here)}) stands; commented in the recipe")
    return parts


def render(
    title: str,
    rows: list[Line],
    recipe: Recipe,
    *,
    what: str,
    source: str,
    carried: dict[str, str],
    notes: list[str],
) -> str:
    """The whole report: a title, the counts, the chosen options, one line per input, carried defaults, notes."""
    counts = {m: sum(r.marker == m for r in rows) for m, _ in LABELS}
    out = [
        title,
        # "math differs" only where an importer says so (veRL's): other reports keep their counts line.
        "  " + ", ".join(f"{counts[m]} {label}" for m, label in LABELS if m != DIFFERS or counts[m]),
        "",
        "recipe: " + ", ".join(f"{g}={o}" for g, o in recipe.choices.items()),
        "",
        what,
    ]
    width = min(max((len(r.flag) for r in rows), default=0), 52)
    for r in rows:
        text = r.flag if len(r.flag) <= 70 else r.flag[:67] + "..."
        if len(text) <= width:
            out.append(f"  {text:<{width}}  {r.marker} {r.detail}")
        else:
            out.append(f"  {text}")
            out.append(f"  {'':<{width}}  {r.marker} {r.detail}")
    shown = {k: v for k, v in carried.items() if k in recipe.values and k not in recipe.placeholders}
    if shown:
        out += ["", f"{source} defaults carried over (the command does not set them; the chosen options differ)"]
        out += [f"  {k}={_scalar(recipe.values[k])}  (default of {src})" for k, src in shown.items()]
    if notes:
        out += ["", "notes"] + [f"  - {n}" for n in notes]
    return "\n".join(out) + "\n"
