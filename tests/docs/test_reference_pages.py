"""The site's reference pages are generated (scripts/gen_reference.py), never written by hand: regenerated here into
a temporary folder, they must equal the committed ones, and they must cover what the schema, the parsers and the
recipes hold. The site itself builds with ``mkdocs build --strict`` (no broken link, anchor or missing page) where
MkDocs is installed (``pip install -e ".[docs]"``)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "reference"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    """The generator, loaded once: it composes and plans every recipe once for all the tables."""
    return _generator()


@pytest.fixture(scope="module")
def generated(gen, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    gen.generate(out)
    return out


def test_the_committed_reference_pages_are_the_generated_ones(gen, generated):
    stale = gen.stale(COMMITTED, generated)
    assert not stale, (
        f"stale generated page(s): {', '.join(f'docs/reference/{name}' for name in stale)}; "
        f"regenerate with: {gen.REGENERATE}"
    )


def test_the_readme_recipe_table_is_the_generated_one(gen):
    readme = (ROOT / "README.md").read_text()
    assert gen.with_readme_table(readme) == readme, (
        f"stale: README.md's recipe table (between {gen.README_START.strip()} and {gen.README_END.strip()}); "
        f"regenerate with: {gen.REGENERATE}"
    )
    table = readme[readme.index(gen.README_START) : readme.index(gen.README_END)]
    assert table.count("\n| `") == len(list((ROOT / "recipes").glob("*.yaml")))  # a row per shipped recipe


def test_the_config_page_lists_every_key_rlhf_recipes_explain_knows(generated):
    from rlhf.spec.keys import walk
    from rlhf.spec.schema import ExperimentSpec

    page = (generated / "config.md").read_text()
    listed = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", page, flags=re.M))
    keys = {info.path for info in walk(ExperimentSpec)}
    assert len(keys) > 100
    assert keys - listed == set(), "keys the config reference does not list"
    # each row: the key, its type, default, domain and documentation
    assert "| `trainer.zero_stage` | `int` | `2` | one of 0, 1, 2, 3 | DeepSpeed ZeRO stage" in page


def test_the_cli_page_lists_every_verb_and_flag(generated):
    from rlhf.cli.recipes import VERBS

    page = (generated / "cli.md").read_text()
    for command in ("rlhf-run", "rlhf-plan", "rlhf-recipes", "rlhf-serve-rm"):
        assert f"\n## {command}\n" in page
    for verb in VERBS:
        assert f"\n### rlhf-recipes {verb}\n" in page
    for flag in ("--resume", "--hydra-help", "--auto", "--rehearse", "--check", "--max-queries", "--hardware"):
        assert f"`{flag}" in page or f", {flag}" in page, flag
    assert 'eval "$(rlhf-run -sc install=bash)"' in page  # Hydra's help names rlhf-run, not the generator


def test_the_recipe_page_plans_every_shipped_recipe(generated):
    page = (generated / "recipes.md").read_text()
    shipped = sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml"))
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| .* \| (fits|does not fit) \| ([0-9.]+) \|", page, flags=re.M)
    assert sorted(name for name, _, _ in rows) == shipped
    assert all(verdict == "fits" for _, verdict, _ in rows)
    assert "| `grpo_llama3_8b` | llama3_8b | grpo | 8xh100 | colocate_all | vllm 4x TP 2 |" in page


def test_check_names_a_stale_page_and_the_command(gen, tmp_path, generated, monkeypatch, capsys):
    for page in generated.iterdir():
        shutil.copy(page, tmp_path / page.name)
    (tmp_path / "cli.md").write_text("hand-edited\n")
    assert gen.stale(tmp_path, generated) == ["cli.md"]
    # --check regenerates into a temporary folder: here a copy of the pages generated once for this module
    monkeypatch.setattr(gen, "generate", lambda folder: [shutil.copy(p, folder / p.name) for p in generated.iterdir()])
    readme = tmp_path / "README.md"
    readme.write_text(gen.with_readme_table((ROOT / "README.md").read_text()))
    check = ["--check", "--out", str(tmp_path), "--readme", str(readme)]
    assert gen.main(check) == 1
    err = capsys.readouterr().err
    assert "stale: docs/reference/cli.md; regenerate with: python scripts/gen_reference.py" in err
    assert "config.md" not in err and "README" not in err
    (tmp_path / "cli.md").write_text((generated / "cli.md").read_text())
    assert gen.main(check) == 0
    readme.write_text(readme.read_text().replace("| `grpo_llama3_8b` |", "| `grpo_llama3_8b_renamed` |"))
    assert gen.main(check) == 1
    assert "stale: README.md (its recipe table); regenerate with" in capsys.readouterr().err


def test_the_algorithm_lists_are_generated_from_conf_algorithm(gen):
    options = sorted(p.stem for p in (ROOT / "conf" / "algorithm").glob("*.yaml"))
    readme = (ROOT / "README.md").read_text()
    assert gen.with_readme_blocks(readme) == readme, f"stale: README.md; regenerate with: {gen.REGENERATE}"
    for name, markers, make, what in gen.DOC_BLOCKS:
        page = (ROOT / "docs" / name).read_text()
        assert gen.with_block(page, markers, make(), name) == page, f"stale: docs/{name} ({what})"
    for text, markers in (
        (readme, gen.ALGORITHM_LIST),
        ((ROOT / "docs" / "index.md").read_text(), gen.ALGORITHM_LIST),
        ((ROOT / "docs" / "algorithms.md").read_text(), gen.PRESET_TABLE),
    ):
        block = text[text.index(markers[0]) : text.index(markers[1])]
        assert [o for o in options if f"`{o}`" not in block] == [], "presets the list leaves out"
    assert f"{len(options)} algorithms are presets" in readme
    # each preset's name is its file's first comment line, up to the colon and any aside
    titles = {p.option: p.title for p in gen.algorithm_presets()}
    assert titles["grpo"] == "GRPO" and titles["cispo"] == "CISPO" and titles["grpo_passk"] == "Pass@k GRPO"


def test_check_names_a_lagging_algorithm_list(gen, tmp_path, generated, monkeypatch, capsys):
    monkeypatch.setattr(gen, "generate", lambda folder: [shutil.copy(p, folder / p.name) for p in generated.iterdir()])
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, *_ in gen.DOC_BLOCKS:
        shutil.copy(ROOT / "docs" / name, docs / name)
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    check = ["--check", "--out", str(generated), "--readme", str(readme), "--docs", str(docs)]
    assert gen.main(check) == 0
    index = docs / "index.md"
    index.write_text(index.read_text().replace(", SAPO (`sapo`)", ""))  # a preset the home page forgot
    readme.write_text(readme.read_text().replace("GMPO (`geo_mean`), ", ""))
    assert gen.main(check) == 1
    err = capsys.readouterr().err
    assert "stale: docs/index.md (its algorithm list); regenerate with: python scripts/gen_reference.py" in err
    assert "stale: README.md (its algorithm list)" in err and "algorithms.md" not in err


def test_a_preset_the_registries_do_not_know_or_without_a_name_is_refused(gen):
    where = Path("conf/algorithm/mine.yaml")
    fields = {"family": "rl", "advantage": {"estimator": "group_nrom"}, "policy_loss": {"type": "ppo"}}
    (problem,) = gen._registry_problems(fields, where)
    assert problem.startswith("conf/algorithm/mine.yaml: advantage.estimator='group_nrom' is not registered (one of ")
    assert "group_norm" in problem
    with pytest.raises(SystemExit, match="first line must be a comment '# Name: what it does'"):
        gen._title("no colon here", where)


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    # no -q: it lowers MkDocs' log level to ERROR, so --strict never sees the warnings it should count (a page left
    # out of the nav passed that way)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()
