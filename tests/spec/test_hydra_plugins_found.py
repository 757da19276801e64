"""rlhf's Hydra plugins (the -cd search path, the ray_cluster launcher) are found even in a process that used Hydra
before rlhf did: Hydra scans for plugins once, at first use, and a scan made before rlhf exposed its folder left
them out (CI composed a -cd recipe as 'Could not find recipe/mine' after such a scan)."""

from __future__ import annotations

import subprocess
import sys

from ceilings import ceiling

SCRIPT = """
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.search_path_plugin import SearchPathPlugin
Plugins.instance()  # another Hydra user scans first
from rlhf.spec.build import load_spec
print(load_spec(["+recipe=mine"], config_dir={folder!r}).seed)
paths = [c.__name__ for c in Plugins.instance().discover(SearchPathPlugin)]
launchers = [c.__name__ for c in Plugins.instance().discover(Launcher)]
print(paths.count("RlhfConfigDirSearchPath"), "RayClusterLauncher" in launchers)
"""


def test_a_minus_cd_recipe_composes_after_another_hydra_user_scanned_for_plugins(tmp_path):
    (tmp_path / "recipe").mkdir()
    recipe = "# @package _global_\ndefaults:\n  - /recipe/grpo_tiny_cpu\nseed: 31\n"
    (tmp_path / "recipe" / "mine.yaml").write_text(recipe)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(folder=str(tmp_path))],
        capture_output=True,
        text=True,
        timeout=ceiling(300),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["31", "1", "True"]  # the recipe found, the search-path plugin once, the launcher


RESCAN = """
import sys
from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton
from hydra.plugins.search_path_plugin import SearchPathPlugin
from rlhf.spec.build import compose
seeds = [compose(["+recipe=mine"], config_dir={folder!r}).seed]
sys.path.insert(0, {folder!r})  # recomputes the hydra_plugins namespace path
Singleton.set_state(Singleton.get_state())  # what a launcher's job does: the plugins scanned afresh
seeds.append(compose(["+recipe=mine", "seed=32"], config_dir={folder!r}).seed)
Singleton.set_state(Singleton.get_state())  # a scan that finds the folder again
seeds.append(compose(["+recipe=mine", "seed=33"], config_dir={folder!r}).seed)
paths = [c.__name__ for c in Plugins.instance().discover(SearchPathPlugin)]
print(*seeds, paths.count("RlhfConfigDirSearchPath"))
"""


def test_a_minus_cd_recipe_composes_after_hydra_rescans_its_plugins_in_the_same_process(tmp_path):
    (tmp_path / "recipe").mkdir()
    recipe = "# @package _global_\ndefaults:\n  - /recipe/grpo_tiny_cpu\nseed: 31\n"
    (tmp_path / "recipe" / "mine.yaml").write_text(recipe)
    out = subprocess.run(
        [sys.executable, "-c", RESCAN.format(folder=str(tmp_path))],
        capture_output=True,
        text=True,
        timeout=ceiling(300),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["31", "32", "33", "1"]  # each compose found the recipe; the plugin is there once
