"""Every config key the README and the documentation site (docs/**/*.md) name exists: each ``section.key`` (or
``section.key=``) in backticks or on a command line of a code block, whose first part is a section of the schema
(rlhf/spec/schema.py) or ``hydra``, must be a key or a section of the schema, or a key of Hydra's own config or of a
sweeper or launcher plugin the pages describe. File names (``data.jsonl``) and dotted names outside the config
(``rlhf.atomic_save``, ``signal.alarm``) are not keys and are left alone."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import pytest

from rlhf.spec.keys import keys_under, walk
from rlhf.spec.schema import ExperimentSpec

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SECTIONS = {f.name for f in dataclasses.fields(ExperimentSpec)}
# A dotted name whose last part is one of these is a file, not a key.
FILE_SUFFIXES = {
    "json",
    "jsonl",
    "yaml",
    "yml",
    "py",
    "parquet",
    "csv",
    "txt",
    "md",
    "db",
    "log",
    "sh",
    "pt",
    "bin",
    "safetensors",
    "sbatch",
    "toml",
    "cfg",
    "gz",
}
# Named on purpose: the pages show what an unknown key, a mistyped one and a moved (old) vLLM key get
# (docs/concepts/config.md, docs/concepts/engines.md).
DELIBERATE = {"trainer.no_such_key", "trainer.zero_stag", "rollout.gpu_memory_utilization"}
# veRL's own keys, named in prose beside ours (the veRL table's first column is skipped as a whole).
FOREIGN = {"trainer.resume_mode", "data.prompt_dict_keys"}
FOREIGN_TABLES = ("| veRL |",)  # tables whose first column holds another system's keys
KEY = re.compile(r"(?<![\w./:-])[+~]?([a-z_][a-z0-9_]*(?:\.(?:[a-z_][a-z0-9_]*|\*))+)")
COMMAND_LINE = re.compile(r"^\s{4,}(?:\$ )?(rlhf-\w+ .*)$")


def named_keys(text: str) -> dict[str, int]:
    """Dotted names that look like config keys -> the line of ``text`` that first names them."""
    spans: list[tuple[int, str]] = []
    foreign_table = False
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            foreign_table = False
        elif line.startswith(FOREIGN_TABLES):
            foreign_table = True
        if foreign_table:
            line = "|".join(line.split("|")[2:])  # ours are in the second column on
        spans += [(n, m) for m in re.findall(r"`([^`]+)`", line)]
        command = COMMAND_LINE.match(line)
        if command:
            spans.append((n, command.group(1)))
    found: dict[str, int] = {}
    for n, span in spans:
        for name in KEY.findall(span):
            first, last = name.split(".")[0], name.split(".")[-1]
            if (first in SECTIONS or first == "hydra") and last not in FILE_SUFFIXES:
                found.setdefault(name, n)
    return found


def _dataclass_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _hydra_key_exists(parts: list[str]) -> bool:
    from hydra.conf import HydraConf, JobConf, RunDir, SweepDir

    if len(parts) < 2 or parts[1] not in _dataclass_fields(HydraConf):
        return False
    nested = {"run": RunDir, "sweep": SweepDir, "job": JobConf}
    if len(parts) > 2 and parts[1] in nested:
        return parts[2] in _dataclass_fields(nested[parts[1]])
    if len(parts) > 2 and parts[1] == "launcher":
        from hydra_plugins.rlhf_plugins.ray_cluster_launcher import RayClusterLauncherConf

        return parts[2] in _dataclass_fields(RayClusterLauncherConf)
    if len(parts) > 2 and parts[1] == "sweeper":
        optuna = pytest.importorskip("hydra_plugins.hydra_optuna_sweeper.config")
        return parts[2] in _dataclass_fields(optuna.OptunaSweeperConf)
    return True


def _schema_key_exists(name: str) -> bool:
    path = name.removesuffix(".*")
    if keys_under(ExperimentSpec, path):
        return True
    # below a key typed as a mapping (ray.runtime_env.FOO): any name is a key
    return any(path.startswith(k.path + ".") and k.type.startswith("dict") for k in walk(ExperimentSpec))


@functools.cache  # the same names recur on many pages
def key_exists(name: str) -> bool:
    parts = name.split(".")
    return _hydra_key_exists(parts) if parts[0] == "hydra" else _schema_key_exists(name)


def test_the_checker_finds_keys_in_backticks_and_commands_and_skips_files_and_modules():
    text = (
        "use `reward.url=` or `trainer.lr`; `data.jsonl`, `rlhf.atomic_save` and `signal.alarm` are no keys\n"
        "    rlhf-run +recipe=x rollout.top_p=0.9 'model=glob(my_*)' hydra.run.dir=/tmp/x.y/z\n"
    )
    assert set(named_keys(text)) == {"reward.url", "trainer.lr", "rollout.top_p", "hydra.run.dir"}
    assert not key_exists("reward.url") and key_exists("reward.urls") and key_exists("trainer")
    assert key_exists("hydra.run.dir") and not key_exists("hydra.run.folder")


def pages() -> list[Path]:
    """The README and every page of the site, the generated reference included."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_every_config_key_the_readme_and_the_docs_name_exists():
    named = {page: named_keys(page.read_text()) for page in pages()}
    written = {name for page, keys in named.items() if "reference" not in page.parts for name in keys}
    assert len(written) > 50  # the scan sees the keys of the hand-written pages at all
    assert DELIBERATE <= written  # each exemption is still named somewhere, on purpose
    missing = [
        f"{page.relative_to(ROOT)}:{line} {name}"
        for page, keys in named.items()
        for name, line in sorted(keys.items(), key=lambda x: x[1])
        if name not in DELIBERATE | FOREIGN and not key_exists(name)
    ]
    assert not missing, "pages name keys the schema does not have: " + ", ".join(missing)
