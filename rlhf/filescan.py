"""Finding malformed lines and empty files in local JSON Lines, JSON and CSV data files, with the standard library.

Shared by the data loader (rlhf.data.loading: to name a malformed line, or skip it with ``data.on_bad_row=skip``)
and the preflight (rlhf.planning.preflight: to name it before anything starts). It lives at the package root, beside
rlhf.errors, because importing anything under rlhf.data imports torch, and the preflight must stay light.

The rules follow what ``datasets`` accepts: a file whose first byte (after a UTF-8 BOM) is ``[`` is one JSON array,
anything else is read as JSON Lines whatever its suffix (blank lines are ignored; every other line must be one
JSON object). A CSV line is malformed when it has more fields than the header (pandas refuses it; fewer fields are
filled with nulls). Line numbers are 1-based, as an editor shows them.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

JSON_SUFFIXES = (".json", ".jsonl")
CSV_SUFFIXES = (".csv",)
SCANNED_SUFFIXES = JSON_SUFFIXES + CSV_SUFFIXES


@dataclass(frozen=True)
class BadLine:
    line: int  # 1-based
    problem: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.problem}"


@dataclass
class Scan:
    """What a scan found: ``rows`` usable rows, the malformed lines (the first ``max_bad`` kept in ``bad``)."""

    path: str
    layout: str  # "json lines" | "json array" | "csv"
    rows: int = 0
    bad: list[BadLine] = field(default_factory=list)
    bad_count: int = 0
    truncated: bool = False  # stopped at max_bytes: lines after that were not looked at
    first_keys: list[str] | None = None  # the keys (columns) of the first usable row
    # Of the columns asked for (``required``): the first row (0-based, as the loader counts rows) that lacks it or
    # holds null there, and how many rows do; a column the first row lacks is reported through ``first_keys``.
    missing: dict[str, int] = field(default_factory=dict)
    missing_count: dict[str, int] = field(default_factory=dict)
    missing_line: dict[str, int] = field(default_factory=dict)  # that row's line (1-based) where lines are rows
    missing_keys: dict[str, list[str]] = field(default_factory=dict)  # the columns that row does hold

    def note_row(self, index: int, row: dict, required: Sequence[str], line: int | None = None) -> None:
        """Count ``row`` (the ``index``-th row) against the required columns: absent or null is missing, as the
        row builders' ``rlhf.data.fields.require`` sees it."""
        for column in required:
            if row.get(column) is None:
                if column not in self.missing:
                    self.missing[column] = index
                    self.missing_keys[column] = sorted(k for k, v in row.items() if v is not None)
                    if line is not None:
                        self.missing_line[column] = line
                self.missing_count[column] = self.missing_count.get(column, 0) + 1

    @property
    def empty(self) -> bool:
        return self.rows == 0 and self.bad_count == 0

    @property
    def can_skip(self) -> bool:
        """Whether the malformed lines can be dropped one by one (JSON Lines); an array's syntax error cannot."""
        return self.layout == "json lines"

    def add_bad(self, bad: BadLine, max_bad: int) -> None:
        self.bad_count += 1
        if len(self.bad) < max_bad:
            self.bad.append(bad)

    def describe_bad(self) -> str:
        """``line 2: not valid JSON (...); line 7: ...`` (and how many more)."""
        text = "; ".join(str(b) for b in self.bad)
        more = self.bad_count - len(self.bad)
        return text + (f"; and {more} more malformed line(s)" if more > 0 else "")


def _json_problem(e: json.JSONDecodeError) -> str:
    return f"not valid JSON ({e.msg}, column {e.colno})"


def _json_type(value: object) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), "null"
    )


