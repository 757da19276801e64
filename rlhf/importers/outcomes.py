"""What became of each flag or override as written, for every importer's mapping: the bookkeeping both share."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    """What became of one input (a flag, an override) as written."""

    keys: list[str] = field(default_factory=list)  # our keys it set (before dropping those equal to the preset)
    none: str = ""  # no equivalent: "category: reason" ("coming: ...": a key this schema does not have yet)
    note: str = ""  # how it was carried over, when not obvious
    overridden_by: str = ""  # a later input set the same thing
    problem: str = ""  # a value of the wrong type for its key (importers that check types late)


class OutcomeBook:
    """``outcomes[i]`` for the i-th input; ``by[name]``: the input that set ``name`` last; ``handled``: every name a
    mapping step looked at (the rest are reported as having no equivalent, never dropped)."""

    outcomes: list[Outcome]
    by: dict[str, int]
    handled: set[str]

    def _outcome(self, name: str) -> Outcome | None:
        return self.outcomes[self.by[name]] if name in self.by else None

    def none(self, name: str, category: str, reason: str) -> None:
        self.handled.add(name)
        o = self._outcome(name)
        if o is not None:
            o.none = f"{category}: {reason}"

    def explain(self, name: str, text: str) -> None:
        self.handled.add(name)
        o = self._outcome(name)
        if o is not None:
            o.note = f"{o.note}; {text}" if o.note else text
