"""Data errors: every message names the file, the row and the key, and says how to fix it."""

from __future__ import annotations

from rlhf.errors import UserError

SOURCE_COLUMN = "_source"  # the file (or dataset name) a row was read from
ROW_COLUMN = "_row"  # the row's 0-based index within that file
MALFORMED_COLUMN = "_malformed"  # set on the stand-in row of a malformed line skipped by data.on_bad_row=skip


class DataError(UserError):
    """A dataset that cannot be read or a row that cannot be used; the message names file, row, key and fix."""


class BadRow(Exception):
    """Raised by a row encoder for a row it cannot use; the driver adds the file and row and either raises a
    :class:`DataError` (``data.on_bad_row=error``) or counts a skip (``skip``)."""

    def __init__(self, key: str, problem: str, fix: str = "", skippable: bool = True) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem
        self.fix = fix
        # A mistake in the settings (a struct where a string is read) is the same on every row: never skipped.
        self.skippable = skippable


def where(source: str, row: int) -> str:
    """``file.jsonl, row 17 (line 18)``: rows are 0-based; for JSON Lines files the line number is given too."""
    line = f" (line {row + 1})" if source.endswith(".jsonl") else ""
    return f"{source}, row {row}{line}"


def bad_row_error(source: str, row: int, bad: BadRow) -> DataError:
    if not bad.skippable:
        return DataError(f"{where(source, row)}: key {bad.key!r}: {bad.problem}; {bad.fix or 'fix the setting'}")
    fix = f"{bad.fix}; " if bad.fix else ""
    return DataError(
        f"{where(source, row)}: key {bad.key!r}: {bad.problem}; {fix}or set data.on_bad_row=skip to skip such rows "
        "(they are counted and reported)"
    )
