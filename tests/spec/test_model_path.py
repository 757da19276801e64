"""``model.path`` is never ignored: with ``model.make_local=true`` (the tiny recipes' default) a given path is the
model, and a wrong one is refused at validation, before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

from rlhf.models.loading import resolve_model_path
from rlhf.spec import validate
from rlhf.spec.build import load_spec

TINY = ["+recipe=grpo_tiny_cpu"]  # model=tiny: make_local true, path empty


def errors(overrides: list[str]) -> dict[str, str]:
    return {e.key: str(e) for e in validate(load_spec(overrides))}


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "sft" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"")  # validation looks for the files, it loads nothing
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_a_model_folder_without_weights_is_refused_before_anything_loads(model_folder):
    (model_folder / "model.safetensors").unlink()
    errs = errors(TINY + [f"model.path={model_folder}"])
    assert "no weights in that folder" in errs["model.path"] and "save_pretrained" in errs["model.path"]


def test_a_model_folder_without_a_tokenizer_asks_for_model_tokenizer_path(model_folder, tmp_path):
    (model_folder / "tokenizer.json").unlink()
    errs = errors(TINY + [f"model.path={model_folder}"])
    assert "no tokenizer files in that folder" in errs["model.path"] and "model.tokenizer_path" in errs["model.path"]
    elsewhere = tmp_path / "tok"
    elsewhere.mkdir()
    assert "model.tokenizer_path" in errors(TINY + [f"model.path={model_folder}", f"model.tokenizer_path={elsewhere}"])
    (elsewhere / "tokenizer_config.json").write_text("{}")
    assert errors(TINY + [f"model.path={model_folder}", f"model.tokenizer_path={elsewhere}"]) == {}


def test_a_mistyped_path_with_make_local_is_refused_naming_both_keys(tmp_path):
    errs = errors(TINY + [f"model.path={tmp_path / 'no_such_model'}"])
    assert list(errs) == ["model.path"]
    assert "no such model folder" in errs["model.path"] and "model.make_local=true" in errs["model.path"]


def test_a_given_path_is_the_model_whatever_make_local_says(model_folder):
    spec = load_spec(TINY + [f"model.path={model_folder}"])
    assert spec.model.make_local and errors(TINY + [f"model.path={model_folder}"]) == {}
    assert resolve_model_path(spec.model) == str(model_folder)  # not the tiny factory's random model


def test_a_run_folder_instead_of_its_model_folder_is_refused(model_folder):
    errs = errors(TINY + [f"model.path={model_folder.parent}"])
    assert "no config.json" in errs["model.path"] and "model/" in errs["model.path"]


def test_a_relative_typo_under_an_existing_folder_is_not_taken_for_a_hub_name(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    assert "no such model folder" in errors(TINY + ["model.path=runs/modl"])["model.path"]
    # without a local folder of that name it reads as a hub name (resolved when the run loads it)
    assert errors(TINY + ["model.path=Qwen/Qwen2.5-0.5B"]) == {}


def test_no_path_and_no_make_local_names_both_ways_out():
    errs = errors(TINY + ["model.make_local=false"])
    assert "hub name" in errs["model.path"] and "model.make_local=true" in errs["model.path"]


def test_rlhf_run_with_a_mistyped_path_starts_nothing(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlhf.cli.run", *TINY, f"model.path={tmp_path / 'typo'}", f"hydra.run.dir={run_dir}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=ceiling(300), cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "model.path" in done.stderr and "no such model folder" in done.stderr
    assert "Traceback" not in done.stderr and not (run_dir / "checkpoints").exists()
