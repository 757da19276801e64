"""Reading rows: local files, saved dataset folders, the package's builtin datasets and hub names, mixed.

Sources (one string each, as in ``data.train_files``):
    path/to/file.{json,jsonl,csv,parquet,arrow}   a local file
    path/to/folder                                a ``Dataset.save_to_disk`` folder, or a folder of data files
    builtin:NAME                                  a file in rlhf/data/builtin (rlhf.spec.paths.builtin_datasets)
    owner/name  or  owner/name@data_dir           a Hugging Face hub dataset (only where a network exists)

Every row gets two extra columns, ``_source`` (the source string) and ``_row`` (its 0-based index in that source),
so that an error about the row can name both after shuffling and mixing (OpenRLHF ``blending_datasets`` semantics
otherwise: probabilities interleave with ``all_exhausted``, no probabilities concatenate, ``max_samples`` applies
per source and to the total).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import datasets
from datasets import Dataset, DatasetDict, Json
from datasets.exceptions import DatasetGenerationError

from rlhf.data.errors import MALFORMED_COLUMN, ROW_COLUMN, SOURCE_COLUMN, DataError
from rlhf.filescan import Scan, json_line_problem, scan_file
from rlhf.spec import paths

BUILTIN_PREFIX = "builtin:"
FILE_LOADERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
_BUILTIN_SUFFIXES = (".jsonl", ".json", ".parquet")


def builtin_path(name: str) -> Path:
    """The file behind ``builtin:NAME``; a :class:`DataError` lists the available names when there is none."""
    for suffix in _BUILTIN_SUFFIXES:
        p = paths.builtin_data_dir() / f"{name}{suffix}"
        if p.is_file():
            return p
    known = ", ".join(paths.builtin_datasets()) or "none"
    raise DataError(f"builtin:{name}: no such builtin dataset; available: {known}")


def _looks_local(source: str) -> bool:
    # A typo in a local path must say "not found", not try the hub and fail with a network error.
    return Path(source).suffix in FILE_LOADERS or source.startswith(("/", "./", "../", "~"))


def _load_file(path: Path, on_bad_row: str = "error") -> Dataset:
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its "Failed to load JSON" log: we say it better
    try:
        ds = datasets.load_dataset(FILE_LOADERS[path.suffix], data_files=str(path), split="train")
    except Exception:
        # Only a file datasets refused is read again, line by line, to say which line is wrong.
        scan = scan_file(path)
        if scan is None or not (scan.empty or scan.bad):
            raise
        if scan.empty:
            raise DataError(_EMPTY.format(path=path)) from None
        if on_bad_row == "skip" and scan.can_skip:
            return _load_json_lines_marking_malformed(path)
        raise DataError(_malformed_message(path, scan)) from None
    finally:
        datasets.logging.set_verbosity(verbosity)
    if len(ds) == 0:
        raise DataError(_EMPTY.format(path=path))
    return ds


_EMPTY = "{path}: the file is empty (no rows); add rows or remove it from data.train_files/eval_files"


def _malformed_message(path: Path, scan: Scan) -> str:
    if scan.can_skip:
        fix = "fix the line(s), or set data.on_bad_row=skip to skip malformed lines (counted in the data report)"
    elif scan.layout == "json array":
        fix = "fix it (data.on_bad_row=skip cannot skip inside one JSON array; JSON Lines can be skipped by line)"
    else:
        fix = "fix the line(s) (data.on_bad_row=skip skips malformed lines of JSON Lines files only)"
    return f"{path}: {scan.describe_bad()}; {fix}"


def _load_json_lines_marking_malformed(path: Path) -> Dataset:
    """``path`` with each malformed line replaced by a row holding only ``MALFORMED_COLUMN`` (its line and
    problem), so that the row builders count it as a skipped bad row and every other row keeps its index."""
    with tempfile.TemporaryDirectory(prefix="rlhf-clean-") as tmp:
        clean = Path(tmp) / path.name
        with path.open("rb") as src, clean.open("wb") as dst:
            for n, raw in enumerate(src, 1):
                problem = json_line_problem(raw.removeprefix(b"\xef\xbb\xbf") if n == 1 else raw)
                if problem is not None:
                    raw = json.dumps({MALFORMED_COLUMN: f"line {n}: {problem}"}).encode()
                dst.write(raw if raw.endswith(b"\n") else raw + b"\n")
        return datasets.load_dataset("json", data_files=str(clean), split="train")


def _load_folder(path: Path, split: str) -> Dataset:
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, DatasetDict):
            if split not in loaded:
                raise DataError(f"{path}: saved dataset has splits {sorted(loaded)}, not {split!r}; set the split key")
            return loaded[split]
        return loaded
    return datasets.load_dataset(str(path), split=split)


def _load_source(source: str, split: str, on_bad_row: str = "error") -> Dataset:
    if source.startswith(BUILTIN_PREFIX):
        return _load_file(builtin_path(source[len(BUILTIN_PREFIX) :]), on_bad_row)
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix not in FILE_LOADERS:
            raise DataError(f"{source}: unsupported file type {path.suffix!r}; use one of {', '.join(FILE_LOADERS)}")
        return _load_file(path, on_bad_row)
    if path.is_dir():
        return _load_folder(path, split)
    if _looks_local(source):
        builtins = ", ".join(f"builtin:{n}" for n in paths.builtin_datasets())
        raise DataError(f"{source}: no such file or folder; check data.train_files/eval_files (builtin: {builtins})")
    name, _, data_dir = source.partition("@")
    try:
        return datasets.load_dataset(name, data_dir=data_dir or None, split=split)
    except Exception as e:  # network, auth, unknown name: all the user's to fix
        raise DataError(f"{source}: not a local file or folder, and loading it from the hub failed: {e}") from e


@contextmanager
def _quiet_progress() -> Iterator[None]:
    # "Generating train split" bars for every small local file drown the data report the pipeline prints.
    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def load_source(
    source: str, split: str = "train", max_samples: int | None = None, on_bad_row: str = "error"
) -> Dataset:
    """One source as a Dataset with ``_source`` and ``_row`` columns (see the module docstring).

    A malformed line of a local JSON Lines file is an error naming the file and line, or with ``on_bad_row="skip"``
    a row holding only ``MALFORMED_COLUMN``, which the row builders count as a skipped bad row.
    """
    try:
        with _quiet_progress():
            ds = _load_source(source, split, on_bad_row)
    except DataError:
        raise
    except Exception as e:  # a parse error inside the file: name the file
        cause = e.__cause__ if isinstance(e, DatasetGenerationError) and e.__cause__ is not None else e
        raise DataError(f"{source}: cannot be read as a dataset: {type(cause).__name__}: {cause}") from e
    if max_samples is not None:
        ds = ds.select(range(min(max_samples, len(ds))))
    ds = ds.remove_columns([c for c in (SOURCE_COLUMN, ROW_COLUMN) if c in ds.column_names])
    ds = ds.add_column(SOURCE_COLUMN, [source] * len(ds))
    return ds.add_column(ROW_COLUMN, list(range(len(ds))))


def _align(parts: list[Dataset]) -> list[Dataset]:
    """Give every part the same columns and types so they can be mixed: a column a part lacks becomes nulls
    (reported later as a missing key, naming the row), a column whose type differs between parts becomes JSON."""
    columns: list[str] = []
    for d in parts:
        columns += [c for c in d.column_names if c not in columns]
    out = []
    for d in parts:
        for c in columns:
            if c not in d.column_names:
                d = d.add_column(c, [None] * len(d))
        out.append(d.select_columns(columns))
    for c in columns:
        types = {repr(d.features[c]) for d in out}
        null = repr(datasets.Value("null"))
        if len(types - {null}) > 1:
            out = [d.cast_column(c, Json()) for d in out]
    return out


def load_rows(
    files: Sequence[str],
    split: str = "train",
    probs: Sequence[float] | None = None,
    seed: int = 42,
    max_samples: int | None = None,
    on_bad_row: str = "error",
) -> Dataset:
    """Read and mix ``files``: interleaved with ``probs`` (seeded, ``all_exhausted``) or concatenated in order.

    ``split`` applies to hub datasets and saved DatasetDict folders (a single file is its own ``train`` split).
    ``max_samples`` caps each source and the result. Every row carries ``_source`` and ``_row``. ``on_bad_row``
    as in :func:`load_source`.
    """
    if not files:
        raise DataError("no data files given; set data.train_files (e.g. [builtin:arith])")
    if probs is not None and len(probs) != len(files):
        raise DataError(f"data.train_probs has {len(probs)} values for {len(files)} train files; give one per file")
    parts = _align([load_source(f, split, max_samples, on_bad_row) for f in files])
    if len(parts) == 1:
        mixed = parts[0]
    elif probs is not None:
        total = float(sum(probs))
        if total <= 0 or any(p < 0 for p in probs):
            raise DataError(f"data.train_probs={list(probs)}: need non-negative values with a positive sum")
        mixed = datasets.interleave_datasets(
            parts, probabilities=[p / total for p in probs], seed=seed, stopping_strategy="all_exhausted"
        )
    else:
        mixed = datasets.concatenate_datasets(parts)
    if max_samples is not None and len(mixed) > max_samples:
        mixed = mixed.select(range(max_samples))
    return mixed


def split_eval(rows: Dataset, fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """Hold out ``fraction`` of ``rows`` (at least one row) for evaluation, chosen with ``seed``."""
    if not 0 < fraction < 1:
        raise DataError(f"data.eval_fraction={fraction}: must be between 0 and 1 (exclusive)")
    if len(rows) < 2:
        raise DataError(f"data.eval_fraction needs at least 2 training rows, found {len(rows)}")
    n_eval = max(1, round(len(rows) * fraction))
    parts = rows.train_test_split(test_size=n_eval, seed=seed, shuffle=True)
    return parts["train"], parts["test"]
