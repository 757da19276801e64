"""Prepends the user's ``-cd`` folders to the search path of the rlhf CLIs' compose API.

A Hydra app gets ``--config-dir`` from Hydra itself, at the front of its search path; the compose API that
``rlhf-plan``, ``rlhf-recipes`` and ``rlhf-run``'s pre-validation use has no such argument, so this plugin puts the
same folders in the same place while :func:`rlhf.spec.paths.config_dirs_on_search_path` holds them open. Outside
that (any other Hydra app in the environment, or rlhf-run's own app) it does nothing.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

PROVIDER = "rlhf --config-dir"


class RlhfConfigDirSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from rlhf.spec.paths import active_config_dirs

        for d in reversed(active_config_dirs()):
            search_path.prepend(provider=PROVIDER, path=f"file://{d}")
