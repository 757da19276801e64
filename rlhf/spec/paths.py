"""Where things live: config groups, recipes (checkout or installed wheel), built-in datasets, caches.

A source checkout keeps conf/ and recipes/ at the top level; a wheel carries them as rlhf/_conf and rlhf/_recipes.
Users add their own config folder with Hydra's ``-cd DIR`` (its groups, a ``recipe/`` subfolder, a primary config
for ``-cn``) or ``hydra.searchpath``, and flat recipe folders with RLHF_RECIPE_PATH (os.pathsep-separated).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent
#: The file types of the shipped datasets (builtin:NAME), in the order a name is looked up.
BUILTIN_SUFFIXES = (".jsonl", ".json", ".parquet")
#: A path written with one of these is local by its form: a missing one is "not found", never a hub name.
LOCAL_PATH_PREFIXES = ("/", "./", "../", "~")
RECIPE_PATH_ENV = "RLHF_RECIPE_PATH"


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    raise FileNotFoundError(f"none of {', '.join(map(str, candidates))} exists; is the package installed completely?")


def conf_dir() -> Path:
    """The Hydra config groups (conf/)."""
    return _first_existing(_PKG / "_conf", _PKG.parent / "conf")


# The user's config folders (-cd) while the compose API runs; hydra_plugins.rlhf_plugins.search_path prepends them to
# Hydra's search path exactly where `-cd` puts them for a Hydra app, so the CLIs and the app compose alike.
_user_config_dirs: list[Path] = []


def user_config_dir(path: str | os.PathLike[str]) -> Path:
    """An absolute config folder given with -cd, or a clear error naming it."""
    p = Path(path).expanduser().absolute()
    if not p.is_dir():
        raise FileNotFoundError(f"--config-dir {path}: no such folder")
    return p


@contextmanager
def config_dirs_on_search_path(*dirs: str | os.PathLike[str] | None) -> Iterator[list[Path]]:
    """While open, Hydra search paths built by the compose API start with ``dirs`` (as ``-cd`` would)."""
    added = [user_config_dir(d) for d in dirs if d]
    saved = list(_user_config_dirs)
    _user_config_dirs[:0] = added
    try:
        yield added
    finally:
        _user_config_dirs[:] = saved


def active_config_dirs() -> list[Path]:
    """The folders :func:`config_dirs_on_search_path` holds open (read by the search-path plugin)."""
    return list(_user_config_dirs)


def recipe_dirs() -> list[Path]:
    """Shipped recipes first, then each folder of RLHF_RECIPE_PATH (a later folder's recipe wins on a name clash)."""
    dirs = [_first_existing(_PKG / "_recipes", _PKG.parent / "recipes")]
    for extra in os.environ.get(RECIPE_PATH_ENV, "").split(os.pathsep):
        if extra:
            p = Path(extra).expanduser()
            if not p.is_dir():
                raise FileNotFoundError(f"{RECIPE_PATH_ENV} names {extra!r}, which is not a folder")
            dirs.append(p)
    return dirs


def examples_dir() -> Path:
    """examples/ (agents, SLURM script): RLHF_EXAMPLES, else the installed copy, else the checkout's. Recipes name it
    as ${rlhf.examples:}."""
    env = os.environ.get("RLHF_EXAMPLES")
    if env:
        return Path(env).expanduser()
    return _first_existing(_PKG / "_examples", _PKG.parent / "examples")


def builtin_data_dir() -> Path:
    return _PKG / "data" / "builtin"


def builtin_datasets() -> list[str]:
    """Names usable as data.train_files: [builtin:NAME] (files shipped with the package)."""
    d = builtin_data_dir()
    if not d.is_dir():
        return []
    return sorted(p.name.split(".")[0] for p in d.iterdir() if p.suffix in BUILTIN_SUFFIXES)


def cache_dir() -> Path:
    """Locally made artefacts (the tiny model); RLHF_CACHE overrides ~/.cache/rlhf."""
    return Path(os.environ.get("RLHF_CACHE", Path.home() / ".cache" / "rlhf")).expanduser()


def source_root() -> Path | None:
    """The folder holding the ``rlhf`` package when it runs from a source checkout (or a worktree), else None."""
    root = _PKG.parent
    return None if root.name in ("site-packages", "dist-packages") else root
