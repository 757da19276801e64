"""What a dataset builder did with the rows: printed by the pipeline and logged as metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class DataReport:
    """Counts for one built dataset (e.g. ``name="train prompts"``).

    ``rows_read`` rows came in; ``skipped_bad`` of them were unusable (malformed line, missing key, wrong type) and
    skipped because ``data.on_bad_row=skip``; ``dropped_too_long`` were longer than the limit and dropped;
    ``truncated`` were cut to the limit and kept; ``rows_out`` samples remain (after packing: ``packed_rows`` rows
    hold them). ``keys`` says which data.*_key settings were read from the columns (a peer's layout recognised),
    ``notes`` anything else the user should know about how the rows were read.
    """

    name: str
    rows_read: int = 0
    skipped_bad: int = 0
    truncated: int = 0
    dropped_too_long: int = 0
    rows_out: int = 0
    packed_rows: int | None = None
    keys: str | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{self.rows_read} rows read", f"{self.rows_out} used"]
        if self.skipped_bad:
            parts.append(f"{self.skipped_bad} skipped (bad rows)")
        if self.dropped_too_long:
            parts.append(f"{self.dropped_too_long} dropped (too long)")
        if self.truncated:
            parts.append(f"{self.truncated} truncated")
        if self.packed_rows is not None:
            parts.append(f"packed into {self.packed_rows} rows")
        extra = [x for x in (self.keys, *self.notes) if x]
        return f"{self.name}: " + ", ".join(parts) + "".join(f"; {x}" for x in extra)

    def as_metrics(self, prefix: str = "data") -> dict[str, float]:
        """Flat numeric metrics, e.g. ``data/train_prompts/rows_read``."""
        key = self.name.replace(" ", "_")
        numbers = {k: v for k, v in asdict(self).items() if isinstance(v, int) and not isinstance(v, bool)}
        return {f"{prefix}/{key}/{k}": float(v) for k, v in numbers.items()}
