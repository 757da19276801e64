"""Only the package list lives here (pyproject.toml has everything else): the rlhf packages plus the top-level
conf/, recipes/ and examples/ folders, which the wheel carries as rlhf._conf, rlhf._recipes and rlhf._examples."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["rlhf", "rlhf.*"]) + ["rlhf._conf", "rlhf._recipes", "rlhf._examples"])
