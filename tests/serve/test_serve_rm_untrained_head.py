"""``rlhf-serve-rm`` refuses a folder without trained value-head weights (a policy), unless told otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request

import pytest
import torch
from ceilings import ceiling, wait_until
from serve_helpers import tiny_llama_config

from rlhf.models.head_check import UntrainedValueHead
from rlhf.models.tokenizer import byte_level_tokenizer

SERVE = [sys.executable, "-m", "rlhf.cli.serve_rm", "--port", "0", "--device", "cpu"]


def tiny_config(tokenizer):
    return tiny_llama_config(tokenizer, layers=1)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """A causal LM, saved as a policy is: lm_head.weight, no score.weight."""
    from transformers import LlamaForCausalLM

    tokenizer = byte_level_tokenizer()
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("policy")
    LlamaForCausalLM(tiny_config(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_a_policy_folder_is_refused_naming_the_folder_the_weights_and_the_fix(policy_dir, tmp_path):
    # refused from the safetensors header, before torch is imported: here torch cannot be imported at all
    blocked = tmp_path / "blocked" / "torch"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('the refusal must not import torch')\n")
    env = {**os.environ, "PYTHONPATH": str(blocked.parent)}
    r = subprocess.run(
        [*SERVE, "--model", str(policy_dir)], capture_output=True, text=True, timeout=ceiling(120), env=env
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"rlhf-serve-rm: error: {policy_dir}: the checkpoint has no value head weights")
    assert "(score.weight)" in r.stderr and "LlamaForCausalLM" in r.stderr and "lm_head.weight" in r.stderr
    assert "--allow-untrained-head" in r.stderr and "--value-head-prefix" in r.stderr
    assert "Traceback" not in r.stderr and "serving" not in r.stdout


def test_allow_untrained_head_serves_with_a_warning(policy_dir):
    proc = subprocess.Popen(
        [*SERVE, "--model", str(policy_dir), "--allow-untrained-head"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    try:
        wait_until(
            lambda: any(" at http" in line for line in lines),
            "the server's start",
            120,
            alive=lambda: proc.poll() is None,
        )
        assert any("warning:" in line and "no trained value head" in line for line in lines), "".join(lines)
        url = next(line for line in lines if " at http" in line).split(" at ")[1].strip()
        request = urllib.request.Request(
            url, json.dumps({"query": ["hi"]}).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=ceiling(60)) as answer:
            assert len(json.loads(answer.read())["rewards"]) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=ceiling(30))


def test_loading_refuses_after_the_load_where_the_header_cannot_be_read(policy_dir, tmp_path):
    # load_value_model decides from transformers' loading report (works for .bin checkpoints too).
    from transformers import LlamaForSequenceClassification

    from rlhf.models.value_head import load_value_model

    with pytest.raises(UntrainedValueHead, match=r"no value head weights \(score.weight\)"):
        load_value_model(str(policy_dir), "reward", require_trained_head=True)
    rm = tmp_path / "rm"
    LlamaForSequenceClassification(tiny_config(byte_level_tokenizer())).save_pretrained(rm)
    model = load_value_model(str(rm), "reward", require_trained_head=True)
    assert model.score.weight.shape == (1, 64)
