"""Only the package list lives here (pyproject.toml has everything else): the rlhf packages, the top-level conf/,
recipes/ and examples/ folders, which the wheel carries as rlhf._conf, rlhf._recipes and rlhf._examples, and rlhf's
Hydra plugins in Hydra's ``hydra_plugins`` namespace package (no __init__.py there: other plugins share it)."""

from setuptools import find_namespace_packages, find_packages, setup

setup(
    packages=find_packages(include=["rlhf", "rlhf.*"])
    + ["rlhf._conf", "rlhf._recipes", "rlhf._examples"]
    + find_namespace_packages(include=["hydra_plugins.*"])
)
