"""Finding 7 of issue 17: a hub dataset's config and split in one form, org/name[:config][@split]; the loader
passes the config as datasets' ``name`` (not as ``data_dir``), the GPU recipes name GSM8K's, and the preflight names
a missing config (with the ones to choose from) before anything starts."""

from __future__ import annotations

import datasets
import pytest

from rlhf.data.loading import load_source
from rlhf.spec.build import load_spec
from rlhf.spec.validate import validate


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        seen.append({"path": path, "name": name, "split": split, **kwargs})
        return datasets.Dataset.from_list([{"question": "1+1?", "answer": "#### 2"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    return seen


def test_the_config_goes_to_datasets_as_its_name(calls):
    load_source("openai/gsm8k:main", split="train")
    load_source("openai/gsm8k:socratic@test[:10]", split="train")
    assert calls == [
        {"path": "openai/gsm8k", "name": "main", "split": "train"},
        {"path": "openai/gsm8k", "name": "socratic", "split": "test[:10]"},
    ]


def test_the_qwen_recipes_name_gsm8ks_config():
    for recipe in ("grpo_qwen2_5_0_5b", "grpo_qwen2_5_0_5b_h200"):
        spec = load_spec([f"+recipe={recipe}"])
        assert spec.data.train_files == ["openai/gsm8k:main"] and validate(spec) == []


def test_preflight_names_a_missing_config_before_anything_starts():
    from rlhf.planning.preflight.hub_datasets import check_hub_configs

    spec = load_spec(["+recipe=grpo_qwen2_5_0_5b", "data.train_files=[openai/gsm8k]"])
    found, _ = check_hub_configs(spec, lambda path: ["main", "socratic"])
    assert [f.key for f in found] == ["data.train_files[0]"]
    assert "main, socratic" in found[0].problem and "openai/gsm8k:main" in found[0].fix and not found[0].warning
    assert check_hub_configs(load_spec(["+recipe=grpo_qwen2_5_0_5b"]), lambda path: ["main", "socratic"]) == ([], [])

    def offline(path):
        raise ConnectionError("no network")

    assert check_hub_configs(spec, offline) == ([], ["openai/gsm8k"])  # not asked: said in what was checked
