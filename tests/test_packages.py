"""Every folder of python modules under rlhf/ is a regular package, so setup.py's find_packages puts it in the wheel
as a package (rlhf/models/ had no __init__.py and travelled only as package data)."""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent


def test_every_module_folder_under_rlhf_is_a_package_the_wheel_lists():
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "rlhf").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    packaged = set(find_packages(where=str(ROOT), include=["rlhf", "rlhf.*"]))
    assert folders <= packaged, f"folders of modules without an __init__.py: {sorted(folders - packaged)}"