def json_line_problem(raw: bytes) -> str | None:
    """Why one line of a JSON Lines file is not a row (None for a good line; blank lines are good: ignored)."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")  # so that a column number refers to this line
    except UnicodeDecodeError as e:
        return f"not UTF-8 text (byte {e.start + 1})"
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return _json_problem(e)
    if not isinstance(value, dict):
        return f"{_json_type(value)}, not a JSON object ({{...}}: one row per line)"
    return None


def _starts_with_bracket(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(len(codecs.BOM_UTF8) + 1)
    return head.removeprefix(codecs.BOM_UTF8).startswith(b"[")


def scan_json_lines(
    path: str | Path, *, max_bad: int = 5, max_bytes: int | None = None, required: Sequence[str] = ()
) -> Scan:
    p = Path(path)
    scan = Scan(str(path), "json lines")
    read = 0
    index = 0  # the row's index as the loader numbers rows: every non-blank line (a skipped bad one keeps its place)
    with p.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if n == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            read += len(raw)
            problem = json_line_problem(raw)
            if problem is not None:
                scan.add_bad(BadLine(n, problem), max_bad)
                index += 1
            elif raw.strip():
                scan.rows += 1
                if scan.first_keys is None or required:
                    row = json.loads(raw)
                    if scan.first_keys is None:
                        scan.first_keys = list(row)
                    scan.note_row(index, row, required, line=n)
                index += 1
            if max_bytes is not None and read >= max_bytes:
                scan.truncated = f.read(1) != b""
                break
    return scan


def scan_json_array(path: str | Path, required: Sequence[str] = ()) -> Scan:
    scan = Scan(str(path), "json array")
    try:
        value = json.loads(Path(path).read_bytes().removeprefix(codecs.BOM_UTF8))
    except UnicodeDecodeError as e:
        scan.add_bad(BadLine(1, f"not UTF-8 text (byte {e.start + 1})"), 1)
        return scan
    except json.JSONDecodeError as e:
        scan.add_bad(BadLine(e.lineno, _json_problem(e)), 1)
        return scan
    scan.rows = len(value) if isinstance(value, list) else 0
    if scan.rows and isinstance(value[0], dict):
        scan.first_keys = list(value[0])
    for index, row in enumerate(value if scan.rows and required else []):
        if isinstance(row, dict):
            scan.note_row(index, row, required)
    return scan


def scan_csv(
    path: str | Path, *, max_bad: int = 5, max_bytes: int | None = None, required: Sequence[str] = ()
) -> Scan:
    scan = Scan(str(path), "csv")
    with Path(path).open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return scan
        scan.first_keys = [h.removeprefix("\ufeff") for h in header]
        # a column the header lacks is reported by first_keys; an empty field reads as null (pandas' NaN)
        columns = [(c, scan.first_keys.index(c)) for c in required if c in scan.first_keys]
        read = 0  # characters, roughly (a text file's tell() is unavailable while csv iterates it)
        for row in reader:
            if not row:
                continue
            if len(row) > len(header):
                scan.add_bad(BadLine(reader.line_num, f"{len(row)} fields, the header has {len(header)}"), max_bad)
            else:
                if columns:
                    values = {c: (row[i] if i < len(row) and row[i] != "" else None) for c, i in columns}
                    scan.note_row(scan.rows, values, [c for c, _ in columns], line=reader.line_num)
                scan.rows += 1
            read += sum(map(len, row)) + len(row)
            if max_bytes is not None and read >= max_bytes:
                scan.truncated = next(reader, None) is not None
                break
    return scan


def scan_file(
    path: str | Path, *, max_bad: int = 5, max_bytes: int | None = None, required: Sequence[str] = ()
) -> Scan | None:
    """Scan a local JSON Lines / JSON / CSV file by its suffix; None for other formats (parquet, arrow...).
    ``required``: columns every row must hold (not null), counted in ``Scan.missing``.

    The same scan of an unchanged file (path, size, modification time) is answered from memory: the command line's
    preflight and the run that follows it in the same process read each file once."""
    p = Path(path)
    try:
        st = p.stat()
        memo_key = (str(p.resolve()), st.st_size, st.st_mtime_ns, max_bad, max_bytes, tuple(required))
    except OSError:
        memo_key = None
    if memo_key is not None and memo_key in _SCANS:
        return _SCANS[memo_key]
    scan = _scan(p, max_bad, max_bytes, required)
    if memo_key is not None:
        if len(_SCANS) >= 64:
            _SCANS.clear()
        _SCANS[memo_key] = scan
    return scan


_SCANS: dict[tuple, Scan | None] = {}


def _scan(p: Path, max_bad: int, max_bytes: int | None, required: Sequence[str]) -> Scan | None:
    suffix = p.suffix.lower()
    if suffix in JSON_SUFFIXES:
        if _starts_with_bracket(p):
            return scan_json_array(p, required)
        return scan_json_lines(p, max_bad=max_bad, max_bytes=max_bytes, required=required)
    if suffix in CSV_SUFFIXES:
        return scan_csv(p, max_bad=max_bad, max_bytes=max_bytes, required=required)
    return None
