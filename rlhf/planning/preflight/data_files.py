"""Reading the local data files far enough to name what would stop the run after start-up: an empty file, a malformed
line (by file and line), or a row without a column the algorithm reads (the first such row of each column, by row and
line, and how many there are).

JSON Lines, JSON and CSV files are scanned with the standard library (rlhf.filescan), up to :data:`SCAN_BYTES` per
file (the loader names any malformed line beyond that itself); parquet files by their footer (the row count).
Builtin datasets, saved dataset folders, arrow files and hub names are left to the loader.
"""

from __future__ import annotations

from pathlib import Path

from rlhf.filescan import SCANNED_SUFFIXES, Scan, scan_file
from rlhf.planning.preflight.findings import Finding
from rlhf.spec.data_columns import columns_for, data_sources, required_columns, sources_with_columns
from rlhf.spec.schema import ExperimentSpec

__all__ = ["check_data_files", "data_sources", "required_columns"]

SCAN_BYTES = 256 * 2**20
SKIP_FIX = "or set data.on_bad_row=skip to skip malformed lines (counted in the data report)"


def _scan_findings(key: str, source: str, scan: Scan, spec: ExperimentSpec, columns: dict[str, str]) -> list[Finding]:
    skip = spec.data.on_bad_row == "skip"
    if scan.empty:
        return [Finding(key, source, "the file is empty (no rows)", "add rows, or remove it from the list")]
    out = []
    if scan.bad and skip and scan.can_skip:
        out.append(
            Finding(
                key, source, f"{scan.bad_count} malformed line(s) will be skipped: {scan.describe_bad()}", warning=True
            )
        )
    elif scan.bad:
        if scan.can_skip:
            fix = "fix the line(s), " + SKIP_FIX
        else:
            fix = "fix the line(s)" if scan.layout == "csv" else "fix the file"
            fix += f" (data.on_bad_row=skip cannot skip lines of a {scan.layout} file)" if skip else ""
        out.append(Finding(key, source, scan.describe_bad(), fix))
    if scan.first_keys is not None:
        for column, setting in columns.items():
            if column in scan.first_keys:
                continue
            header = scan.layout == "csv"
            where = "the header" if header else "the first row"
            problem = f"{where} has no column {column!r} ({setting}); its columns: {', '.join(scan.first_keys)}"
            fix = f"set {setting} to the column that holds it"
            if header or not skip:
                out.append(Finding(key, source, problem, fix))
            else:
                out.append(Finding(key, source, problem + "; such rows will be skipped", warning=True))
    for column, row in scan.missing.items():
        if scan.first_keys is not None and column not in scan.first_keys:
            continue  # the first row (or the header) lacks it: named above
        count = scan.missing_count[column]
        line = f" (line {scan.missing_line[column]})" if column in scan.missing_line else ""
        more = f", and {count - 1} more row(s)" if count > 1 else ""
        problem = f"row {row}{line} has no value for column {column!r} ({columns[column]}){more}"
        if skip:
            out.append(Finding(key, source, problem + "; such rows will be skipped", warning=True))
        else:
            fix = f"give every row a {column!r}, or set data.on_bad_row=skip to skip such rows (counted)"
            out.append(Finding(key, source, problem, fix))
    return out


def _parquet_findings(key: str, source: str, path: Path) -> list[Finding]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_metadata(path).num_rows
    except Exception as e:  # noqa: BLE001 - whatever pyarrow says about a broken file is the message
        return [Finding(key, source, f"not a readable parquet file: {e}", "rewrite it, or remove it from the list")]
    return [] if rows else [Finding(key, source, "the file has no rows", "add rows, or remove it from the list")]


def check_data_files(spec: ExperimentSpec) -> list[Finding]:
    out: list[Finding] = []
    for src in sources_with_columns(spec):
        key, source = src.key, src.source
        path = Path(source).expanduser()
        if not path.is_file():
            continue  # builtin:NAME, a folder, a hub name; a missing path is a validation error already
        suffix = path.suffix.lower()
        if suffix in SCANNED_SUFFIXES:
            scan = scan_file(path, max_bytes=SCAN_BYTES, required=list(src.columns))
            columns = columns_for(spec, src, scan.first_keys if scan is not None else None)
            if scan is not None and columns != src.columns:  # a TRL/veRL layout: its own columns are required
                scan = scan_file(path, max_bytes=SCAN_BYTES, required=list(columns))
            if scan is not None:
                out += _scan_findings(key, source, scan, spec, columns)
        elif suffix == ".parquet":
            out += _parquet_findings(key, source, path)
    return out
