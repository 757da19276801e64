"""Hub datasets named without the config they need: ``openai/gsm8k`` has the configs ``main`` and ``socratic`` and
no default, so loading it fails after the cluster started; the preflight asks the hub (datasets'
``get_dataset_config_names``) for each hub source that names no config and reports the ones to choose from. Without
hub access (an offline machine) nothing can be asked: the preflight says so in what it checked, and the loader names
the dataset if it fails later."""

from __future__ import annotations

import functools
from collections.abc import Callable

from rlhf.planning.preflight.data_files import data_sources
from rlhf.planning.preflight.findings import Finding
from rlhf.spec.hub_source import FORM, parse_hub_source
from rlhf.spec.schema import ExperimentSpec


@functools.cache
def hub_reachable(timeout_s: float = 2.0) -> bool:
    """One TCP connect to the hub's endpoint: without it ``get_dataset_config_names`` retries with back-off for
    about 25 s per dataset on an offline machine before it fails. ``HF_HUB_OFFLINE`` is honoured as the hub's own
    switch."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _config_names(path: str) -> list[str]:
    if not hub_reachable():
        raise ConnectionError("the hub is not reachable from here")
    import datasets

    return list(datasets.get_dataset_config_names(path))


def hub_sources(spec: ExperimentSpec) -> list[tuple[str, str]]:
    """(key, source) of the hub sources (not local, not builtin: or reasoning_gym:)."""
    import os

    out = []
    for key, source in data_sources(spec):
        if ":" in source.split("/")[0] or os.path.exists(os.path.expanduser(source)):
            continue  # builtin:NAME, reasoning_gym:TASK, a local path
        if parse_hub_source(source) is not None:
            out.append((key, source))
    return out


def check_hub_configs(
    spec: ExperimentSpec, config_names: Callable[[str], list[str]] = _config_names
) -> tuple[list[Finding], list[str]]:
    """Findings for hub sources that need a config and name none, and the sources the hub could not be asked
    about (offline, private, unknown)."""
    findings, unasked = [], []
    for key, source in hub_sources(spec):
        hub = parse_hub_source(source)
        if hub is None or hub.config:
            continue
        try:
            names = config_names(hub.path)
        except Exception:  # noqa: BLE001 - offline, private or unknown: the loader will say which
            unasked.append(source)
            continue
        if len(names) > 1 and "default" not in names:
            findings.append(
                Finding(
                    key,
                    source,
                    f"the dataset has configs {', '.join(names)} and none is the default",
                    f"name one, as {FORM}: e.g. {hub.path}:{names[0]}",
                )
            )
    return findings, unasked
