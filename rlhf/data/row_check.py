"""Every row of the run's local data files read before any process starts (the run lifecycle calls
:func:`check_rows` before it starts Ray beside the data build): an empty file, a malformed line, or a row without a
column the algorithm reads stops the job here, with the same message the data build would give, so a bad row still
starts nothing while Ray's start overlaps the tokenising.

What only the row builders can judge (a value of the wrong type, a chat conversation without the turns it needs, a
prompt with no tokens, every row too long) is found by the data build itself while Ray starts; the run then stops
the cluster it started before placing anything. Builtin datasets are the package's own; folders, parquet files and
hub datasets are left to the loader (rlhf.data.loading) as before."""

from __future__ import annotations

from pathlib import Path

from rlhf.data.errors import BadRow, DataError, bad_row_error
from rlhf.data.loading import EMPTY_FILE, malformed_message
from rlhf.filescan import SCANNED_SUFFIXES, scan_file
from rlhf.spec.data_columns import columns_for, sources_with_columns
from rlhf.spec.schema import ExperimentSpec

SCAN_BYTES = 256 * 2**20  # as the preflight's scan (rlhf.planning.preflight.data_files): beyond it the loader judges


def check_rows(spec: ExperimentSpec) -> None:
    """Raise a :class:`DataError` naming file, row and key for the first problem in a local JSON Lines, JSON or CSV
    source; nothing with ``data.on_bad_row=skip`` (such rows are counted and skipped by the data build)."""
    if spec.data.on_bad_row == "skip":
        return
    for src in sources_with_columns(spec):
        path = Path(src.source).expanduser()
        if not path.is_file() or path.suffix.lower() not in SCANNED_SUFFIXES:
            continue
        scan = scan_file(path, max_bytes=SCAN_BYTES, required=list(src.columns))
        columns = columns_for(spec, src, scan.first_keys if scan is not None else None)
        if scan is not None and columns != src.columns:  # a TRL/veRL layout: its own columns are required
            scan = scan_file(path, max_bytes=SCAN_BYTES, required=list(columns))
        if scan is None:
            continue
        if scan.empty:
            raise DataError(EMPTY_FILE.format(path=path))
        if scan.bad:
            raise DataError(malformed_message(path, scan))
        for column, row in sorted(scan.missing.items(), key=lambda kv: kv[1]):
            setting = columns[column]
            available = scan.missing_keys.get(column, [])
            fix = f"add it to every row, or point {setting} at the right column"
            raise bad_row_error(src.source, row, BadRow(column, f"missing (row has {available})", fix))
